"""Write the image locks from requirements/cpu.lock, so the cluster runs the versions CI tested.

    python infra/locks.py      # CPython 3.11 on Linux x86_64 (the images' platform), pip >= 24, network to PyPI

- requirements/gpu.lock (infra/Dockerfile): cpu.lock's pins unchanged, then what torch's CUDA build adds to them.
- infra/compose/mlflow/requirements.lock (the MLflow server image): MLflow with its Postgres and S3 drivers.

How: pip's resolver is asked, as a dry run, what the packages need, with every cpu.lock pin as a constraint (a
package cpu.lock pins can only come at that version; what the lock does not hold is added at the version pip picks).
Resolving torch this way yields its CUDA build: on Linux x86_64 the public index's torch wheel is that build (the
CPU build on this machine comes from its pip configuration, which is ignored here). Nothing is installed: pip >= 24
reads each wheel's metadata file instead of downloading the wheel (an older pip downloads the multi-GB CUDA wheels).
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_LOCK = REPO / "requirements/cpu.lock"
GPU_LOCK = REPO / "requirements/gpu.lock"
MLFLOW_LOCK = REPO / "infra/compose/mlflow/requirements.lock"
MLFLOW_DRIVERS = ("psycopg2-binary==2.9.13", "boto3==1.44.8")  # Postgres backend store, S3 artifacts
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")
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
# Linux x86_64 only.
"""
MLFLOW_HEADER = """\
# The MLflow tracking server image (Dockerfile beside this file): {top}
# and their dependencies, every one pinned, at requirements/cpu.lock's pins where it holds them (the client that CI
# tests). Written by `python infra/locks.py`; do not edit by hand.
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
    lines += [f"{name}=={version}" for name, version in cpu_pins.values()]
    lines += [CUDA_SECTION] + [f"{name}=={version}" for _, (name, version) in sorted(added.items())]
    write(GPU_LOCK, lines)


def mlflow_lock(cpu_pins: dict[str, tuple[str, str]]) -> None:
    top = [f"mlflow[auth]=={cpu_pins['mlflow'][1]}", *MLFLOW_DRIVERS]
    resolved = resolve(top, cpu_pins)
    lines = [MLFLOW_HEADER.format(top=" + ".join(top))]
    lines += [f"{name}=={version}" for _, (name, version) in sorted(resolved.items())]
    write(MLFLOW_LOCK, lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if platform.system() != "Linux" or platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11):
        raise SystemExit("run with CPython 3.11 on Linux x86_64, the images' platform: pip resolves for the "
                         "interpreter it runs in")
    cpu_pins = read_pins(CPU_LOCK)
    gpu_lock(cpu_pins)
    mlflow_lock(cpu_pins)


if __name__ == "__main__":
    main()
