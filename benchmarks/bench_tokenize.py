"""Tokenization stage (`gpt1 tokenize`) throughput vs raw `tokenizers`, and its peak memory vs corpus size.

Corpus: the smallest shared books up to --mb MB (so it holds many documents, one per book), ingested with
`gpt1.data.ingest`; the 8x corpus repeats every document of that corpus 8 times (written straight in the
corpus.py Parquet layout, since ingest would deduplicate the copies). Tokenizer: the original GPT-1 vocabulary
(40,478 + 3 specials) when the shared files are present, else one trained on the corpus.

Measured, each in a fresh process with RAYON_NUM_THREADS=--threads, in alternating rounds (best round counts, so
load from other processes on a shared machine hits all variants alike):
    raw peer        `tokenizers.Tokenizer.from_file(tokenizer.json).encode_batch_fast` over every text of the
                    corpus in one call (texts preloaded; the same Rust normalizer/pre-tokenizer/BPE, no ftfy)
    tokenizer       `GPT1Tokenizer.encode_batch` over the same preloaded texts (adds ftfy, in Python)
    stage, N proc   `tokenize_corpus(workers=N)` end to end: hash + plan + read Parquet + encode + pack + write
                    shards + manifest; N=1 runs in-process on --threads threads (tokenizer preloaded, and the
                    share of time spent inside its encode_batch is reported: the stage's own overhead, which
                    load from other processes barely moves), N=--threads runs N processes of 1 thread each
                    (the same total; tokenizer loaded from its folder)
Throughput is given per wall-clock second and per CPU second (user + system, workers included): on a shared
machine the second is what other processes' load barely moves.
Memory: peak RSS (ru_maxrss) of the stage on the corpus and on 8x the corpus, with SHARD_ROWS small enough that
both fill several shards (the single-process figure is the clean one; see the note printed for N processes).

    python benchmarks/bench_tokenize.py --mb 6 --threads 2 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from results import record

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" / "data"))
SHARD_ROWS = 1024  # 0.5M tokens: the 1x corpus already fills several shards, so packing costs the same in both


def ingest_books(work: Path, mb: float) -> Path:
    """The smallest shared books up to `mb` MB, ingested: many documents, as in BooksCorpus ingested in ~80 KB
    documents, so parallel work can be balanced (one book = one document)."""
    from gpt1.config import IngestConfig
    from gpt1.data.ingest.ingest import ingest

    books, total = work / "books", 0
    books.mkdir()
    for path in sorted((SHARED / "books").glob("*.txt"), key=lambda p: (p.stat().st_size, p.name)):
        if total + path.stat().st_size > mb * 1e6:
            break
        (books / path.name).symlink_to(path)
        total += path.stat().st_size
    ingest(IngestConfig(source=str(books), val_fraction=0.05), work / "corpus-1x", show_progress=False)
    return work / "corpus-1x"


def repeat_corpus(one: Path, out: Path, copies: int) -> Path:
    """`copies` x every document of `one`, in the corpus.py layout with ingest's row groups (ingest itself would
    deduplicate the copies)."""
    from gpt1.data.ingest import corpus
    from gpt1.io import write_json

    for split in corpus.SPLITS:
        (out / split).mkdir(parents=True)
        with pq.ParquetWriter(out / split / "part-00000.parquet", corpus.SCHEMA, compression="zstd") as writer:
            for copy in range(copies):
                for path in corpus.split_files(one, split):
                    part = pq.ParquetFile(path)
                    for group in range(part.num_row_groups):  # the same row groups as ingest wrote
                        table = part.read_row_group(group)
                        ids = pa.array([f"{i}-{copy}" for i in table.column("id").to_pylist()], pa.string())
                        writer.write_table(table.set_column(0, "id", ids))
    write_json(out / corpus.STATS_FILE, {"copies_of": str(one), "copies": copies})
    return out


def gpt1_tokenizer(corpus_dir: Path):
    """The original GPT-1 vocabulary when the shared files exist, else 2,000 merges trained on the corpus."""
    from gpt1.tokenizer import bpe
    from gpt1.data.ingest.corpus import iter_texts

    vocab = SHARED / "openai-gpt1"
    if (vocab / "encoder_bpe_40000.json").exists():
        return bpe.from_openai(vocab / "encoder_bpe_40000.json", vocab / "vocab_40000.bpe")
    return bpe.train(iter_texts(corpus_dir, "train"), merges=2000, show_progress=False)


def peak_rss_mb() -> dict:
    return {"self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "largest_child_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def cpu_seconds() -> float:
    """User + system time of this process and its finished children (the pool's workers)."""
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF,
                                                                          resource.RUSAGE_CHILDREN)))


def child(args: argparse.Namespace) -> dict:
    """One measurement in this (fresh) process; prints a JSON line."""
    from gpt1.data.ingest.corpus import SPLITS, iter_texts

    if args.child in ("raw", "tokenizer"):
        texts = [t for split in SPLITS for t in iter_texts(args.corpus, split)]
        if args.child == "raw":
            from tokenizers import Tokenizer

            encoder = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
            started, cpu = time.perf_counter(), cpu_seconds()
            tokens = sum(len(e.ids) for e in encoder.encode_batch_fast(texts))
        else:
            from gpt1.tokenizer import bpe

            encoder = bpe.load(args.tokenizer)
            started, cpu = time.perf_counter(), cpu_seconds()
            tokens = sum(len(ids) for ids in encoder.encode_batch(texts))
        seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        chars = sum(map(len, texts))
    else:
        from gpt1.tokenizer import bpe
        from gpt1.data.tokenize import tokenize_corpus

        out = Path(args.out)
        shutil.rmtree(out, ignore_errors=True)
        encoder, in_encode = args.tokenizer, [0.0]
        if args.workers == 1:  # in-process: also time the tokenizer's own share of the stage
            encoder = bpe.load(args.tokenizer)
            encode_batch = encoder.encode_batch

            def timed_encode_batch(texts):
                started = time.perf_counter()
                try:
                    return encode_batch(texts)
                finally:
                    in_encode[0] += time.perf_counter() - started

            encoder.encode_batch = timed_encode_batch
        started, cpu = time.perf_counter(), cpu_seconds()
        manifest = tokenize_corpus(args.corpus, encoder, out, n_ctx=512, shard_rows=SHARD_ROWS,
                                   workers=args.workers, show_progress=False)
        seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        totals = manifest["totals"]  # the stream holds one boundary token per non-empty document: not text
        tokens = sum(s["stream_tokens"] for s in manifest["splits"].values()) - (
            totals["documents"] - totals["empty_documents"])
        chars = None  # not counted here: reading the texts again would inflate this process's peak RSS
        shutil.rmtree(out)
        if args.workers == 1:
            return {"seconds": seconds, "cpu_seconds": cpu, "tokens": tokens, "chars": chars,
                    "in_encode_batch": in_encode[0] / seconds, **peak_rss_mb()}
    return {"seconds": seconds, "cpu_seconds": cpu, "tokens": tokens, "chars": chars, **peak_rss_mb()}


def measure(variant: str, corpus_dir: Path, tok: Path, work: Path, threads: int, workers: int = 1) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--corpus", str(corpus_dir), "--tokenizer", str(tok),
               "--out", str(work / "out"), "--workers", str(workers)]
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    result = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=6.0, help="MB of shared books in the 1x corpus")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", help="scratch folder (default: a temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if not (SHARED / "books").is_dir():
        sys.exit(f"shared books not found at {SHARED / 'books'} (set GPT1_SHARED_DATA)")

    work = Path(args.work or tempfile.mkdtemp(prefix="bench_tokenize-"))
    work.mkdir(parents=True, exist_ok=True)
    one = ingest_books(work, args.mb)
    eight = repeat_corpus(one, work / "corpus-8x", 8)
    tok = gpt1_tokenizer(one).save(work / "tokenizer").parent
    variants = {"raw peer": ("raw", 1), "tokenizer": ("tokenizer", 1), "stage, 1 proc": ("stage", 1),
                f"stage, {args.threads} proc": ("stage", args.threads)}
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, (variant, workers) in variants.items():
            result = measure(variant, one, tok, work, args.threads, workers)
            if name not in best or result["seconds"] < best[name]["seconds"]:
                best[name] = result
    scaled = {name: measure("stage", eight, tok, work, args.threads, workers)
              for name, (variant, workers) in variants.items() if variant == "stage"}

    raw = best["raw peer"]
    raw_rate, raw_cpu_rate = raw["tokens"] / raw["seconds"], raw["tokens"] / raw["cpu_seconds"]
    print(f"corpus: {raw['chars'] / 1e6:.1f} M chars, {raw['tokens']:,} tokens (8x: {8 * raw['tokens']:,}); "
          f"tokenizer {tok}; {args.threads} threads; 1x: best of {args.rounds} rounds, 8x: one run")
    print(f"{'':<16}{'---- wall clock: tokens/s ----':>36}{'-- tokens per CPU second --':>30}"
          f"{'-------- peak RSS MB --------':>31}")
    print(f"{'variant':<16}{'1x':>10}{'vs raw':>8}{'8x':>10}{'vs raw':>8}{'1x':>10}{'vs raw':>8}{'8x':>12}"
          f"{'1x':>10}{'8x':>10}{'growth':>11}")
    for name, result in best.items():
        rate, cpu_rate = result["tokens"] / result["seconds"], result["tokens"] / result["cpu_seconds"]
        rss = max(result["self_mb"], result["largest_child_mb"])
        big = scaled.get(name)
        line = f"{name:<16}{rate:>10,.0f}{rate / raw_rate:>8.1%}"
        line += f"{big['tokens'] / big['seconds']:>10,.0f}{big['tokens'] / big['seconds'] / raw_rate:>8.1%}" if big \
            else f"{'':>18}"
        line += f"{cpu_rate:>10,.0f}{cpu_rate / raw_cpu_rate:>8.1%}"
        line += f"{big['tokens'] / big['cpu_seconds']:>12,.0f}" if big else f"{'':>12}"
        line += f"{rss:>10.0f}"
        if big:
            big_rss = max(big["self_mb"], big["largest_child_mb"])
            line += f"{big_rss:>10.0f}{big_rss / rss:>10.2f}x"
        print(line)
    for label, result in (("1x", best["stage, 1 proc"]), ("8x", scaled["stage, 1 proc"])):
        print(f"stage, 1 proc, {label}: {result['in_encode_batch']:.1%} of its wall time inside "
              "GPT1Tokenizer.encode_batch (the rest: hashing, planning, reading, packing, writing)")
    print("peak RSS: ru_maxrss of the process, or of the largest of parent and workers (on Linux a spawned worker's "
          "ru_maxrss starts at its parent's RSS at spawn time, so that figure is an upper bound)")
    print(json.dumps({"best": best, "scaled_8x": scaled}))
    figures: dict = {}
    for name, result in best.items():
        figures[name] = {"vs_raw_1x": result["tokens"] / result["seconds"] / raw_rate}
        if name in scaled:
            big = scaled[name]
            figures[name]["vs_raw_8x"] = big["tokens"] / big["seconds"] / raw_rate
            figures[name]["rss_growth_8x"] = (max(big["self_mb"], big["largest_child_mb"])
                                              / max(result["self_mb"], result["largest_child_mb"]))
    figures["in_encode_batch_1x"] = best["stage, 1 proc"]["in_encode_batch"]
    record(figures)
    if not args.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
