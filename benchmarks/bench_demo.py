"""`make demo` timed from a fresh clone, phase by phase, with the CPU seconds each part used.

    python benchmarks/bench_demo.py [--keep] [--default-ports]        # or: make bench-demo

Clones the committed HEAD of this repository into a temporary folder (no .venv, no .demo: what a newcomer starts
from; uv's download cache is the machine's), runs `make demo` there as from a new shell (this machine's environment
less the project's and a venv's variables; free ports unless --default-ports), reads the phase lines
scripts/demo.sh prints, then `make down`. Records:

- seconds: the whole `make demo` (limit 300), its flow run (limit 200), and the phases: venv (with the servers
  starting beside it), servers and deployments ready, flow, results printed;
- CPU seconds of every process started inside the clone, sampled every 2 s, by kind: the two servers, the flow
  (the worker, the flow run, pre-training, fine-tune workers) and the rest of `make demo` (venv install, deploy,
  the follower): their sum over 2 cores bounds the whole run from below;
- the load average before and during the run: the figure for the goal needs a quiet machine (load under 0.5);
- whether pre-trained beat from-scratch on every task, and the smallest margin.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from results import REPO, record

LIMITS = {"demo": 300, "flow": 200}  # the limits, seconds on 2 cores
PHASE = re.compile(r"^demo \[(\d+) s\]: (.*)$")
# scripts/demo.sh's phase lines, by how they start -> the name recorded (seconds since `make demo` began)
PHASES = {"venv ready": "venv", "deployed": "deployed", "servers up": "servers_up",
          "running gpt1/smoke": "flow_started", "smoke pipeline finished": "flow_ended", "done": "results_printed"}
FLOW = re.compile(r"smoke pipeline finished in (\d+) s \(exit (\d+)\)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_env() -> dict[str, str]:
    """A new shell's environment: this one's, less what the project, a venv or a make around it set (as
    tests/conftest.py's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPT1_", "PREFECT_", "MLFLOW_"))
           and k not in ("DS_ACCELERATOR", "VIRTUAL_ENV", "PYTHONPATH", "MAKELEVEL", "MAKEFLAGS", "MFLAGS",
                         "MAKEOVERRIDES")}
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin)
    return env


def kind_of(cmdline: str) -> str:
    if "prefect" in cmdline and " server " in f" {cmdline} ":
        return "prefect_server"
    if "mlflow" in cmdline and " server " in f" {cmdline} ":
        return "mlflow_server"
    if any(part in cmdline for part in ("gpt1.pretrain", "gpt1.runtime", "prefect worker", "prefect.engine",
                                        "flows.", "multiprocessing")):
        return "flow"
    return "make_demo"


def sample(clone: Path, cpu: dict[int, tuple[str, float]], loads: list[float], stop: threading.Event) -> None:
    """Every 2 s: the load average, and the CPU seconds (user + system) of every process whose command line or
    working directory is inside the clone, by kind. A process's last reading counts: one that lives under 2 s, or
    its last 2 s, is missed, which makes the sums a slight underestimate."""
    tick = 0
    while not stop.wait(2):
        tick += 1
        if tick % 5 == 0:
            loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                cwd = os.readlink(proc / "cwd")
                fields = (proc / "stat").read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if str(clone) in cmdline or cwd.startswith(str(clone)):
                cpu[int(proc.name)] = (kind_of(cmdline), (int(fields[11]) + int(fields[12])) / CLK_TCK)


def margins(state: Path) -> dict[str, float]:
    """Pre-trained minus from-scratch primary metric per task, from the demo's report."""
    report = max((state / "work" / "report").glob("*/results.json"), key=os.path.getmtime)
    runs = json.loads(report.read_text())["runs"]
    full, scratch = runs["full"]["tasks"], runs["no_pretrain"]["tasks"]
    return {t: full[t]["metrics"]["primary"] - scratch[t]["metrics"]["primary"] for t in full}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone (its .demo/ holds the logs)")
    parser.add_argument("--default-ports", action="store_true", help="4200 and 5000, as a newcomer gets them")
    args = parser.parse_args()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    if dirty:
        print("bench_demo: uncommitted changes are not in the clone it times (commit them first):\n" + dirty)

    root = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    clone = root / "gpt1-pipeline"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = fresh_env()
    if not args.default_ports:
        env.update(GPT1_PREFECT_PORT=str(free_port()), GPT1_MLFLOW_PORT=str(free_port()))
    load_before = float(Path("/proc/loadavg").read_text().split()[0])
    loads: list[float] = []
    per_process: dict[int, tuple[str, float]] = {}
    stop = threading.Event()
    threading.Thread(target=sample, args=(clone, per_process, loads, stop), daemon=True).start()

    phases: dict[str, int] = {}
    flow_seconds = exit_code = None
    started = time.monotonic()
    demo = subprocess.Popen(["make", "demo"], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    for line in demo.stdout:
        print(line, end="", flush=True)
        if phase := PHASE.match(line.strip()):
            phases.update({name: int(phase[1]) for start, name in PHASES.items() if phase[2].startswith(start)})
        if flow := FLOW.search(line):
            flow_seconds, exit_code = int(flow[1]), int(flow[2])
    demo.wait()
    seconds = time.monotonic() - started
    stop.set()
    state = clone / ".demo"
    cpu: dict[str, float] = {}
    for kind, used in per_process.values():
        cpu[kind] = round(cpu.get(kind, 0.0) + used, 1)
    subprocess.run(["make", "down"], cwd=clone, env=env, capture_output=True, timeout=300)

    found = margins(state) if demo.returncode == 0 else {}
    result = {
        "seconds": round(seconds), "limit_s": LIMITS["demo"], "flow_s": flow_seconds, "flow_limit_s": LIMITS["flow"],
        "exit": demo.returncode if exit_code is None else exit_code,
        "phases_s": phases,
        "cpu_s": {**cpu, "total": round(sum(cpu.values()), 1)},
        "load": {"before": load_before, "mean_during": round(sum(loads) / len(loads), 2) if loads else None},
        "pretrained_above_scratch_on_every_task": bool(found) and min(found.values()) > 0,
        "min_margin": round(min(found.values()), 1) if found else None,
    }
    print(json.dumps(result, indent=1))
    cloned = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                            text=True).stdout.strip()
    record(result, command="python benchmarks/bench_demo.py" + (" --default-ports" if args.default_ports else ""),
           measured_commit=cloned)
    if args.keep:
        print(f"the clone is kept: {clone}")
    else:
        subprocess.run(["rm", "-rf", str(root)])
    return 0 if demo.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
