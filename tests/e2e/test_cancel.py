"""Cancelling a flow run for real: a process worker runs the `gpt1` flow against the session's Prefect and MLflow
servers (tests/conftest.py `services`), `prefect flow-run cancel` stops it mid pre-training, and then:

- the flow run is Cancelled and so is every step it interrupted (none Crashed, none left Running);
- no process of the run is left and no stage lock is held;
- its MLflow parent run and the stage runs it interrupted are KILLED, not FAILED or RUNNING;
- a re-run of the same parameters completes, pre-training resuming from the checkpoint the cancelled run saved.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

POOL = "cancel-check"
# A small model pre-trained for long enough to be stopped mid-way (a minute or more, longer than a cancellation
# takes to arrive), checkpointed every 100 updates: what a re-run resumes from.
STEPS = 3000
OVERRIDES = ["model.n_layer=1", "model.n_embd=64", "model.n_head=2", "model.d_ff=128", "model.n_ctx=64",
             "train_tokenizer.merges=300", f"pretrain.max_steps={STEPS}", "pretrain.global_batch_size=8",
             "pretrain.save_every=100",
             f"pretrain.eval_every={STEPS}", f"pretrain.probe_every={STEPS}", "pretrain.probe_max_examples=8",
             "finetune.tasks=[sst2]", "finetune.max_train_examples=32", "finetune.max_eval_examples=16",
             "finetune.epochs=1"]
DEPLOYMENT = f"""
name: cancel-check
prefect-version: 3.8.8
deployments:
  - name: {POOL}
    entrypoint: flows.pipeline:gpt1_pipeline
    parameters: {{preset: smoke}}
    work_pool: {{name: {POOL}, work_queue_name: default}}
    pull: []
"""


@pytest.fixture(scope="module")
def stand(services, tmp_path_factory):
    """A work dir, the deployment gpt1/cancel-check on a pool of its own and a process worker for it."""
    root = tmp_path_factory.mktemp("cancel")
    (root / "prefect.yaml").write_text(DEPLOYMENT)
    env = {**services, "GPT1_WORK_DIR": str(root / "work")}
    up = shell(env, f"worker_up {POOL} cancel-worker && prefect --no-prompt deploy --prefect-file "
                    f"{root / 'prefect.yaml'} -n {POOL}", timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    try:
        yield env, root / "work"
    finally:
        shell(env, "worker_down cancel-worker", timeout=120)


def shell(env: dict, commands: str, timeout: float) -> subprocess.CompletedProcess:
    """`commands` in bash with scripts/services.sh sourced (its URLs, PATH to the test's venv, state dir)."""
    script = f"source {REPO / 'scripts' / 'services.sh'} && export PATH=$BIN:$PATH && {commands}"
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def server(env: dict):
    """Prefect's settings for the session's server, its API auth included."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    return temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{env['GPT1_PREFECT_PORT']}/api",
                               PREFECT_API_AUTH_STRING: env.get("PREFECT_API_AUTH_STRING")})


def prefect(env: dict):
    """A Prefect client of the session's server."""
    from prefect import get_client

    with server(env):
        return get_client(sync_client=True)


def start_run(env: dict) -> str:
    from prefect.deployments import run_deployment

    with server(env):
        return str(run_deployment(f"gpt1/{POOL}", parameters={"overrides": OVERRIDES}, timeout=0).id)


def flow_run(env: dict, run_id: str) -> dict:
    """The flow run's state and its task runs' states, by name."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with prefect(env) as client:
        run = client.read_flow_run(run_id)
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    return {"state": run.state.type.value, "tasks": {t.name: t.state.type.value for t in tasks}}


def wait_for(what: str, condition, timeout: float = 900):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(3)
    return found


def held_locks(work: Path) -> list[str]:
    """Stage lock files someone still holds (an exclusive flock that cannot be taken)."""
    held = []
    for path in work.rglob(".*.lock"):
        with open(path, "rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(str(path))
    return held


def test_a_cancelled_run_stops_cleanly_and_the_next_one_takes_over(stand, monkeypatch):
    env, work = stand
    first = start_run(env)
    checkpoints = lambda: list(work.glob("pretrain/*/checkpoints/step-*/COMPLETE"))  # noqa: E731
    wait_for("pre-training's first checkpoint", checkpoints)
    assert flow_run(env, first)["tasks"].get("pretrain") == "RUNNING"

    cancel = shell(env, f"prefect flow-run cancel {first}", timeout=120)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    final = wait_for("the flow run to end", lambda: (r := flow_run(env, first))["state"] in
                     ("CANCELLED", "FAILED", "CRASHED", "COMPLETED") and r, timeout=300)
    assert final["state"] == "CANCELLED", final
    assert final["tasks"]["pretrain"] == "CANCELLED", final
    assert not {name: s for name, s in final["tasks"].items() if s in ("RUNNING", "CRASHED", "PENDING")}, final

    time.sleep(5)  # the worker reaps the flow's process
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes of the cancelled run still running: {left}"
    assert held_locks(work) == []

    from mlflow.tracking import MlflowClient

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):  # the stack's MLflow asks for a login
        monkeypatch.setenv(name, env[name])
    mlflow = MlflowClient(f"http://127.0.0.1:{env['GPT1_MLFLOW_PORT']}")
    experiment = mlflow.get_experiment_by_name("gpt1-smoke")
    [parent] = mlflow.search_runs([experiment.experiment_id], f"tags.`prefect.flow_run_id` = '{first}'")
    assert parent.info.status == "KILLED"
    children = mlflow.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert not [c.info.run_name for c in children if c.info.status in ("RUNNING", "FAILED")], \
        [(c.info.run_name, c.info.status) for c in children]
    stopped_at = max(int(p.parent.name.split("-")[1]) for p in checkpoints())

    second = start_run(env)
    done = wait_for("the re-run to end", lambda: (r := flow_run(env, second))["state"] in
                    ("CANCELLED", "FAILED", "CRASHED", "COMPLETED") and r, timeout=1200)
    assert done["state"] == "COMPLETED", done
    log = (Path(env["GPT1_STATE"]) / "logs" / "cancel-worker.log").read_text(errors="replace")
    assert f"resumed from {next(work.glob('pretrain/*/checkpoints'))}/step-{stopped_at:08d}" in log, log[-3000:]
