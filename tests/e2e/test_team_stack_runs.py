"""Runs the team stack has to carry without a human (tests/conftest.py `team_stack`), at a tiny size on a pool and
worker of their own:

- Schedules: a deployment with `full`'s concurrency limit and schedule (pipelines.yaml), firing every INTERVAL s,
  turned on with the documented command (scripts/schedule.py), is run by the server's scheduler and the worker
  alone, on the folders of a clean run started by hand. The first fired run reuses every stage (its stage records
  all older than it); after a task file changes the next firing redoes only that task's fine-tune and the report.
  Firings never overlap (one that comes while a run runs is cancelled).
- Faults, one after another during one run: PostgreSQL stopped and started again, the Prefect server restarted,
  the MLflow server killed while an artifact uploads, the S3 server down. Each starts while the run runs; it
  completes; what an outage kept from MLflow past the flush timeout is spooled and `gpt1 replay-spool` delivers
  it; then what the run logged (runs, params, metrics, artifacts and models in the bucket) is what a clean run of
  the same settings logged: docs/failure-behaviour.md, "The team stack".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.team_stack import TINY_SMOKE

pytestmark = pytest.mark.slow

POOL = "stack-runs"
INTERVAL = 15  # seconds between two firings: shorter than a run that redoes a fine-tune
TASKS = ("sst2", "cola")


def tiny_overrides(data: Path) -> list[str]:
    """The tiny smoke recipe at a shorter context, on two tasks of a task folder of our own, with no ablation."""
    return [*TINY_SMOKE, "model.n_ctx=32", f"finetune.tasks=[{','.join(TASKS)}]", "orchestration.ablations=[]",
            f"finetune.data={data}"]


def deployments(root: Path, data: Path) -> Path:
    """`stack-schedule` (full's concurrency limit and schedule, every INTERVAL s, shipped off) and `stack-faults`,
    both the tiny recipe on POOL."""
    spec = yaml.safe_load((REPO / "pipelines.yaml").read_text())
    [full] = [d for d in spec["deployments"] if d["name"] == "full"]
    common = {"entrypoint": full["entrypoint"], "work_pool": {"name": POOL, "work_queue_name": "default"},
              "pull": []}
    schedule = {**common, "name": "stack-schedule", "concurrency_limit": full["concurrency_limit"],
                "schedules": [{"interval": INTERVAL, "active": False}],
                "parameters": {"preset": "smoke", "overrides": tiny_overrides(data),
                               "work_dir": str(root / "scheduled")}}
    faults = {**common, "name": "stack-faults", "parameters": {"preset": "smoke", "overrides": tiny_overrides(data)}}
    path = root / "prefect.yaml"
    path.write_text(yaml.safe_dump({"name": "stack-runs", "prefect-version": "3.8.8",
                                    "deployments": [schedule, faults]}))
    return path


def shell(env: dict, commands: str, timeout: float = 600) -> subprocess.CompletedProcess:
    script = f"source {REPO / 'scripts' / 'services.sh'} && export PATH=$BIN:$PATH && {commands}"
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def stand(team_stack, services, sample_tasks, tmp_path_factory):
    """A task folder of our own (a copy of the sample tasks), both deployments, and a worker for POOL with the
    production flush timeout (the tests' 3 s would spool what a short outage delays)."""
    root = tmp_path_factory.mktemp("stack-runs")
    data = root / "tasks"
    shutil.copytree(sample_tasks, data)
    env = {**services, "GPT1_MLFLOW_FLUSH_TIMEOUT": "120", "GPT1_MLFLOW_SPOOL_DIR": str(root / "spool")}
    up = shell(env, f"worker_up {POOL} stack-runs-worker && prefect --no-prompt deploy --prefect-file "
                    f"{deployments(root, data)} -n stack-schedule -n stack-faults", timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    try:
        yield env, root, data
    finally:
        schedule(env, "off")
        shell(env, "worker_down stack-runs-worker", timeout=180)


@pytest.fixture(scope="module")
def clean_run(stand, team_stack):
    """A run of the tiny recipe no fault met, started by hand: (its flow run, what it logged to MLflow). Its work dir
    is the scheduled deployment's."""
    env, root, _ = stand
    run = team_stack.prefect.wait_for_end(start_run(team_stack, root / "scheduled")["id"])
    assert run["state_type"] == "COMPLETED", run["state"]
    return run, mlflow_record(team_stack, run["id"])


# -- schedules --------------------------------------------------------------------------------------------------------
def test_a_schedule_fires_without_a_human_and_its_runs_reuse_what_is_cached(stand, clean_run, team_stack):
    """Two fired runs on the clean run's folders: the first reuses every stage (all its stage records are older than
    it); after a task file changes the second redoes that task's fine-tune and the report only. A firing while one
    runs is cancelled, and no two ever ran at once."""
    env, root, data = stand
    api = team_stack.prefect
    train = next((data / "SST-2").glob("train.tsv"))
    original = train.read_bytes()
    try:
        said = schedule(env, "on")
        assert f"every {INTERVAL} s on" in said, said
        first = wait_for_runs(api, "gpt1/stack-schedule", completed=1, timeout=900)[0]
        schedule(env, "off")
        settle(api, "gpt1/stack-schedule")
        before = stage_records(root / "scheduled")
        assert {r["stage"] for r in before.values()} >= {"ingest", "train-tokenizer", "tokenize", "pretrain",
                                                         "finetune", "report"}
        made_by_first = [f for f, r in before.items() if r["finished"] >= when(first["start_time"])]
        assert made_by_first == [], made_by_first

        # a task file changes between firings: only its fine-tune and the report are redone
        lines = original.decode().splitlines()
        train.write_text("\n".join([*lines, lines[-1]]) + "\n")
        schedule(env, "on")
        second = wait_for_runs(api, "gpt1/stack-schedule", completed=2, timeout=900)[1]
        schedule(env, "off")
        runs = settle(api, "gpt1/stack-schedule")
    finally:
        train.write_bytes(original)  # the faults' run compares itself with the clean run, on the same files
    after = stage_records(root / "scheduled")
    redone = {(r["stage"], r.get("task")) for f, r in after.items() if r["finished"] >= when(second["start_time"])}
    assert redone == {("finetune", "sst2"), ("report", None)}, redone
    kept = {f: r for f, r in before.items() if (r["stage"], r.get("task")) not in redone}
    assert {f: after.get(f) for f in kept} == kept

    assert first["auto_scheduled"] and second["auto_scheduled"]
    assert [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")] == [], runs
    ran = sorted((r for r in runs if r["run_count"]), key=lambda r: r["start_time"])
    for earlier, later in zip(ran, ran[1:]):  # never two at once on the same folders
        assert when(earlier["end_time"]) <= when(later["start_time"]), (earlier["name"], later["name"])
    assert any(r["state_type"] == "CANCELLED" and not r["run_count"] for r in runs), \
        [(r["name"], r["state_name"]) for r in runs]  # a firing while a run ran was dropped


# -- faults -----------------------------------------------------------------------------------------------------------
def test_each_fault_of_the_stack_leaves_the_run_going_and_nothing_lost(stand, clean_run, team_stack):
    """One run, in a work dir of its own, meets every fault in turn (each server back before the next one goes; each
    fault checked to start while the run runs); it completes and, its spool replayed, logged what the clean run
    logged."""
    env, root, _ = stand
    api = team_stack.prefect
    _, reference = clean_run

    def state(flow_run_id: str) -> str:
        return api.call("GET", f"/flow_runs/{flow_run_id}")["state_type"]

    def stop_postgres(flow_run_id: str) -> str:
        api.wait_for_task(flow_run_id, "pretrain")
        found = state(flow_run_id)
        team_stack.run("stop", "postgres")
        # the servers' health checks (compose's, the probes') see the database gone, not only their own process
        status = team_stack.run("status").stdout
        assert "mlflow: unhealthy" in status and "prefect-server: unhealthy" in status, status
        time.sleep(10)
        team_stack.run("start", "postgres")
        return found

    def restart_prefect(flow_run_id: str) -> str:
        found = state(flow_run_id)
        team_stack.run("stop", "prefect-server")
        time.sleep(5)
        team_stack.run("start", "prefect-server")
        return found

    def kill_mlflow_while_uploading(flow_run_id: str) -> str:
        log = team_stack.state / "logs" / "mlflow.log"
        seen = log.read_text().count("mlflow-artifacts/artifacts")
        deadline = time.monotonic() + 600
        while log.read_text().count("mlflow-artifacts/artifacts") == seen and time.monotonic() < deadline \
                and state(flow_run_id) == "RUNNING":
            time.sleep(0.2)
        found = state(flow_run_id)
        os.killpg(int((team_stack.state / "pids" / "mlflow.pid").read_text()), signal.SIGKILL)
        time.sleep(5)
        team_stack.run("start", "mlflow")
        return found

    def s3_down(flow_run_id: str) -> str:
        assert not list((root / "spool").glob("*.json"))  # the runs before this one delivered everything
        found = state(flow_run_id)
        team_stack.run("stop", "minio")
        deadline = time.monotonic() + 600  # until a fine-tune's upload met the outage too, or the run ended
        while state(flow_run_id) == "RUNNING" and time.monotonic() < deadline and not api.call(
                "POST", "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}},
                                              "task_runs": {"name": {"any_": [f"finetune-full-{TASKS[0]}"]}}}):
            time.sleep(1)
        time.sleep(10)
        team_stack.run("start", "minio")
        return found

    faults = {"postgres stopped and started": stop_postgres, "prefect server restarted": restart_prefect,
              "mlflow killed during an upload": kill_mlflow_while_uploading, "s3 down": s3_down}
    flow_run = start_run(team_stack, root / "faults")
    met = {name: inject(flow_run["id"]) for name, inject in faults.items()}
    assert met == dict.fromkeys(faults, "RUNNING"), met  # each fault started while the run ran
    finished = api.wait_for_end(flow_run["id"])
    assert finished["state_type"] == "COMPLETED", finished["state"]
    # what an outage kept from MLflow past a stage's flush timeout was spooled: the documented replay
    # (docs/tracking.md) delivers it
    spool = root / "spool"
    if list(spool.glob("*.json")):
        replay = subprocess.run([sys.executable, "-m", "gpt1.cli", "replay-spool", str(spool)], env=env,
                                capture_output=True, text=True, timeout=600)
        assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]
    assert differences(mlflow_record(team_stack, finished["id"]), reference) == {}


# -- helpers ----------------------------------------------------------------------------------------------------------
def schedule(env: dict, switch: str) -> str:
    done = subprocess.run([sys.executable, "scripts/schedule.py", "gpt1/stack-schedule", switch], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_for_runs(api, deployment: str, completed: int, timeout: float) -> list[dict]:
    """The first `completed` completed flow runs of `deployment`, oldest first, once there are that many."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [r for r in api.flow_runs(deployment) if r["state_type"] == "COMPLETED"]
        if len(done) >= completed:
            return sorted(done, key=lambda r: r["start_time"])[:completed]
        time.sleep(3)
    raise AssertionError(f"fewer than {completed} completed runs of {deployment}: {api.flow_runs(deployment)}")


def settle(api, deployment: str, timeout: float = 600) -> list[dict]:
    """Every flow run of `deployment` once none is pending or running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = api.flow_runs(deployment)
        if not [r for r in runs if r["state_type"] in ("PENDING", "RUNNING")]:
            return runs
        time.sleep(3)
    raise AssertionError(f"runs of {deployment} still going: {runs}")


def start_run(team_stack, work: Path) -> dict:
    return team_stack.prefect.run_deployment("gpt1/stack-faults", {"work_dir": str(work)})


def stage_records(work: Path) -> dict[str, dict]:
    """{stage folder: its .done record} of every finished stage output under `work`."""
    return {str(marker.parent.relative_to(work)): json.loads(marker.read_text()) for marker in work.rglob(".done")}


def mlflow_record(team_stack, flow_run_id: str) -> dict[str, dict]:
    """What one flow run logged, by MLflow run name (parent, stages, fine-tunes): its params, each metric's number
    of values (MLflow's own system/ metrics, sampled by the clock, left out), and the paths of its artifacts and
    logged models' files in the bucket."""
    parents = team_stack.psql("mlflow", "select run_uuid from tags where key = 'prefect.flow_run_id' and "
                                        f"value = '{flow_run_id}'")
    if len(parents) != 1:
        return {"parent runs of the flow run": len(parents)}
    [[parent]] = parents
    runs = team_stack.psql("mlflow", "select r.run_uuid, r.name, r.experiment_id from runs r join tags t on "
                                     f"t.run_uuid = r.run_uuid and t.key = 'mlflow.parentRunId' and t.value = '{parent}'"
                                     f" union select run_uuid, 'parent', experiment_id from runs where run_uuid = '{parent}'")
    objects = team_stack.bucket()
    record = {}
    for run_id, name, experiment in runs:
        metrics = dict(team_stack.psql("mlflow", f"select key, count(*) from metrics where run_uuid = '{run_id}' "
                                                 "and key not like 'system/%' group by key"))
        params = [k for [k] in team_stack.psql("mlflow", f"select key from params where run_uuid = '{run_id}'")]
        prefixes = [f"{experiment}/{run_id}/artifacts/"]
        prefixes += [f"{experiment}/models/{m}/artifacts/" for [m] in team_stack.psql(
            "mlflow", f"select model_id from logged_models where source_run_id = '{run_id}'")]
        files = sorted(key.split("/artifacts/", 1)[1] for key in objects if key.startswith(tuple(prefixes)))
        record[name] = {"metrics": metrics, "params": sorted(params), "files": files}
    return record


def differences(record: dict, reference: dict) -> dict:
    """Where a run's record differs from the reference's: {run name: {what: (missing, extra)}} for params and files,
    {metric: (its count, the reference's)} for metrics."""
    found = {}
    for name in sorted(set(record) | set(reference)):
        mine, theirs = record.get(name) or {}, reference.get(name) or {}
        differ = {}
        for what in ("params", "files"):
            have, want = set(mine.get(what, [])), set(theirs.get(what, []))
            if have != want:
                differ[what] = {"missing": sorted(want - have), "extra": sorted(have - want)}
        counts, wanted = mine.get("metrics", {}), theirs.get("metrics", {})
        if counts != wanted:
            differ["metrics"] = {k: (counts.get(k), wanted.get(k)) for k in set(counts) | set(wanted)
                                 if counts.get(k) != wanted.get(k)}
        if differ or (name in record) != (name in reference):
            found[name] = differ or {"run": "missing" if name not in record else "extra"}
    return found
