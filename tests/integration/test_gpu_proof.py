"""`make gpu-proof-cpu`: the GPU proof run's one command (scripts/gpu_proof.py) rehearsed on CPUs, end to end.

`prepare --cpu` runs the first stages on the shared data (the books' first 2M characters with the three tasks'
train text and the leak check, a 500-merge tokenizer) and packs them as they travel to the GPU host; `run --cpu`
restores them, tokenizes, pre-trains a 2x64 model for 20 updates through DeepSpeed, fine-tunes STS-B, SST-2 and
MRPC (200 train rows each) pre-trained and from scratch with three seeds in two reused worker processes, and makes
the report, writing OUT as it goes. The same code path as the GPU run, at a size two cores run in minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA, shared_path

SCRIPT = REPO / "scripts" / "gpu_proof.py"
sys.path.insert(0, str(SCRIPT.parent))
import gpu_proof  # noqa: E402

TASKS = {"stsb": "pearson", "sst2": "accuracy", "mrpc": "accuracy"}  # the preset's headline
SEEDS = 3


def test_run_refuses_folders_that_are_not_prepared(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--cpu", "--prepared", str(tmp_path / "none"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "make gpu-proof-prepare" in done.stderr


@pytest.mark.slow
def test_cpu_rehearsal_proves_the_command_end_to_end(tmp_path):
    for part in ("books", "books-more", *(f"glue-full/{f}" for f in ("STS-B", "SST-2", "MRPC"))):
        shared_path(*part.split("/"))
    prepared, out, work = tmp_path / "prepared", tmp_path / "out", tmp_path / "work"

    prep = subprocess.run([sys.executable, str(SCRIPT), "prepare", "--cpu", "--data", str(SHARED_DATA), "--out",
                           str(prepared)], capture_output=True, text=True, timeout=1200)
    assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    assert "of the 64.0 MiB a device call carries" in prep.stdout
    assert gpu_proof.tree_bytes(prepared) < gpu_proof.LIMIT_BYTES
    meta = json.loads((prepared / "prepared.json").read_text())
    assert meta["mode"] == "cpu" and meta["books"] == 272 and set(meta["tasks"]) == set(TASKS)
    assert meta["corpus"]["origins"]["task_text"]["characters"] > 0
    assert sum(meta["corpus"]["leak_check"]["sentences_removed"].values()) > 0  # the dev/test sentences went
    assert not (prepared / "wheels").exists()  # the rehearsal runs in this venv

    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--cpu", "--prepared", str(prepared), "--out",
                           str(out), "--work", str(work)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    # OUT: what a device call brings back (at most 8 files, none in a folder)
    assert {p.name for p in out.iterdir()} == set(gpu_proof.OUT_FILES)

    # the pipeline's steps, each recorded as it ended; the report made before the last fine-tune ended, then again
    progress = json.loads((out / "progress.json").read_text())
    steps = progress["steps"]
    finetunes = {name: step for name, step in steps.items() if name.startswith("finetune-")}
    assert len(finetunes) == len(TASKS) * 2 * SEEDS and all(s["status"] == "ok" for s in finetunes.values())
    assert {steps[name]["status"] for name in ("ingest", "train-tokenizer")} == {"cached"}  # restored, not redone
    assert steps["tokenize"]["status"] == steps["pretrain"]["status"] == steps["report"]["status"] == "ok"
    assert all(s["device"] == "cpu" and s["train_examples"] == 200 for s in finetunes.values())
    assert progress["finished"] and progress["failures"] == {}
    log = (out / "gpu-proof.log").read_text()
    interim, final = log.index("report: interim"), log.index("report: final")
    assert interim < final
    last_finetune = max(s["ended_at"] for s in finetunes.values())
    first_report = float(log[:interim].rsplit("[", 1)[1].split("s]")[0])
    assert first_report < last_finetune  # results came in while fine-tunes still ran

    # pre-training: its metrics, and the language model beside the n-gram baselines
    training = json.loads((out / "pretrain-training.json").read_text())
    assert training["steps"] == 20
    model = training["language_model"]
    assert model["val_loss"] > 0 and 0 < model["bigram_loss"] < model["unigram_loss"]
    assert (out / "pretrain-metrics.jsonl").read_text().count("\n") >= 20
    composition = json.loads((out / "shards-manifest.json").read_text())["composition"]
    assert composition["train_tokens"]["task_text"] > 0 and composition["train_tokens"]["corpus"] > 0

    # the report: pre-trained minus from scratch over three seeds, with intervals, beside the baselines
    results = json.loads((out / "results.json").read_text())
    assert set(results["baselines"]) == set(TASKS)
    assert all(b["train_rows"] == 200 for b in results["baselines"].values())
    [compared] = results["comparisons"]
    assert compared["runs"] == {"pretrained": ["full", "full_seed1", "full_seed2"],
                                "from_scratch": ["no_pretrain", "no_pretrain_seed1", "no_pretrain_seed2"]}
    head = compared["headline"]
    assert head["tasks"] == TASKS and head["low"] <= head["difference"] <= head["high"] and head["verdict"]
    for task, metric in TASKS.items():
        entry = compared["tasks"][task]
        assert entry["metric"] == metric and entry["seeds"] == [SEEDS, SEEDS]
        assert entry["low"] <= entry["difference"] <= entry["high"]
    assert [s["seed"] for s in compared["per_seed"]] == [0, 1, 2]
    assert all(s["low"] <= s["difference"] <= s["high"] for s in compared["per_seed"])
    assert compared["pretraining"]["corpus"]["train_tokens"]["task_text"] > 0
    assert compared["pretraining"]["language_model"]["bigram_loss"] == pytest.approx(model["bigram_loss"])
    markdown = (out / "results.md").read_text()
    for line in ("**headline mean**", "**Per seed**", "**Pre-training corpus**", "task text",
                 "**Pre-training quality**", "interpolated bigram", "non-neural baseline"):
        assert line in markdown, line
    assert "headline: full (3 seeds) minus no_pretrain (3 seeds):" in done.stdout
