"""`gpt1 preflight` against a real Prefect server (the shared `services` fixture): a missing deployment and a work
pool with no worker are found before any GPU is held. The checks without a server: tests/unit/test_preflight.py."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import REPO


def test_missing_deployments_pools_and_workers_are_found_on_a_real_server(services, tmp_path):
    """Against a real Prefect server: a deployment that is not there, a pool without a worker."""
    env = {**services, "PREFECT_API_URL": f"http://127.0.0.1:{services['GPT1_PREFECT_PORT']}/api",
           "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    prefect = [sys.executable, "-m", "prefect"]
    subprocess.run([*prefect, "work-pool", "create", "preflight-idle", "--type", "process"], env=env, check=True,
                   capture_output=True)
    spec = yaml.safe_load((REPO / "pipelines.yaml").read_text())
    for deployment in spec["deployments"]:
        deployment["work_pool"] = {"name": "preflight-idle", "work_queue_name": "default"}
    rendered = tmp_path / "pipelines.yaml"
    rendered.write_text(yaml.safe_dump(spec))
    subprocess.run([*prefect, "--no-prompt", "deploy", "--prefect-file", str(rendered), "-n", "gpu"], env=env,
                   check=True, capture_output=True, cwd=REPO)  # the fan-out target only
    done = subprocess.run([sys.executable, "-m", "gpt1.cli", "preflight", "--preset", "cluster", "--set",
                           "ingest.source=sample", "--set", "finetune.data=sample", "--work", str(tmp_path / "w")],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "deployment gpt1-pretrain/gpu-node does not exist" in done.stdout
    assert "work pool preflight-idle has no worker online" in done.stdout
