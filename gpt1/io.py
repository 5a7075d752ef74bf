"""Small helpers every stage shares: crash-safe writes, content hashes, input/output errors.

Stages write through `atomic_path`/`write_json` so a crash never leaves a half-written file under its final
name, and name their outputs by `stable_hash` of their inputs so a re-run can skip finished work.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import resource
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpt1.errors import NO_SPACE, first_line, lack_of_room, no_space_message

_CHUNK = 1 << 20
JSON_MAX_BYTES = 256 << 20  # the pipeline's largest JSON is a tokenizer.json of a few MB
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `final`; rename it into place only if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if tmp.exists():
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, final)
    except OSError as err:
        _name_the_output(err, final)
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; swap it in whole, replacing `final`, only if the block
    succeeds: `final` is never a half-written folder (between the two renames it is briefly absent)."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
    except OSError as err:
        _name_the_output(err, final)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _name_the_output(err: OSError, final: Path) -> None:
    """A write that failed for lack of room without naming its file (a write(), not an open()) names the output."""
    if err.errno in NO_SPACE and not err.filename:
        err.filename = str(final)


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def check_input_file(path: str | os.PathLike, *, what: str, max_bytes: int | None) -> Path:
    """`path`, once `os.stat` shows it is a regular file (symlinks followed) of at most `max_bytes` (None: a file
    read in pieces, whatever its size). Checked before it is opened: opening a FIFO blocks, and a device such as
    /dev/zero never ends. Anything else raises InputError naming `path` and what it is; `what` names what was
    expected ("tokenizer file"). A path with nothing there raises FileNotFoundError."""
    path = Path(path)
    link = f" (a symlink to {os.readlink(path)})" if path.is_symlink() else ""
    try:
        info = path.stat()
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"a symlink loop, not a {what}", file=path) from None
        if err.errno == errno.ENOENT and link:
            raise InputError(
                f"a dangling symlink (to {os.readlink(path)}, which does not exist), not a {what}",
                file=path,
            ) from None
        raise
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"a folder{link}, where a {what} was expected", file=path)
    if not stat.S_ISREG(info.st_mode):
        kind = next(
            (name for test, name in _KINDS if test(info.st_mode)), "an unknown kind of file"
        )
        raise InputError(f"{kind}{link}: a {what} must be a regular file", file=path)
    if max_bytes is not None and info.st_size > max_bytes:
        raise InputError(
            f"{info.st_size:,} bytes{link}, more than a {what} may have ({max_bytes:,})", file=path
        )
    return path


_JSON_TYPES: dict[type, str] = {dict: "an object", list: "an array"}


def read_json(
    path: str | os.PathLike, max_bytes: int = JSON_MAX_BYTES, *, expect: type = dict
) -> Any:
    """The parsed file, whose top level is `expect` (an object unless said; `object`: any JSON). A path that is not
    a regular file of at most `max_bytes`, text that is not UTF-8 or not JSON, or JSON of another shape raise
    InputError naming the file (and line): every reader gets the shape it indexes, never an AttributeError."""
    check_input_file(path, what="JSON file", max_bytes=max_bytes)
    try:
        with open(
            path, encoding="utf-8-sig"
        ) as fh:  # a BOM (Windows editors write one) is not JSON
            data = json.load(fh)
    except json.JSONDecodeError as err:
        raise InputError(
            f"not valid JSON: {err.msg} (column {err.colno})", file=path, line=err.lineno
        ) from None
    except UnicodeDecodeError as err:
        raise InputError(
            f"not UTF-8 text (byte {err.start}: {err.object[err.start : err.start + 1]!r})",
            file=path,
        ) from None
    return _of_shape(data, expect, file=path)


def _of_shape(data: Any, expect: type, *, file: str | os.PathLike, line: int | None = None) -> Any:
    if not isinstance(data, expect):
        raise InputError(
            f"the JSON is {_json_kind(data)}, not {_JSON_TYPES.get(expect, expect.__name__)}",
            file=file,
            line=line,
        )
    return data


def _json_kind(data: Any) -> str:
    """What a parsed JSON value is, in JSON's words."""
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "true or false"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return "a string"
    return _JSON_TYPES.get(type(data), type(data).__name__)


def read_jsonl(path: str | os.PathLike, *, expect: type = dict) -> list:
    """The records of a JSON-lines file, each of type `expect` (objects unless said). A blank line is no record;
    a line that is not UTF-8, not JSON or not of that shape raises InputError naming the file and line."""
    path = check_input_file(path, what="JSON-lines file", max_bytes=None)
    records = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise InputError(
                    f"not UTF-8 text (byte {err.start})", file=path, line=number
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(
                    f"not valid JSON: {err.msg} (column {err.colno})", file=path, line=number
                ) from None
            records.append(_of_shape(record, expect, file=path, line=number))
    return records


def parquet_file(path: str | os.PathLike):
    """pyarrow's `ParquetFile` of `path`; bytes that are not Parquet (a cut or overwritten file) raise InputError
    naming it (pyarrow's own message does not)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_input_file(path, what="Parquet file", max_bytes=None)
    try:
        return pq.ParquetFile(path)
    except pa.ArrowException as err:
        raise InputError(f"not a readable Parquet file ({err})", file=path) from None


def sha256_file(path: str | os.PathLike) -> str:
    check_input_file(path, what="file", max_bytes=None)
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_tree(root: str | os.PathLike, pattern: str = "**/*") -> str:
    """Hash of every file's relative path and bytes under `root` (sorted, so order-independent)."""
    root = Path(root)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.glob(pattern) if p.is_file() and not p.name.startswith(".")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()


def size_on_disk(path: str | os.PathLike) -> int | None:
    """Bytes of a file, or of every file under a folder; None when nothing is there."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.is_file() else None


def stable_hash(obj: Any, length: int = 16) -> str:
    """Order-independent hash of a JSON-able object (configs, input hashes); names content-addressed outputs."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


class InputError(ValueError):
    """Bad user input, located: `InputError("bad score", file="dev.tsv", line=12, field="score")`."""

    def __init__(
        self,
        message: str,
        *,
        file: str | os.PathLike | None = None,
        line: int | None = None,
        field: str | None = None,
    ):
        self.message = message
        self.file, self.line, self.field = (str(file) if file else None), line, field
        where = ":".join(str(x) for x in (self.file, line) if x is not None)
        if field:
            where = f"{where} [{field}]" if where else f"[{field}]"
        super().__init__(f"{where}: {message}" if where else message)


class OutputError(ValueError):
    """An output cannot or must not be written (unwritable folder, disk full, busy, someone else's folder): names
    the path; what was there is untouched."""


def write_error(path: str | os.PathLike, err: BaseException) -> OutputError:
    """A failed write of `path` as an OutputError naming it. A write that found no room reads the same whoever
    wrote (gpt1.errors.no_space_message); writers that say so in no words of their own (torch's checkpoint writer)
    are recognised by the device's free space or a file-size limit in force."""
    if lack_of_room(err) or _out_of_room(Path(path)):
        return OutputError(no_space_message(path, first_line(err)))
    return OutputError(f"{path}: could not write it ({first_line(err)})")


def _out_of_room(path: Path) -> bool:
    """Whether a write under `path` may have failed for room: its device nearly full, or a file-size limit set."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and shutil.disk_usage(existing).free < _CHUNK:
        return True
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def check_writable(folder: str | os.PathLike) -> Path:
    """Create `folder` (and parents) if needed and prove a file can be created in it, before any work is done."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder}: is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise OutputError(f"{folder}: cannot write here ({err.strerror or err})") from None
    return folder


def positive_int(text: str) -> int:
    """argparse type for counts and sizes: a whole number > 0 (0 must not quietly mean "the default")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value
