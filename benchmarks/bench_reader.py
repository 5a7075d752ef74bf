"""Training reader (`BlockReader`) throughput vs what pre-training consumes, measured in the same run.

Shards: the smallest shared books up to --mb MB, ingested and tokenized at the paper's n_ctx = 512 with the
original GPT-1 vocabulary (as in bench_tokenize.py), or --shards DIR. The reader serves shuffled global batches of
64 blocks split into micro-batches of 8, epoch after epoch, as `gpt1.pretrain` requests them (`global_batches`),
single-process and as rank 0 of 8; plus single random blocks (`reader[i]`).

Consumers, in tokens/s (a block is n_ctx + 1 = 513 tokens):
    smoke model     one forward + backward + AdamW step of the smoke preset's GPT-1 (n_ctx 128, batch 16) on this
                    CPU, fp32, with the shards' vocabulary
    GPT-1 model     the same for the paper's 117M model (n_ctx 512, batch 1)
    one A100        what one GPU (= one rank) at 40% MFU would consume (bf16 peak 312 TFLOP/s), from
                    `gpt1.model.transformer.flops_per_token`: a stated figure, not measured here
Each rank runs its own reader, so the per-rank reader rate is compared with one consumer; the reader only has to
keep ahead of it, and the ratio says by how much.

    python benchmarks/bench_reader.py --mb 3 --seconds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from results import record

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" / "data"))
A100_BF16_FLOPS, A100_MFU = 312e12, 0.40


def build_shards(work: Path, mb: float) -> Path:
    from bench_tokenize import gpt1_tokenizer, ingest_books  # this folder: the same corpus and tokenizer

    from gpt1.data.tokenize import tokenize_corpus

    corpus_dir = ingest_books(work, mb)
    tokenize_corpus(corpus_dir, gpt1_tokenizer(corpus_dir), work / "shards", n_ctx=512, shard_rows=256, workers=2,
                    show_progress=False)
    return work / "shards"


def reader_rate(shards: Path, seconds: float, world_size: int, global_batch: int = 64, micro: int = 8) -> float:
    """Blocks/s this rank receives from `global_batches`, shuffles of every new epoch included."""
    from gpt1.data.tokenize import BlockReader

    reader = BlockReader(shards, "train", seed=0, rank=0, world_size=world_size)
    blocks, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for step in reader.global_batches(global_batch, micro):
            blocks += step.shape[0] * step.shape[1]
    return blocks / (time.perf_counter() - started)


def random_access_rate(shards: Path, seconds: float) -> float:
    from gpt1.data.tokenize import BlockReader

    reader = BlockReader(shards, "train")
    order = torch.randperm(len(reader)).tolist()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for i in order[:256]:
            reader[i]
        count += 256
        order = order[256:] + order[:256]
    return count / (time.perf_counter() - started)


def training_rate(preset: str, vocab_size: int, batch: int, steps: int) -> tuple[float, int]:
    """Tokens/s one forward + backward + AdamW step consumes for `preset`'s model on this CPU (best step), with
    the shards' vocabulary (as `gpt1 pretrain` sets it)."""
    from gpt1.config import load_config
    from gpt1.model.transformer import GPT1

    cfg = load_config(preset).model.model_copy(update={"vocab_size": vocab_size})
    model = GPT1(cfg).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    blocks = torch.randint(0, cfg.vocab_size, (batch, cfg.n_ctx + 1))
    best = float("inf")
    for _ in range(steps + 1):  # the first step warms up allocators and kernels
        started = time.perf_counter()
        logits = model(blocks[:, :-1]).logits
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), blocks[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        best = min(best, time.perf_counter() - started)
    return batch * cfg.n_ctx / best, cfg.n_ctx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=3.0, help="MB of shared books to tokenize")
    parser.add_argument("--shards", help="existing `gpt1 tokenize` output (n_ctx 512) instead of building one")
    parser.add_argument("--seconds", type=float, default=3.0, help="time per reader measurement")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for the training steps")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = None
    if args.shards:
        shards = Path(args.shards)
    else:
        if not (SHARED / "books").is_dir():
            sys.exit(f"shared books not found at {SHARED / 'books'} (set GPT1_SHARED_DATA or pass --shards)")
        work = Path(tempfile.mkdtemp(prefix="bench_reader-"))
        shards = build_shards(work, args.mb)

    from gpt1.config import load_config
    from gpt1.data.tokenize import load_manifest
    from gpt1.model.transformer import flops_per_token

    manifest = load_manifest(shards)
    block = manifest["n_ctx"] + 1
    rates = {
        "reader, 1 rank, global_batches(64, 8)": reader_rate(shards, args.seconds, 1) * block,
        "reader, rank 0 of 8, global_batches(64, 8)": reader_rate(shards, args.seconds, 8) * block,
        "reader, random reader[i]": random_access_rate(shards, args.seconds) * block,
    }
    smoke, smoke_ctx = training_rate("smoke", manifest["vocab_size"], 16, 3)
    paper, _ = training_rate("paper", manifest["vocab_size"], 1, 2)
    gpu = A100_BF16_FLOPS * A100_MFU / flops_per_token(load_config("paper").model)
    consumers = {f"smoke model step (n_ctx {smoke_ctx}), this CPU": smoke,
                 "GPT-1 117M step (n_ctx 512), this CPU": paper,
                 f"GPT-1 117M on one A100 at {A100_MFU:.0%} MFU (stated)": gpu}

    print(f"shards: {shards} ({manifest['splits']['train']['rows']:,} train blocks of {block} tokens, "
          f"{len(manifest['splits']['train']['shards'])} shards); torch threads {args.threads}")
    print(f"{'producer / consumer':<52}{'tokens/s':>14}{'blocks/s':>12}")
    for name, rate in {**rates, **consumers}.items():
        print(f"{name:<52}{rate:>14,.0f}{rate / block:>12,.1f}")
    slowest_reader = min(rates["reader, 1 rank, global_batches(64, 8)"],
                         rates["reader, rank 0 of 8, global_batches(64, 8)"])
    for name, rate in consumers.items():
        print(f"reader / {name}: {slowest_reader / rate:,.1f}x")
    record({"reader_1_rank_tokens_per_s": rates["reader, 1 rank, global_batches(64, 8)"],
            "reader_rank0_of_8_tokens_per_s": rates["reader, rank 0 of 8, global_batches(64, 8)"],
            "random_access_tokens_per_s": rates["reader, random reader[i]"],
            "reader_vs_smoke_step": slowest_reader / smoke, "reader_vs_gpt1_step": slowest_reader / paper,
            "reader_vs_a100_stated": slowest_reader / gpu})
    if work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
