"""`make gpu-check` as CI can run it: its data prepared from scratch, then every check on CPUs at a tiny shape
(`scripts/gpu_check.py run --cpu`), one line each; and the random-token shards its GPT-1-shape runs read."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from gpt1.data.tokenize import BlockReader, load_manifest, verify_shards
from gpt1.data.tokenize.write import write_random_shards
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu_check.py"
CHECKS = ["environment", "pretrain eager micro 4", "pretrain eager micro 16", "loss parity", "resume", "finetune",
          "hf parity"]


def test_random_shards_are_read_like_tokenized_ones(tmp_path):
    manifest = write_random_shards(tmp_path, vocab_size=40481, n_ctx=32, rows={"train": 100, "val": 10},
                                   shard_rows=64, seed=3)
    assert load_manifest(tmp_path) == manifest and manifest["dtype"] == "uint16"
    assert [s["rows"] for s in manifest["splits"]["train"]["shards"]] == [64, 36]
    assert verify_shards(tmp_path, full=True)["shards"] == 3  # every id below the vocabulary, every hash right
    blocks = np.stack([BlockReader(tmp_path, "train", shuffle=False)[i].numpy() for i in range(100)])
    assert blocks.shape == (100, 33) and blocks.max() < 40481 and len(np.unique(blocks)) > 2000
    again = write_random_shards(tmp_path / "again", vocab_size=40481, n_ctx=32, rows={"train": 100, "val": 10},
                                shard_rows=64, seed=3)
    assert again["key"] == manifest["key"]  # the same seed, the same shards


def test_checks_refuse_to_start_without_prepared_data(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--prepared", str(tmp_path), "--cpu"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "make gpu-check-prepare" in done.stderr


@pytest.mark.slow
def test_cpu_dry_run_passes_every_check_from_freshly_prepared_data(tmp_path):
    prepared = tmp_path / "gpu-check"
    prep = subprocess.run([sys.executable, str(SCRIPT), "prepare", "--out", str(prepared), "--gpt1-rows", "256"],
                          capture_output=True, text=True, timeout=900)
    assert prep.returncode == 0, prep.stdout[-2000:] + prep.stderr[-2000:]
    assert load_manifest(prepared / "data" / "shards-gpt1")["vocab_size"] == 40481

    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--prepared", str(prepared), "--cpu"],
                          capture_output=True, text=True, timeout=1200)
    lines = [line for line in done.stdout.splitlines() if line and not line.startswith("gpu-check ")]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert [line[:28].strip() for line in lines] == [*CHECKS, "total"]
    assert all(line[29:33].strip() == "ok" for line in lines)
    results = json.loads((prepared / "run-cpu" / "results.json").read_text())["checks"]
    assert results["pretrain eager micro 16"]["tokens_per_s"] > 0 and results["resume"]["first_update_identical"]
    assert results["finetune"]["device"] == "cpu" and results["hf parity"]["max_abs_logit_difference"] < 1e-4
