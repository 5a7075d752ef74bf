"""Real stages run by the CLI and by the pipeline: one key for an edited local dataset folder, the tokenizer's
stats written whoever runs it. The output policy on a stand-in stage: tests/unit/test_stages.py."""

from __future__ import annotations

import json
from pathlib import Path

from gpt1 import recipe
from gpt1.cli import main as cli
from gpt1.config import load_config
from gpt1.io import read_json
from gpt1.pipeline.run import run_step
from gpt1.stages.outputs import DONE


def save_local_hub_dataset(path: Path, texts: list[str]) -> None:
    import datasets

    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(path))


def test_editing_a_local_dataset_folder_reruns_ingestion_through_the_cli_and_the_pipeline(tmp_path):
    """The bug this design removes: a local `hf:` folder was fingerprinted by content in one layer and by name in
    another, so an edited folder kept its stale corpus. Now both paths take the stage's own key."""
    books = [f"Chapter {i}. It was a bright cold day in April, and the clocks were striking {i}." for i in range(40)]
    data = tmp_path / "hub-copy"
    save_local_hub_dataset(data, books)
    source = f"hf:{data}"
    out = tmp_path / "corpus"
    argv = ["ingest", "--source", source, "--out", str(out), "--no-progress", "--val-fraction", "0.1"]
    assert cli(argv) == 0
    first = read_json(out / DONE)
    plan = recipe.plan(load_config("smoke", [f"ingest.source={source}", "ingest.val_fraction=0.1"]), tmp_path / "work")
    assert plan.ref("ingest").key == first["key"]  # one fingerprint everywhere
    assert not run_step(plan, "ingest").cached and run_step(plan, "ingest").cached

    save_local_hub_dataset(data, [*books, "A new chapter, added after the first ingestion."])
    edited = recipe.plan(load_config("smoke", [f"ingest.source={source}", "ingest.val_fraction=0.1"]), tmp_path / "work")
    assert edited.ref("ingest").key != first["key"]
    result = run_step(edited, "ingest")  # what the flow's ingest task runs
    assert not result.cached and sum(result.marker["stats"]["documents"].values()) == 41
    assert cli([*argv, "--force"]) == 0  # the CLI's folder holds the old corpus: replaced on request
    assert read_json(out / DONE)["key"] == result.key
    assert sum(read_json(out / "stats.json")["documents"].values()) == 41


def test_the_tokenizer_stage_writes_its_stats_whoever_runs_it(tmp_path):
    """Before, only the CLI wrote tokenizer_stats.json, so a flow run never logged them."""
    plan = recipe.plan(load_config("smoke", ["train_tokenizer.merges=100"]), tmp_path / "work")
    for stage in ("sample-data", "ingest"):
        run_step(plan, stage)
    result = run_step(plan, "train-tokenizer")
    stats = json.loads((result.path / "tokenizer_stats.json").read_text())
    assert stats["merges_requested"] == 100 and 0 < stats["merges"] <= 100
    assert result.marker["stats"]["vocab_size"] == stats["vocab_size"]
    by_hand = tmp_path / "by-hand"
    assert cli(["train-tokenizer", "--corpus", str(plan.dir("ingest")), "--out", str(by_hand), "--merges", "100",
                "--expect-key", plan.ref("train-tokenizer").key]) == 0
    assert (by_hand / "tokenizer.json").read_bytes() == (result.path / "tokenizer.json").read_bytes()
