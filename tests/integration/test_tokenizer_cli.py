"""`gpt1 train-tokenizer` on a corpus that a real ingestion wrote: its stats, the character limit and a limited
alphabet. The tokenizer itself: tests/unit/test_tokenizer.py."""

from __future__ import annotations

import json

from gpt1.cli import main as cli
from gpt1.tokenizer import bpe
from tests.unit.test_tokenizer import CORPUS


def test_cli_trains_on_an_ingested_corpus(tmp_path):
    from gpt1.config import IngestConfig
    from gpt1.data.ingest.ingest import ingest

    (tmp_path / "books").mkdir()
    for i, text in enumerate(CORPUS):
        (tmp_path / "books" / f"{i}.txt").write_text(f"Book {i}. {text}", encoding="utf-8")
    ingest(IngestConfig(source=str(tmp_path / "books"), val_fraction=0.0), tmp_path / "corpus", show_progress=False)
    out = tmp_path / "tok"
    assert cli(["train-tokenizer", "--corpus", str(tmp_path / "corpus"), "--out", str(out), "--merges", "30",
                "--max-chars", "500"]) == 0
    stats = json.loads((out / "tokenizer_stats.json").read_text())
    loaded = bpe.load(out)
    assert stats["merges"] == loaded.num_merges == 30
    assert stats["vocab_size"] == loaded.vocab_size and stats["sha256"] == loaded.sha256
    assert stats["characters"] == 500 and stats["seconds"] > 0

    narrow = tmp_path / "tok-narrow"  # train_tokenizer.limit_alphabet: only the 12 most frequent characters are symbols
    assert cli(["train-tokenizer", "--corpus", str(tmp_path / "corpus"), "--out", str(narrow), "--merges", "30",
                "--limit-alphabet", "12"]) == 0
    assert json.loads((narrow / "tokenizer_stats.json").read_text())["limit_alphabet"] == 12
    text = " ".join(CORPUS)
    unknown = [bpe.load(path).encode(text).count(0) for path in (out, narrow)]  # id 0 is <unk>
    assert unknown[0] == 0 < unknown[1]
