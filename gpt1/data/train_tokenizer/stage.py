"""Stage `train-tokenizer`: train the GPT-1 BPE tokenizer on an ingested corpus.

    gpt1 train-tokenizer --corpus DIR --out DIR [--merges N] [--min-frequency N] [--max-chars N]

Writes tokenizer.json (HF `tokenizers`, with the specials `_start_ _delimiter_ _classify_`) and
tokenizer_stats.json: the vocabulary size and the merges actually learnt (a small corpus can run out of pairs
before the requested number), the corpus read, the time. The encoder itself is bpe.py, beside this file.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gpt1.config import SPECIAL_TOKENS, TrainTokenizerConfig
from gpt1.data.ingest.corpus import STATS_FILE, iter_texts, split_files
from gpt1.io import InputError, read_json, write_json
from gpt1.stages.base import (
    Ref,
    Result,
    StageJob,
    add_output_args,
    keyed_settings,
    run_from_args,
)
from gpt1.tokenizer import bpe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "train-tokenizer"
    summary: ClassVar[str] = "train the GPT-1 BPE tokenizer on an ingested corpus"
    section: ClassVar[str] = "train_tokenizer"
    retries: ClassVar[int] = 1
    corpus: Ref
    cfg: TrainTokenizerConfig

    def identity(self) -> dict:
        return {"corpus": self.corpus.key, "tokenizer": keyed_settings(self.cfg)}

    def check(self, out: Path) -> None:
        if not split_files(self.corpus.path, "train"):
            raise InputError("the corpus has no train documents", file=self.corpus.path / "train")
        # the corpus's own count refuses an impossible merge count before the text is read
        counts = read_json(self.corpus.path / STATS_FILE).get("characters")
        characters = counts.get("train") if isinstance(counts, dict) else None
        if isinstance(characters, int):
            t = self.cfg
            bpe.check_merges(
                t.merges,
                min(characters, t.max_train_chars or characters),
                t.limit_alphabet,
                "the corpus's train split",
                file=self.corpus.path,
                field="train_tokenizer.merges",
            )

    def build(self, out: Path) -> dict:
        t = self.cfg
        counts = {"documents": 0, "characters": 0}
        started = time.perf_counter()
        texts = bpe.capped(iter_texts(self.corpus.path, "train"), t.max_train_chars, counts)
        tokenizer = bpe.train(
            texts, t.merges, min_frequency=t.min_frequency, limit_alphabet=t.limit_alphabet
        )
        seconds = time.perf_counter() - started
        tokenizer.save(out)
        stats = {
            "vocab_size": tokenizer.vocab_size,
            "bpe_vocab_size": tokenizer.vocab_size - len(SPECIAL_TOKENS),
            "merges_requested": t.merges,
            "merges": tokenizer.num_merges,
            "min_frequency": t.min_frequency,
            "limit_alphabet": t.limit_alphabet,
            "documents": counts["documents"],
            "characters": counts["characters"],
            "seconds": round(seconds, 3),
            "characters_per_second": round(counts["characters"] / max(seconds, 1e-9)),
            "sha256": tokenizer.sha256,
            "corpus": str(self.corpus.path),
        }
        write_json(out / bpe.STATS_FILE, stats)
        log.info(
            "tokenizer: %d merges (of %d asked), vocab %d (incl. %d specials) from %d documents / %d chars in "
            "%.1f s (%.0f chars/s)",
            stats["merges"],
            t.merges,
            stats["vocab_size"],
            len(SPECIAL_TOKENS),
            stats["documents"],
            stats["characters"],
            seconds,
            stats["characters_per_second"],
        )
        return {"stats": stats}

    def resolved_params(self, result: Result) -> dict[str, Any]:
        """The vocabulary the later stages really use (a small corpus may run out of pairs before `merges`)."""
        stats = result.marker["stats"]
        return {
            "resolved.train_tokenizer.merges": stats["merges"],
            "resolved.train_tokenizer.vocab_size": stats["vocab_size"],
            "resolved.model.vocab_size": stats["vocab_size"],
        }


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    defaults = TrainTokenizerConfig()
    parser.add_argument(
        "--corpus",
        required=True,
        type=Path,
        help="an ingested corpus (gpt1 ingest); its train split is read",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="folder for tokenizer.json and tokenizer_stats.json"
    )
    parser.add_argument(
        "--merges", type=int, default=defaults.merges, help="BPE merges to learn (paper: 40,000)"
    )
    parser.add_argument(
        "--min-frequency",
        type=int,
        default=defaults.min_frequency,
        help="a pair must occur this often to be merged",
    )
    parser.add_argument(
        "--max-chars",
        type=int,
        default=defaults.max_train_chars,
        help="read at most this many characters of the corpus",
    )
    parser.add_argument(
        "--limit-alphabet",
        type=int,
        default=defaults.limit_alphabet,
        help="keep the most frequent characters as the base alphabet (the rest encode as <unk>)",
    )
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    cfg = TrainTokenizerConfig(
        merges=args.merges,
        min_frequency=args.min_frequency,
        max_train_chars=args.max_chars,
        limit_alphabet=args.limit_alphabet,
    )
    result = run_from_args(Job(Ref.to(args.corpus), cfg), args)
    stats = result.marker["stats"]
    print(
        f"{result.path / bpe.TOKENIZER_FILE}: vocab {stats['vocab_size']:,} ({stats['merges']:,} merges learnt of "
        f"{stats['merges_requested']:,} asked)"
    )
    return 0
