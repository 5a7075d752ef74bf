"""Stage 1, corpus ingestion: a text source -> cleaned, deduplicated documents split into train/val.

    stats = ingest("../shared/data/books", "runs/corpus")
    gpt1 ingest --source SRC --out DIR [--text-column C] [--val-fraction F] [--seed N] [--no-unwrap-lines]
                [--max-documents N] [--max-chars N]

The sources (directories, globs and files of .txt/.jsonl/.parquet, `hf:` datasets) and how their rows become
records are gpt1/data/sources.py; the output layout is gpt1/data/corpus.py. Records stream through one at a time,
so memory is bounded by the largest document plus one Parquet row group per split; only the set of document ids
grows with the corpus.

Choices where the spec is silent:
- Split: a document is val iff hash(split_seed, id) < val_fraction, so adding or removing documents never moves
  the others. Floor: if val would be empty (val_fraction > 0, >= 2 documents), the train document with the lowest
  hash goes to val instead; it is held back while streaming, so nothing has to be rewritten.
- Cleaning is gpt1/data/clean.py. `unwrap_lines` (default on) joins hard-wrapped prose lines into paragraphs in a
  text file or a row; stats.json says how many paragraphs and line breaks it joined and how many multi-line
  paragraphs it kept. Rows grouped into one document keep one row per line: those breaks are row boundaries (the
  sentences of lower-cased BooksCorpus, which the lowercase-continuation rule would otherwise join), not wraps.
- Duplicates are exact (same id = sha256 of the cleaned text); the first one in source order is kept.
- Documents empty or shorter than min_doc_chars once cleaned are named in stats.json, as are the inputs a source
  could not use and its malformed rows.
- Restartability: the output is keyed by hash(source hash, settings, FORMAT_VERSION); a finished corpus with the
  same key in out_dir is returned as is. Local sources are hashed by content (one extra read); a hub source by
  id, revision and split, so pin a revision. A different corpus already in out_dir is replaced atomically; any
  other non-empty out_dir is refused.
- A subset of a large source (`max_documents`, `max_chars`): the first documents in source order, whole; the
  source is read only that far (see `_build`).
- Failures: a run builds in `.OUT.build-HOST-PID` beside out_dir and swaps it in at the end; a killed run's
  folders are removed (or, for a previous corpus moved aside, put back) by the next run into the same out_dir,
  never while their process lives. An unwritable parent folder is refused before any work; a failed write (disk
  full) is one OutputError and leaves the previous corpus as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import logging
import os
import shutil
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from gpt1.config import DataConfig
from gpt1.data.clean import clean
from gpt1.data.corpus import SCHEMA, SPLITS, STATS_FILE
from gpt1.data.sources import BOOKCORPUS_ROWS_PER_DOC, FileSource, HFSource, Report, open_source
from gpt1.io import (InputError, OutputError, atomic_path, check_writable, positive_int, read_json, stable_hash,
                     write_json)

__all__ = ["BOOKCORPUS_ROWS_PER_DOC", "FileSource", "HFSource", "add_ingest_args", "ingest", "run_ingest", "summary"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # bump when cleaning or splitting changes, so corpora built by older code are rebuilt
ROWS_PER_PART = 10_000  # documents per Parquet part
ROW_GROUP_CHARS = 2_000_000  # characters per row group (or one larger document): bounds the write buffer


@dataclass
class Document:
    id: str
    source: str
    text: str


# -- output: Parquet parts per split ----------------------------------------------------------------------------
class SplitWriter:
    """One split's Parquet parts: at most `rows_per_part` documents each, in row groups of up to ROW_GROUP_CHARS
    characters (or one larger document); each part is written under a temporary name and renamed when complete."""

    def __init__(self, folder: Path, rows_per_part: int):
        self.folder, self.rows_per_part = folder, rows_per_part
        with _writing(folder):
            folder.mkdir(parents=True, exist_ok=True)
        self.documents = self.characters = 0
        self.parts: list[dict] = []
        self.ids = hashlib.sha256()  # content hash of the split: its document ids in order
        self._buffer: list[Document] = []
        self._buffered_chars = 0
        self._part: contextlib.ExitStack | None = None
        self._writer: pq.ParquetWriter | None = None
        self._part_rows = 0

    def add(self, doc: Document) -> None:
        if self._buffered_chars + len(doc.text) > ROW_GROUP_CHARS:  # so a row group holds at most one big book
            self._flush()
        self._buffer.append(doc)
        self._buffered_chars += len(doc.text)
        self.documents += 1
        self.characters += len(doc.text)
        self.ids.update(doc.id.encode())
        if self._buffered_chars >= ROW_GROUP_CHARS or self._part_rows + len(self._buffer) >= self.rows_per_part:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        with _writing(self.folder):
            self._write_buffer()

    def _write_buffer(self) -> None:
        if self._writer is None:
            self._part = contextlib.ExitStack()
            tmp = self._part.enter_context(atomic_path(self.folder / f"part-{len(self.parts):05d}.parquet"))
            # Every value is unique, so no dictionaries; min/max statistics of whole books would copy them twice.
            self._writer = pq.ParquetWriter(tmp, SCHEMA, compression="zstd", use_dictionary=False,
                                            write_statistics=["id", "source"])
        columns = {"id": [d.id for d in self._buffer], "source": [d.source for d in self._buffer],
                   "text": [d.text for d in self._buffer]}
        self._writer.write_table(pa.table(columns, schema=SCHEMA))
        self._part_rows += len(self._buffer)
        self._buffer, self._buffered_chars = [], 0
        if self._part_rows >= self.rows_per_part:
            self._close_part()

    def _close_part(self) -> None:
        self._writer.close()
        self._part.close()  # atomic_path renames the finished part into place
        self.parts.append({"file": f"{self.folder.name}/part-{len(self.parts):05d}.parquet", "rows": self._part_rows})
        self._writer, self._part, self._part_rows = None, None, 0

    def __enter__(self) -> "SplitWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._flush()
            if self._writer is not None:
                with _writing(self.folder):
                    self._close_part()
        elif self._writer is not None:
            with contextlib.suppress(OSError):  # e.g. the disk that made this fail is still full
                self._writer.close()
            self._part.__exit__(exc_type, exc, tb)  # atomic_path deletes the unfinished part


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Failed writes (disk full, quota, read-only, I/O error) as one clear OutputError naming the path."""
    try:
        yield
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err})") from None


class TrainValSplit:
    """Routes documents to train or val by hash(seed, id), holding back the lowest-hash train document so that
    val can receive it at the end if it would otherwise stay empty (see the module docstring)."""

    def __init__(self, train: SplitWriter, val: SplitWriter, val_fraction: float, seed: int):
        self.train, self.val, self.val_fraction, self.seed = train, val, val_fraction, seed
        self.held: tuple[float, Document] | None = None

    def score(self, doc_id: str) -> float:
        digest = hashlib.sha256(f"{self.seed}:{doc_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def add(self, doc: Document) -> None:
        score = self.score(doc.id)
        if score < self.val_fraction:
            self.val.add(doc)
        elif self.val_fraction == 0 or (self.held is not None and score >= self.held[0]):
            self.train.add(doc)
        else:
            if self.held is not None:
                self.train.add(self.held[1])
            self.held = (score, doc)

    def finish(self) -> bool:
        """Write the held-back document; True if it went to val as the floor."""
        if self.held is None:
            return False
        floor = self.val.documents == 0 and self.train.documents > 0
        (self.val if floor else self.train).add(self.held[1])
        return floor


# -- the stage --------------------------------------------------------------------------------------------------
def ingest(source: str, out_dir: str | os.PathLike, *, text_column: str = "text", val_fraction: float = 0.01,
           split_seed: int = 0, min_doc_chars: int = 1, show_progress: bool = True, rows_per_doc: int | None = None,
           rows_per_part: int = ROWS_PER_PART, unwrap_lines: bool = True, max_documents: int | None = None,
           max_chars: int | None = None) -> dict:
    """Clean, deduplicate and split `source` into the corpus layout at `out_dir`; returns the stats.

    `rows_per_doc`: consecutive rows joined into one document for row sources (default: BOOKCORPUS_ROWS_PER_DOC
    for hub BooksCorpus, else 1). `unwrap_lines`: join the lines of hard-wrapped prose paragraphs (see
    gpt1/data/clean.py). `max_documents` / `max_chars`: a subset, see `_build`. Built in a temporary folder renamed
    at the end, so `out_dir` never holds half a corpus; a finished corpus of the same inputs and settings already
    there is reused. Temporary folders of killed runs are cleaned up first (see `_clean_stale_builds`).
    """
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if min_doc_chars < 0 or (rows_per_doc is not None and rows_per_doc < 1) or rows_per_part < 1:
        raise ValueError("min_doc_chars must be >= 0, rows_per_doc and rows_per_part >= 1")
    if (max_documents is not None and max_documents < 1) or (max_chars is not None and max_chars < 1):
        raise ValueError(f"max_documents and max_chars must be >= 1 when given, got {max_documents}, {max_chars}")
    out = Path(out_dir)
    src = open_source(source, exclude=out)
    settings = {"text_column": text_column, "val_fraction": val_fraction, "split_seed": split_seed,
                "min_doc_chars": min_doc_chars, "rows_per_doc": rows_per_doc or src.rows_per_doc,
                "rows_per_part": rows_per_part, "unwrap_lines": unwrap_lines, "max_documents": max_documents,
                "max_chars": max_chars, "format": FORMAT_VERSION}
    _clean_stale_builds(out)
    source_hash = src.fingerprint()
    key = stable_hash({"source": source_hash, "settings": settings})
    if (done := _finished_corpus(out, key)) is not None:
        log.info("%s: already ingested from this source with these settings (key %s); skipping", out, key)
        return done
    if out.exists() and not (out / STATS_FILE).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an ingested corpus; refusing to replace it")
    check_writable(out.parent)
    src.check(text_column)

    build = out.parent / f".{out.name}{_BUILD}{_owner()}"
    try:
        stats = _build(src, build, settings, show_progress)
        stats.update(source=source, source_hash=source_hash, key=key)
        with _writing(build):
            write_json(build / STATS_FILE, stats)
            _move_into_place(build, out)
    except OutputError as err:
        kept = f"the corpus already at {out} is unchanged" if (out / STATS_FILE).is_file() else "nothing was kept"
        raise OutputError(f"{err}; {kept}") from None
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return stats


# -- temporary folders: .NAME.build-HOST-PID while building, .NAME.old-HOST-PID while swapping in ----------------
_BUILD, _OLD = ".build-", ".old-"
_LEGACY_BUILD = ".tmp-"  # what runs before the host was part of the name left behind (PID only)


def _owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _owner_alive(suffix: str, folder: Path) -> bool:
    """Whether the process that named `folder` HOST-PID (or PID) may still be running. A process on another host
    cannot be checked, so it counts as alive; a PID now held by a process started after the folder's last change
    is someone else's."""
    host, _, pid = suffix.rpartition("-")
    if host and host != socket.gethostname():
        return True
    if not pid.isdigit():
        return True  # not a name this module writes
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    started = _process_start(int(pid))
    return started is None or started <= folder.stat().st_mtime + 2  # btime has 1 s resolution


def _process_start(pid: int) -> float | None:
    """A process's start time (epoch seconds) from /proc, or None where there is no /proc."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _clean_stale_builds(out: Path) -> None:
    """Remove what killed runs into `out` left beside it: unfinished builds, and the previous corpus moved aside
    for a swap, which is put back if the new one never arrived. Folders of live runs are left alone."""
    if not out.parent.is_dir():
        return
    for folder in sorted(out.parent.glob(f".{glob.escape(out.name)}.*")):
        tag = folder.name[len(out.name) + 1:]
        kind = next((k for k in (_BUILD, _OLD, _LEGACY_BUILD) if tag.startswith(k)), None)
        if kind is None or not folder.is_dir() or _owner_alive(tag[len(kind):], folder):
            continue
        if kind == _OLD and not out.exists():
            log.warning("%s: restoring the corpus a killed run had moved aside (%s)", out, folder.name)
            os.replace(folder, out)
        else:
            log.info("%s: removing %s, left by a killed run", out.parent, folder.name)
            shutil.rmtree(folder, ignore_errors=True)


def _build(src: FileSource | HFSource, build: Path, settings: dict, show_progress: bool) -> dict:
    """Stream the source's records through cleaning, dedup and the split into `build`.

    Subset: with max_documents / max_chars, documents are kept in source order (after cleaning and dedup) until
    the next one would pass either limit, and the source is read no further (a hub dataset streams only that far).
    The subset is a prefix of what the full run would keep, so a larger limit only adds documents; the train/val
    assignment of a document does not depend on the limits.
    """
    report, seen, started = Report(), set(), time.time()
    max_docs, max_chars = settings["max_documents"], settings["max_chars"]
    kept_chars, limit_reached = 0, False
    records = src.records(settings["text_column"], settings["rows_per_doc"], report)
    with contextlib.closing(records), \
            SplitWriter(build / "train", settings["rows_per_part"]) as train, \
            SplitWriter(build / "val", settings["rows_per_part"]) as val:
        split = TrainValSplit(train, val, settings["val_fraction"], settings["split_seed"])
        for record in tqdm(records, total=src.total, unit=" docs", desc="ingest", disable=not show_progress):
            report.records += 1
            unwrap = settings["unwrap_lines"] and not record.grouped_rows
            text, removed, unwrapped = clean(record.text, unwrap_lines=unwrap)
            report.boilerplate.update(header=removed.header, footer=removed.footer, notes=removed.notes,
                                      characters=removed.chars)
            report.unwrapped.update(asdict(unwrapped))
            if len(text) < max(1, settings["min_doc_chars"]):
                reason = "empty" if not text else "too_short"
                report.reject(reason, record.source, f"{len(text)} characters after cleaning")
                continue
            doc_id = hashlib.sha256(text.encode()).hexdigest()
            if doc_id in seen:
                report.duplicates.add(record.source)
                continue
            if max_chars is not None and kept_chars + len(text) > max_chars:
                if not seen:
                    raise InputError(f"max_chars={max_chars:,} keeps no document: the first one ({record.source}) "
                                     f"has {len(text):,} characters", file=src.spec)
                limit_reached = True
                break
            seen.add(doc_id)
            kept_chars += len(text)
            split.add(Document(doc_id, record.source, text))
            if max_docs is not None and len(seen) == max_docs:
                limit_reached = True
                break
        report.check_malformed()
        floor = split.finish()
    if train.documents + val.documents == 0:
        reasons = ", ".join(f"{r}: {t.count}" for r, t in report.rejects.items()) or "no records"
        raise InputError(f"no documents ({reasons}; duplicates: {report.duplicates.count}; "
                         f"malformed rows: {report.malformed.count})", file=src.spec)

    seconds = time.time() - started
    chars = train.characters + val.characters
    log.info("ingested %d train + %d val documents (%.1fM characters) in %.1fs: %.2fM chars/s, %.1f docs/s",
             train.documents, val.documents, chars / 1e6, seconds, chars / 1e6 / max(seconds, 1e-9),
             report.records / max(seconds, 1e-9))
    return {
        "format": FORMAT_VERSION,
        "settings": settings,
        "documents": {"train": train.documents, "val": val.documents},
        "characters": {"train": train.characters, "val": val.characters},
        "parts": {"train": train.parts, "val": val.parts},
        "content_hash": hashlib.sha256(train.ids.digest() + val.ids.digest()).hexdigest(),
        "val_floor_applied": floor,
        "subset": {"max_documents": max_docs, "max_chars": max_chars, "limit_reached": limit_reached},
        **report.as_dict(),
        "seconds": round(seconds, 3),
    }


def _finished_corpus(out: Path, key: str) -> dict | None:
    """The stats of a complete corpus at `out` built with this key, or None."""
    try:
        stats = read_json(out / STATS_FILE)
    except (OSError, ValueError):
        return None
    parts = [part["file"] for split in SPLITS for part in stats.get("parts", {}).get(split, [])]
    if stats.get("key") != key or not all((out / part).is_file() for part in parts):
        return None
    return stats


def _move_into_place(build: Path, out: Path) -> None:
    """Rename the finished build to `out`; a previous corpus there is moved aside first, then deleted."""
    old = out.with_name(f".{out.name}{_OLD}{_owner()}") if out.exists() else None
    if old is not None:
        os.replace(out, old)
    try:
        os.replace(build, out)
    except OSError:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old)


# -- CLI: gpt1 ingest -------------------------------------------------------------------------------------------
def add_ingest_args(parser: argparse.ArgumentParser) -> None:
    defaults = DataConfig()
    parser.add_argument("--source", required=True,
                        help="directory or glob of .txt/.jsonl/.parquet, a file, or hf:<id>[@revision][:split]")
    parser.add_argument("--out", required=True, help="corpus directory to write")
    parser.add_argument("--text-column", default=defaults.text_column, help="text field of jsonl/parquet/hf rows")
    parser.add_argument("--val-fraction", type=float, default=defaults.val_fraction,
                        help="share of documents held out for validation")
    parser.add_argument("--seed", type=int, default=defaults.split_seed, help="train/val split seed")
    parser.add_argument("--min-doc-chars", type=int, default=defaults.min_doc_chars,
                        help="reject documents shorter than this after cleaning")
    parser.add_argument("--rows-per-doc", type=positive_int, default=None,
                        help=f"rows joined per document for row sources (default: {BOOKCORPUS_ROWS_PER_DOC} for "
                             f"hub BooksCorpus, else 1)")
    parser.add_argument("--unwrap-lines", action=argparse.BooleanOptionalAction, default=defaults.unwrap_lines,
                        help="join the lines of hard-wrapped prose paragraphs (verse, lists and headings keep theirs)")
    parser.add_argument("--max-documents", type=positive_int, default=defaults.max_documents,
                        help="subset: keep the first N documents in source order, read no further")
    parser.add_argument("--max-chars", type=positive_int, default=defaults.max_chars,
                        help="subset: keep whole documents in source order up to this many characters")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_ingest(args: argparse.Namespace) -> int:
    stats = ingest(args.source, args.out, text_column=args.text_column, val_fraction=args.val_fraction,
                   split_seed=args.seed, min_doc_chars=args.min_doc_chars, rows_per_doc=args.rows_per_doc,
                   unwrap_lines=args.unwrap_lines, max_documents=args.max_documents, max_chars=args.max_chars,
                   show_progress=not args.no_progress)
    print(summary(stats, args.out))
    return 0


def summary(stats: dict, out: str | os.PathLike) -> str:
    docs, chars = stats["documents"], stats["characters"]
    lines = [
        f"corpus {out} (key {stats['key']})",
        f"  documents: {docs['train']:,} train + {docs['val']:,} val, {sum(chars.values()):,} characters; "
        f"{stats['duplicates']['count']:,} duplicates dropped",
    ]
    if stats["subset"]["limit_reached"]:
        limits = {k: v for k, v in stats["subset"].items() if k.startswith("max_") and v is not None}
        lines.append(f"  subset: source read up to the limit ({', '.join(f'{k}={v:,}' for k, v in limits.items())})")
    for reason, tally in stats["rejects"].items():
        lines.append(f"  rejected ({reason}): {tally['count']:,}, e.g. {', '.join(map(str, tally['examples'][:3]))}")
    for encoding, tally in stats["decode_fallbacks"].items():
        lines.append(f"  read as {encoding}: {', '.join(tally['examples'])}")
    if stats["malformed_rows"]["count"]:
        first = stats["malformed_rows"]["examples"][0]
        lines.append(f"  malformed rows: {stats['malformed_rows']['count']:,} of {stats['inputs']['rows']:,}, "
                     f"first {first['file']}:{first['line']}: {first['error']}")
    removed = stats["boilerplate_removed"]
    if removed["header"] or removed["footer"]:
        lines.append(f"  Gutenberg boilerplate removed: {removed['header']} headers, {removed['footer']} footers, "
                     f"{removed['notes']} notes")
    unwrapped = stats["unwrapped"]
    if unwrapped["paragraphs"]:
        lines.append(f"  hard-wrapped lines joined: {unwrapped['lines_joined']:,} line breaks in "
                     f"{unwrapped['paragraphs']:,} paragraphs; {unwrapped['paragraphs_kept']:,} multi-line "
                     f"paragraphs kept (verse, lists, headings)")
    return "\n".join(lines)
