"""Peak memory of `gpt1.data.ingest` on the shared books vs the same corpus scaled up: does it stream?

The limit: peak RSS on SCALE x the corpus must stay within 1.2x of the peak on 1x (memory must not grow with
corpus size). The scaled corpus holds SCALE distinct copies of every book: copy k has a line "Copy k." inserted
in the middle of the body, so dedup keeps all of them and every copy is cleaned and written like a new book.
Each ingestion runs in a fresh process that reports its own peak RSS; a process that only imports the stage gives
the fixed cost. Throughput is per CPU second (the machine is shared, wall time is not comparable).

Live data does not grow with the corpus, but allocators keep freed memory: glibc raises its mmap threshold after
freeing a large block (so later book-sized strings come from a heap that fragments) and Arrow's default mimalloc
pool holds on to pages. The "tuned" runs pin both (MALLOC_MMAP_THRESHOLD_, ARROW_DEFAULT_MEMORY_POOL=system) to
show how much of the growth is allocator retention rather than the stage.

    python benchmarks/bench_ingest_memory.py                    # 1x vs 8x of ../shared/data/books
    python benchmarks/bench_ingest_memory.py --scale 4 --format jsonl --allocators default   # rows, not files
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

from results import record

REPO = Path(__file__).resolve().parents[1]
BOOKS = REPO.parent / "shared" / "data" / "books"
LIMIT = 1.2
ALLOCATORS = {"default": {}, "tuned": {"MALLOC_MMAP_THRESHOLD_": "131072", "ARROW_DEFAULT_MEMORY_POOL": "system"}}


def scaled_corpus(books: Path, out: Path, scale: int, fmt: str) -> int:
    """Write `scale` distinct copies of every book to `out` (as .txt files, or one jsonl row per line of each
    copy); returns the bytes written."""
    out.mkdir(parents=True)
    total = 0
    jsonl = open(out / "books.jsonl", "w", encoding="utf-8") if fmt == "jsonl" else None
    for book in sorted(books.glob("*.txt")):
        data = book.read_bytes()
        middle = data.index(b"\n", len(data) // 2) + 1
        for k in range(scale):
            copy = data[:middle] + f"Copy {k}.\n".encode() + data[middle:]
            total += len(copy)
            if jsonl is None:
                (out / f"{k}-{book.name}").write_bytes(copy)
            else:  # sentence-per-row like hub BooksCorpus; the stage decodes files, rows arrive as text
                text = copy.decode("utf-8-sig", errors="replace")
                jsonl.writelines(json.dumps({"text": line}) + "\n" for line in text.splitlines())
    if jsonl is not None:
        jsonl.close()
    return total


def child(source: str | None, out: str) -> None:
    """Run in a fresh process: ingest (or only import, when `source` is None) and print what it cost."""
    from gpt1.config import IngestConfig
    from gpt1.data.ingest.ingest import BOOKCORPUS_ROWS_PER_DOC, ingest

    cpu, stats = time.process_time(), None
    if source:  # rows are grouped into documents as for hub BooksCorpus
        rows_per_doc = BOOKCORPUS_ROWS_PER_DOC if source.endswith(".jsonl") else None
        stats = ingest(IngestConfig(source=source, rows_per_doc=rows_per_doc), out, show_progress=False)
    print(json.dumps({
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_seconds": time.process_time() - cpu,
        "documents": sum(stats["documents"].values()) if stats else 0,
        "characters": sum(stats["characters"].values()) if stats else 0,
    }))


def measure(source: str | None, out: Path, allocators: str) -> dict:
    args = [sys.executable, __file__, "--child", source or "", str(out)]
    env = {**os.environ, **ALLOCATORS[allocators]}
    done = subprocess.run(args, check=True, capture_output=True, text=True, cwd=REPO, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=Path, default=BOOKS)
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--format", choices=("txt", "jsonl"), default="txt")
    parser.add_argument("--allocators", choices=("default", "tuned", "both"), default="both")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0] or None, args.child[1])

    configs = list(ALLOCATORS) if args.allocators == "both" else [args.allocators]
    results: dict[tuple[str, str], tuple[int, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        tmp = Path(tmp)
        for config in configs:
            results[config, "imports only"] = (0, measure(None, tmp / "none", config))
        for scale in (1, args.scale):
            src = tmp / f"src{scale}"
            size = scaled_corpus(args.books, src, scale, args.format)
            source = str(src / "books.jsonl") if args.format == "jsonl" else str(src)
            for config in configs:
                results[config, f"{scale}x"] = (size, measure(source, tmp / f"corpus-{config}-{scale}", config))
            shutil.rmtree(src)

    print(f"ingest, {args.format} source: peak RSS vs corpus size ({args.books})")
    print(f"{'allocators':>10} {'run':>13} {'input MB':>9} {'documents':>9} {'CPU s':>7} {'MB/CPU s':>8} "
          f"{'peak RSS MB':>11}")
    for (config, name), (size, r) in sorted(results.items(), key=lambda kv: configs.index(kv[0][0])):
        rate = f"{size / 1e6 / r['cpu_seconds']:8.2f}" if size else f"{'-':>8}"
        print(f"{config:>10} {name:>13} {size / 1e6:9.1f} {r['documents']:9d} {r['cpu_seconds']:7.1f} {rate} "
              f"{r['peak_rss_mb']:11.1f}")
    figures = {}
    for config in configs:
        growth = results[config, f"{args.scale}x"][1]["peak_rss_mb"] / results[config, "1x"][1]["peak_rss_mb"]
        verdict = "within" if growth < LIMIT else "OVER"
        print(f"{config} allocators: peak RSS growth {args.scale}x / 1x corpus = {growth:.3f}x "
              f"({verdict} the {LIMIT}x limit)")
        figures[config] = {"peak_rss_mb_1x": results[config, "1x"][1]["peak_rss_mb"],
                           f"peak_rss_mb_{args.scale}x": results[config, f"{args.scale}x"][1]["peak_rss_mb"],
                           "growth": growth, "limit": LIMIT}
    record(figures)


if __name__ == "__main__":
    main()
