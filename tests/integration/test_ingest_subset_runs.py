"""Deterministic subsets of a large corpus (ingest.max_documents / ingest.max_chars) ingested, streamed, from a
jsonl file and from local copies in the hub's layouts: a `save_to_disk` folder and a parquet repo folder
(data/<split>-00000-of-00001.parquet); and by `gpt1 ingest` as its own process. The limits' checks:
tests/unit/test_ingest_subset.py."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpora import rows

from gpt1.config import IngestConfig
from gpt1.data.ingest import ingest as I
from gpt1.io import InputError
from tests.unit.test_ingest_subset import TEXTS, jsonl  # noqa: F401 (jsonl: a fixture)


@pytest.fixture(scope="module")
def parquet_repo(tmp_path_factory):
    """A hub dataset repo as downloaded: data/<split>-00000-of-00001.parquet, several row groups."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "data").mkdir()
    pq.write_table(pa.table({"text": TEXTS}), repo / "data" / "train-00000-of-00001.parquet", row_group_size=500)
    pq.write_table(pa.table({"text": TEXTS[:40]}), repo / "data" / "validation-00000-of-00001.parquet")
    return repo


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """`datasets.DatasetDict.save_to_disk`, as a user would copy a hub dataset to an offline machine."""
    datasets = pytest.importorskip("datasets")
    folder = tmp_path_factory.mktemp("saved") / "dataset"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": TEXTS}),
                          "validation": datasets.Dataset.from_dict({"text": TEXTS[:40]})}).save_to_disk(str(folder))
    return folder


def kept(corpus) -> list[str]:
    """The corpus's documents in source order (both splits)."""
    return sorted((r["text"] for r in rows(corpus)), key=TEXTS.index)


def test_max_documents_keeps_the_first_ones_and_reads_no_further(tmp_path, jsonl):
    stats = I.ingest(IngestConfig(source=str(jsonl), max_documents=10, val_fraction=0.2), tmp_path / "ten", show_progress=False)
    assert kept(tmp_path / "ten") == TEXTS[:10]
    assert stats["inputs"]["rows"] == 10 and stats["subset"] == {"max_documents": 10, "max_chars": None,
                                                                 "limit_reached": True}
    more = I.ingest(IngestConfig(source=str(jsonl), max_documents=40, val_fraction=0.2), tmp_path / "forty", show_progress=False)
    assert kept(tmp_path / "forty") == TEXTS[:40] and more["subset"]["max_documents"] == 40
    # a larger subset only adds documents; the ones both hold sit in the same split
    val_10 = {r["text"] for r in rows(tmp_path / "ten", "val")}
    val_40 = {r["text"] for r in rows(tmp_path / "forty", "val")}
    assert val_10 == val_40 & set(TEXTS[:10])


def test_max_chars_keeps_whole_documents_up_to_the_limit(tmp_path, jsonl):
    limit = sum(map(len, TEXTS[:25])) + len(TEXTS[25]) - 1  # the 26th does not fit
    stats = I.ingest(IngestConfig(source=str(jsonl), max_chars=limit, val_fraction=0), tmp_path / "out", show_progress=False)
    assert kept(tmp_path / "out") == TEXTS[:25]
    assert sum(stats["characters"].values()) <= limit and stats["inputs"]["rows"] == 26
    both = I.ingest(IngestConfig(source=str(jsonl), max_chars=limit, max_documents=5), tmp_path / "both", show_progress=False)
    assert sum(both["documents"].values()) == 5  # whichever limit comes first
    with pytest.raises(InputError, match=rf"max_chars=10 keeps no document: the first one \({jsonl}:1\) has "):
        I.ingest(IngestConfig(source=str(jsonl), max_chars=10), tmp_path / "none", show_progress=False)


def test_without_limits_everything_is_read(tmp_path, jsonl):
    stats = I.ingest(IngestConfig(source=str(jsonl)), tmp_path / "out", show_progress=False)
    assert stats["inputs"]["rows"] == len(TEXTS) and not stats["subset"]["limit_reached"]
    exact = I.ingest(IngestConfig(source=str(jsonl), max_documents=len(TEXTS)), tmp_path / "exact", show_progress=False)
    assert sum(exact["documents"].values()) == len(TEXTS)


@pytest.mark.parametrize("layout", ["parquet_repo", "saved"])
def test_hub_layouts_stream_a_subset_through_the_hub_code_path(tmp_path, layout, request):
    folder = request.getfixturevalue(layout)
    stats = I.ingest(IngestConfig(source=f"hf:{folder}", max_documents=7), tmp_path / "train", show_progress=False)
    assert kept(tmp_path / "train") == TEXTS[:7] and stats["inputs"]["rows"] == 7
    assert stats["source"] == f"hf:{folder}" and stats["settings"]["max_documents"] == 7
    validation = I.ingest(IngestConfig(source=f"hf:{folder}:validation", max_chars=10**9), tmp_path / "val", show_progress=False)
    assert kept(tmp_path / "val") == TEXTS[:40] and not validation["subset"]["limit_reached"]


def test_cli_subset_from_a_parquet_repo_folder(tmp_path, parquet_repo):
    done = subprocess.run([sys.executable, "-m", "gpt1.cli", "ingest", "--source", f"hf:{parquet_repo}:train",
                           "--out", str(tmp_path / "out"), "--max-documents", "12", "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "subset: source read up to the limit (max_documents=12)" in done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr  # the stream closed cleanly
    assert kept(tmp_path / "out") == TEXTS[:12]
