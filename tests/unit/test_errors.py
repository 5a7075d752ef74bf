"""Errors name the user's words: a write that found no room reads the same whichever library failed, an `--out`
that is a symlink stands for what it points to, a busy output names the process really holding it (issue 45).

The cases come from declarations: every errno of `gpt1.errors.NO_SPACE` in the forms the writers raise it, every
command that has an `--out` flag.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
from pathlib import Path

import pytest

from gpt1 import cli
from gpt1.errors import NO_SPACE, lack_of_room, user_message
from gpt1.io import write_error
from gpt1.stages.outputs import OutputBusy, lock, lock_path

# How each writer says "no room": the OS (an errno), pyarrow (errno only in its text), safetensors (Rust's words),
# and any of them wrapped by a caller that raised its own error from it.
FORMS = {
    "OSError": lambda code, path: OSError(code, os.strerror(code), str(path)),
    "pyarrow": lambda code, path: OSError(f"[Errno {code}] Error writing bytes to file. Detail: [errno {code}]"),
    "safetensors": lambda code, path: RuntimeError(
        f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})"
    ),
    "wrapped": lambda code, path: _wrapped(OSError(code, os.strerror(code))),
}


def _wrapped(cause: BaseException) -> BaseException:
    try:
        raise RuntimeError("file write failed") from cause
    except RuntimeError as err:
        return err


@pytest.mark.parametrize("code", NO_SPACE, ids=[errno.errorcode[c] for c in NO_SPACE])
@pytest.mark.parametrize("form", FORMS)
def test_a_write_that_found_no_room_reads_the_same_from_every_writer(code, form, tmp_path):
    """ENOSPC (a full disk), EDQUOT (a quota) and EFBIG (a file-size limit): one wording naming the path."""
    path = tmp_path / "out" / "model.safetensors"
    err = FORMS[form](code, path)
    assert lack_of_room(err)
    assert f"no space left to write {path}" in str(write_error(path, err))
    if isinstance(err, OSError) and err.errno is not None:
        assert f"no space left to write {path}" in (user_message(err) or "")


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO, errno.EROFS])
def test_other_write_failures_are_not_called_a_full_disk(code, tmp_path):
    err = OSError(code, os.strerror(code), str(tmp_path / "x"))
    assert not lack_of_room(err)
    assert "no space" not in str(write_error(tmp_path / "x", err))


def _required(command: str) -> list[str]:
    """A placeholder for each argument the command requires but --out (its first choice where it has choices)."""
    parser = argparse.ArgumentParser()
    importlib.import_module(cli.commands()[command][0]).add_cli_args(parser)
    argv = []
    for action in parser._actions:
        if action.dest == "out" or action.option_strings and not action.required:
            continue
        value = str(next(iter(action.choices))) if action.choices else "placeholder"
        argv += [action.option_strings[0], value] if action.option_strings else [value]
    return argv


def _has_out(command: str) -> bool:
    parser = argparse.ArgumentParser()
    importlib.import_module(cli.commands()[command][0]).add_cli_args(parser)
    return any(action.dest == "out" for action in parser._actions)


OUT_COMMANDS = [command for command in cli.commands() if _has_out(command)]


@pytest.mark.parametrize("command", OUT_COMMANDS)
def test_an_out_that_is_a_symlink_is_what_it_points_to(command, tmp_path):
    """What gets written, locked and replaced (`--force`) is the real folder, never the link: removing a link with
    rmtree fails, and a swap would replace the link by a folder."""
    real = tmp_path / "disk" / "real"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    args = cli.build_parser(command).parse_args([command, *_required(command), "--out", str(link)])
    assert args.out == real
    plain = tmp_path / "plain"
    assert cli.build_parser(command).parse_args([command, *_required(command), "--out", str(plain)]).out == plain


def test_a_busy_output_names_the_process_really_holding_its_lock(tmp_path):
    """The process that took the lock has exited, leaving it to one it started (a worker outliving its killed
    launcher): the refusal names the live holder and how to stop it, not the dead pid."""
    out = tmp_path / "run"
    held = lock(out, wait=False)  # this process stands in for the worker that inherited the lock
    never = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process ever has this pid
    record = json.loads(lock_path(out).read_text())
    lock_path(out).write_text(json.dumps({**record, "pid": never}))
    try:
        with pytest.raises(OutputBusy) as busy:
            lock(out, wait=False)
    finally:
        held.release()
    message = str(busy.value)
    assert f"pid {os.getpid()}" in message and f"kill {os.getpid()}" in message and str(never) in message
