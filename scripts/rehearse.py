"""`make rehearse`: the `gpt1/full` topology at tiny size on this machine, against real Prefect and MLflow servers.

Run by scripts/rehearse.sh, which starts (or reuses) the servers and exports PREFECT_API_URL, MLFLOW_TRACKING_URI
and GPT1_STATE. This script:

1. renders pipelines.yaml with each cluster work pool played by a local process pool (the mapping and the
   stand-in concurrency limit are `definitions.rehearsal` there) and deploys gpt1/full, gpt1/ablation-no-aux-lm,
   gpt1-pretrain/gpu-node and gpt1-finetune/gpu from it, each pool with a process worker;
2. starts `gpt1/full` and `gpt1/ablation-no-aux-lm` at the same time with the `rehearse` preset (the cluster
   preset at tiny size) on one shared work dir: both need the same upstream stages and the same pre-training;
3. breaks RTE's train file until the first RTE fine-tune has failed on it, then repairs it (a corrupt file an
   operator replaces), so a retry of the fan-out absorbs the failure;
4. checks what ran where and what was recorded, prints the results table, stops the workers it started, and exits
   non-zero if any check failed.

Checks: both runs complete; the preflight ran first; `gpt1` ran on the CPU stand-in, pre-training once, on the
GPU-node stand-in, with 2 ranks, and the fine-tunes on the GPU stand-in, never more at once than its concurrency
limit, several to a pod (`orchestration.finetunes_per_pod`); every stage was computed once (the other run reused
it, its stage runs tagged cached); the failed RTE fine-tune was retried (alone) and succeeded; MLflow nests pre-training and every task run under a parent; each run's
results table has every task.

    make rehearse                       # servers started and stopped for it (or reused if up)
    python scripts/rehearse.py --keep   # leave the workers running afterwards (inspect the UIs)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEPLOYMENTS = ("gpt1/full", "gpt1/ablation-no-aux-lm", "gpt1-pretrain/gpu-node", "gpt1-finetune/gpu")
# `prefect deploy -n` matches a deployment by its own name (unique in pipelines.yaml), not by flow/name
DEPLOY_NAMES = [name.split("/")[1] for name in DEPLOYMENTS]
RUNS = ("gpt1/full", "gpt1/ablation-no-aux-lm")
FLAKY_TASK = "rte"


def render(state: Path) -> tuple[Path, dict]:
    """pipelines.yaml with the cluster pools mapped onto local stand-ins (process pools: no GPU job variables)."""
    spec = yaml.safe_load((REPO / "pipelines.yaml").read_text())
    rehearsal = spec["definitions"]["rehearsal"]
    for deployment in spec["deployments"]:
        pool = deployment["work_pool"]
        if pool["name"] in rehearsal["pools"]:
            deployment["work_pool"] = {"name": rehearsal["pools"][pool["name"]], "work_queue_name": "default"}
        if "concurrency_limit" in deployment:
            deployment["concurrency_limit"] = rehearsal["finetune_concurrency_limit"]
    path = state / "rehearse-pipelines.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, rehearsal


def prefect(*args: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN / "prefect"), *args], cwd=REPO, capture_output=True, text=True, **kwargs)
    if done.returncode:
        sys.exit(f"rehearse: `prefect {' '.join(args)}` failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


def create_pools(pools: list[str]) -> None:
    for pool in pools:
        if subprocess.run([str(BIN / "prefect"), "work-pool", "inspect", pool], capture_output=True).returncode:
            prefect("work-pool", "create", pool, "--type", "process")


def start_workers(pools: list[str], env: dict, logs: Path) -> list[subprocess.Popen]:
    workers = []
    for pool in pools:
        log = open(logs / f"worker-{pool}.log", "w")
        workers.append(subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", pool, "--type",
                                         "process"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True))
    return workers


def stop_workers(workers: list[subprocess.Popen]) -> None:
    """Each worker's flow runs (sessions of their own) first, then the worker's group."""
    for worker in workers:
        children = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout.split()
        for pid in map(int, children):
            try:
                os.killpg(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            try:
                os.killpg(worker.pid, sig)
                worker.wait(15)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def flaky_copy(state: Path, work: Path) -> tuple[Path, bytes]:
    """The flaky task's official folder from the sample data, with its train file broken; returns (folder, the
    good train file's bytes)."""
    from gpt1 import tasks
    from gpt1.sample_data import write_sample_data

    sample = state / "rehearse-sample"
    if not (sample / "tasks").is_dir():
        write_sample_data(sample)
    folder = work.parent / f"{FLAKY_TASK}-flaky"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(sample / "tasks" / tasks.get(FLAKY_TASK).folder, folder)
    train = folder / "train.tsv"
    good = train.read_bytes()
    header, *rows = good.decode().splitlines()
    train.write_text("\n".join([header, *(r.rsplit("\t", 1)[0] + "\tmaybe" for r in rows)]) + "\n")  # bad labels
    return folder, good


def repair_after_first_failure(work: Path, train: Path, good: bytes, stop: threading.Event, record: dict) -> None:
    while not stop.is_set():
        failed = list(work.glob(f"finetune/*/{FLAKY_TASK}/*/error.json"))  # <variant>/<task>/<data>
        if failed:
            train.write_bytes(good)
            record["repaired_after"] = str(failed[0])
            return
        time.sleep(0.2)


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failed.append(what)


def overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def verify(checks: Checks, parents: dict, rehearsal: dict, work: Path, since: datetime, repaired: dict,
           overrides: list[str]) -> None:
    from mlflow.tracking import MlflowClient
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterStartTime

    from gpt1.config import load_config
    from gpt1 import recipe
    from gpt1.recipe.experiment import variant_config
    from gpt1.stages.outputs import DONE

    cfg = load_config("rehearse")
    pools = rehearsal["pools"]
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since)))
        flows = {f.id: f.name for f in client.read_flows()}
        tasks_of = {name: client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
                    for name, run in parents.items()}
    by_flow: dict[str, list] = {}
    for run in runs:
        by_flow.setdefault(flows.get(run.flow_id, "?"), []).append(run)

    for name, run in parents.items():
        checks.check(run.state.is_completed(), f"{name} completed ({run.state.name}: {run.state.message or ''})")
        names = [t.name for t in sorted(tasks_of[name], key=lambda t: t.start_time or t.expected_start_time)]
        checks.check(bool(names) and names[0].startswith("preflight"), f"{name}: the preflight ran first ({names[:3]})")
    checks.check(all(r.work_pool_name == pools["gpt1-cpu"] for r in by_flow.get("gpt1", [])),
                 f"the orchestrating flow runs ran on {pools['gpt1-cpu']}")
    pretraining = by_flow.get("gpt1-pretrain", [])
    where = [(r.name, r.work_pool_name) for r in pretraining]
    checks.check(len(pretraining) == 1 and pretraining[0].work_pool_name == pools["gpt1-gpu-node"],
                 f"pre-training ran once, on {pools['gpt1-gpu-node']} ({where})")
    finetunes = by_flow.get("gpt1-finetune", [])
    checks.check(bool(finetunes) and all(r.work_pool_name == pools["gpt1-gpu"] for r in finetunes),
                 f"{len(finetunes)} fine-tune flow runs, all on {pools['gpt1-gpu']}")
    spans = [(r.start_time.timestamp(), r.end_time.timestamp()) for r in finetunes if r.start_time and r.end_time]
    limit = rehearsal["finetune_concurrency_limit"]
    checks.check(0 < overlap(spans) <= limit, f"at most {limit} fine-tunes at once (peak {overlap(spans)})")
    failed = [r for r in finetunes if r.state.is_failed() or r.state.is_crashed()]
    retried = {r.name for r in finetunes if r.state.is_completed() and "-retry" in r.name}
    # a pod's run is named after its steps, joined by "+" (orchestration.finetunes_per_pod); a retry runs alone
    flaky = [step for r in failed for step in r.name.split("+") if step.endswith(f"-{FLAKY_TASK}")]
    checks.check(bool(failed) and all(FLAKY_TASK in r.name for r in failed)
                 and all(f"{step}-retry1" in retried for step in flaky),
                 f"the injected {FLAKY_TASK} failure was absorbed by a retry (failed {[r.name for r in failed]}, "
                 f"retried {sorted(retried)}; file repaired after {repaired.get('repaired_after')})")
    shared = [r.name for r in finetunes if "+" in r.name]
    per_pod = cfg.orchestration.finetunes_per_pod
    checks.check(bool(shared) and all(len(name.split("+")) <= per_pod for name in shared),
                 f"fine-tunes shared pods, {per_pod} at most ({shared})")

    markers = sorted(p.parent.relative_to(work).as_posix() for p in work.glob(f"*/*/{DONE}"))
    for stage in ("sample-data", "ingest", "train-tokenizer", "tokenize", "pretrain"):
        done = [m for m in markers if m.startswith(f"{stage}/")]
        checks.check(len(done) == 1, f"stage {stage} computed once ({done})")

    client = MlflowClient()
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    mruns = client.search_runs([experiment.experiment_id], max_results=1000) if experiment else []
    ours: set[str] = set()  # this rehearsal's parent runs: the store may hold an earlier rehearsal's
    for name, run in parents.items():
        parent = [r for r in mruns if r.data.tags.get("prefect.flow_run_id") == str(run.id)]
        checks.check(len(parent) == 1, f"{name}: one MLflow parent run")
        if not parent:
            continue
        ours.add(parent[0].info.run_id)
        children = {r.info.run_name: r for r in mruns if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id}
        tasks = {f"finetune-full-{t}" for t in cfg.finetune.tasks}
        checks.check(tasks <= set(children), f"{name}: every task's run under the parent ({sorted(children)})")
        checks.check({"sample-data", "ingest", "train-tokenizer", "tokenize"} <= set(children), f"{name}: every stage's run")
    mruns = [r for r in mruns if r.data.tags.get("mlflow.parentRunId") in ours]
    trained = [r for r in mruns if r.info.run_name == "pretrain" and r.data.tags.get("gpt1.cached") != "true"]
    checks.check(len(trained) == 1 and trained[0].data.params.get("world_size") == "2",
                 "one pre-training MLflow run, 2 ranks, nested under a pipeline's parent run")
    cached = [r for r in mruns if r.data.tags.get("gpt1.cached") == "true"]
    checks.check(bool(cached), f"the run that waited reused the other's stages ({len(cached)} cached stage runs)")

    variants = {"gpt1/full": "full", "gpt1/ablation-no-aux-lm": "no_aux_lm"}
    for name, run in parents.items():
        plan = recipe.plan(variant_config(load_config("rehearse", overrides), variants[name]), work)
        results = plan.report_dir() / "results.json"
        reported = json.loads(results.read_text())["runs"] if results.exists() else {}
        scored = {t for run in reported.values() for t, r in run["tasks"].items() if r.get("metrics")}
        checks.check(scored == set(cfg.finetune.tasks), f"{name}: results table of every task at {results.parent}")
        if results.exists():
            print((results.parent / "results.md").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the stand-in workers running")
    args = parser.parse_args()
    for needed in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "GPT1_STATE"):
        if not os.environ.get(needed):
            sys.exit(f"rehearse: {needed} is not set; run `make rehearse` (scripts/rehearse.sh)")
    from prefect.deployments import run_deployment

    from flows.pipeline import wait_for

    state = Path(os.environ["GPT1_STATE"]).absolute()
    work = state / "rehearse-work"
    shutil.rmtree(work, ignore_errors=True)  # every stage runs again: a re-run proves the topology too
    logs = state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rendered, rehearsal = render(state)
    env = {**os.environ, "GPT1_WORK_DIR": str(work), "OMP_NUM_THREADS": "1", "PREFECT_LOGGING_EXTRA_LOGGERS": "gpt1"}
    print(f"rehearse: stand-in pools {rehearsal['pools']}; deploying {', '.join(DEPLOYMENTS)}")
    create_pools(sorted(set(rehearsal["pools"].values())))
    prefect("--no-prompt", "deploy", "--prefect-file", str(rendered), *(a for d in DEPLOY_NAMES for a in ("-n", d)),
            env=env)
    workers = start_workers(sorted(set(rehearsal["pools"].values())), env, logs)
    stop, repaired = threading.Event(), {}
    try:
        flaky, good = flaky_copy(state, work)
        watcher = threading.Thread(target=repair_after_first_failure, args=(work, flaky / "train.tsv", good, stop,
                                                                            repaired), daemon=True)
        watcher.start()
        since = datetime.now(timezone.utc)
        parameters = {"preset": "rehearse", "overrides": [f"finetune.task_data.{FLAKY_TASK}={flaky}"],
                      "work_dir": str(work)}
        started = {name: run_deployment(name, parameters=parameters, timeout=0, as_subflow=False) for name in RUNS}
        print(f"rehearse: started {', '.join(f'{n} ({r.name})' for n, r in started.items())}")
        finished = {name: wait_for(run.id) for name, run in started.items()}
        checks = Checks()
        print("rehearse: checks")
        verify(checks, finished, rehearsal, work, since, repaired, parameters["overrides"])
    finally:
        stop.set()
        if not args.keep:
            stop_workers(workers)
    if checks.failed:
        print(f"rehearse: {len(checks.failed)} check(s) failed; worker logs in {logs}")
        return 1
    print(f"rehearse: all checks passed (state in {state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
