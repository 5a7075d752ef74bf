"""The stage output lock across processes: a second writer is refused or waits, a killed build leaves nothing
half-written in place, and the lock outlives a launcher whose child still writes. The stand-in stage and the
in-process checks of the policy: tests/unit/test_stages.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gpt1.stages import outputs
from gpt1.stages.base import Ref
from gpt1.stages.outputs import OutputBusy
from tests.unit.test_stages import Copy, source  # noqa: F401 (source: a fixture)


def test_a_second_writer_is_refused_or_waits_and_then_reuses(tmp_path, source):
    out = tmp_path / "out"
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "from pathlib import Path\nfrom gpt1.stages.base import Ref\nfrom tests.unit.test_stages import Copy\n"
            f"Copy(Ref.to({str(source)!r}), seconds=4).run(Path({str(out)!r}), wait=False)\n")
    first = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(OutputBusy, match=f"pid {first.pid}"):
            Copy(Ref.to(source)).run(out, wait=False)
        waited = Copy(Ref.to(source)).run(out, wait=True)  # the pipeline: waits, then finds it finished
        assert waited.cached and first.wait(60) == 0
    finally:
        first.kill()


def test_a_killed_build_leaves_nothing_in_place_and_its_leftovers_are_removed(tmp_path, source):
    out = tmp_path / "out"
    Copy(Ref.to(source)).run(out, wait=False)
    before = (out / "copy.txt").read_text()
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "from pathlib import Path\nfrom gpt1.stages.base import Ref\nfrom tests.unit.test_stages import Copy\n"
            f"Copy(Ref.to({str(source)!r}), upper=True, seconds=60).run(Path({str(out)!r}), wait=False, force=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".out.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (out / "copy.txt").read_text() == before and list(tmp_path.glob(".out.tmp-*"))
    Copy(Ref.to(source), upper=True).run(out, wait=False, force=True)
    assert (out / "copy.txt").read_text() == before.upper() and not list(tmp_path.glob(".out.tmp-*"))


def test_a_child_started_with_the_lock_keeps_it_after_its_launcher_dies(tmp_path):
    """What keeps a pre-training worker's output safe when `gpt1 pretrain` is killed: the lock lives on in it."""
    out = tmp_path / "out"
    launcher = (f"import sys, subprocess, time; sys.path[:0] = {sys.path!r}\n"
                "from pathlib import Path\nfrom gpt1.stages import outputs\n"
                f"lock = outputs.lock(Path({str(out)!r}), wait=False)\n"
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
                "env={**__import__('os').environ, **lock.inherit_env()}, pass_fds=(lock.fd,))\n"
                "print(child.pid, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with pytest.raises(OutputBusy):
            outputs.lock(out, wait=False)
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:  # free once the last holder is gone (the child is reaped by init, not by us)
            try:
                outputs.lock(out, wait=False).release()
                break
            except OutputBusy:
                assert time.monotonic() < deadline, "the lock outlived every process holding it"
                time.sleep(0.1)
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
