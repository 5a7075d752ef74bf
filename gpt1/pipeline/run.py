"""Running one step of a plan in this process: what the flows' tasks, scripts and tests call.

    result = run_step(plan, "train-tokenizer", parent_run_id)

The step's job decides whether there is work to do (gpt1.stages.base); a second run needing the same output waits
for the first and then reuses it. A stage that runs in a worker process (its job class's `in_worker`: the fine-tunes)
is handed to `workers` when given, so the flow's own process never trains.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpt1 import errors
from gpt1.io import read_json
from gpt1.pipeline.lineage import log_step
from gpt1.pipeline.plan import Plan
from gpt1.runtime.workers import JobFailed, WorkerDied, WorkerPool
from gpt1.stages.base import Result, StageJob
from gpt1.stages.outputs import ERROR, read_marker
from gpt1.tracking import logger


@dataclass(frozen=True)
class InWorker:
    """`job.run(out)` as a picklable job for a reused worker process: waits for a concurrent writer, and exits as
    the stage's CLI command would (one line and 2 for bad input)."""

    job: StageJob
    out: Path
    label: str  # the step's name, in the pool's messages
    force: bool = False

    def __call__(self) -> int:
        def run() -> int:
            self.job.run(self.out, wait=True, force=self.force)
            return 0

        with (
            logger.as_own_process()
        ):  # a fresh process's tracking state, drained at the end as at exit
            return errors.exit_code(run, prefix=f"gpt1 {self.job.stage}")


def run_step(
    plan: Plan,
    name: str,
    parent_run_id: str | None = None,
    *,
    workers: WorkerPool | None = None,
    threads: str | None = None,
    log_line: Callable[[str], None] = print,
) -> Result:
    """Run step `name` (waiting for a concurrent writer of its output), then record it in MLflow under
    `parent_run_id`. `threads`: OMP_NUM_THREADS of the processes a stage launches beside other work. A failure
    names its cause (a stage's error.json when it left one)."""
    step = plan.steps[name]
    job = step.job.with_context(parent_run_id=parent_run_id, log_line=log_line, threads=threads)
    if workers is not None and step.job.in_worker:
        started = time.time()
        try:
            workers.run(
                InWorker(job, step.out, name, step.force), lambda line: log_line(f"[{name}] {line}")
            )
        except (JobFailed, WorkerDied) as err:
            error = step.out / ERROR
            if error.is_file() and error.stat().st_mtime >= started:
                raise RuntimeError(f"{name}: {read_json(error)['error']} ({err})") from None
            raise RuntimeError(f"{name}: {err}") from None
        marker = read_marker(step.out) or {}
        result = Result(
            step.out, job.key(), marker, cached=marker.get("finished", started) < started
        )
    else:
        result = job.run(step.out, wait=True, force=step.force, log_line=log_line)
    log_step(plan, step, result, parent_run_id)
    return result
