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
from test_ingest import book, rows, write

from gpt1.cli import main as cli_main
from gpt1.data import clean as C
from gpt1.data import ingest as I
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


@pytest.mark.slow  # kills a real `gpt1 ingest` while it builds
def test_a_killed_runs_folder_is_removed_by_the_next_run(tmp_path):
    src = random_books(tmp_path / "src", 400, 20_000)
    out = tmp_path / "corpus"
    proc = subprocess.Popen(gpt1_command("ingest", "--source", str(src), "--out", str(out), "--no-progress"),
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".corpus.build-*/train/*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    left = list(tmp_path.glob(".corpus.build-*"))
    assert left == [tmp_path / f".corpus.build-{HOST}-{proc.pid}"], "the run was not killed while building"
    assert not out.exists()

    stats = I.ingest(str(src), out, show_progress=False)
    assert not left[0].exists() and sum(stats["documents"].values()) == 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "src"]


def test_folders_of_live_or_unknown_runs_are_kept(tmp_path):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(3)})
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        live = tmp_path / f".corpus.build-{HOST}-{sleeper.pid}"
        elsewhere = tmp_path / ".corpus.build-another-host-1"  # a run on another machine sharing the folder
        stale = [tmp_path / f".corpus.build-{HOST}-{dead_pid()}", tmp_path / f".corpus.tmp-{dead_pid()}"]
        for folder in (live, elsewhere, *stale):
            (folder / "train").mkdir(parents=True)
        unknown = tmp_path / f".corpus.build-{HOST}-{dead_pid()}-x"  # not a name this module writes
        unknown.mkdir()
        I.ingest(str(src), tmp_path / "corpus", show_progress=False)
        assert live.is_dir() and elsewhere.is_dir() and unknown.is_dir()
        assert not any(folder.exists() for folder in stale)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_folder_whose_pid_was_reused_by_a_later_process_is_stale(tmp_path):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(3)})
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        folder = tmp_path / f".corpus.build-{HOST}-{sleeper.pid}"
        folder.mkdir()
        an_hour_ago = time.time() - 3600
        os.utime(folder, (an_hour_ago, an_hour_ago))  # made by an earlier process that had the same id
        I.ingest(str(src), tmp_path / "corpus", show_progress=False)
        assert not folder.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_corpus_moved_aside_by_a_killed_swap_is_restored(tmp_path, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(4)})
    out = tmp_path / "corpus"
    before = I.ingest(str(src), out, show_progress=False)
    aside = tmp_path / f".corpus.old-{HOST}-{dead_pid()}"
    os.replace(out, aside)  # killed between moving the old corpus aside and renaming the new one in

    def must_not_run(text, **options):
        raise AssertionError("the restored corpus was rebuilt")

    monkeypatch.setattr(I, "clean", must_not_run)
    assert I.ingest(str(src), out, show_progress=False) == before
    assert not aside.exists() and len(rows(out)) == 4

    (tmp_path / f".corpus.old-{HOST}-{dead_pid()}").mkdir()  # killed after the swap, before deleting the old one
    monkeypatch.setattr(I, "clean", C.clean)
    I.ingest(str(src), out, show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "src"]


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
    assert code == 2 and len(err.splitlines()) == 1 and f"{tmp_path / 'locked'}: cannot write here" in err


@pytest.mark.slow  # a real `gpt1 ingest` whose writes fail
def test_a_failed_write_keeps_the_previous_corpus(tmp_path):
    out = tmp_path / "corpus"
    before = I.ingest(str(write(tmp_path / "small", {"a.txt": book(1), "b.txt": book(2)})), out, show_progress=False)
    src = random_books(tmp_path / "big", 20, 30_000)  # ~600 KB of text: its first Parquet part is > 100 KB
    done = subprocess.run(gpt1_command("ingest", "--source", str(src), "--out", str(out), "--no-progress"),
                          capture_output=True, text=True, preexec_fn=file_size_limit(100_000))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpt1 ingest: error: ") and "cannot write" in last
    assert last.endswith(f"the corpus already at {out} is unchanged")
    assert read_json(out / "stats.json") == before and len(rows(out)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big", "corpus", "small"]  # nothing half-built left
