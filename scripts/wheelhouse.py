"""An air-gapped install: a wheelhouse of everything gpt1 needs but torch, and its offline install onto a Python
that already has torch (an air-gapped cluster's CUDA image, or the Docker build).

    python scripts/wheelhouse.py build --python-version 3.12 --out build-artifacts/wheelhouse-py3.12   # online
    python scripts/wheelhouse.py install --wheelhouse DIR --venv .venv-gpu [--python python3]     # offline
    python scripts/wheelhouse.py install --wheelhouse DIR --python /usr/local/bin/python3          # in place

`build` (a machine with a package index): the pins of requirements/gpu.lock without torch and the CUDA stack
that comes with it (torch, triton, nvidia-*, cuda-*), as wheels for CPython X.Y on Linux x86_64; a project
published as source only (DeepSpeed) is built into a wheel here, which must come out pure Python (any Python);
then gpt1-pipeline's own wheel. `--leave-out NAME...` leaves out more packages the target Python already has (a
smaller wheelhouse; the host's versions must then meet the other packages' requirements). DIR/requirements.txt
lists what `install` installs; DIR/wheelhouse.json says for which Python it was built.

`install` (no network): `pip install --no-index --require-hashes` from DIR alone, with pip's resolver checking
that the wheelhouse and the Python's own packages (its torch) together satisfy every requirement.

Hashes: the lock holds the sha256 of every file of each release (infra/locks.py), and `build` downloads in pip's
hash-checking mode, so a file whose bytes are not the lock's is refused; the sdist a wheel is built from is
checked the same way (the build tools pip fetches to build it are not: pip does not check build dependencies).
DIR/requirements.txt then records the sha256 of each wheel in DIR, and `install` refuses any other bytes.
`host-requirements` prints the lock's torch and CUDA pins with their hashes, for the image's own torch install. `--venv` first creates a venv that
sees the Python's packages (`--system-site-packages`), and installs into it. The wheels may travel spread over
several folders (a size limit on each transfer): `--wheelhouse DIR DIR2 ...`, the one with requirements.txt first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "gpu.lock"
PROJECT = "gpt1-pipeline"
# torch and what its CUDA build brings: the target Python has them (its own CUDA build, for its driver)
HOST_PROVIDED = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$", re.IGNORECASE)
# Wheel platforms accepted for Linux x86_64: manylinux back to glibc 2.17 (pip matches --platform exactly)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
             "linux_x86_64"]
# One lock entry (continuation lines joined): name[extras]==version, then the release's file hashes
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#\\]+)((?:\s+--hash=sha256:[0-9a-f]{64})*)\s*$")


class WheelhouseError(Exception):
    """One line saying what is wrong and what to do."""


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(lock: Path) -> list[tuple[str, str, list[str]]]:
    """(name, version, sha256 hashes) of every entry of `lock`, in order (extras dropped)."""
    found, logical, start = [], "", 0
    for number, line in enumerate(lock.read_text().splitlines(), start=1):
        stripped = line.strip()
        if not logical and (not stripped or stripped.startswith("#")):
            continue
        start = start or number
        logical += " " + stripped.removesuffix("\\")
        if stripped.endswith("\\"):
            continue
        entry = ENTRY.match(logical.strip())
        if not entry:
            raise WheelhouseError(f"{lock}:{start}: not an exact pin (name==version, then --hash=sha256:...): "
                                  f"{logical.strip()[:120]!r}")
        found.append((entry[1], entry[3], re.findall(r"--hash=sha256:([0-9a-f]{64})", entry[4])))
        logical, start = "", 0
    return found


def requirement(name: str, version: str, hashes: list[str]) -> str:
    """A requirements-file line: the pin and its hashes (pip then checks every file it fetches for it)."""
    return " ".join([f"{name}=={version}", *(f"--hash=sha256:{h}" for h in hashes)])


def pins(lock: Path, leave_out: tuple[str, ...] = (), host: bool = False) -> list[str]:
    """Requirement lines (`requirement`) of `lock`: every entry but the host-provided ones and `leave_out`, or
    with `host` the host-provided ones alone (torch and its CUDA stack)."""
    left_out = {normal(name) for name in leave_out}
    return [requirement(name, version, hashes) for name, version, hashes in entries(lock)
            if bool(HOST_PROVIDED.match(name)) == host and normal(name) not in left_out]


def pin_name(line: str) -> str:
    """The project a requirement line pins."""
    return line.split("==")[0]


def pip(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True)


def download(requirements: list[str], out: Path, python_version: str) -> list[str]:
    """Binary wheels for CPython `python_version`; returns the pins that have none (source only)."""
    abi = "cp" + python_version.replace(".", "")
    target = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
              "--abi", abi, "--abi", "abi3", "--abi", "none", *(f"--platform={p}" for p in PLATFORMS + ["any"])]
    wanted, source_only = list(requirements), []
    while wanted:
        listed = out / ".download.txt"  # with the lock's hashes: pip checks each file it fetches
        listed.write_text("\n".join(wanted) + "\n")
        done = pip(sys.executable, "download", "--no-deps", *target, "-d", str(out), "-r", str(listed))
        if done.returncode == 0:
            break
        missing = re.search(r"No matching distribution found for ([A-Za-z0-9._-]+)==", done.stderr)
        if missing is None:
            raise WheelhouseError(f"pip download failed: {done.stderr.strip().splitlines()[-1]}")
        name = normal(missing[1])
        pin = next(p for p in wanted if normal(pin_name(p)) == name)
        wanted.remove(pin)
        source_only.append(pin)
    (out / ".download.txt").unlink(missing_ok=True)
    return source_only


def build_wheel(target: str, name: str, out: Path, python_version: str) -> Path:
    """Build `target` (a requirement line, its sdist checked against its hashes, or a source folder) of project
    `name` into a wheel in `out`; it must install on CPython `python_version`: pure Python, or built here by that
    very Python version."""
    if Path(target).is_dir():
        done = pip(sys.executable, "wheel", "--no-deps", "-w", str(out), target)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            listed = Path(tmp, "requirement.txt")
            listed.write_text(target + "\n")
            done = pip(sys.executable, "wheel", "--no-deps", "-w", str(out), "-r", str(listed))
    if done.returncode != 0:
        raise WheelhouseError(f"building a wheel of {target} failed: {done.stderr.strip().splitlines()[-1]}")
    built = [w for w in out.glob("*.whl") if normal(w.name.split("-")[0]) == normal(name)]
    if not built:
        raise WheelhouseError(f"pip built no wheel of {target} in {out}")
    wheel = max(built, key=lambda w: w.stat().st_mtime)
    python_tag, abi_tag, platform_tag = wheel.stem.split("-")[-3:]
    pure = python_tag.startswith("py") and abi_tag == "none" and platform_tag == "any"
    if not (pure or python_tag == "cp" + python_version.replace(".", "")):
        raise WheelhouseError(f"{wheel.name} is built for this Python only ({python_tag}-{abi_tag}); build the "
                              f"wheelhouse with Python {python_version}")
    return wheel


def build(out: Path, python_version: str, lock: Path, leave_out: tuple[str, ...]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    wanted = pins(lock, leave_out)
    print(f"wheelhouse: {len(wanted)} pins of {lock.name} for CPython {python_version} (without torch and its CUDA "
          f"libraries), into {out}", flush=True)
    source_only = download(wanted, out, python_version)
    for pin in source_only:
        print(f"wheelhouse: {pin.split()[0]} is published as source only: building its wheel", flush=True)
        build_wheel(pin, pin_name(pin), out, python_version)
    with tempfile.TemporaryDirectory() as source:  # a clean copy: setuptools leaves build/ in the tree it builds
        shutil.copy2(REPO / "pyproject.toml", source)
        for package in ("gpt1", "flows"):  # pyproject's packages
            shutil.copytree(REPO / package, Path(source) / package, ignore=shutil.ignore_patterns("__pycache__"))
        project = build_wheel(source, PROJECT, out, python_version)
    # What `install` installs, each with the sha256 of its wheel here: the downloaded ones were checked against the
    # lock as they came, the built ones (from a checked sdist, and gpt1's own) are hashed as built.
    wheels = [wheel_of(out, pin_name(pin), pin.split("==")[1].split()[0]) for pin in wanted]
    listed = [requirement(pin_name(pin), pin.split("==")[1].split()[0], [sha256(wheel)])
              for pin, wheel in zip(wanted, wheels)]
    listed.append(requirement(PROJECT, project.name.split("-")[1], [sha256(project)]))
    (out / "requirements.txt").write_text("\n".join(listed) + "\n")
    (out / "wheelhouse.json").write_text(json.dumps({"python_version": python_version, "lock": lock.name,
                                                     "left_out": sorted(leave_out),
                                                     "built_from_source": [p.split()[0] for p in source_only],
                                                     "project": project.name}, indent=2) + "\n")
    print(f"wheelhouse: {len(list(out.glob('*.whl')))} wheels in {out} (built from source: "
          f"{', '.join(source_only) or 'none'}, and {project.name})")
    return 0


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_of(out: Path, name: str, version: str) -> Path:
    """The wheel of `name` `version` in `out` (pip names wheels by the normalized project and its version)."""
    for wheel in sorted(out.glob("*.whl")):
        project, wheel_version = wheel.name.split("-")[:2]
        if normal(project) == normal(name) and wheel_version == version:
            return wheel
    raise WheelhouseError(f"no wheel of {name}=={version} in {out} after the download")


def install(wheelhouses: list[Path], python: str, venv: Path | None) -> int:
    """Install from `wheelhouses` (one wheelhouse, or its wheels spread over several folders: the first holds
    requirements.txt and wheelhouse.json) onto `python`, or a venv made on top of it."""
    first = wheelhouses[0]
    manifest = first / "wheelhouse.json"
    if not manifest.is_file():
        raise WheelhouseError(f"{first} is not a wheelhouse (no wheelhouse.json): build one with "
                              "`make wheelhouse PYTHON_VERSION=X.Y`")
    wanted = json.loads(manifest.read_text())["python_version"]
    probe = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); import torch; "
                                          "print(torch.__version__, torch.version.cuda)"],
                           capture_output=True, text=True)
    lines = probe.stdout.split("\n")
    if not lines[0]:
        raise WheelhouseError(f"{python} does not run: {probe.stderr.strip()}")
    if lines[0] != wanted:
        raise WheelhouseError(f"{first} is for Python {wanted}, {python} is {lines[0]}: build it with "
                              f"`make wheelhouse PYTHON_VERSION={lines[0]}`")
    if probe.returncode != 0:
        raise WheelhouseError(f"{python} has no torch: install the host's torch build first (the wheelhouse "
                              "leaves torch out on purpose)")
    print(f"install: torch {lines[1]} of {python} is kept")
    if venv is not None:
        if not (venv / "bin" / "python").exists():
            subprocess.run([python, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        python = str(venv / "bin" / "python")
    # From the wheelhouse alone: no index, and none of pip's configured mirrors or local wheel folders either
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    links = [arg for folder in wheelhouses for arg in ("--find-links", str(folder))]
    done = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "install", "--no-index",
                           "--require-hashes", *links, "-r", str(first / "requirements.txt")], env=env)
    if done.returncode != 0:
        raise WheelhouseError(f"pip could not install from {', '.join(map(str, wheelhouses))} alone (its message is "
                              "above)")
    print(f"install: done; gpt1 is {Path(python).parent / 'gpt1'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/wheelhouse.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="download and build the wheels (needs a package index)")
    make.add_argument("--python-version", default="%d.%d" % sys.version_info[:2], help="target CPython X.Y")
    make.add_argument("--out", type=Path, required=True)
    make.add_argument("--lock", type=Path, default=LOCK)
    make.add_argument("--leave-out", nargs="*", default=[], metavar="NAME",
                      help="packages the target Python already has, besides torch (e.g. numpy pyarrow)")
    host = sub.add_parser("host-requirements", help="print the lock's torch and CUDA pins, with their hashes "
                          "(for `pip install --require-hashes --no-deps -r`: the image's torch)")
    host.add_argument("--lock", type=Path, default=LOCK)
    put = sub.add_parser("install", help="install from a wheelhouse, no network")
    put.add_argument("--wheelhouse", type=Path, nargs="+", required=True,
                     help="the wheelhouse folder (more folders: its wheels spread over them, the first one first)")
    put.add_argument("--python", default=sys.executable, help="the Python with torch (default: this one)")
    put.add_argument("--venv", type=Path, help="create this venv on top of --python and install there")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            if not re.fullmatch(r"3\.\d+", args.python_version):
                raise WheelhouseError(f"--python-version {args.python_version}: expected X.Y, e.g. 3.12")
            return build(args.out.absolute(), args.python_version, args.lock, tuple(args.leave_out))
        if args.command == "host-requirements":
            print("\n".join(pins(args.lock, host=True)))
            return 0
        return install([folder.absolute() for folder in args.wheelhouse], args.python, args.venv)
    except WheelhouseError as err:
        print(f"wheelhouse: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
