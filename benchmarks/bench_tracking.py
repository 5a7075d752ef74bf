"""Metric logging against a real tracking server: `RunLogger.log_metrics` per call, buffered, and MLflow's own
asynchronous logging.

Starts `mlflow server --workers 1` (127.0.0.1, SQLite backend and artifacts in a temp dir, job execution off), then
times --calls metric logging calls (one small dict each, like a fine-tuning curve point) on a fresh run per mode:

- per call: `RunLogger(metrics_interval=0)`, each call is one `log_batch` HTTP request (how every call was sent
  before buffering);
- buffered: `RunLogger` with the default `METRICS_INTERVAL`; calls append to the run's buffer, a background thread
  (or `flush()`) sends it;
- mlflow async: `MlflowClient.log_batch(..., synchronous=False)` per call (what MLFLOW_ENABLE_ASYNC_LOGGING does for
  the fluent API), then waiting for every returned operation;
- mlflow async 2 s: the same with MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS=2, MLflow's option to merge queued calls.

Each mode is timed up to delivery (the calls, then the flush or wait) and for the calls alone; the modes rotate over
--rounds so that background load on a shared machine hits them alike. Afterwards every metric of every run is read
back from the server, and the HTTP `log_batch` requests each mode made are counted (at the REST store, below
MLflow's queue).

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
import threading
import time
import urllib.request
from pathlib import Path

from mlflow.store.tracking.rest_store import RestStore

from gpt1.runtime.processes import free_port
from gpt1.tracking.logger import METRICS_INTERVAL, RunLogger
from results import record

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


class RequestCounter:
    """Counts the REST store's `log_batch` requests (also those MLflow's async queue makes from its own threads:
    the queue binds `store.log_batch` when the store is created, so the class is patched before any client)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        original = RestStore.log_batch

        def counted(store, *args, **kwargs):
            with self._lock:
                self.count += 1
            return original(store, *args, **kwargs)

        RestStore.log_batch = counted


def metrics_at(step: int) -> dict[str, float]:
    return {"train/loss": 4.0 / step, "train/lr": 2.5e-4, "train/grad_norm": 1.0 + step % 7}


def timed_run(url: str, name: str, calls: int, mode: str, counter: RequestCounter) -> dict:
    """One run: `calls` logging calls, then everything delivered; seconds for the calls, to delivery, requests."""
    run = RunLogger(name, experiment="bench-tracking", uri=url,
                    metrics_interval=0.0 if mode == "per call" else METRICS_INTERVAL)
    os.environ.pop("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS", None)
    if mode == "mlflow async 2 s":
        os.environ["MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS"] = "2"
    client = run.client  # the run already exists: only metric requests are counted from here
    before = counter.count
    started = time.perf_counter()
    if mode.startswith("mlflow async"):
        from mlflow.entities import Metric

        operations = []
        for step in range(1, calls + 1):
            now = int(time.time() * 1000)
            items = [Metric(k, v, now, step) for k, v in metrics_at(step).items()]
            operations.append(client.log_batch(run.run_id, metrics=items, synchronous=False))
        logged = time.perf_counter()
        for operation in operations:
            operation.wait()  # raises if MLflow could not deliver the batch (it does not retry)
        delivered_all = True
    else:
        for step in range(1, calls + 1):
            run.log_metrics(metrics_at(step), step=step)
        logged = time.perf_counter()
        delivered_all = run.flush()
    delivered = time.perf_counter()
    requests = counter.count - before
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


MODES = ("per call", "buffered", "mlflow async", "mlflow async 2 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="logging calls per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode, rotating the order")
    args = parser.parse_args()

    counter = RequestCounter()
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        proc, url = start_server(Path(tmp))
        try:
            timed_run(url, "warm-up", 20, "per call", counter)  # first requests pay the server's lazy imports
            results: dict[str, list[dict]] = {mode: [] for mode in MODES}
            for i in range(args.rounds):
                for mode in MODES[i % len(MODES):] + MODES[:i % len(MODES)]:
                    result = timed_run(url, f"{mode.replace(' ', '-')}-{i}", args.calls, mode, counter)
                    check_delivered(url, result["run_id"], args.calls)
                    results[mode].append(result)
                    print(f"round {i} {mode:>16}: calls {result['calls_s'] * 1000:8.1f} ms, delivered "
                          f"{result['delivered_s'] * 1000:8.1f} ms, {result['requests']} log_batch request(s)")
        finally:
            stop_server(proc)

    def median(mode: str, field: str) -> float:
        return statistics.median(r[field] for r in results[mode])

    print(f"\n{args.calls} logging calls ({len(KEYS)} metrics each), mlflow server --workers 1, SQLite, "
          f"median of {args.rounds}:")
    for mode in MODES:
        print(f"  {mode:>16}: {median(mode, 'delivered_s') * 1000:8.1f} ms to delivery, calls alone "
              f"{median(mode, 'calls_s') * 1000:7.1f} ms, {median(mode, 'requests'):.0f} request(s)")
    base = median("per call", "delivered_s")
    print("  to delivery vs per call: " + ", ".join(f"{mode} {base / median(mode, 'delivered_s'):.1f}x"
                                                   for mode in MODES[1:]))
    record({mode: {"delivered_s": median(mode, "delivered_s"), "calls_s": median(mode, "calls_s"),
                   "requests": median(mode, "requests"), "speedup_vs_per_call": base / median(mode, "delivered_s")}
            for mode in MODES})


if __name__ == "__main__":
    main()
