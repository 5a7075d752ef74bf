"""What verifying the shards costs (`verify_shards`, once per run) against reading the same bytes and against
the tokenization that wrote them, measured in one run.

Shards: the smallest shared books up to --mb MB, ingested and tokenized at the paper's n_ctx = 512 with the
original GPT-1 vocabulary (bench_tokenize.py's corpus and tokenizer); the tokenization is timed here. Then, best
of --rounds each, with the shard files evicted from the page cache first (`cold`, posix_fadvise DONTNEED on these
files only) and without (`warm`, as right after tokenization):
    read            every shard file read in 1 MiB chunks: the floor for anything that looks at every byte
    verify, full    verify_shards(full=True): sha256, Arrow structure and token-id range of every shard
    verify, again   verify_shards() with nothing changed since: file identities compared, no shard read
    reader open     BlockReader(train) with the verification record (identities compared), and with
                    verify_checksums=True (every train shard hashed at open)
Plus the per-batch vocabulary check inside BlockReader: its share of the time to serve global batches of 64.

    python benchmarks/bench_shard_verify.py --mb 6 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from results import record  # noqa: E402

CHUNK = 1 << 20


def shard_files(shards: Path) -> list[Path]:
    from gpt1.data.tokenize import load_manifest

    manifest = load_manifest(shards)
    return [shards / s["file"] for split in manifest["splits"].values() for s in split["shards"]]


def evict(files: list[Path]) -> None:
    """Drop these files' pages from the page cache (only theirs: nothing else on the machine is affected)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_all(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while fh.read(CHUNK):
                pass


def best_of(rounds: int, run, files: list[Path], cold: bool) -> float:
    best = float("inf")
    for _ in range(rounds):
        if cold:
            evict(files)
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def batch_check_share(shards: Path, batches: int) -> tuple[float, float]:
    """(seconds per global batch of 64 served, seconds of the vocabulary check on such a batch)."""
    from gpt1.data.tokenize import BlockReader

    reader = BlockReader(shards, "train", seed=0)
    served, started = 0, time.perf_counter()
    while served < batches:
        for step in reader.global_batches(64, 8):
            served += 1
            if served == batches:
                break
    per_batch = (time.perf_counter() - started) / served
    sample = step.reshape(-1, step.shape[-1]).numpy()
    started = time.perf_counter()
    for _ in range(batches):
        _ = sample.max() >= reader.vocab_size  # what _gather adds per batch
    return per_batch, (time.perf_counter() - started) / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=6.0, help="MB of shared books to tokenize")
    parser.add_argument("--workers", type=int, default=2, help="tokenizer processes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from bench_tokenize import SHARED, gpt1_tokenizer, ingest_books

    from gpt1.data.tokenize import BlockReader, tokenize_corpus, verify_shards

    if not (SHARED / "books").is_dir():
        sys.exit(f"shared books not found at {SHARED / 'books'} (set GPT1_SHARED_DATA)")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="bench_verify-"))
    try:
        corpus = ingest_books(work, args.mb)
        tokenizer = gpt1_tokenizer(corpus)
        started = time.perf_counter()
        tokenize_corpus(corpus, tokenizer, work / "shards", n_ctx=512, shard_rows=256, workers=args.workers,
                        show_progress=False)
        tokenize_seconds = time.perf_counter() - started
        shards = work / "shards"
        files = shard_files(shards)
        train = [f for f in files if f.parent.name == "train"]
        total = sum(f.stat().st_size for f in files)

        rows = {}
        for cache in ("cold", "warm"):
            cold = cache == "cold"
            rows[f"read, {cache}"] = best_of(args.rounds, lambda: read_all(files), files, cold)
            rows[f"verify, full, {cache}"] = best_of(args.rounds, lambda: verify_shards(shards, full=True), files,
                                                     cold)
        rows["verify, again (nothing changed)"] = best_of(args.rounds, lambda: verify_shards(shards), files, False)
        rows["reader open, verified (train)"] = best_of(args.rounds, lambda: BlockReader(shards, "train"), train,
                                                        False)
        rows["reader open, verify_checksums=True (train)"] = best_of(
            args.rounds, lambda: BlockReader(shards, "train", verify_checksums=True), train, False)
        per_batch, check = batch_check_share(shards, 200)

        print(f"load: {load}")
        print(f"shards: {len(files)} files, {total / 1e6:.1f} MB ({args.mb} MB of books at n_ctx 512, "
              f"{tokenizer.vocab_size:,} ids); tokenization ({args.workers} workers) took {tokenize_seconds:.1f} s")
        print(f"{'step':<46}{'seconds':>10}{'MB/s':>10}{'x read':>9}{'x tokenize':>12}")
        for name, seconds in rows.items():
            same = "cold" if "cold" in name else "warm"
            ratio = seconds / rows[f"read, {same}"]
            print(f"{name:<46}{seconds:>10.4f}{total / 1e6 / seconds:>10.0f}{ratio:>9.2f}"
                  f"{seconds / tokenize_seconds:>12.5f}")
        print(f"per-batch vocabulary check: {check * 1e6:.1f} us of {per_batch * 1e6:.0f} us per global batch of 64 "
              f"({check / per_batch:.2%})")
        record({"shards_mb": total / 1e6, "tokenize_s": tokenize_seconds,
                "verify_full_cold_vs_read_cold": rows["verify, full, cold"] / rows["read, cold"],
                "verify_full_cold_vs_tokenize": rows["verify, full, cold"] / tokenize_seconds,
                "verify_again_s": rows["verify, again (nothing changed)"],
                "batch_check_share": check / per_batch})
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
