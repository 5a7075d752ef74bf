"""Child processes of a stage: their output streamed line by line, and their lives tied to whoever started them.

    code = stream([...], log_line, env={**parent_env()})      # in the child: exit_with_parent() at start-up

A stage that starts processes (pre-training workers, torchrun, a report) must not leave them running when it is
killed, or they go on writing into a folder the next run takes over. So a child started with `parent_env()` knows
its parent's pid, and `exit_with_parent()` (called first thing by `gpt1 <command>` and by a pre-training worker)
watches it and stops the child's whole process group once that parent is gone, however it died (kill -9, OOM).
Polling rather than PR_SET_PDEATHSIG: that signal fires when the *thread* that started the child ends, and the
flows start stages from short-lived threads; and it reaches only direct children, not torchrun's workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

PARENT_PID_ENV = "GPT1_PARENT_PID"
_POLL_SECONDS = 1.0


def parent_env() -> dict[str, str]:
    """Environment entries that make a child started by this process stop when this process dies."""
    return {PARENT_PID_ENV: str(os.getpid())}


def alive(pid: int) -> bool:
    """Whether process `pid` runs; a zombie (exited, waiting to be reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else (cannot be our parent, but do not guess)
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):  # exited just now, or no /proc (not Linux: os.kill said it runs)
        return not os.path.isdir("/proc")


def exit_with_parent() -> None:
    """If this process was started with `parent_env()`, stop its process group when that parent is gone.

    The variable is removed from this process's environment, so processes it starts itself watch nothing unless
    it passes its own `parent_env()` on."""
    parent = os.environ.pop(PARENT_PID_ENV, None)
    if not parent or not parent.isdigit() or not alive(int(parent)):
        return

    def watch() -> None:
        while alive(int(parent)):
            time.sleep(_POLL_SECONDS)
        logging.getLogger("gpt1").error("parent process %s is gone: stopping", parent)
        os.killpg(os.getpgid(0), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def stream(
    cmd: list[str],
    log_line: Callable[[str], None] = print,
    env: dict[str, str] | None = None,
    *,
    new_session: bool = False,
    pass_fds: Iterable[int] = (),
    forward_sigterm: bool = False,
) -> int:
    """Run `cmd`, forwarding each line of its output (stdout and stderr) to `log_line`; returns its exit code
    (negative: killed by that signal). Progress bars are off (piped output has no terminal to redraw).
    `new_session`: the command and everything it starts form a process group of their own. `forward_sigterm`
    (with `new_session`, from the main thread): while it runs, a SIGTERM to this process goes to that group
    instead of ending this process, which waits for the command to stop in its own way."""
    merged = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **os.environ, **(env or {})}
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=merged,
        start_new_session=new_session,
        pass_fds=tuple(pass_fds),
    )
    assert proc.stdout is not None
    previous = None
    if forward_sigterm and new_session and threading.current_thread() is threading.main_thread():

        def pass_on(signum: int, frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)

        previous = signal.signal(signal.SIGTERM, pass_on)
    try:
        for line in proc.stdout:
            log_line(line.rstrip())
    except (
        BaseException
    ):  # interrupted (Ctrl-C, a failing flow): the command must not run on unwatched
        proc.terminate()
        raise
    finally:
        code = proc.wait()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code


def stop_stage_processes(timeout: float) -> None:
    """Stop the processes this process's steps started (`parent_env` marks them; pre-training runs in a session of
    its own, with its ranks below it) and everything below them: SIGTERM, then SIGKILL for any left after
    `timeout` seconds. Their stage locks go with them."""
    import psutil

    me, stages = str(os.getpid()), []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if child.environ().get(PARENT_PID_ENV) == me:
                stages += [child, *child.children(recursive=True)]
    for process in stages:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, left = psutil.wait_procs(stages, timeout=timeout)
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def reset_peak_rss() -> None:
    """Start a new peak-memory measurement for this process (a reused worker measures each job on its own).
    Linux resets the high-water mark (VmHWM) on writing 5 to /proc/self/clear_refs; elsewhere nothing happens."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process since it started or since `reset_peak_rss`, in MB."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None
    # ru_maxrss: bytes on macOS, kB on Linux
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def threads_per_process(processes: int) -> str:
    """OMP_NUM_THREADS for one of `processes` processes sharing this machine: each takes its share of the cores,
    instead of every one spawning a thread per core and all of them contending."""
    return str(max(1, (os.cpu_count() or 1) // processes))
