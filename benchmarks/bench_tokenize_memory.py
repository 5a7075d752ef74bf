"""Peak memory of `gpt1 tokenize` per character of one very large document: encoded in pieces (the stage's
default) vs encoded whole (what the stage did before), on a ~27 MB one-document corpus and a smaller one, in one
run.

Corpus: the shared books joined into one document (paragraphs kept; CRLF, BOMs and all), written straight in the
corpus.py layout; the smaller corpus is its first --small-mb MB, cut at a paragraph. Tokenizer: the original
GPT-1 vocabulary (as bench_tokenize.py). Each measurement runs `tokenize_corpus` (one worker, RAYON_NUM_THREADS
--threads) in a fresh process that reports its peak RSS (VmHWM: ru_maxrss would include the parent's size, which
Linux carries across exec) before and after tokenizing. Bytes per character: the growth of the peak between the
two corpora divided by their difference in characters (fixed costs cancel), and the growth over the process's
starting peak divided by the document's characters. The whole-document runs get an address-space limit of
--limit-gb so that a failing run fails alone; how it ended is printed.

    python benchmarks/bench_tokenize_memory.py --small-mb 3 --threads 2
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from results import record  # noqa: E402

WHOLE = 1 << 40  # encode_chars larger than any document: every document encoded whole


def one_document_corpus(books: Path, out: Path, max_chars: int | None) -> int:
    """The shared books joined into one document (the first `max_chars` characters, cut after a blank line)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpt1.data.ingest import corpus
    from gpt1.data.ingest.clean import decode
    from gpt1.io import write_json

    text = "\n\n".join(decode(p.read_bytes())[0] for p in sorted(books.glob("*.txt")))
    if max_chars is not None and len(text) > max_chars:
        text = text[:text.rfind("\n\n", 0, max_chars) + 2]
    for split, docs in (("train", [text]), ("val", ["a short validation document ."])):
        (out / split).mkdir(parents=True)
        table = pa.table({"id": [str(len(d)) for d in docs], "source": [split] * len(docs), "text": docs},
                         schema=corpus.SCHEMA)
        pq.write_table(table, out / split / "part-00000.parquet")
    write_json(out / corpus.STATS_FILE, {"documents": 2})
    return len(text)


def vm_hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(corpus: str, tokenizer_dir: str, out: str, encode_chars: int) -> None:
    from gpt1.tokenizer import bpe
    from gpt1.data.tokenize import tokenize_corpus

    tok = bpe.load(tokenizer_dir)
    tok.encode_batch(["start the thread pool"] * 64)
    before, started, cpu = vm_hwm_bytes(), time.perf_counter(), time.process_time()
    manifest = tokenize_corpus(corpus, tok, out, n_ctx=512, shard_rows=1024, show_progress=False,
                               encode_chars=encode_chars)
    print(json.dumps({"before": before, "after": vm_hwm_bytes(), "seconds": time.perf_counter() - started,
                      "cpu_seconds": time.process_time() - cpu, "tokens": manifest["totals"]["tokens"]}))


def measure(corpus: Path, tokenizer_dir: Path, out: Path, encode_chars: int, threads: int,
            limit_gb: float | None) -> dict:
    def limit() -> None:
        if limit_gb is not None:
            cap = int(limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, __file__, "--child", str(corpus), str(tokenizer_dir), str(out),
                           str(encode_chars)], capture_output=True, text=True, preexec_fn=limit,
                          env={**os.environ, "RAYON_NUM_THREADS": str(threads)})
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"failed": f"exit {done.returncode}: {last[:150]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-mb", type=float, default=3.0, help="size of the smaller one-document corpus")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit-gb", type=float, default=6.0, help="address-space limit of whole-document runs")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child[:3], int(args.child[3]))

    from bench_tokenize import SHARED, gpt1_tokenizer

    from gpt1.data.tokenize import ENCODE_CHARS

    if not (SHARED / "books").is_dir():
        sys.exit(f"shared books not found at {SHARED / 'books'} (set GPT1_SHARED_DATA)")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="bench_tokmem-"))
    try:
        sizes = {"small": one_document_corpus(SHARED / "books", work / "small", int(args.small_mb * 1e6)),
                 "large": one_document_corpus(SHARED / "books", work / "large", None)}
        gpt1_tokenizer(work / "small").save(work / "tok")
        results = {}
        for mode, encode_chars, limit_gb in (("pieces", ENCODE_CHARS, None), ("whole", WHOLE, args.limit_gb)):
            for name in ("small", "large"):
                results[mode, name] = measure(work / name, work / "tok", work / f"out-{mode}-{name}", encode_chars,
                                              args.threads, limit_gb)

        print(f"load at start: {load}")
        print(f"one-document corpora: small {sizes['small']:,} characters, large {sizes['large']:,} characters; "
              f"encode calls of up to {ENCODE_CHARS:,} characters; RAYON_NUM_THREADS={args.threads}")
        print(f"{'mode':<8}{'corpus':<8}{'peak before MB':>15}{'peak after MB':>15}{'bytes/char':>12}{'seconds':>9}"
              f"{'CPU s':>8}")
        for (mode, name), r in results.items():
            if "failed" in r:
                print(f"{mode:<8}{name:<8}  {r['failed']}")
                continue
            per_char = (r["after"] - r["before"]) / sizes[name]
            print(f"{mode:<8}{name:<8}{r['before'] / 2**20:>15.0f}{r['after'] / 2**20:>15.0f}{per_char:>12.1f}"
                  f"{r['seconds']:>9.1f}{r['cpu_seconds']:>8.1f}")
        figures: dict = {"large_chars": sizes["large"]}
        for mode in ("pieces", "whole"):
            small, large = results[mode, "small"], results[mode, "large"]
            if "failed" in small or "failed" in large:
                continue
            slope = ((large["after"] - large["before"]) - (small["after"] - small["before"])) / (
                sizes["large"] - sizes["small"])
            print(f"{mode}: {slope:.1f} bytes of peak RSS per additional character (large vs small)")
            figures[f"{mode}_bytes_per_char"] = slope
        print(f"load at end: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
        for (mode, name), r in results.items():
            figures[f"{mode}_{name}_peak_mb"] = r["after"] / 2**20 if "failed" not in r else "failed"
        record(figures)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
