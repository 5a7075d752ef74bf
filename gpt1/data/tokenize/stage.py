"""Stage `tokenize`: tokenize an ingested corpus and pack it into Arrow IPC shards of n_ctx+1-token blocks.

    gpt1 tokenize --corpus DIR --tokenizer DIR --out DIR [--ctx N] [--shard-rows N] [--workers N]

Resumable: a killed run continues with the partitions it had not finished (gpt1.data.tokenize does the work and
documents the layout). The worker count changes speed, never the bytes, so it is not part of the key.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from gpt1.config import PipelineConfig, load_config
from gpt1.data.tokenize import load_manifest, tokenize_corpus
from gpt1.io import positive_int
from gpt1.stages.base import Ref, StageJob, add_output_args, run_from_args


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "tokenize"
    summary: ClassVar[str] = "tokenize and pack a corpus into Arrow shards + manifest.json"
    section: ClassVar[str] = "tokenize"
    retries: ClassVar[int] = 2
    mode: ClassVar[str] = "resume"
    corpus: Ref
    tokenizer: Ref
    n_ctx: int
    shard_rows: int
    align_documents: bool = False
    workers: int = field(default=1, compare=False)  # speed only, never the bytes
    # None: a bar when stderr is a terminal
    progress: bool | None = field(default=None, compare=False)

    @classmethod
    def of(cls, corpus: Ref, tokenizer: Ref, cfg: PipelineConfig) -> Job:
        """The corpus in blocks of the model's context, as `cfg.tokenize` lays them out."""
        t = cfg.tokenize
        return cls(
            corpus, tokenizer, cfg.model.n_ctx, t.shard_rows, t.align_documents, workers=t.workers
        )

    def identity(self) -> dict:
        identity = {
            "corpus": self.corpus.key,
            "tokenizer": self.tokenizer.key,
            "n_ctx": self.n_ctx,
            "shard_rows": self.shard_rows,
        }
        if self.align_documents:  # only when on: shards packed as a plain stream keep their key
            identity["align_documents"] = True
        return identity

    def build(self, out: Path) -> dict:
        manifest = tokenize_corpus(
            self.corpus.path,
            self.tokenizer.path,
            out,
            n_ctx=self.n_ctx,
            shard_rows=self.shard_rows,
            workers=self.workers,
            align_documents=self.align_documents,
            show_progress=sys.stderr.isatty() if self.progress is None else self.progress,
        )
        return {
            "tokens": {split: entry.get("tokens") for split, entry in manifest["splits"].items()},
            "vocab_size": manifest["vocab_size"],
            "composition": manifest["composition"],
        }

    def output_profile(self, result) -> dict:
        """The train tokens by origin (the source, the tasks' train text) and the share of blocks starting a
        document."""
        mix = result.marker.get("composition") or {}
        return {
            **{f"train_tokens_{origin}": n for origin, n in mix.get("train_tokens", {}).items()},
            "blocks_starting_a_document": mix.get("blocks_starting_a_document"),
        }


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus", required=True, type=Path, help="ingested corpus directory (gpt1 ingest --out)"
    )
    parser.add_argument(
        "--tokenizer",
        required=True,
        type=Path,
        help="directory holding tokenizer.json (gpt1 train-tokenizer)",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="output directory for shards + manifest.json"
    )
    parser.add_argument(
        "--preset",
        default="paper",
        help="config preset supplying the defaults below (default: paper)",
    )
    parser.add_argument(
        "--ctx",
        type=positive_int,
        help="context length n_ctx; blocks hold n_ctx+1 tokens (default: the preset's model.n_ctx)",
    )
    parser.add_argument(
        "--shard-rows",
        type=positive_int,
        help="blocks per shard (default: preset tokenize.shard_rows)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        help="tokenizer processes; changes speed, never the output bytes (default: tokenize.workers)",
    )
    parser.add_argument(
        "--align-documents",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start each document of at least a block at a block's first position (default: "
        "tokenize.align_documents)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)"
    )
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    cfg = load_config(args.preset)
    job = Job(
        Ref.to(args.corpus),
        Ref.to(args.tokenizer),
        n_ctx=args.ctx or cfg.model.n_ctx,
        shard_rows=args.shard_rows or cfg.tokenize.shard_rows,
        align_documents=cfg.tokenize.align_documents
        if args.align_documents is None
        else args.align_documents,
        workers=args.workers or cfg.tokenize.workers,
        progress=False if args.no_progress else None,
    )
    result = run_from_args(job, args)
    manifest = load_manifest(result.path)
    totals = manifest["totals"]
    per_split = ", ".join(
        f"{split}: {entry['rows']:,}" for split, entry in manifest["splits"].items()
    )
    print(
        f"{result.path}: {totals['rows']:,} blocks of {manifest['block_tokens']} tokens in {totals['shards']} "
        f"shards ({per_split}); dropped tail tokens {totals['dropped_tail_tokens']:,}"
    )
    mix = manifest["composition"]
    origins = ", ".join(f"{origin} {n:,}" for origin, n in mix["train_tokens"].items())
    print(
        f"train tokens by origin: {origins}; {mix['blocks_starting_a_document']:.0%} of train blocks start with "
        f"the document boundary"
    )
    return 0
