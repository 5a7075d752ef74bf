"""Real file-system faults for tests: a folder nobody can write to, and a process whose writes fail."""

from __future__ import annotations

import contextlib
import resource
import signal
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest


def _can_write(folder: Path) -> bool:
    probe = folder / ".probe"
    try:
        probe.touch()
        probe.unlink()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """`folder` unwritable for this user: mode 0555, and for root (which ignores modes) the immutable attribute."""
    folder.chmod(0o555)
    immutable = False
    try:
        if _can_write(folder):
            immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
            if not immutable or _can_write(folder):
                pytest.skip("cannot make a folder read-only here (root without chattr)")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def file_size_limit(max_bytes: int) -> Callable[[], None]:
    """A `preexec_fn` making every file write past `max_bytes` fail in the child (EFBIG, as a full disk fails
    with ENOSPC): RLIMIT_FSIZE, with SIGXFSZ ignored so the write returns an error instead of killing it."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return apply
