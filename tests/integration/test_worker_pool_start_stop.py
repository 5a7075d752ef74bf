"""The reused worker processes (`gpt1.runtime.workers.WorkerPool`) started ahead of their first job, and stopped all
at once at the end of a flow run, busy ones included, without the interpreter's teardown."""

from __future__ import annotations

import atexit
import os
import threading
import time
from pathlib import Path

from gpt1.runtime.processes import alive
from gpt1.runtime.workers import WorkerPool


# Imported as a worker's preload (as torch and MLflow are), this module registers an exit handler that leaves a file
# when the worker runs its interpreter's teardown; the test process itself imported it before setting the variable.
TEARDOWN_MARKER = "GPT1_TEST_TEARDOWN_MARKER"
if os.environ.get(TEARDOWN_MARKER):
    atexit.register(lambda: Path(os.environ[TEARDOWN_MARKER], str(os.getpid())).touch())


class Sleep:
    """A picklable job: prints its worker's pid, then sleeps `seconds`."""

    label = "sleep"

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self) -> int:
        print("pid", os.getpid(), flush=True)
        time.sleep(self.seconds)
        return 0


def wait_until(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_start_brings_every_worker_up_before_any_job_and_jobs_then_reuse_them():
    pool = WorkerPool(2)
    try:
        pool.start()
        wait_until(lambda: len(pool.pids) == 2, "both workers to start")
        started = set(pool.pids)
        lines: list[str] = []
        pool.run(Sleep(0), lines.append)
        assert int(lines[0].split()[1]) in started  # the job ran in a worker started ahead, not a new one
        assert set(pool.pids) == started
    finally:
        pool.shutdown()
    assert not any(alive(pid) for pid in started)


def test_workers_leave_without_running_the_exit_handlers_of_their_imports(tmp_path, monkeypatch):
    monkeypatch.setenv(TEARDOWN_MARKER, str(tmp_path))
    pool = WorkerPool(2, preload=(__name__,))
    pool.start()
    wait_until(lambda: len(pool.pids) == 2, "both workers to start")
    pids = pool.pids
    pool.shutdown()
    assert not any(alive(pid) for pid in pids)
    assert list(tmp_path.iterdir()) == []  # no teardown ran (it would have left a file per worker)


def test_shutdown_terminates_a_busy_worker_instead_of_waiting_for_its_job():
    """A busy worker (a cancelled flow's fine-tune) is stopped with the idle one: shutdown returns long before the
    busy job would have ended."""
    pool = WorkerPool(2)
    pool.start()
    wait_until(lambda: len(pool.pids) == 2, "both workers to start")
    lines: list[str] = []
    busy = threading.Thread(target=lambda: _run_quietly(pool, Sleep(120), lines), daemon=True)
    busy.start()
    wait_until(lambda: lines, "the long job to start")
    pids = pool.pids
    began = time.monotonic()
    pool.shutdown()
    assert time.monotonic() - began < 60
    assert not any(alive(pid) for pid in pids), pids
    busy.join(30)
    assert not busy.is_alive()


def _run_quietly(pool: WorkerPool, job, lines: list[str]) -> None:
    try:
        pool.run(job, lines.append)
    except Exception:  # noqa: BLE001 - the job's worker is terminated by the shutdown under test
        pass
