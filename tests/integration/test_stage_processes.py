"""Stage processes do not outlive the pipeline process that started them: subprocesses
(`gpt1.runtime.processes`) and the reused worker processes (`gpt1.runtime.workers.WorkerPool`); and the workers
keep each job's output and failure to that job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from gpt1.runtime.processes import alive

# The parent: runs a stage command the way pre-training's launcher does (gpt1.pretrain.stage), forwarding its output.
PARENT = """
import sys
from gpt1.runtime.processes import parent_env, stream
sys.exit(stream([sys.executable, "-c", sys.argv[1]], print, parent_env(), new_session=True))
"""
# The stage: what `python -m gpt1.cli ...` does first, then reports its pid and works for a long time.
STAGE = """
import os, time
from gpt1.runtime.processes import exit_with_parent
exit_with_parent()
print("stage", os.getpid(), flush=True)
time.sleep(120)
"""


def start_parent(code: str, *args: str, tag: str) -> tuple[subprocess.Popen, int]:
    """Run `code` as a parent process; returns it and the child pid it prints first, as "<tag> <pid>"."""
    parent = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline().split()
    assert line[:1] == [tag], line
    return parent, int(line[1])


def start_stage() -> tuple[subprocess.Popen, int]:
    return start_parent(PARENT, STAGE, tag="stage")


def assert_dies_with_its_parent(parent: subprocess.Popen, child: int, what: str) -> None:
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(child), f"{what} kept running after the process that started it died"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stage_stops_when_the_pipeline_process_is_killed():
    parent, stage = start_stage()
    assert os.getpgid(stage) == stage != os.getpgid(parent.pid)  # its own session: one group per stage tree
    assert_dies_with_its_parent(parent, stage, "the stage")


def test_stage_keeps_running_while_the_parent_lives():
    parent, stage = start_stage()
    try:
        time.sleep(2.5)  # more than two polls of the watchdog
        assert alive(stage)
    finally:
        os.killpg(stage, signal.SIGKILL)
        parent.wait()


# -- reused worker processes (`gpt1.runtime.workers.WorkerPool`) ------------------------------------------------
class StandIn:
    """A picklable job for these tests instead of a fine-tune (no torch imports: the mechanics only).

    say A B ...   prints each word, then logs one line          threads   prints OMP_NUM_THREADS
    fail          prints a line, then raises                   hang      prints its pid, then sleeps
    """

    def __init__(self, *args: str):
        self.args = list(args)
        self.label = f"stand-in {' '.join(args[:1])}"

    def __call__(self) -> int:
        return stand_in(self.args)


def stand_in(args: list[str]) -> int:
    import logging

    command, *rest = args
    if command == "say":
        for word in rest:
            print(word)
            time.sleep(0.05)
        logging.getLogger("stand-in").info("logged %s", " ".join(rest))
        return 0
    if command == "threads":
        print(os.environ.get("OMP_NUM_THREADS"))
        return 0
    if command == "fail":
        print("about to fail", flush=True)
        raise RuntimeError("boom in the job")
    if command == "hang":
        print("pid", os.getpid(), flush=True)
        time.sleep(120)
        return 0
    return 3


def workers(n: int, **kwargs):
    from gpt1.runtime.workers import WorkerPool

    return WorkerPool(n, **kwargs)


def in_thread(pool, args: list[str]) -> tuple[threading.Thread, list[str], list[BaseException]]:
    lines, errors = [], []

    def job() -> None:
        try:
            pool.run(StandIn(*args), lines.append)
        except BaseException as err:  # noqa: BLE001 - asserted by the caller
            errors.append(err)

    thread = threading.Thread(target=job)
    thread.start()
    return thread, lines, errors


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_pool_jobs_stream_their_own_lines_to_their_caller():
    with workers(2) as pool:
        first, first_lines, first_errors = in_thread(pool, ["say", "a1", "a2", "a3"])
        second, second_lines, second_errors = in_thread(pool, ["say", "b1", "b2"])
        first.join(60)
        second.join(60)
        assert not first_errors and not second_errors, first_errors + second_errors
        assert first_lines[:3] == ["a1", "a2", "a3"] and second_lines[:2] == ["b1", "b2"]
        assert len(first_lines) == 4 and "INFO stand-in: logged a1 a2 a3" in first_lines[3], first_lines
        assert len(second_lines) == 3 and "logged b1 b2" in second_lines[2], second_lines
        threads: list[str] = []
        pool.run(StandIn("threads"), threads.append)
        assert threads == [os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // 2))]
        assert len(set(pool.pids)) == 2 and os.getpid() not in pool.pids  # two reused processes, not this one


def test_a_failing_pool_job_names_its_failure_and_leaves_the_others_running():
    with workers(2) as pool:
        slow, slow_lines, slow_errors = in_thread(pool, ["say", *(f"w{i}" for i in range(20))])
        lines: list[str] = []
        with pytest.raises(RuntimeError, match="exit code 1") as failed:
            pool.run(StandIn("fail"), lines.append)
        assert "stand-in fail" in str(failed.value) and "worker process" in str(failed.value)
        assert lines[0] == "about to fail" and "RuntimeError: boom in the job" in lines, lines  # its traceback
        slow.join(60)
        assert not slow_errors and slow_lines[:20] == [f"w{i}" for i in range(20)]
        pids = set(pool.pids)
        again: list[str] = []
        pool.run(StandIn("say", "still", "here"), again.append)
        assert again[:2] == ["still", "here"] and set(pool.pids) == pids  # the same workers go on


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_pool_worker_fails_its_job_clearly_and_is_replaced():
    from gpt1.runtime.workers import WorkerDied

    with workers(2) as pool:
        hung, hung_lines, hung_errors = in_thread(pool, ["hang"])
        wait_until(lambda: hung_lines, "the job's first line")
        victim = int(hung_lines[0].split()[1])
        beside, beside_lines, beside_errors = in_thread(pool, ["say", *(f"w{i}" for i in range(40))])
        wait_until(lambda: beside_lines, "the other job to start")
        os.kill(victim, signal.SIGKILL)
        hung.join(60)
        assert len(hung_errors) == 1 and isinstance(hung_errors[0], WorkerDied), hung_errors
        assert f"process {victim}" in str(hung_errors[0]) and "ended abruptly" in str(hung_errors[0])
        beside.join(60)
        assert not beside_errors and beside_lines[:40] == [f"w{i}" for i in range(40)]  # not affected
        later: list[str] = []
        pool.run(StandIn("say", "later"), later.append)
        assert later[0] == "later" and victim not in pool.pids  # a new worker took the dead one's place


# The parent of a pool: runs a job that hangs, printing the worker's pid.
POOL_PARENT = f"""
import sys
sys.path[:0] = {sys.path!r}
from gpt1.runtime.workers import WorkerPool
from {__name__} import StandIn
WorkerPool(1).run(StandIn("hang"), lambda line: print(line, flush=True))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_workers_exit_when_their_parent_is_killed():
    parent, worker = start_parent(POOL_PARENT, tag="pid")
    assert os.getpgid(worker) == os.getpgid(parent.pid)  # in the flow's group: it must stop itself
    assert_dies_with_its_parent(parent, worker, "a pool worker")
