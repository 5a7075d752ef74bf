"""Metric logging against a real tracking server: `RunLogger.log_metrics` sent per call vs buffered.

Starts `mlflow server --workers 1` (127.0.0.1, SQLite backend and artifacts in a temp dir, job execution off), then
times --calls `log_metrics` calls (one small dict each, like a fine-tuning curve point) on a fresh run per mode:

- per call: `metrics_interval=0`, each call is one `log_batch` HTTP request (how every call was sent before
  buffering);
- buffered: the default `METRICS_INTERVAL`; calls append to the run's buffer and `flush()` sends it.

Each mode is timed up to delivery (the calls, then `flush()`) and for the calls alone; the modes alternate over
--rounds so that background load on a shared machine hits both alike. Afterwards every metric of every run is read
back from the server, and the requests each mode made are counted.

    python benchmarks/bench_tracking.py [--calls 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from gpt1.distributed import free_port
from gpt1.tracking import METRICS_INTERVAL, RunLogger

KEYS = ("train/loss", "train/lr", "train/grad_norm")


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` as the demo runs it; returns the process (its own group) and its URL once healthy."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts")],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mlflow server exited with {proc.returncode}; see {root / 'server.log'}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise SystemExit("mlflow server did not become healthy within 300 s")


def stop_server(proc: subprocess.Popen) -> None:
    """Its whole process group: SIGTERM, then SIGKILL for whatever is left."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            return
        try:
            proc.wait(20)
            return
        except subprocess.TimeoutExpired:
            continue


def timed_run(url: str, name: str, calls: int, interval: float) -> dict:
    """One run: `calls` log_metrics calls, then flush(); seconds for the calls, to delivery, and requests made."""
    run = RunLogger(name, experiment="bench-tracking", uri=url, metrics_interval=interval)
    client = run.client
    send = client.log_batch
    requests = 0

    def counted_log_batch(*args, **kwargs):
        nonlocal requests
        requests += 1
        return send(*args, **kwargs)

    client.log_batch = counted_log_batch  # counts the requests this run makes; the run already exists
    started = time.perf_counter()
    for step in range(1, calls + 1):
        run.log_metrics({"train/loss": 4.0 / step, "train/lr": 2.5e-4, "train/grad_norm": 1.0 + step % 7}, step=step)
    logged = time.perf_counter()
    delivered_all = run.flush()
    delivered = time.perf_counter()
    run.end()
    if not delivered_all:
        raise SystemExit(f"run {name}: metrics not delivered ({run.pending} call(s) pending)")
    return {"run_id": run.run_id, "calls_s": logged - started, "delivered_s": delivered - started,
            "requests": requests}


def check_delivered(url: str, run_id: str, calls: int) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    for key in KEYS:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        if steps != list(range(1, calls + 1)):
            raise SystemExit(f"run {run_id}: {key} has {len(steps)} of {calls} steps on the server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="log_metrics calls per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode, alternating")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        proc, url = start_server(Path(tmp))
        try:
            timed_run(url, "warm-up", 20, 0)  # first requests pay the server's lazy imports and table caches
            results: dict[str, list[dict]] = {"per call": [], "buffered": []}
            for i in range(args.rounds):
                order = [("per call", 0.0), ("buffered", METRICS_INTERVAL)]
                for mode, interval in order if i % 2 == 0 else order[::-1]:
                    result = timed_run(url, f"{mode.replace(' ', '-')}-{i}", args.calls, interval)
                    check_delivered(url, result["run_id"], args.calls)
                    results[mode].append(result)
                    print(f"round {i} {mode:>8}: calls {result['calls_s'] * 1000:8.1f} ms, delivered "
                          f"{result['delivered_s'] * 1000:8.1f} ms, {result['requests']} log_batch request(s)")
        finally:
            stop_server(proc)

    def median(mode: str, field: str) -> float:
        return statistics.median(r[field] for r in results[mode])

    per_call, buffered = median("per call", "delivered_s"), median("buffered", "delivered_s")
    print(f"\n{args.calls} log_metrics calls ({len(KEYS)} metrics each), mlflow server --workers 1, SQLite, "
          f"median of {args.rounds}:")
    print(f"  per call : {per_call * 1000:8.1f} ms to delivery ({per_call / args.calls * 1000:.2f} ms/call), "
          f"{results['per call'][0]['requests']} requests")
    print(f"  buffered : {buffered * 1000:8.1f} ms to delivery (calls alone {median('buffered', 'calls_s') * 1000:.1f}"
          f" ms), {results['buffered'][0]['requests']} request(s)")
    print(f"  ratio    : {per_call / buffered:.1f}x faster to delivery; every metric checked on the server")


if __name__ == "__main__":
    main()
