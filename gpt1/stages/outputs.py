"""One policy for every stage's output folder: who may write it, when it is finished, how it is replaced.

    with claim(out, "tokenizer", key, wait=False, force=False) as output:
        if output.done:                       # finished by an earlier run of the same inputs and settings
            return output.marker
        output.build(lambda tmp: train_into(tmp))   # written into a temporary sibling, renamed into place

The rules, the same for the CLI, `gpt1.pipeline` and the flows:

- Writable first. The output's parent is created and its lock file written before any work, so an unwritable
  place fails in a second, not after an hour of compute.
- One writer. An exclusive `flock` on `<parent>/.<name>.lock` is held for the whole build. A second process
  asking for the same output either waits for it (`wait=True`: the pipeline, which then finds it finished and
  reuses it) or is refused with the holder's pid and command (`wait=False`: the CLI). The kernel releases the
  lock when the holder dies, however it dies. Launchers pass the lock on to the processes they start
  (`inherit_env`), so a training worker outliving its launcher still holds it and no second run can write
  beside it.
- Finished means marked. A finished output holds `.done`: the stage, its content key (a hash of its inputs and
  settings), what it reported and the size and sha256 of every file it holds (gpt1.stages.integrity: a reader
  refuses a file edited since). The marker is written last, inside the build, so a folder without it is never
  mistaken for a result.
- Nothing is replaced by accident. A folder that is not this stage's output (someone's model, a stage of another
  kind, unknown files) is refused unless `force`, and so is a finished output whose files were edited since
  (`force` builds it again). This stage's own output of *other* inputs or settings (a stale key) is refused the
  same way on the CLI; the pipeline names its folders by key, so it never meets one.
- Crash-safe replacement, in one of three modes. "atomic" stages build into `<parent>/.<name>.tmp-<pid>` and
  rename it into place when complete (gpt1.io.atomic_dir: the old folder, if any, moved aside first and deleted
  after), so a reader only ever sees the old result or the new one; builds left by killed processes are deleted
  by the next holder of the lock, and an old folder a killed swap had moved aside is put back. "resume" stages
  (shards, pre-training) build in place: they record their identity in `.stage.json` first and continue a
  partial build of the same key. "restart" stages (fine-tuning, whose outputs
  MLflow references by path) build in place from an emptied folder: what an interrupted run left is cleared
  first, so it never survives into the next run's results.
- A failed build of a stage whose failures are reported (fine-tuning: `record_failure`) leaves `error.json` (the
  error, for the report) in an otherwise empty folder, never a mix of old and new files; other stages leave
  nothing behind a failure but a resumable build's own partial output.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpt1.io import InputError, OutputError, atomic_dir, read_json, write_json
from gpt1.stages import integrity
from gpt1.stages.integrity import DONE, read_marker  # the marker is the record's home

log = logging.getLogger(__name__)

IDENTITY = ".stage.json"
ERROR = "error.json"
LOCK_FDS_ENV = (
    "GPT1_OUTPUT_LOCK_FDS"  # "fd,fd": output locks a launching process passed on to this one
)


class OutputBusy(OutputError):
    """Another live process is writing this output."""


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


def is_done(out: Path, key: str | None = None) -> bool:
    marker = read_marker(out)
    return marker is not None and (key is None or marker.get("key") == key)


def mark_done(out: Path, stage: str, key: str, info: dict | None = None) -> dict:
    """Mark `out` finished, with the record of its files that its readers verify (gpt1.stages.integrity)."""
    marker = {
        "stage": stage,
        "key": key,
        "finished": time.time(),
        **(info or {}),
        integrity.FIELD: integrity.record(out),
    }
    write_json(out / DONE, marker)
    return marker


# -- the lock ---------------------------------------------------------------------------------------------------
def _inherited_fds() -> list[int]:
    return [int(fd) for fd in os.environ.get(LOCK_FDS_ENV, "").split(",") if fd.strip().isdigit()]


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _holder(path: Path, probe: int) -> str:
    """Who holds the lock file `path` (`probe`: our own descriptor on it, which holds nothing): the process its
    record names, or, when that one has exited and left the lock to a process it started (a worker outliving its
    killed launcher), the process really holding it."""
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    recorded = (
        f"pid {info.get('pid')} on {info.get('host')} since {since}: {info.get('command', '?')}"
    )
    if info.get("host") != socket.gethostname():
        return recorded
    holders = _processes_with_open(path, probe)
    if not holders or info.get("pid") in holders:
        return recorded  # the recorded holder (or /proc cannot tell)
    heir = holders[0]
    return (
        f"pid {heir}: {_command_of(heir)}, still running after the process that took the lock ({recorded}) "
        f"exited; stop it (kill {heir}) if it should not be running"
    )


def _processes_with_open(path: Path, probe: int) -> list[int]:
    """The processes that have `path` open (Linux /proc, those this user may look into), `probe` of ours aside."""
    try:
        target = os.stat(path)
        pids = sorted(int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit())
    except OSError:
        return []
    found = []
    for pid in pids:
        try:
            fds = list(os.scandir(f"/proc/{pid}/fd"))
        except OSError:  # exited, or another user's
            continue
        for fd in fds:
            if pid == os.getpid() and fd.name == str(probe):
                continue
            with contextlib.suppress(OSError):
                info = os.stat(fd.path)
                if (info.st_dev, info.st_ino) == (target.st_dev, target.st_ino):
                    found.append(pid)
                    break
    return found


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv) if a)
    return " ".join(command.split())[:300]  # one line


@dataclass
class Lock:
    """An exclusive lock on one output (see the module docstring). `fd` stays open while it is held."""

    path: Path
    fd: int
    inherited: bool = False

    def release(self) -> None:
        if not self.inherited and self.fd >= 0:
            # closing our descriptor drops the lock unless a child still holds a copy
            os.close(self.fd)
        self.fd = -1

    def inherit_env(self) -> dict[str, str]:
        """Environment for a child process that must keep this lock alive as long as it runs (its launcher may
        be killed first). The descriptor becomes inheritable; pass it with `subprocess.Popen(pass_fds=...)` or
        close_fds=False."""
        os.set_inheritable(self.fd, True)
        fds = [str(fd) for fd in (*_inherited_fds(), self.fd)]
        return {LOCK_FDS_ENV: ",".join(dict.fromkeys(fds))}


# outputs this process has claimed, for launchers passing the lock on (`held`)
_HELD: dict[Path, Lock] = {}


def held(out: str | os.PathLike) -> Lock:
    """The lock this process holds on `out` (inside `claim`)."""
    try:
        return _HELD[Path(out).absolute()]
    except KeyError:
        raise RuntimeError(f"{out} is not claimed by this process") from None


def lock(out: Path, *, wait: bool, log_line: Callable[[str], None] | None = None) -> Lock:
    """Take the exclusive lock on `out` (creating its parent): the same lock passed on by a launcher is ours
    already; a live holder makes this wait or raise OutputBusy."""
    path = lock_path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise OutputError(
            f"cannot write output {out}: {err.strerror or err} ({path.parent})"
        ) from None
    for inherited in _inherited_fds():
        if _same_file(inherited, path):
            os.close(fd)
            return Lock(path, inherited, inherited=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(path, fd)
        if not wait:
            os.close(fd)
            raise OutputBusy(
                f"{out} is being written by another process ({holder}); wait for it to finish or "
                "use another output folder"
            ) from None
        (log_line or log.info)(f"waiting for {out}: another process is writing it ({holder})")
        fcntl.flock(fd, fcntl.LOCK_EX)
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.time(),
        "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[
            :500
        ],
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
    except OSError as err:
        os.close(fd)
        raise OutputError(f"cannot write output {out}: {err.strerror or err}") from None
    return Lock(path, fd)


# -- claiming an output -------------------------------------------------------------------------------------------
def _identity(out: Path) -> dict:
    try:
        return read_json(out / IDENTITY)
    except (OSError, ValueError):
        return {}


def _edit(out: Path, marker: dict) -> InputError | None:
    """How a finished output's files differ from the ones its marker records, if they do."""
    try:
        integrity.verify(out, marker)
    except InputError as err:
        return err
    return None


def describe(out: Path, stage: str, key: str) -> str:
    """What `out` holds relative to (stage, key): empty, done, edited (done, but its files changed since), partial,
    failed, stale, foreign."""
    if not out.exists():
        return "empty"
    if not out.is_dir():
        return "foreign"
    names = {p.name for p in out.iterdir()}
    if not names:
        return "empty"
    marker = read_marker(out)
    if marker is None and IDENTITY in names:
        marker = _identity(out) or None
        if marker is not None and marker.get("stage") == stage and marker.get("key") == key:
            return "partial"
    elif marker is not None and marker.get("stage") == stage and marker.get("key") == key:
        return "done" if _edit(out, marker) is None else "edited"
    if names == {ERROR}:
        try:
            failed = read_json(out / ERROR).get("stage") in (stage, None)
        except (OSError, ValueError, AttributeError):
            failed = False
        if failed:
            return "failed"
    if marker is not None and marker.get("stage") == stage:
        return "stale"
    return "foreign"


@dataclass
class Output:
    """A claimed output folder (we hold its lock). `done` when a finished build of this key is already there."""

    path: Path
    stage: str
    key: str
    state: str
    lock: Lock
    mode: str  # atomic | resume | restart
    info: dict[str, Any] = field(default_factory=dict)
    record_failure: bool = False

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def marker(self) -> dict:
        return read_marker(self.path) or {}

    def build(self, write: Callable[[Path], dict | None]) -> dict:
        """Run `write(folder)` and mark the output finished; returns the marker. The folder is a temporary sibling
        renamed into place at the end ("atomic"), or the output itself (see `begin`)."""
        started = time.time()
        if self.mode != "atomic":
            self.begin()
            info = write(self.path) or {}
            return mark_done(
                self.path,
                self.stage,
                self.key,
                {"seconds": round(time.time() - started, 3), **self.info, **info},
            )
        with atomic_dir(self.path) as tmp:  # swapped in whole only once the marker is written
            info = write(tmp) or {}
            marker = mark_done(
                tmp,
                self.stage,
                self.key,
                {"seconds": round(time.time() - started, 3), **self.info, **info},
            )
        return marker

    def begin(self) -> None:
        """An in-place build starts (or, "resume", continues): record whose folder this is."""
        if self.mode == "restart" and self.path.exists():
            shutil.rmtree(self.path) if self.path.is_dir() else self.path.unlink()
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / ERROR).unlink(missing_ok=True)
        if self.state != "partial" or self.mode == "restart":
            write_json(
                self.path / IDENTITY,
                {"stage": self.stage, "key": self.key, "started": time.time(), **self.info},
            )

    def fail(self, err: BaseException) -> None:
        """After a failed build: our own unfinished build is removed unless it can resume, and with
        `record_failure` error.json (for the report) takes the place of the result that could not be made."""
        if (
            self.mode == "resume"
            and self.path.is_dir()
            and {p.name for p in self.path.iterdir()} <= {IDENTITY}
        ):
            shutil.rmtree(self.path)  # nothing was made that a re-run could continue from
            return
        if not self.record_failure:
            if self.mode == "restart" and describe(self.path, self.stage, self.key) == "partial":
                shutil.rmtree(self.path)
            return
        record = {
            "stage": self.stage,
            "key": self.key,
            "error": f"{type(err).__name__}: {err}",
            "time": time.time(),
        }
        if self.mode == "resume":
            if self.path.is_dir():
                write_json(self.path / ERROR, record)
            return
        if self.mode == "restart" and describe(self.path, self.stage, self.key) == "partial":
            shutil.rmtree(self.path)  # our own unfinished build: the error replaces it
        if self.path.exists() and self.state != "failed":
            return  # a finished earlier result of other settings stays whole; the caller reports the error
        shutil.rmtree(self.path, ignore_errors=True)
        write_json(self.path / ERROR, record)


def _remove_leftovers(out: Path) -> None:
    """What processes that died holding this lock left (we hold it now: none of them is live): unfinished builds
    are removed; an earlier output moved aside for a swap that never completed is put back."""
    for path in sorted(out.parent.glob(f".{glob.escape(out.name)}.old-*")):
        if not out.exists() and not out.is_symlink():
            log.warning(
                "%s: putting back the output an interrupted run had moved aside (%s)",
                out,
                path.name,
            )
            os.replace(path, out)
        else:
            shutil.rmtree(path, ignore_errors=True)
    for path in out.parent.glob(f".{glob.escape(out.name)}.tmp-*"):
        log.info("removing %s, left by an interrupted run", path)
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def claim(
    out: str | os.PathLike,
    stage: str,
    key: str,
    *,
    wait: bool,
    force: bool = False,
    mode: str = "atomic",
    info: dict | None = None,
    record_failure: bool = False,
    log_line: Callable[[str], None] | None = None,
) -> Iterator[Output]:
    """Lock `out` for (stage, key) and say what it holds; refuses (OutputError) what must not be replaced.
    A build raising inside the block is cleaned up after (`Output.fail`) and re-raised."""
    out = Path(out).absolute()
    taken = lock(out, wait=wait, log_line=log_line)
    _HELD[out] = taken
    try:
        _remove_leftovers(out)
        state = describe(out, stage, key)
        if state in ("foreign", "stale", "edited") and not force:
            raise OutputError(_refusal(out, stage, key, state))
        if state in ("foreign", "stale", "edited") and mode == "resume":
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        output = Output(out, stage, key, state, taken, mode, dict(info or {}), record_failure)
        try:
            yield output
        except BaseException as err:
            if not output.done:
                try:
                    output.fail(err)
                except OSError:
                    pass  # e.g. the disk is full: the original error is the one to report
            raise
    finally:
        _HELD.pop(out, None)
        taken.release()


def _refusal(out: Path, stage: str, key: str, state: str) -> str:
    if state == "edited":
        return str(_edit(out, read_marker(out) or {}))
    if state == "stale":
        other = (read_marker(out) or _identity(out)).get("key")
        return (
            f"{out} holds a `{stage}` output of other inputs or settings (key {other}, this run {key}); use "
            "another output folder, or --force to replace it"
        )
    what = (
        "a file"
        if out.exists() and not out.is_dir()
        else "files that are not a `" + stage + "` output"
    )
    return f"{out} exists and holds {what}; refusing to replace it (use another output folder, or --force)"
