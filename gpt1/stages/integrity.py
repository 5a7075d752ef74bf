"""What a finished stage output held when it was marked, and the check that it still holds it.

`record(out)` lists every file of an output (relative path, bytes, sha256); `gpt1.stages.outputs.mark_done`
keeps it in the `.done` marker under `recorded_files` (a list, so that the marker's numbers logged with a stage's MLflow
run stay the stage's own), so a later stage that reads the output (or a folder inside it,
e.g. pre-training's `final/`) can tell that it is what the marked stage wrote: `verify(out, marker, under)` refuses
(InputError naming the file) a recorded file that is missing or whose bytes changed, and a file that was not
recorded, under `under`. An input's key is the key in its marker (gpt1.stages.base.input_key), so without this an
input edited in place would keep its key and its readers' old outputs would be reused.

Verifying hashes a file only when its identity (size, mtime, ctime, inode; the kernel sets ctime, so even a
rewrite that puts the mtime back is seen) differs from the one it had when it was recorded, or when it last
matched (kept beside it in `.integrity.json`, as the shards' `.verified.json` does, e.g. for a copied folder): a
large checkpoint is hashed once, when it is marked, not on every read. `sha256_cached` gives other records (the
weights' sha256 in `training.json`, `task.json`) the same economy. Markers written before this record existed
have none and are not checked here (their readers still validate what they read field by field); their keys are
unchanged.

A model folder also travels without its stage output (copied, uploaded, given as `--checkpoint`): its own record,
written last beside its files (pre-training's `training.json`, a fine-tuned model's `task.json`: `FOLDER_RECORDS`),
holds the sha256 of every other file in it (`folder_record`), and each reader checks the file it reads against it
(`verify_beside`): the config as much as the weights, since a config edited with its shapes intact (`n_head`)
loads as another function.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gpt1.io import InputError, read_json, sha256_file, write_json

log = logging.getLogger(__name__)

DONE = ".done"  # a finished output's marker: its stage, key and settings, and this record
FIELD = "recorded_files"  # the record's field in the `.done` marker (a stage's own `files` may be there)
# in a folder: its files' identities when they were last hashed, with their sha256
VERIFIED = ".integrity.json"
_MARKER_LEVELS = 3  # how far above an input to look for the marker of the stage output holding it
# A model folder's own record, written after every other file in it (by gpt1.pretrain, gpt1.finetune.predict), and
# its field listing them
FOLDER_RECORDS = ("training.json", "task.json")
FOLDER_FIELD = "files_sha256"


def _identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _files(folder: Path) -> list[str]:
    """Relative paths of the files under `folder`, without the hidden ones (markers, locks, caches)."""
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(root).relative_to(folder)
        found += [(base / n).as_posix() for n in names if not n.startswith(".")]
    return sorted(found)


def record(out: Path) -> list[dict]:
    """[{file: relative path, bytes, sha256, seen: its identity now}] of every file of the output."""
    files = []
    for name in _files(out):
        identity = _identity(out / name)
        files.append(
            {
                "file": name,
                "bytes": identity[0],
                "sha256": sha256_file(out / name),
                "seen": identity,
            }
        )
    return files


def read_marker(out: Path) -> dict | None:
    """The `.done` marker of a finished output, else None."""
    try:
        return read_json(out / DONE)
    except (OSError, ValueError):
        return None


def recorded(marker: dict) -> dict[str, dict] | None:
    """The marker's record by file (`record`); None for a marker written before outputs carried one."""
    files = marker.get(FIELD)
    if not isinstance(files, list):
        return None
    return {
        entry["file"]: entry
        for entry in files
        if isinstance(entry, dict) and isinstance(entry.get("file"), str)
    }


def holding_output(path: str | os.PathLike) -> tuple[Path, dict, str] | None:
    """(the stage output, its marker, the path relative to it) of a path that is a stage's output or lies inside
    one (e.g. pre-training's `final/`); None for anything else."""
    path = Path(path).absolute()
    for folder in [path, *path.parents][: _MARKER_LEVELS + 1]:
        marker = read_marker(folder)
        if marker and marker.get("key"):
            return folder, marker, path.relative_to(folder).as_posix()
    return None


def digests(paths: list[Path]) -> dict[Path, str]:
    """sha256 of each file, hashed only when its identity differs from when it was last hashed (kept beside it,
    in `.integrity.json`)."""
    found: dict[Path, str] = {}
    for folder in sorted({path.parent for path in paths}):
        try:
            known = read_json(folder / VERIFIED)["files"]
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError, KeyError, TypeError):
            known = {}  # absent or unreadable: every file is hashed
        hashed = {}
        for path in (p for p in paths if p.parent == folder):
            identity, entry = _identity(path), known.get(path.name)
            if isinstance(entry, list) and len(entry) == 5 and entry[:4] == identity:
                found[path] = entry[4]
            else:
                found[path] = sha256_file(path)
                hashed[path.name] = [*identity, found[path]]
        if hashed:
            try:  # best effort: a read-only copy is still verified, only hashed again on the next read
                write_json(folder / VERIFIED, {"files": {**known, **hashed}})
            except OSError as err:
                log.debug("%s: cannot record the verification (%s)", folder, err)
    return found


def sha256_cached(path: Path) -> str:
    """A file's sha256: its stage's record while the file is as it was recorded, else `digests`."""
    held = holding_output(path)
    entry = (recorded(held[1]) or {}).get(held[2]) if held else None
    if isinstance(entry, dict) and entry.get("seen") == _identity(path):
        return entry["sha256"]
    return digests([path])[path]


def _inside(name: str, under: str) -> bool:
    return under == "." or name == under or name.startswith(under.rstrip("/") + "/")


def verify(out: Path, marker: dict, under: str = ".") -> None:
    """Refuse the files under `under` (relative to the output `out`) that are not the ones its marker records."""
    files = recorded(marker)
    if files is None:
        return  # written before outputs carried a record
    fix = (
        f"the folder was edited after `gpt1 {marker.get('stage', '?')}` wrote it; re-run that stage with "
        "--force, or restore the file"
    )
    if (out / under).is_dir():
        present = {(Path(under) / name).as_posix() for name in _files(out / under)}
        extra = sorted(present - set(files))
        if extra:
            raise InputError(f"not written by the stage ({fix})", file=out / extra[0])
    changed = []  # the files whose identity is not the one they had when recorded: hashed (once)
    for name, entry in sorted(files.items()):
        if not _inside(name, under):
            continue
        path = out / name
        if Path(name).is_absolute() or ".." in Path(name).parts:  # confined to the output
            raise InputError(f"the record names {name}, outside the output", file=out / ".done")
        if not {"bytes", "sha256"} <= set(entry):
            raise InputError(f"the record of {name} has no bytes/sha256", file=out / ".done")
        if not path.is_file():
            raise InputError(f"recorded file missing ({fix})", file=path)
        identity = _identity(path)
        if identity[0] != entry["bytes"]:
            raise InputError(f"{identity[0]} bytes, recorded {entry['bytes']} ({fix})", file=path)
        if identity != entry.get("seen"):
            changed.append(name)
    for path, digest in digests([out / name for name in changed]).items():
        name = path.relative_to(out).as_posix()
        if digest != files[name]["sha256"]:
            raise InputError(
                f"sha256 {digest[:12]}, recorded {files[name]['sha256'][:12]} ({fix})",
                file=path,
            )


def folder_record(folder: Path) -> dict[str, str]:
    """{name: sha256} of the files directly in `folder` (not hidden, not its record): what its record holds."""
    return {
        path.name: sha256_file(path)
        for path in sorted(folder.iterdir())
        if path.is_file() and not path.name.startswith(".") and path.name not in FOLDER_RECORDS
    }


def verify_beside(path: Path, legacy_field: str | None = None) -> None:
    """Refuse `path` (InputError naming it) unless the record of its folder (`FOLDER_RECORDS`), when there is one,
    holds its bytes: a file the record lists with another sha256, or one it does not list (added since). A record
    written before records listed every file is read for `legacy_field` alone (the weights' `weights_sha256`)."""
    for name in FOLDER_RECORDS:
        record_path = path.parent / name
        if not record_path.is_file():
            continue
        record = read_json(record_path)
        files = record.get(FOLDER_FIELD)
        if isinstance(files, dict):
            expected = files.get(path.name)
            if not isinstance(expected, str):
                raise InputError(
                    f"not one of the files {name} records ({', '.join(sorted(files))}): added after the "
                    "model was written; restore the folder as it was written",
                    file=path,
                )
        else:
            expected = record.get(legacy_field) if legacy_field else None
        if isinstance(expected, str):
            actual = sha256_cached(path)  # hashed again only once the file changed
            if actual != expected:
                raise InputError(
                    f"changed since it was written: sha256 {actual[:16]}, {name} records {expected[:16]}",
                    file=path,
                )
