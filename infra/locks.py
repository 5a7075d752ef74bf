"""Write the image locks from requirements/cpu.lock, so the cluster runs the versions CI tested.

    python infra/locks.py      # CPython 3.11 on Linux x86_64 (the images' platform), pip >= 24, network to PyPI

- requirements/gpu.lock (infra/Dockerfile): cpu.lock's pins unchanged, then what torch's CUDA build adds to them.
- infra/compose/mlflow/requirements.lock (the MLflow server image): MLflow with its Postgres and S3 drivers.
- infra/compose/s3-standin.lock (infra/compose/stack.py, no image): moto's S3 server, standing in for MinIO where
  MinIO cannot be installed, at the MLflow lock's pins of what the two share (boto3, botocore).

How: pip's resolver is asked, as a dry run, what the packages need, with every cpu.lock pin as a constraint (a
package cpu.lock pins can only come at that version; what the lock does not hold is added at the version pip picks).
Resolving torch this way yields its CUDA build: on Linux x86_64 the public index's torch wheel is that build (the
CPU build on this machine comes from its pip configuration, which is ignored here). Nothing is installed: pip >= 24
reads each wheel's metadata file instead of downloading the wheel (an older pip downloads the multi-GB CUDA wheels).

Hashes: every pin is followed by the sha256 of each of its files on the index (its JSON simple API, PEP 691), so
`pip install -r LOCK` checks what it downloads (pip's hash-checking mode: a file whose bytes differ from the lock's
is refused, whatever the index serves). Every Linux x86_64 file of a release is listed (each CPython version's
wheel, pure-Python wheels, the sdist), so a wheelhouse for another CPython version checks too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_LOCK = REPO / "requirements/cpu.lock"
GPU_LOCK = REPO / "requirements/gpu.lock"
MLFLOW_LOCK = REPO / "infra/compose/mlflow/requirements.lock"
MLFLOW_DRIVERS = ("psycopg2-binary==2.9.13", "boto3==1.44.8")  # Postgres backend store, S3 artifacts
S3_STANDIN_LOCK = REPO / "infra/compose/s3-standin.lock"
S3_STANDIN = "moto[server]==5.2.5"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#\\]+)")
INDEX = "https://pypi.org/simple"
CPU_SECTION = "# --- requirements/cpu.lock, unchanged"
CUDA_SECTION = "# --- added by torch's CUDA build (not in requirements/cpu.lock)"
GPU_HEADER = """\
# GPU lock for the cluster image (infra/Dockerfile): the pins of requirements/cpu.lock, unchanged, and what the
# CUDA build of the same torch adds to them. Written by `python infra/locks.py` (how: its docstring); do not edit
# by hand, rerun it after changing cpu.lock (tests/unit/test_infra_assets.py checks that the two agree).
#
# torch=={torch} resolves here to the CUDA {cuda} build: on Linux x86_64 the public index's torch {torch} wheel is
# the build PyTorch also publishes as {torch}+cu{cuda_tag} on its CUDA index, https://download.pytorch.org/whl/cu{cuda_tag}.
# This lock was resolved against the public index (PyTorch's index was not reachable where it was written), so it
# installs that wheel from there. CUDA {cuda} needs an NVIDIA driver that supports it on every GPU node.
# Each pin carries the sha256 of every file of its release on the index: installs check what they download.
# Linux x86_64 only.
"""
MLFLOW_HEADER = """\
# The MLflow tracking server image (Dockerfile beside this file): {top}
# and their dependencies, every one pinned, at requirements/cpu.lock's pins where it holds them (the client that CI
# tests), each with the sha256 of every file of its release on the index. Written by `python infra/locks.py`; do
# not edit by hand.
"""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, tuple[str, str]]:
    """{normalized name: (name as written, version)} of every `name==version` line."""
    pins = {}
    for line in path.read_text().splitlines():
        if match := PIN.match(line.strip()):
            pins[normalize(match[1])] = (match[1], match[2])
    return pins


def resolve(requirements: list[str], constraints: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """{normalized name: (name, version)} pip would install for `requirements` under `constraints`, wheels only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the machine's config points at local CPU wheels and caps torch
    with tempfile.TemporaryDirectory() as tmp:
        constraints_file = Path(tmp, "constraints.txt")
        constraints_file.write_text("".join(f"{name}=={version}\n" for name, version in constraints.values()))
        report = Path(tmp, "report.json")
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                        "--only-binary", ":all:", "--report", str(report), "-c", str(constraints_file),
                        *requirements], check=True, env=env)
        installs = json.loads(report.read_text())["install"]
    return {normalize(i["metadata"]["name"]): (i["metadata"]["name"], i["metadata"]["version"]) for i in installs}


def release_hashes(name: str, version: str) -> list[str]:
    """The sha256 of every file of `name` `version` on the index that Linux x86_64 can install: its wheels for
    that platform (each CPython version) or any, and the sdist."""
    request = urllib.request.Request(
        f"{INDEX}/{normalize(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    found = []
    for file in files:
        filename = file["filename"]
        if filename.endswith(".whl"):
            file_version, platform_tag = filename.split("-")[1], filename[:-4].split("-")[-1]
            if platform_tag != "any" and not ("linux" in platform_tag and "x86_64" in platform_tag):
                continue  # the locks are for Linux x86_64 (any CPython version the wheelhouse targets)
        else:  # an sdist: name-version.tar.gz / .zip
            file_version = re.sub(r"\.(tar\.gz|zip|tar\.bz2)$", "", filename).rsplit("-", 1)[-1]
        if file_version == version and "sha256" in file.get("hashes", {}):
            found.append(file["hashes"]["sha256"])
    if not found:
        raise SystemExit(f"{INDEX} lists no file of {name}=={version} with a sha256")
    return sorted(found)


def hashed(name: str, version: str) -> str:
    """A lock entry: the pin, then one `--hash` per file of that release (pip's requirements-file syntax)."""
    return " \\\n".join([f"{name}=={version}", *(f"    --hash=sha256:{h}" for h in release_hashes(name, version))])


def write(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    print(f"wrote {path.relative_to(REPO)}")


def cuda_version(resolved: dict[str, tuple[str, str]]) -> str:
    """The CUDA runtime torch's build requires, e.g. '13.0' (the nvidia-cuda-runtime pin)."""
    for key, (_, version) in resolved.items():
        if key.startswith("nvidia-cuda-runtime"):
            return ".".join(version.split(".")[:2])
    raise SystemExit("torch resolved without an nvidia-cuda-runtime wheel: not a CUDA build")


def gpu_lock(cpu_pins: dict[str, tuple[str, str]]) -> None:
    torch = cpu_pins["torch"][1]
    resolved = resolve([f"torch=={torch}"], {k: v for k, v in cpu_pins.items() if k != "torch"})
    added = {key: pin for key, pin in resolved.items() if key not in cpu_pins}
    cuda = cuda_version(added)
    lines = [GPU_HEADER.format(torch=torch, cuda=cuda, cuda_tag=cuda.replace(".", "")), CPU_SECTION]
    lines += [hashed(name, version) for name, version in cpu_pins.values()]
    lines += [CUDA_SECTION] + [hashed(name, version) for _, (name, version) in sorted(added.items())]
    write(GPU_LOCK, lines)


def mlflow_lock(cpu_pins: dict[str, tuple[str, str]]) -> None:
    top = [f"mlflow[auth]=={cpu_pins['mlflow'][1]}", *MLFLOW_DRIVERS]
    resolved = resolve(top, cpu_pins)
    lines = [MLFLOW_HEADER.format(top=" + ".join(top))]
    lines += [hashed(name, version) for _, (name, version) in sorted(resolved.items())]
    write(MLFLOW_LOCK, lines)


S3_STANDIN_HEADER = """\
# The S3 server of the native team stack (infra/compose/stack.py), in place of compose's MinIO: {top} and its
# dependencies, every one pinned, at infra/compose/mlflow/requirements.lock's pins where it holds them, each with
# the sha256 of every file of its release on the index. Written by `python infra/locks.py`; do not edit by hand.
"""


def s3_standin_lock() -> None:
    resolved = resolve([S3_STANDIN], read_pins(MLFLOW_LOCK))
    lines = [S3_STANDIN_HEADER.format(top=S3_STANDIN)]
    lines += [hashed(name, version) for _, (name, version) in sorted(resolved.items())]
    write(S3_STANDIN_LOCK, lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if platform.system() != "Linux" or platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11):
        raise SystemExit("run with CPython 3.11 on Linux x86_64, the images' platform: pip resolves for the "
                         "interpreter it runs in")
    from importlib.metadata import version

    if int(version("pip").split(".")[0]) < 24:
        raise SystemExit(f"pip {version('pip')} here: use pip >= 24 (`python -m pip install -U pip` in a venv), which "
                         "reads wheels' metadata instead of downloading the multi-GB CUDA wheels to resolve them")
    cpu_pins = read_pins(CPU_LOCK)
    gpu_lock(cpu_pins)
    mlflow_lock(cpu_pins)
    s3_standin_lock()


if __name__ == "__main__":
    main()
