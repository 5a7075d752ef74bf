"""Stage 1, corpus ingestion: a text source -> cleaned, deduplicated documents split into train/val.

    stats = ingest(IngestConfig(source="../shared/data/books"), "runs/corpus")   # `gpt1 ingest`: as a stage

The sources (directories, globs and files of .txt/.jsonl/.parquet, `hf:` datasets) and how their rows become
records are gpt1/data/sources.py; the output layout is gpt1/data/corpus.py. Records stream through one at a time,
so memory is bounded by the largest document plus one Parquet row group per split; only the set of document ids
grows with the corpus.

Design choices:
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
- Restartability and replacement are the stage's (gpt1.data.ingest.stage, gpt1.stages.outputs): its key hashes the
  source (local files by content; a hub source by id, revision and split, so pin a revision) and these settings.
- A subset of a large source (`max_documents`, `max_chars`): the first documents in source order, whole; the
  source is read only that far (see `_build`).
- Failures: an unwritable folder is refused before any work; a failed write (disk full) is one OutputError.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from gpt1.config import IngestConfig
from gpt1.data.ingest.clean import clean
from gpt1.data.ingest.corpus import CORPUS, ORIGINS, SCHEMA, STATS_FILE, TASK_TEXT_ORIGIN
from gpt1.data.ingest.documents import cut_documents
from gpt1.data.ingest.leaks import MIN_WORDS
from gpt1.data.ingest.sources import (
    BOOKCORPUS_ROWS_PER_DOC,
    MAX_EXAMPLES,
    FileSource,
    HFSource,
    Record,
    Report,
    open_source,
)
from gpt1.data.ingest.task_text import held_out_index
from gpt1.data.ingest.task_text import train_records as task_records
from gpt1.io import InputError, atomic_path, check_writable, write_error, write_json

__all__ = ["BOOKCORPUS_ROWS_PER_DOC", "FileSource", "HFSource", "ingest", "open_source", "summary"]

log = logging.getLogger(__name__)

FORMAT_VERSION = (
    2  # bump when cleaning or splitting changes, so corpora built by older code are rebuilt
)
ROWS_PER_PART = 10_000  # documents per Parquet part
ROW_GROUP_CHARS = (
    2_000_000  # characters per row group (or one larger document): bounds the write buffer
)


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
        # the open part: its writer, and the stack whose atomic_path renames it into place when closed
        self._part: tuple[pq.ParquetWriter, contextlib.ExitStack] | None = None
        self._part_rows = 0

    def add(self, doc: Document) -> None:
        if (
            self._buffered_chars + len(doc.text) > ROW_GROUP_CHARS
        ):  # so a row group holds at most one big book
            self._flush()
        self._buffer.append(doc)
        self._buffered_chars += len(doc.text)
        self.documents += 1
        self.characters += len(doc.text)
        self.ids.update(doc.id.encode())
        if (
            self._buffered_chars >= ROW_GROUP_CHARS
            or self._part_rows + len(self._buffer) >= self.rows_per_part
        ):
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        with _writing(self.folder):
            self._write_buffer()

    def _write_buffer(self) -> None:
        if self._part is None:
            stack = contextlib.ExitStack()
            tmp = stack.enter_context(
                atomic_path(self.folder / f"part-{len(self.parts):05d}.parquet")
            )
            # Every value is unique, so no dictionaries; min/max statistics of whole books would copy them twice.
            writer = pq.ParquetWriter(
                tmp,
                SCHEMA,
                compression="zstd",
                use_dictionary=False,
                write_statistics=["id", "source"],
            )
            self._part = writer, stack
        columns = {
            "id": [d.id for d in self._buffer],
            "source": [d.source for d in self._buffer],
            "text": [d.text for d in self._buffer],
        }
        self._part[0].write_table(pa.table(columns, schema=SCHEMA))
        self._part_rows += len(self._buffer)
        self._buffer, self._buffered_chars = [], 0
        if self._part_rows >= self.rows_per_part:
            self._close_part(self._part)

    def _close_part(self, part: tuple[pq.ParquetWriter, contextlib.ExitStack]) -> None:
        writer, stack = part
        writer.close()
        stack.close()  # atomic_path renames the finished part into place
        self.parts.append(
            {
                "file": f"{self.folder.name}/part-{len(self.parts):05d}.parquet",
                "rows": self._part_rows,
            }
        )
        self._part, self._part_rows = None, 0

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._flush()
            if self._part is not None:
                with _writing(self.folder):
                    self._close_part(self._part)
        elif self._part is not None:
            writer, stack = self._part
            with contextlib.suppress(OSError):  # e.g. the disk that made this fail is still full
                writer.close()
            stack.__exit__(exc_type, exc, tb)  # atomic_path deletes the unfinished part


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Failed writes (disk full, quota, read-only, I/O error) as one clear OutputError naming the path."""
    try:
        yield
    except OSError as err:
        raise write_error(path, err) from None


class TrainValSplit:
    """Routes records to train or val by hash(seed, id), holding back the lowest-hash train record so that val can
    receive it at the end if it would otherwise stay empty (see the module docstring). A record is routed whole
    and then cut into documents of at most `max_doc_chars` (documents.py): a book's documents never straddle the
    split."""

    def __init__(
        self,
        train: SplitWriter,
        val: SplitWriter,
        val_fraction: float,
        seed: int,
        max_doc_chars: int | None = None,
    ):
        self.train, self.val, self.val_fraction, self.seed = train, val, val_fraction, seed
        self.max_doc_chars = max_doc_chars
        self.held: tuple[float, Document] | None = None

    def score(self, doc_id: str) -> float:
        digest = hashlib.sha256(f"{self.seed}:{doc_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def add(self, doc: Document) -> None:
        score = self.score(doc.id)
        if score < self.val_fraction:
            self._write(self.val, doc)
        elif self.val_fraction == 0 or (self.held is not None and score >= self.held[0]):
            self._write(self.train, doc)
        else:
            if self.held is not None:
                self._write(self.train, self.held[1])
            self.held = (score, doc)

    def finish(self) -> bool:
        """Write the held-back record; True if it went to val as the floor."""
        if self.held is None:
            return False
        floor = self.val.documents == 0 and self.train.documents > 0
        self._write(self.val if floor else self.train, self.held[1])
        return floor

    def _write(self, split: SplitWriter, doc: Document) -> None:
        if self.max_doc_chars is None or len(doc.text) <= self.max_doc_chars:
            split.add(doc)
            return
        for piece in cut_documents(doc.text, self.max_doc_chars):
            split.add(Document(hashlib.sha256(piece.encode()).hexdigest(), doc.source, piece))


# -- the build ------------------------------------------------------------------------------------------------
def ingest(
    cfg: IngestConfig,
    out_dir: str | os.PathLike,
    *,
    task_files: Sequence[tuple[str, str]] = (),
    show_progress: bool = True,
    rows_per_part: int = ROWS_PER_PART,
) -> dict:
    """Clean, deduplicate and split `cfg.source` into the corpus layout in `out_dir` (created; it must be empty);
    returns the stats, also written as stats.json.

    `cfg` is the `ingest` section (its fields say what each setting does); `task_files`: (task, where its files
    are) pairs, whose train rows are added as documents when `cfg.task_text` (task_text.py) and whose held-out
    sentences are removed from everything when `cfg.leak_check` (leaks.py). Whether to run, and replacing an
    earlier corpus without ever showing half of one, are the stage's (gpt1.data.ingest.stage): this writes what it
    is given to write.
    """
    if rows_per_part < 1:
        raise ValueError(f"rows_per_part must be >= 1, got {rows_per_part}")
    task_text = list(task_files) if cfg.task_text else []
    leak_check = list(task_files) if cfg.leak_check else []
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: a corpus is built into an empty folder")
    check_writable(out)
    src = open_source(cfg.source, exclude=out)
    settings = {
        "text_column": cfg.text_column,
        "val_fraction": cfg.val_fraction,
        "split_seed": cfg.split_seed,
        "min_doc_chars": cfg.min_doc_chars,
        "rows_per_doc": cfg.rows_per_doc or src.rows_per_doc,
        "rows_per_part": rows_per_part,
        "unwrap_lines": cfg.unwrap_lines,
        "max_documents": cfg.max_documents,
        "max_chars": cfg.max_chars,
        "max_doc_chars": cfg.max_doc_chars,
        "task_text": [t for t, _ in task_text],
        "leak_check": [t for t, _ in leak_check],
        "format": FORMAT_VERSION,
    }
    src.check(cfg.text_column)
    leaks = LeakCheck(leak_check)
    stats = _build(src, out, settings, show_progress, task_text, leaks)
    stats.update(source=cfg.source, source_hash=src.fingerprint())
    with _writing(out):
        write_json(out / STATS_FILE, stats)
    return stats


class LeakCheck:
    """The leak check of one build: the held-out sentences of the run's tasks, and what was removed per origin."""

    def __init__(self, sources: Sequence[tuple[str, str]]):
        self.splits: dict[str, dict] = {}
        self.index = held_out_index(sources, self.splits) if sources else None
        self.removed = {origin: 0 for origin in ORIGINS}
        self.examples: list[str] = []

    def remove(self, text: str, origin: str, where: str) -> str:
        if self.index is None:
            return text
        text, removed = self.index.remove(text)
        if removed:
            self.removed[origin] += removed
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(where)
        return text

    def as_dict(self) -> dict | None:
        if self.index is None:
            return None
        return {
            "min_words": MIN_WORDS,
            "held_out": self.splits,
            "sentences_indexed": len(self.index),
            "sentences_removed": self.removed,
            "examples": self.examples,
        }


def _build(
    src: FileSource | HFSource,
    build: Path,
    settings: dict,
    show_progress: bool,
    task_text: list[tuple[str, str]],
    leaks: LeakCheck,
) -> dict:
    """Stream the source's records, then the tasks' train rows, through cleaning, the leak check, dedup and the
    split into `build`.

    Subset: with max_documents / max_chars, the source's documents are kept in source order (after cleaning and
    dedup) until the next one would pass either limit, and the source is read no further (a hub dataset streams
    only that far). The subset is a prefix of what the full run would keep, so a larger limit only adds
    documents; the train/val assignment of a document does not depend on the limits. Task text is never cut.
    """
    report, started = Report(), time.time()
    seen: set[str] = set()  # ids of the documents kept
    max_docs, max_chars = settings["max_documents"], settings["max_chars"]
    kept = {origin: {"records": 0, "characters": 0} for origin in ORIGINS}
    limit_reached = False
    records = src.records(settings["text_column"], settings["rows_per_doc"], report)
    with (
        contextlib.closing(records),
        SplitWriter(build / "train", settings["rows_per_part"]) as train,
        SplitWriter(build / "val", settings["rows_per_part"]) as val,
    ):
        split = TrainValSplit(
            train, val, settings["val_fraction"], settings["split_seed"], settings["max_doc_chars"]
        )

        def admit(record: Record, origin: str) -> bool:
            """Clean, check and route one record; False when it would pass a subset limit (it is not kept)."""
            report.records += 1
            unwrap = settings["unwrap_lines"] and not record.grouped_rows
            text, removed, unwrapped = clean(record.text, unwrap_lines=unwrap)
            report.boilerplate.update(
                header=removed.header,
                footer=removed.footer,
                notes=removed.notes,
                characters=removed.chars,
            )
            report.unwrapped.update(asdict(unwrapped))
            text = leaks.remove(text, origin, record.source)
            if len(text) < max(1, settings["min_doc_chars"]):
                reason = "empty" if not text else "too_short"
                report.reject(reason, record.source, f"{len(text)} characters after cleaning")
                return True
            doc_id = hashlib.sha256(text.encode()).hexdigest()
            if doc_id in seen:
                report.duplicates.add(record.source)
                return True
            if (
                origin == CORPUS
                and max_chars is not None
                and kept[CORPUS]["characters"] + len(text) > max_chars
            ):
                if not seen:
                    raise InputError(
                        f"max_chars={max_chars:,} keeps no document: the first one ({record.source}) "
                        f"has {len(text):,} characters",
                        file=src.spec,
                    )
                return False
            seen.add(doc_id)
            kept[origin]["records"] += 1
            kept[origin]["characters"] += len(text)
            split.add(Document(doc_id, record.source, text))
            return not (
                origin == CORPUS and max_docs is not None and kept[CORPUS]["records"] == max_docs
            )

        for record in tqdm(
            records, total=src.total, unit=" docs", desc="ingest", disable=not show_progress
        ):
            if not admit(record, CORPUS):
                limit_reached = True
                break
        for task, where in task_text:
            for record in task_records(task, where, report):
                admit(record, TASK_TEXT_ORIGIN)
        report.check_malformed()
        floor = split.finish()
    # A hub stream cut at a limit leaves pyarrow's batch iterator half read; collected at interpreter exit it aborts
    # the process after the corpus is written (apache/arrow#45214). Collect it now, while Arrow is still alive.
    gc.collect()
    if train.documents + val.documents == 0:
        reasons = (
            ", ".join(f"{r}: {t.count}, first {t.examples[0]}" for r, t in report.rejects.items())
            or "no records"
        )
        raise InputError(
            f"no documents ({reasons}; duplicates: {report.duplicates.count}; "
            f"malformed rows: {report.malformed.count})",
            file=src.spec,
        )

    seconds = time.time() - started
    chars = train.characters + val.characters
    log.info(
        "ingested %d train + %d val documents (%.1fM characters) in %.1fs: %.2fM chars/s, %.1f docs/s",
        train.documents,
        val.documents,
        chars / 1e6,
        seconds,
        chars / 1e6 / max(seconds, 1e-9),
        report.records / max(seconds, 1e-9),
    )
    return {
        "format": FORMAT_VERSION,
        "settings": settings,
        "documents": {"train": train.documents, "val": val.documents},
        "characters": {"train": train.characters, "val": val.characters},
        "parts": {"train": train.parts, "val": val.parts},
        "content_hash": hashlib.sha256(train.ids.digest() + val.ids.digest()).hexdigest(),
        "val_floor_applied": floor,
        "subset": {
            "max_documents": max_docs,
            "max_chars": max_chars,
            "limit_reached": limit_reached,
        },
        "origins": kept,
        "leak_check": leaks.as_dict(),
        **report.as_dict(),
        "seconds": round(seconds, 3),
    }


def summary(stats: dict, out: str | os.PathLike) -> str:
    docs, chars = stats["documents"], stats["characters"]
    lines = [
        f"corpus {out}",
        f"  documents: {docs['train']:,} train + {docs['val']:,} val, {sum(chars.values()):,} characters; "
        f"{stats['duplicates']['count']:,} duplicates dropped",
    ]
    if stats["subset"]["limit_reached"]:
        limits = {
            k: v for k, v in stats["subset"].items() if k.startswith("max_") and v is not None
        }
        lines.append(
            f"  subset: source read up to the limit ({', '.join(f'{k}={v:,}' for k, v in limits.items())})"
        )
    tasks = stats["settings"].get("task_text")
    if tasks:
        text = stats["origins"][TASK_TEXT_ORIGIN]
        lines.append(
            f"  task text: {text['records']:,} rows ({text['characters']:,} characters) from the train files of "
            f"{', '.join(tasks)}"
        )
    leak = stats.get("leak_check")
    if leak:
        removed = leak["sentences_removed"]
        lines.append(
            f"  leak check: {sum(removed.values()):,} sentences removed ({removed[CORPUS]:,} from the source, "
            f"{removed[TASK_TEXT_ORIGIN]:,} from task text) of the {leak['sentences_indexed']:,} that the "
            f"dev and test files of {', '.join(leak['held_out'])} hold"
        )
    for reason, tally in stats["rejects"].items():
        lines.append(
            f"  rejected ({reason}): {tally['count']:,}, e.g. {', '.join(map(str, tally['examples'][:3]))}"
        )
    for encoding, tally in stats["decode_fallbacks"].items():
        lines.append(f"  read as {encoding}: {', '.join(tally['examples'])}")
    if stats["malformed_rows"]["count"]:
        first = stats["malformed_rows"]["examples"][0]
        lines.append(
            f"  malformed rows: {stats['malformed_rows']['count']:,} of {stats['inputs']['rows']:,}, "
            f"first {first['file']}:{first['line']}: {first['error']}"
        )
    removed = stats["boilerplate_removed"]
    if removed["header"] or removed["footer"]:
        lines.append(
            f"  Gutenberg boilerplate removed: {removed['header']} headers, {removed['footer']} footers, "
            f"{removed['notes']} notes"
        )
    unwrapped = stats["unwrapped"]
    if unwrapped["paragraphs"]:
        lines.append(
            f"  hard-wrapped lines joined: {unwrapped['lines_joined']:,} line breaks in "
            f"{unwrapped['paragraphs']:,} paragraphs; {unwrapped['paragraphs_kept']:,} multi-line "
            f"paragraphs kept (verse, lists, headings)"
        )
    return "\n".join(lines)
