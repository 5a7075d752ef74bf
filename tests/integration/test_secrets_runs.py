"""Secrets and stores that can never work, through the real processes: a pre-training run whose tracking URI
carries a password leaves it in no file of its work folder or spool and in no line it prints, while its workers
still reach the server with it (from their environment); a `file:` store is refused before any worker starts;
the config a flow hands to a deployment holds no credentials. The in-process cases, one per input form:
tests/unit/test_secrets.py."""

from __future__ import annotations

import json
import subprocess

from gpt1.config import load_config
from gpt1.tracking.logger import tracking_uri
from tiny_pretraining import TIMEOUT, data, env, pretrain_args, run  # noqa: F401 (data: a fixture)

from gpt1.runtime.processes import free_port

SECRET = "Plant3d-s3cret-7"


def test_a_pretraining_run_writes_and_prints_no_credential(data, tmp_path, monkeypatch):
    server = f"127.0.0.1:{free_port()}"  # down: every call is spooled
    monkeypatch.setenv("GPT1_MLFLOW_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("GPT1_MLFLOW_FLUSH_TIMEOUT", "0")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", SECRET)
    out = tmp_path / "run"
    done = run(pretrain_args(data, out, steps=2, sets=[f"tracking.tracking_uri=http://alice:{SECRET}@{server}"]),
               tmp_path / "log.txt")
    assert done.returncode == 0
    config = json.loads((out / "config.json").read_text())
    assert config["tracking"]["tracking_uri"] == f"http://***@{server}"  # which server, not how to log in
    spooled = [json.loads(path.read_text()) for path in (tmp_path / "spool").glob("mlflow-undelivered-*.json")]
    assert spooled and {s["tracking_uri"] for s in spooled} == {f"http://***@{server}"}  # the workers logged
    leaked = [str(path) for path in tmp_path.rglob("*") if path.is_file() and SECRET.encode() in path.read_bytes()]
    assert not leaked  # the log, the work folder, the spool


def test_a_file_store_is_refused_before_any_worker_starts(data, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(pretrain_args(data, out, steps=2), env={**env(), "MLFLOW_TRACKING_URI": f"file://{tmp_path}"},
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "MLFLOW_TRACKING_URI=file://" in line and "sqlite:///" in line
    assert not (out / "config.json").exists()


def test_a_deployment_s_config_parameter_holds_no_credential(monkeypatch):
    from flows.pipeline import _parameter

    full = f"http://alice:{SECRET}@mlflow.internal:5000"
    cfg = load_config("smoke", [f"tracking.tracking_uri={full}"])
    parameter = _parameter(cfg)
    assert SECRET not in json.dumps(parameter)
    # the flow run on the other side: the pool's environment holds the full URI
    received = load_config("smoke", [f"tracking.tracking_uri={parameter['tracking']['tracking_uri']}"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", full)
    assert tracking_uri(received.tracking.tracking_uri) == full
