"""The benchmarks' one results file, benchmarks/results.md: every benchmark adds its own row when it finishes.

    from results import record                 # benchmarks/ is on sys.path when a benchmark runs as a script
    record({"ours_vs_hf": 1.49, "pct_of_peak": 53.1})

A row holds the date (UTC), the machine (CPU model, usable cores, GPU or none), the commit (`-dirty` when the
working tree differs from it; results.md itself does not count), the benchmark, the command that ran it and its
figures as `key=value` pairs. Nested dicts are flattened to dotted keys; floats keep 4 significant digits. Rows are
appended under a file lock, so benchmarks that finish at the same time never interleave; the file is created with
its header when it is absent.

Where rows go: GPT1_BENCH_RESULTS=PATH writes them to PATH instead, GPT1_BENCH_RESULTS=none records nothing. A
benchmark started by a test (pytest sets PYTEST_CURRENT_TEST, which its subprocesses inherit) records nothing
unless GPT1_BENCH_RESULTS names a file, so the test suite never adds rows.
"""

from __future__ import annotations

import fcntl
import os
import platform
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results.md"
ENV = "GPT1_BENCH_RESULTS"
COLUMNS = ("date (UTC)", "machine", "commit", "benchmark", "command", "result")
HEADER = ("# Benchmark results\n\n"
          "Rows are added by the benchmarks themselves when they finish (benchmarks/results.py); what each one "
          "measures and how to run it: docs/benchmarks.md.\n\n"
          f"| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}\n")


def record(results: dict[str, Any], *, benchmark: str | None = None, command: str | None = None,
           measured_commit: str | None = None) -> Path | None:
    """Append one row for this run; returns the file written, or None when recording is off.
    `benchmark` defaults to the script's name, `command` to the command line that started it, `measured_commit`
    to this checkout's commit (a benchmark that measures a clone of another commit names that one)."""
    path = destination()
    if path is None:
        return None
    script = Path(sys.argv[0])
    row = (datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), machine(), measured_commit or commit(),
           benchmark or script.stem, command or command_line(), format_results(results))
    line = "| " + " | ".join(cell(value) for value in row) + " |\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            fh.write(HEADER)
        else:
            fh.seek(fh.tell() - 1)
            if fh.read(1) != "\n":
                fh.write("\n")
        fh.write(line)
    print(f"results: a row added to {display(path)}")
    return path


def destination() -> Path | None:
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() == "none":
        return None
    if chosen:
        return Path(chosen)
    return None if os.environ.get("PYTEST_CURRENT_TEST") else RESULTS


def machine() -> str:
    """CPU model and usable cores, then the GPU (or "no GPU")."""
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores, {gpu() or 'no GPU'}"


def gpu() -> str | None:
    """What the benchmark could use: torch's view when it is loaded (it honours CUDA_VISIBLE_DEVICES), else
    nvidia-smi's; None when there is none."""
    torch = sys.modules.get("torch")
    names: list[str] = []
    if torch is not None:
        try:
            if not torch.cuda.is_available():
                return None
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:  # noqa: BLE001 - a broken CUDA setup reads as "no GPU", not as a failed benchmark
            return None
    else:
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode == 0:
            names = [name.strip() for name in done.stdout.splitlines() if name.strip()]
    counts = {name: names.count(name) for name in names}
    return ", ".join(name if n == 1 else f"{n}x {name}" for name, n in counts.items()) or None


def commit() -> str:
    """The short commit of the checkout, `-dirty` when a file differs from it (untracked files included, results.md
    excluded); "unknown" outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode:
            return "unknown"
        status = git("status", "--porcelain", "--", ".", f":(exclude){RESULTS.relative_to(REPO).as_posix()}")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if status.returncode or status.stdout.strip() else "")


def command_line() -> str:
    argv = list(sys.argv)
    if argv and argv[0]:
        argv[0] = display(Path(argv[0]))
    return "python " + shlex.join(argv)


def display(path: Path) -> str:
    """`path` relative to the repository when it is inside it."""
    try:
        return Path(path).resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def format_results(results: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value_text(value)}" for key, value in flatten(results).items())


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = prefix + re.sub(r"[^\w./+-]+", "_", str(key)).strip("_")
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "/".join(value_text(v) for v in value)
    return "none" if value is None else str(value)


def cell(text: str) -> str:
    """Text that stays in its markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")
