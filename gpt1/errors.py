"""The one error path of every `gpt1` process: which failures are the user's (one line, exit 2) and which are bugs
(a traceback, exit 1).

`gpt1 <command>`, the pre-training workers and the fine-tune worker processes share this policy, so a job fails the
same way in a worker as in a subprocess:

    code = exit_code(lambda: command(args), prefix="gpt1 finetune")

User errors are bad input and a hostile environment: invalid config values, malformed or missing files (the
message names the file, line and field), an output folder that must not be replaced or is busy, a folder that
cannot be written, a full disk (naming the path being written), a truncated or altered weights file, data that is
neither on disk nor reachable. Each prints `<prefix>: error: <message>` on one line; with `--debug` (or
GPT1_DEBUG=1, which `gpt1 --debug` passes on to the processes it starts) its traceback comes first. Anything else
is a bug in gpt1 and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
import traceback
from collections.abc import Callable

from gpt1.redact import redact

USAGE = 2  # bad input: the message says what to fix
BUG = 1  # anything else: the traceback is for us
PREEMPTED = (
    75  # stopped on request with its state saved: resume it (EX_TEMPFAIL of sysexits.h, "retry")
)
DEBUG_ENV = "GPT1_DEBUG"
# A write that failed for lack of room: a full disk, a quota, a file-size limit.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# The same, as libraries that wrap the OS error say it: pyarrow's "[errno 27]", safetensors' "(os error 28)",
# the C library's words
_NO_SPACE_TEXT = re.compile(
    "no space left|file too large|disk quota exceeded|(?:errno|os error)\\W*(?:"
    + "|".join(map(str, NO_SPACE))
    + ")\\b",
    re.IGNORECASE,
)


class Diverged(ValueError):
    """Training produced a non-finite loss, gradient norm or weight, or a model non-finite outputs. A user error
    (the learning rate or the data is the usual cause): the message names the step and what was kept."""


class ReportedFailure(Exception):
    """A failure whose cause was already printed by the process that had it (a worker's error or traceback): one
    line, exit 1, and no second traceback."""


class Preempted(Exception):
    """Stopped on request (SIGTERM: an eviction, a preemption) after saving what a resume needs: one line, exit
    PREEMPTED, which the launchers and the Slurm script treat as "resume", not "repair"."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line (`prog: error: message (see prog --help)`), not usage + error."""

    def error(self, message: str):
        self.exit(USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _offline_errors() -> tuple[type[BaseException], ...]:
    """Errors of the hub clients when data is neither cached nor reachable (only if those libraries are loaded)."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    hub = sys.modules.get("huggingface_hub.errors")
    if hub is not None:
        found += [
            getattr(hub, name)
            for name in (
                "LocalEntryNotFoundError",
                "OfflineModeIsEnabled",
                "RepositoryNotFoundError",
                "RevisionNotFoundError",
            )
            if hasattr(hub, name)
        ]
    datasets_errors = sys.modules.get("datasets.exceptions")
    if datasets_errors is not None and hasattr(datasets_errors, "DatasetNotFoundError"):
        found.append(datasets_errors.DatasetNotFoundError)
    return tuple(found)


def lack_of_room(err: BaseException) -> bool:
    """Whether `err` (or what caused it) is a write that failed for lack of room: a full disk, a quota or a
    file-size limit, by its errno or by the words of a library that wraps it."""
    seen: BaseException | None = err
    while seen is not None:
        if getattr(seen, "errno", None) in NO_SPACE or _NO_SPACE_TEXT.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def no_space_message(path: object, cause: str) -> str:
    """The one wording of a write that found no room, whichever kind (a full disk, a quota, a file-size limit)."""
    return f"no space left to write {path} ({cause})"


def os_error_message(err: OSError) -> str:
    """An OSError as one line that names its path: a full disk, a folder that cannot be written, or the rest."""
    where = f": {err.filename}" if err.filename else ""
    if err.errno in NO_SPACE:
        return no_space_message(
            err.filename or "the output", err.strerror or os.strerror(err.errno)
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write{where}: {err.strerror}"
    if err.strerror:
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    return first_line(err)


def user_message(err: BaseException) -> str | None:
    """The one-line message of a user error, or None when `err` is a bug."""
    if isinstance(err, _offline_errors()):
        return f"{first_line(err)} (no network: supply the data as a local folder, or pre-fill the hub cache)"
    if isinstance(err, OSError):
        return os_error_message(err) if err.errno is not None else one_line(err)
    if isinstance(err, (ValueError, ReportedFailure)):
        return one_line(err)
    safetensors = sys.modules.get("safetensors")
    if safetensors is not None and isinstance(err, getattr(safetensors, "SafetensorError", ())):
        return f"unreadable weights file (truncated or not safetensors): {one_line(err)}"
    return None


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def one_line(err: BaseException) -> str:
    """The whole message on one line (a multi-line message's lines joined)."""
    return (
        " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
        or type(err).__name__
    )


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def exit_code(run: Callable[[], int | None], prefix: str = "gpt1") -> int:
    """Call `run`; a user error prints `<prefix>: error: <message>` and returns 2 (after its traceback when
    debugging), a bug prints its traceback and returns 1, Ctrl-C returns 130, a stop on request (Preempted)
    prints its line and returns 75."""
    try:
        return int(run() or 0)
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exit:  # argparse has printed its message; sys.exit("text") has not
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
        return exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except Preempted as err:
        print(f"{prefix}: {redact(one_line(err))}", file=sys.stderr)
        return PREEMPTED
    except Exception as err:  # noqa: BLE001 - the policy above decides what the user sees
        message = user_message(err)
        if message is None:
            traceback.print_exc()
            return BUG
        if debugging():
            traceback.print_exc()
        # a message may quote a setting as given (a URI with its password): never print the secret
        print(f"{prefix}: error: {redact(message)}", file=sys.stderr)
        return BUG if isinstance(err, ReportedFailure) else USAGE
