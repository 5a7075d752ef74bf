"""The ingested-corpus layout: what `gpt1 ingest` writes and every later stage reads.

    CORPUS/
      train/part-00000.parquet ...   columns: id (sha256 of text), source (file/row it came from), text
      val/part-00000.parquet ...
      stats.json                     documents, characters, duplicates, rejects by reason (with examples)

Documents are whole records (a book, a row) or, with `max_doc_chars`, pieces of one; a record's documents are never
split across train and val. A document's `source` tells where it came from: the tasks' train rows
(`ingest.task_text`) are named `task:<task>:<row id>`, everything else is the corpus source's (`origin_of`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from gpt1.io import parquet_file

SPLITS = ("train", "val")
SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("text", pa.large_string())])
STATS_FILE = "stats.json"

# where a document came from: the source, or a task's train rows
CORPUS, TASK_TEXT_ORIGIN = (
    "corpus",
    "task_text",
)
ORIGINS = (CORPUS, TASK_TEXT_ORIGIN)
TASK_SOURCE_PREFIX = "task:"


def origin_of(source: str) -> str:
    return TASK_TEXT_ORIGIN if source.startswith(TASK_SOURCE_PREFIX) else CORPUS


def split_files(corpus_dir: str | Path, split: str) -> list[Path]:
    """The Parquet parts of one split, in order; a clear error if the folder is not an ingested corpus."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(corpus_dir)
    if not (root / STATS_FILE).exists():
        raise FileNotFoundError(
            f"{root}: not an ingested corpus (no {STATS_FILE}); run `gpt1 ingest` first"
        )
    return sorted((root / split).glob("part-*.parquet"))


def iter_batches(
    corpus_dir: str | Path, split: str = "train", batch_size: int = 256
) -> Iterator[list[str]]:
    """Stream document texts in stored order, `batch_size` at a time (memory does not grow with the corpus)."""
    for path in split_files(corpus_dir, split):
        for batch in parquet_file(path).iter_batches(batch_size=batch_size, columns=["text"]):
            yield batch.column(0).to_pylist()


def iter_texts(corpus_dir: str | Path, split: str = "train") -> Iterator[str]:
    for batch in iter_batches(corpus_dir, split):
        yield from batch
