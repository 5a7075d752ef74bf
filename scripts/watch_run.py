"""Run a deployment and follow it in the terminal: each stage as it starts and ends, pre-training's step, loss and
ETA, each fine-tune's score, warnings and errors. `make demo` uses it instead of `prefect deployment run --watch`,
which shows only state changes.

    python scripts/watch_run.py gpt1/smoke [--params '{"overrides": ["finetune.epochs=1"]}']

Everything is read from the Prefect API (the flow run's task runs and logs), so it works for any worker. Exit code:
0 when the flow run completes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime, timezone

STEP = re.compile(r"step (\d+)/(\d+) loss ([\d.]+)")
SCORE = re.compile(r"\[(\S+)\] .*?(\w+): (\w+) = (-?[\d.]+) on (\w+) \(majority baseline (-?[\d.]+)\)")
COMPILE = re.compile(r"Building extension module|Emitting ninja build file|Loading extension module")
SAY_EVERY = 10.0  # seconds between two pre-training progress lines
PAGE = 200  # log records per request: the most a Prefect server returns (PREFECT_API_DEFAULT_LIMIT)


def clock(start: float) -> str:
    seconds = int(time.monotonic() - start)
    return f"[{seconds // 60:02d}:{seconds % 60:02d}]"


class Follower:
    def __init__(self, start: float):
        self.start = start
        self.states: dict = {}
        self.step_said = 0.0
        self.compile_said = False
        self.first_step: tuple[float, int] | None = None

    def say(self, text: str) -> None:
        print(f"{clock(self.start)} {text}", flush=True)

    def task_run(self, run) -> None:
        state = run.state.type.value if run.state else "?"
        if self.states.get(run.id) == state:
            return
        self.states[run.id] = state
        seconds = (run.end_time - run.start_time).total_seconds() if run.end_time and run.start_time else None
        if state == "RUNNING":
            self.say(f"> {run.name}")
        elif state == "COMPLETED":
            self.say(f"  {run.name} done" + (f" ({seconds:.0f} s)" if seconds is not None else ""))
        elif state in ("FAILED", "CRASHED"):
            self.say(f"  {run.name} FAILED: {run.state.message or state}")

    def log(self, record) -> None:
        message = record.message
        if step := STEP.search(message):
            done, total, loss = int(step[1]), int(step[2]), float(step[3])
            now = time.monotonic()
            if self.first_step is None:
                self.first_step = (now, done)
            if now - self.step_said >= SAY_EVERY or done == total:
                self.step_said = now
                began, first = self.first_step
                rate = (done - first) / max(now - began, 1e-9)
                eta = f", ETA {int((total - done) / rate)} s" if rate > 0 and done < total else ""
                self.say(f"  pre-training step {done}/{total}, loss {loss:.3f}{eta}")
        elif score := SCORE.search(message):
            label, task, metric, value, split, majority = score.groups()
            self.say(f"  {label}: {metric} {float(value):.1f} on {split} (majority class {float(majority):.1f})")
        elif COMPILE.search(message) and not self.compile_said:
            self.compile_said = True
            self.say("  DeepSpeed is compiling a C++ op (first run on this machine only)")
        elif record.level >= 30:
            self.say(f"  {'ERROR' if record.level >= 40 else 'warning'}: {message.splitlines()[0][:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deployment", help="flow/deployment, e.g. gpt1/smoke")
    parser.add_argument("--params", default="{}", help="JSON object of flow parameters")
    args = parser.parse_args()

    from prefect import get_client
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId,
                                                LogFilter, LogFilterFlowRunId, LogFilterTimestamp)
    from prefect.client.schemas.sorting import LogSort
    from prefect.deployments import run_deployment

    run = run_deployment(args.deployment, parameters=json.loads(args.params), timeout=0, as_subflow=False)
    follower = Follower(time.monotonic())
    follower.say(f"flow run {run.name} of {args.deployment} (follow it in the Prefect UI too)")
    seen_after, seen = datetime(2000, 1, 1, tzinfo=timezone.utc), set()
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(run.id)
            children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])))
            ids = [run.id, *(c.id for c in children)]
            task_runs = sorted(client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids))),
                               key=lambda t: t.start_time or t.expected_start_time)
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids),
                                                         timestamp=LogFilterTimestamp(after_=seen_after)),
                                    sort=LogSort.TIMESTAMP_ASC, limit=PAGE)
            for record in logs:
                if record.id not in seen:  # `after_` includes the boundary: a record may come twice
                    seen.add(record.id)
                    follower.log(record)
                seen_after = max(seen_after, record.timestamp)
            for task_run in task_runs:
                follower.task_run(task_run)
            if run.state.is_final() and len(logs) < PAGE:
                break
            time.sleep(2)
    follower.say(f"flow run {run.name}: {run.state.name}" + (f" ({run.state.message})" if run.state.message else ""))
    return 0 if run.state.is_completed() else 1


if __name__ == "__main__":
    sys.exit(main())
