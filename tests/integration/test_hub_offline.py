"""The cluster reads the hub from its cache only: what tells a user, before a run, that the cache lacks a task.

Filling the cache needs the hub, which these machines cannot reach; what runs here is the offline side: the fill
script's `--check` and preflight, each in a fresh process with the offline switches set (the hub libraries read
them when imported), against a cache that lacks the run's tasks or holds a folder for them that does not load.
"""

from __future__ import annotations

import os
import subprocess
import sys

from gpt1 import tasks
from gpt1.config import load_config
from gpt1.finetune.train import held_out_splits
from tests.conftest import REPO

PRESET = "mini"  # its tasks come from the hub (finetune.data: hf)


def offline_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PREFECT_", "MLFLOW_"))}
    return {**env, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "PREFECT_HOME": str(tmp_path / "prefect"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"}


def test_the_fill_check_names_every_split_the_cache_lacks(tmp_path):
    run = subprocess.run([sys.executable, "scripts/fill_hub_cache.py", "--preset", PRESET, "--check"],
                         cwd=REPO, env=offline_env(tmp_path), capture_output=True, text=True, timeout=120)
    missing = [line for line in run.stdout.splitlines() if line.startswith("missing ")]
    wanted = [f"{t}/{s}" for t in load_config(PRESET).finetune.tasks
              for s in ["train", *held_out_splits(tasks.get(t))]]
    assert run.returncode == 2, run.stderr
    assert [line.split()[1] for line in missing] == wanted
    assert f"0 of {len(wanted)} hub task splits in the cache" in run.stdout
    assert "ingest.source hf:" in run.stdout and "not cached" in run.stdout  # mini streams its books


def test_preflight_offline_refuses_a_cache_folder_that_does_not_load_the_run_s_tasks(tmp_path):
    # a cache folder for the repository (another revision, an interrupted download) is not the data itself
    (tmp_path / "hf" / "hub" / "datasets--nyu-mll--glue").mkdir(parents=True)
    run = subprocess.run([sys.executable, "-m", "gpt1.cli", "preflight", "--preset", PRESET, "--no-services",
                          "--work", str(tmp_path / "w")],
                         cwd=tmp_path, env=offline_env(tmp_path), capture_output=True, text=True, timeout=180)
    problems = [line for line in run.stdout.splitlines() if line.startswith("problem: ")]
    assert run.returncode == 2, run.stdout + run.stderr
    for task in load_config(PRESET).finetune.tasks:
        assert any(f"finetune {task}/train:" in p and "does not load from the local Hugging Face cache" in p
                   and "fill_hub_cache.py" in p for p in problems), (task, problems)
