"""Small corpora the data-stage tests build: book-like text files for ingestion, random-word documents written in
the ingested-corpus layout for tokenization, and what they read back."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt1.data.ingest import corpus
from gpt1.data.ingest.corpus import split_files
from gpt1.tokenizer import bpe
from gpt1.tokenizer.bpe import GPT1Tokenizer
from gpt1.io import write_json


def rows(corpus, split=None):
    """Every stored row of a corpus (both splits unless one is named)."""
    out = []
    for s in [split] if split else ["train", "val"]:
        for path in split_files(corpus, s):
            out += pq.read_table(path).to_pylist()
    return out


def write(folder, files: dict):
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (folder / name).write_bytes(data)
    return folder


def book(i: int) -> str:
    return f"Book {i}.\n\nIt was a dark and stormy night, number {i}.\n"


def make_docs(n: int, seed: int, words: int = 120) -> list[str]:
    rng = random.Random(seed)
    lexicon = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(300)]
    return [" ".join(rng.choice(lexicon) for _ in range(rng.randint(1, words))) for _ in range(n)]


# Characters and words around which cutting a document could change its tokens: line-break and space variants
# (CRLF, NBSP, the separators ftfy removes, Unicode line separator), HTML markup and entities (ftfy stops
# unescaping after a line with "<"), mojibake, contractions, abbreviations, units, dashes, a final sigma.
TRICKY = ["<b>", "</b>", "&amp;", "&lt;", "&eacute;", "—", "Σ", "naïve", "don't", "mr.", "10km", "J.",
          " ", "", " ", "â€™", "'em", "'", "...", "-", "--", "été", "	", ""]


LINE_BREAKS = ["\n", "\n", "\n\n", "\n\n", "\r\n", "\r\n\r\n", "\n \n", "\n\n\n", " \n\t\n ", "\n\u3000\n"]


def tricky_text(rng: random.Random, lines: int, words: int = 12) -> str:
    """A document of `lines` lines of lexicon words mixed with TRICKY ones, joined by assorted line breaks."""
    lexicon = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 6))) for _ in range(200)]
    out = []
    for _ in range(lines):
        line = [rng.choice(TRICKY) if rng.random() < 0.15 else rng.choice(lexicon)
                for _ in range(rng.randint(0, words))]
        out += [" ".join(line), rng.choice(LINE_BREAKS)]
    return "".join(out)


def write_corpus(root: Path, files: dict[str, list[list[str]]], row_group_size: int | None = None) -> Path:
    """An ingested corpus in the corpus.py layout: files[split] = documents of each part file."""
    for split, parts in files.items():
        for i, docs in enumerate(parts):
            table = pa.table({"id": [hashlib.sha256(d.encode()).hexdigest() for d in docs],
                              "source": [f"test:{split}:{i}:{j}" for j in range(len(docs))], "text": docs},
                             schema=corpus.SCHEMA)
            (root / split).mkdir(parents=True, exist_ok=True)
            pq.write_table(table, root / split / f"part-{i:05d}.parquet", row_group_size=row_group_size)
    write_json(root / corpus.STATS_FILE, {"documents": sum(len(d) for p in files.values() for d in p)})
    return root


def shard_bytes(out: Path) -> dict[str, bytes]:
    """The tokenizer's output files (not the `.stage.json` / `.done` of a `gpt1 tokenize` stage run)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in (".stage.json", ".done")}


@pytest.fixture(scope="module")
def docs() -> dict[str, list[list[str]]]:
    # Two train parts (so partitions span files), an all-whitespace document (encodes to nothing).
    train = make_docs(40, seed=1)
    train[7] = "   "
    return {"train": [train[:25], train[25:]], "val": [make_docs(6, seed=2)]}


@pytest.fixture(scope="module")
def tokenizer(docs) -> GPT1Tokenizer:
    return bpe.train([d for p in docs["train"] for d in p], merges=150, show_progress=False)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, docs) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"), docs, row_group_size=7)
