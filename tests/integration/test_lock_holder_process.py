"""A lock kept by a worker whose launcher was killed: the refusal names the worker, alive, not the dead launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from gpt1.stages.outputs import OutputBusy, lock

# The launcher: takes the output's lock, passes it on to a worker as launchers do (Lock.inherit_env), and dies
# without a word, as under kill -9; the worker sleeps on, holding the lock.
LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys
    from gpt1.stages.outputs import lock
    held = lock(__import__("pathlib").Path(sys.argv[1]), wait=False)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=[held.fd],
                              env={**os.environ, **held.inherit_env()}, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(worker.pid, flush=True)
    os._exit(0)
    """
)


def test_a_lock_outliving_its_launcher_names_the_worker_holding_it(tmp_path):
    out = tmp_path / "run"
    launcher = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(out)], capture_output=True, text=True, timeout=60, check=True
    )
    worker = int(launcher.stdout.split()[0])
    try:
        with pytest.raises(OutputBusy) as busy:
            lock(out, wait=False)
    finally:
        os.kill(worker, signal.SIGKILL)
    message = str(busy.value)
    assert f"pid {worker}:" in message and f"kill {worker}" in message, message
    assert "exited" in message and "time.sleep" in message, message
