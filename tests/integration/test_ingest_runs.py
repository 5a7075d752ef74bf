"""Corpus ingestion runs on small sources: duplicates, unusable files, malformed rows, parquet and hub-layout
folders, a deterministic train/val split, part sizes, a crash, reruns, the unwrap setting in the stage, the CLI and
the pipeline keys. Cleaning, hub specs and early refusals: tests/unit/test_ingest.py."""

from __future__ import annotations

import itertools
import json
import re
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpora import book, rows, write

from gpt1 import recipe
from gpt1.cli import main as cli_main
from gpt1.config import IngestConfig, load_config
from gpt1.data.ingest import clean as C
from gpt1.data.ingest import ingest as I
from gpt1.data.ingest import stage as ingest_stage
from gpt1.data.ingest.corpus import split_files
from gpt1.io import InputError, OutputError, read_json
from gpt1.stages.outputs import DONE
from tests.unit.test_ingest import NAMES, STORY, VERSE, stage

def test_duplicates_are_dropped_after_cleaning(tmp_path):
    src = write(tmp_path / "src", {"a.txt": book(1), "b.txt": book(1), "c.txt": book(2),
                                   "d.txt": b"\xef\xbb\xbf" + book(1).replace("\n", "\r\n").encode()})
    stats = I.ingest(IngestConfig(source=str(src)), tmp_path / "out", show_progress=False)
    assert stats["duplicates"]["count"] == 2 and stats["duplicates"]["examples"] == ["b.txt", "d.txt"]
    assert sorted(r["source"] for r in rows(tmp_path / "out")) == ["a.txt", "c.txt"]
    stats = I.ingest(IngestConfig(source=str(src / "[bc].txt")), tmp_path / "glob", show_progress=False)  # a glob picks files
    assert stats["duplicates"]["count"] == 0 and sum(stats["documents"].values()) == 2


def test_unusable_files_are_rejected_and_the_run_continues(tmp_path):
    src = write(tmp_path / "src", {"good.txt": book(1), "bin.txt": b"PK\x03\x04\x00\x00binary",
                                   "bad.txt": b"\x81\x81\x81", "blank.txt": " \n\r\n\t", "short.txt": "Hi."})
    stats = I.ingest(IngestConfig(source=str(src), min_doc_chars=10), tmp_path / "out", show_progress=False)
    assert {r: t["examples"] for r, t in stats["rejects"].items()} == {
        "binary": ["bin.txt"], "undecodable": ["bad.txt"], "empty": ["blank.txt"], "too_short": ["short.txt"]}
    assert [r["source"] for r in rows(tmp_path / "out")] == ["good.txt"]


def test_a_source_without_documents_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no input files"):
        stage(write(tmp_path / "empty", {}), tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        stage(tmp_path / "missing" / "*.txt", tmp_path / "out")
    with pytest.raises(InputError, match="no documents.*binary: 1"):
        stage(write(tmp_path / "bin", {"x.txt": b"\x00\x01"}), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_jsonl_rows_with_malformed_lines_counted(tmp_path):
    lines = [json.dumps({"text": f"row {i} " * 5, "id": i}) for i in range(200)]
    lines[50] = '{"text": "unterminated'
    lines[120] = json.dumps({"body": "no text field"})
    lines[150] = json.dumps({"text": None})
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    with pytest.raises(InputError, match=r"rows.jsonl:51.*3 of 200 rows are malformed"):
        I.ingest(IngestConfig(source=str(path)), tmp_path / "bad", show_progress=False)
    lines[150] = json.dumps({"text": "fine now"})
    path.write_text("\n".join(lines) + "\n")
    stats = I.ingest(IngestConfig(source=str(path)), tmp_path / "out", show_progress=False)
    assert stats["malformed_rows"]["count"] == 2 and stats["inputs"]["rows"] == 200
    assert [(e["line"], e["error"][:12]) for e in stats["malformed_rows"]["examples"]] == [
        (51, "invalid JSON"), (121, "no 'text' fi")]
    assert sum(stats["documents"].values()) == 198
    assert {r["source"] for r in rows(tmp_path / "out")} >= {f"{path}:1", f"{path}:200"}


def test_parquet_rows_with_a_named_column_and_grouping(tmp_path):
    texts = [f"sentence {i} ." for i in range(150)]
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"body": texts[:4] + [None] + texts[4:]}), path, row_group_size=64)
    stats = I.ingest(IngestConfig(source=str(path), text_column="body", rows_per_doc=4, val_fraction=0), tmp_path / "out", show_progress=False)
    got = rows(tmp_path / "out")
    # grouped rows keep one per line, though these lowercase lines would read as wrapped prose
    assert len(got) == 38 and [r["text"] for r in got[:2]] == ["\n".join(texts[0:4]), "\n".join(texts[4:8])]
    assert stats["unwrapped"] == {"paragraphs": 0, "lines_joined": 0, "paragraphs_kept": 0}
    assert got[1]["source"] == f"{path}:6-9" and got[-1]["source"] == f"{path}:150-151"  # row 5 was null
    assert stats["malformed_rows"]["examples"] == [{"file": str(path), "line": 5, "error": "'body' is null"}]


def test_hf_source_on_local_folders(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hub_like"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(7)))
    stats = I.ingest(IngestConfig(source=f"hf:{folder}:train", rows_per_doc=3, val_fraction=0), tmp_path / "a", show_progress=False)
    assert [r["source"] for r in rows(tmp_path / "a")] == [f"{folder}:train:{s}" for s in ("1-3", "4-6", "7")]
    assert stats["inputs"]["rows"] == 7 and stats["settings"]["rows_per_doc"] == 3
    with pytest.raises(InputError, match=r"\[body\].*no column 'body' \(columns: text\)"):
        I.ingest(IngestConfig(source=f"hf:{folder}", text_column="body"), tmp_path / "b", show_progress=False)

    saved = tmp_path / "saved"
    texts = [f"row {i}" for i in range(120)]
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"text": texts + [None]})}).save_to_disk(
        str(saved))
    stats = I.ingest(IngestConfig(source=f"hf:{saved}:validation", val_fraction=0), tmp_path / "c", show_progress=False)
    assert [r["text"] for r in rows(tmp_path / "c")] == texts
    assert stats["malformed_rows"]["count"] == 1
    assert stats["source_hash"] == I.HFSource(f"hf:{saved}:validation").fingerprint()
    assert stats["source_hash"] != I.HFSource(f"hf:{saved}:train").fingerprint()  # same files, other split
    with pytest.raises(ValueError, match="no split 'train'"):
        I.ingest(IngestConfig(source=f"hf:{saved}"), tmp_path / "d", show_progress=False)


def _assignment(corpus):
    return {r["source"]: split for split in ("train", "val") for r in rows(corpus, split)}


def test_split_is_deterministic_and_stable_when_documents_are_added(tmp_path):
    src = write(tmp_path / "src", {f"{i:02d}.txt": book(i) for i in range(40)})
    first = I.ingest(IngestConfig(source=str(src), val_fraction=0.3, split_seed=7), tmp_path / "a", show_progress=False)
    again = I.ingest(IngestConfig(source=str(src), val_fraction=0.3, split_seed=7), tmp_path / "b", show_progress=False)
    assert _assignment(tmp_path / "a") == _assignment(tmp_path / "b")
    assert first["content_hash"] == again["content_hash"]
    assert 0 < first["documents"]["val"] < 40

    write(src, {f"{i:02d}.txt": book(i) for i in range(40, 50)})
    I.ingest(IngestConfig(source=str(src), val_fraction=0.3, split_seed=7), tmp_path / "c", show_progress=False)
    grown = _assignment(tmp_path / "c")
    assert {name: grown[name] for name in _assignment(tmp_path / "a")} == _assignment(tmp_path / "a")

    I.ingest(IngestConfig(source=str(src), val_fraction=0.3, split_seed=8), tmp_path / "d", show_progress=False)
    assert _assignment(tmp_path / "d") != grown


def test_val_floor_and_part_size(tmp_path):
    src = write(tmp_path / "src", {f"{i:02d}.txt": book(i) for i in range(25)})
    stats = I.ingest(IngestConfig(source=str(src), val_fraction=1e-9), tmp_path / "out", rows_per_part=10, show_progress=False)
    assert stats["documents"] == {"train": 24, "val": 1} and stats["val_floor_applied"]
    assert [p["rows"] for p in stats["parts"]["train"]] == [10, 10, 4]
    assert [p.name for p in split_files(tmp_path / "out", "train")] == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert not list((tmp_path / "out").rglob(".*"))  # no temporary files left behind
    one = I.ingest(IngestConfig(source=str(src / "00.txt")), tmp_path / "one", show_progress=False)
    assert one["documents"] == {"train": 1, "val": 0}


def test_crash_leaves_no_corpus_and_keeps_the_previous_one(tmp_path, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(5)})
    out = tmp_path / "out"
    calls = itertools.count()

    def crash_on_third(text, **options):
        if next(calls) == 2:
            raise RuntimeError("simulated crash")
        return C.clean(text, **options)

    monkeypatch.setattr(I, "clean", crash_on_third)
    with pytest.raises(RuntimeError, match="simulated"):
        stage(src, out)
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == ["src"]

    monkeypatch.setattr(I, "clean", C.clean)
    before = read_json(stage(src, out).path / "stats.json")
    calls = itertools.count()
    monkeypatch.setattr(I, "clean", crash_on_third)
    with pytest.raises(RuntimeError):
        ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(split_seed=1)).run(
            out, wait=False, force=True)  # new settings over the old corpus: a rebuild, which crashes
    assert read_json(out / "stats.json") == before and len(rows(out)) == 5  # the previous corpus, whole
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["out", "src"]


def test_rerun_skips_a_finished_corpus_and_rebuilds_on_change(tmp_path, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(5)})
    out = tmp_path / "corpus"
    first = stage(src, out)

    def must_not_run(text, **options):
        raise AssertionError("a finished corpus was rebuilt")

    monkeypatch.setattr(I, "clean", must_not_run)
    assert stage(src, out).cached
    monkeypatch.setattr(I, "clean", C.clean)
    with pytest.raises(OutputError, match="other inputs or settings"):
        stage(src, out, min_doc_chars=2)  # another corpus in this folder: replaced only on request
    changed = ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(min_doc_chars=2))
    assert changed.run(out, wait=False, force=True).key != first.key
    (src / "0.txt").write_text(book(99))  # the source changed: its key, hence the stage's
    assert ingest_stage.source_key(str(src)) != changed.source_key
    edited = ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(min_doc_chars=2))
    assert not edited.run(out, wait=False, force=True).cached
    assert any("number 99" in r["text"] for r in rows(out))
    with pytest.raises(ValueError, match="inside the source folder"):
        stage(src, src / "corpus")  # its own parquet parts would become input


def test_unwrap_lines_setting_in_the_stage_cli_stats_and_pipeline_keys(tmp_path, capsys):
    wrapped = textwrap.fill(STORY, 70)
    src = write(tmp_path / "src", {"a.txt": f"CHAPTER I\n\n{wrapped}\n\n{VERSE}\n",
                                   "b.jsonl": json.dumps({"text": textwrap.fill(NAMES, 66)}) + "\n"})
    breaks = wrapped.count("\n") + textwrap.fill(NAMES, 66).count("\n")
    assert cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "on"), "--no-progress"]) == 0
    assert (f"hard-wrapped lines joined: {breaks} line breaks in 2 paragraphs; 1 multi-line paragraphs kept"
            in capsys.readouterr().out)
    on = read_json(tmp_path / "on" / "stats.json")
    assert on["settings"]["unwrap_lines"] and on["unwrapped"] == {"paragraphs": 2, "lines_joined": breaks,
                                                                 "paragraphs_kept": 1}
    assert sorted(r["text"] for r in rows(tmp_path / "on")) == sorted([f"CHAPTER I\n\n{STORY}\n\n{VERSE}", NAMES])

    assert cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "off"), "--no-unwrap-lines",
                     "--no-progress"]) == 0
    assert "hard-wrapped" not in capsys.readouterr().out
    off = read_json(tmp_path / "off" / "stats.json")
    assert read_json(tmp_path / "off" / DONE)["key"] != read_json(tmp_path / "on" / DONE)["key"]
    assert off["unwrapped"] == {"paragraphs": 0, "lines_joined": 0, "paragraphs_kept": 0}
    assert sorted(r["text"] for r in rows(tmp_path / "off")) == sorted([f"CHAPTER I\n\n{wrapped}\n\n{VERSE}",
                                                                        textwrap.fill(NAMES, 66)])
    # in the pipeline the setting is part of the ingest key, so changing it re-runs ingestion and what follows
    plans = [recipe.plan(load_config("smoke", [f"ingest.unwrap_lines={value}"]), tmp_path / "work")
             for value in ("true", "false")]
    assert plans[0].ref("sample-data").key == plans[1].ref("sample-data").key
    assert all(plans[0].ref(s).key != plans[1].ref(s).key for s in ("ingest", "tokenize"))


def test_cli_ingest_prints_a_summary(tmp_path, capsys):
    src = write(tmp_path / "src", {"a.txt": book(1), "b.txt": book(2), "c.txt": book(1), "x.txt": b"\x00"})
    code = cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "out"), "--val-fraction", "0.5",
                     "--seed", "3", "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0
    assert re.search(r"documents: \d train \+ \d val", printed) and "1 duplicates" in printed
    assert "rejected (binary): 1, e.g. x.txt" in printed
    assert read_json(tmp_path / "out" / "stats.json")["settings"]["split_seed"] == 3
    assert cli_main(["ingest", "--source", str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")]) == 2
    assert "no input files" in capsys.readouterr().err
