"""Stage subprocesses (`gpt1.pipeline.stream_subprocess`) do not outlive the pipeline process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

# The parent: runs a stage command the way the pipeline does, forwarding its output.
PARENT = """
import sys
from gpt1.pipeline import stream_subprocess
stream_subprocess([sys.executable, "-c", sys.argv[1]])
"""
# The stage: what `python -m gpt1.cli ...` does first, then reports its pid and works for a long time.
STAGE = """
import os, time
from gpt1.cli import stop_with_parent
stop_with_parent()
print("stage", os.getpid(), flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited; it only waits to be reaped
        return stat.read().split(") ")[1][0] != "Z"


def start_stage() -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, STAGE], stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline().split()
    assert line[:1] == ["stage"], line
    return parent, int(line[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stage_stops_when_the_pipeline_process_is_killed():
    parent, stage = start_stage()
    assert os.getpgid(stage) == stage != os.getpgid(parent.pid)  # its own session: one group per stage tree
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(stage) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(stage), "the stage kept running after its pipeline process died"


def test_stage_keeps_running_while_the_parent_lives():
    parent, stage = start_stage()
    try:
        time.sleep(2.5)  # more than two polls of the watchdog
        assert alive(stage)
    finally:
        os.killpg(stage, signal.SIGKILL)
        parent.wait()
