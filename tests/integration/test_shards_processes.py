"""The tokenize stage across processes: the bytes do not depend on the worker count, a killed run resumes with only
the missing work, one huge document is tokenized in bounded memory, a failed write is one line and resumable."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpora import corpus_dir, docs, make_docs, shard_bytes, tokenizer, tricky_text, write_corpus  # noqa: F401
from fs_faults import file_size_limit
from gpt1.data.tokenize import load_manifest, tokenize_corpus
from gpt1.tokenizer import bpe


def test_bytes_do_not_depend_on_workers_or_partitioning(tmp_path, corpus_dir, tokenizer):
    a = tokenize_corpus(corpus_dir, tokenizer, tmp_path / "a", n_ctx=15, shard_rows=4, workers=1,
                        show_progress=False)
    b = tokenize_corpus(corpus_dir, tokenizer, tmp_path / "b", n_ctx=15, shard_rows=4, workers=2,
                        show_progress=False, partition_bytes=300)
    assert a == b
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")


def test_resume_after_kill_finishes_only_missing_work(tmp_path, caplog):
    docs = {"train": [make_docs(4, seed=10 + i, words=600) for i in range(16)], "val": [make_docs(4, seed=99)]}
    root = write_corpus(tmp_path / "corpus", docs)
    bpe.train(docs["train"][0], merges=300, show_progress=False).save(tmp_path / "tok")
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    settings = {"n_ctx": 63, "shard_rows": 16, "show_progress": False}
    command = [sys.executable, "-m", "gpt1.cli", "tokenize", "--corpus", str(root), "--tokenizer",
               str(tmp_path / "tok"), "--out", str(killed), "--ctx", "63", "--shard-rows", "16", "--workers", "2",
               "--no-progress"]
    proc = subprocess.Popen(command, start_new_session=True)
    first_shard = killed / "train" / "shard-00000.arrow"
    deadline = time.monotonic() + 120
    while not first_shard.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its pool workers
    proc.wait()
    assert first_shard.exists(), "the run ended before writing a shard"
    assert not (killed / "manifest.json").exists(), "the run finished before it could be killed"
    survivors = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in killed.rglob("shard-*.arrow")}

    with caplog.at_level("INFO", logger="gpt1.data.tokenize"):
        resumed = tokenize_corpus(root, tmp_path / "tok", killed, workers=1, **settings)
    assert "resuming" in caplog.text
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in survivors} == survivors  # not rewritten
    assert resumed == tokenize_corpus(root, tmp_path / "tok", reference, **settings)
    assert shard_bytes(killed) == shard_bytes(reference)
    assert len(resumed["splits"]["train"]["shards"]) > len(survivors)


def one_document_corpus(root: Path, chars: int) -> int:
    """A corpus whose train split is one document of about `chars` characters in paragraphs; its length."""
    rng = random.Random(0)
    paragraphs, size = [], 0
    while size < chars:
        paragraph = tricky_text(rng, lines=8).replace("\n\n", "\n")
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    document = "\n\n".join(paragraphs)
    write_corpus(root, {"train": [[document]], "val": [make_docs(3, seed=1)]})
    return len(document)


def peak_rss_growth(tmp_path: Path, chars: int, encode_chars: int) -> tuple[int, float]:
    """(characters, peak RSS growth in bytes) of a fresh process tokenizing a one-document corpus."""
    corpus, out = tmp_path / f"corpus-{chars:.0f}", tmp_path / f"out-{chars:.0f}"
    chars = one_document_corpus(corpus, chars)
    if not (tmp_path / "tok").exists():
        bpe.train(make_docs(50, seed=1), merges=100, show_progress=False).save(tmp_path / "tok")
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report this test's own size.
    script = (
        "import re, sys\n"
        "from pathlib import Path\n"
        "from gpt1.data.tokenize import tokenize_corpus\n"
        "from gpt1 import tokenizer\n"
        "peak = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1))\n"
        "tok = tokenizer.load(sys.argv[2])\n"
        "tok.encode_batch(['warm up the thread pool'] * 64)\n"
        "before = peak()\n"
        "tokenize_corpus(sys.argv[1], tok, sys.argv[3], n_ctx=63, shard_rows=512, show_progress=False,\n"
        "                encode_chars=int(sys.argv[4]))\n"
        "print(before, peak())\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(corpus), str(tmp_path / "tok"), str(out),
                           str(encode_chars)], capture_output=True, text=True,
                          env={**os.environ, "RAYON_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = map(int, done.stdout.split())
    return chars, (after - before) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak RSS from /proc")
def test_one_huge_document_is_tokenized_in_bounded_memory(tmp_path):
    # Encoded whole, HF tokenizers holds over 100 bytes per character (benchmarks/bench_tokenize_memory.py); in
    # pieces of 64K characters that is a fixed few MB, and what grows with the document is its text.
    (small, small_peak), (large, large_peak) = (peak_rss_growth(tmp_path, n, 1 << 16) for n in (1e6, 4e6))
    per_char = (large_peak - small_peak) / (large - small)
    assert per_char < 15, f"{per_char:.1f} bytes of peak RSS per character of the document"


def test_a_failed_write_is_one_line_and_the_rerun_resumes(tmp_path):
    docs = {"train": [make_docs(30, seed=20 + i, words=400) for i in range(4)], "val": [make_docs(4, seed=98)]}
    root = write_corpus(tmp_path / "corpus", docs)
    bpe.train(docs["train"][0], merges=200, show_progress=False).save(tmp_path / "tok")
    command = [sys.executable, "-m", "gpt1.cli", "tokenize", "--corpus", str(root), "--tokenizer",
               str(tmp_path / "tok"), "--out", str(tmp_path / "out"), "--ctx", "63", "--shard-rows", "16",
               "--workers", "1", "--no-progress"]
    # a shard is 2 KB: the first shards fit, a partition's token file (~20 KB) does not
    failed = subprocess.run(command, capture_output=True, text=True, preexec_fn=file_size_limit(16_000))
    assert failed.returncode == 2, failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert "Traceback" not in failed.stderr and last.startswith("gpt1 tokenize: error: ")
    assert f"no space left to write {tmp_path / 'out'}" in last and "re-run the same command to resume" in last
    assert not list((tmp_path / "out").rglob(".*.tmp-*"))  # no half-written file left
    resumed = subprocess.run(command, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    reference = tokenize_corpus(root, tmp_path / "tok", tmp_path / "ref", n_ctx=63, shard_rows=16,
                                show_progress=False)
    assert load_manifest(tmp_path / "out") == reference
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "ref")
