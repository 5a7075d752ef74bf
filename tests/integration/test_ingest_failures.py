"""Ingestion under failures: killed runs, live concurrent runs, an unreachable hub, unwritable and full disks."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time

import pytest
from fs_faults import file_size_limit, read_only
from corpora import book, rows, write

from gpt1.cli import main as cli_main
from gpt1.data.ingest import clean as C
from gpt1.data.ingest import ingest as I
from gpt1.io import read_json

HOST = socket.gethostname()


def gpt1_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpt1.cli", *args]


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def random_books(folder, n: int, chars: int, seed: int = 0):
    """`n` books of `chars` characters of random words: cleaning keeps them, zstd cannot shrink them much."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    texts = {}
    for i in range(n):
        text = []
        while sum(map(len, text)) < chars:
            text.append(" ".join(rng.choice(words) for _ in range(60)) + ".\n\n")
        texts[f"{i:04d}.txt"] = "".join(text)
    return write(folder, texts)


def ingest_cli(src, out, *extra: str) -> int:
    return cli_main(["ingest", "--source", str(src), "--out", str(out), "--no-progress", *extra])


@pytest.mark.slow  # kills a real `gpt1 ingest` while it builds
def test_a_killed_runs_folder_is_removed_by_the_next_run(tmp_path):
    src = random_books(tmp_path / "src", 400, 20_000)
    out = tmp_path / "corpus"
    proc = subprocess.Popen(gpt1_command("ingest", "--source", str(src), "--out", str(out), "--no-progress"),
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".corpus.tmp-*/train/*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    left = list(tmp_path.glob(".corpus.tmp-*"))
    assert left == [tmp_path / f".corpus.tmp-{proc.pid}"], "the run was not killed while building"
    assert not out.exists()

    assert ingest_cli(src, out) == 0  # the lock died with the killed run: its leftovers are known dead
    assert not left[0].exists() and sum(read_json(out / "stats.json")["documents"].values()) == 400
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["corpus", "src"]


def test_a_live_runs_folder_is_never_touched(tmp_path, capsys):
    """Only the holder of the output's lock builds or cleans; while it lives, another run is refused."""
    from gpt1.stages import outputs

    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(3)})
    out = tmp_path / "corpus"
    live = tmp_path / f".corpus.tmp-{os.getpid() + 1}"
    (live / "train").mkdir(parents=True)
    holder = outputs.lock(out, wait=False)  # as a live `gpt1 ingest` holds it
    try:
        assert ingest_cli(src, out) == 2 and "is being written by another process" in capsys.readouterr().err
        assert live.is_dir() and not out.exists()
    finally:
        holder.release()
    assert ingest_cli(src, out) == 0 and not live.exists()  # once it is gone, its folder is a leftover


def test_a_corpus_moved_aside_by_a_killed_swap_is_restored(tmp_path, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(4)})
    out = tmp_path / "corpus"
    assert ingest_cli(src, out) == 0
    before = read_json(out / "stats.json")
    aside = tmp_path / f".corpus.old-{dead_pid()}"
    os.replace(out, aside)  # killed between moving the old corpus aside and renaming the new one in

    def must_not_run(text, **options):
        raise AssertionError("the restored corpus was rebuilt")

    monkeypatch.setattr(I, "clean", must_not_run)
    assert ingest_cli(src, out) == 0  # put back, found finished: not rebuilt
    assert not aside.exists() and read_json(out / "stats.json") == before and len(rows(out)) == 4

    (tmp_path / f".corpus.old-{dead_pid()}").mkdir()  # killed after the swap, before deleting the old one
    monkeypatch.setattr(I, "clean", C.clean)
    assert ingest_cli(src, out) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["corpus", "src"]


def test_an_unreachable_hub_dataset_is_one_line_saying_how_to_supply_it(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-cache")}
    spec = "hf:nobody/absent-corpus@0123abc:validation"
    done = subprocess.run(gpt1_command("ingest", "--source", spec, "--out", str(tmp_path / "out"), "--no-progress"),
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"gpt1 ingest: error: {spec}: cannot fetch it from the Hugging Face Hub")
    assert "save_to_disk(DIR)" in lines[0] and "revision='0123abc'" in lines[0] and "hf:DIR:validation" in lines[0]
    assert not (tmp_path / "out").exists()


def test_an_unwritable_output_folder_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(3)})
    (tmp_path / "locked").mkdir()

    def must_not_run(text, **options):
        raise AssertionError("work started")

    monkeypatch.setattr(I, "clean", must_not_run)
    with read_only(tmp_path / "locked"):
        code = cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "locked" / "corpus"),
                         "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "cannot write" in err and str(tmp_path / "locked") in err


@pytest.mark.slow  # a real `gpt1 ingest` whose writes fail
def test_a_failed_write_keeps_the_previous_corpus(tmp_path):
    out = tmp_path / "corpus"
    assert ingest_cli(write(tmp_path / "small", {"a.txt": book(1), "b.txt": book(2)}), out) == 0
    before = read_json(out / "stats.json")
    src = random_books(tmp_path / "big", 20, 30_000)  # ~600 KB of text: its first Parquet part is > 100 KB
    done = subprocess.run(gpt1_command("ingest", "--source", str(src), "--out", str(out), "--no-progress",
                                       "--force"),  # another source's corpus: replaced only on request
                          capture_output=True, text=True, preexec_fn=file_size_limit(100_000))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpt1 ingest: error: ") and f"no space left to write {tmp_path}" in last  # a file-size limit
    assert read_json(out / "stats.json") == before and len(rows(out)) == 2  # the previous corpus, whole
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["big", "corpus", "small"]
