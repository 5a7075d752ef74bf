"""Prefect flows: orchestration only. Every stage is a thin task over `gpt1.pipeline`.

- `gpt1` (deployments gpt1/smoke, gpt1/full, ablations): preflight -> sample -> ingest -> train-tokenizer ->
  tokenize -> pretrain -> fan-out of the fine-tunes (x variants) -> report, under one MLflow parent run.
- `gpt1-pretrain` (deployment gpt1-pretrain/gpu-node): pre-training alone, on whole GPU nodes; `gpt1` starts it
  when `orchestration.pretrain_deployment` is set, so the orchestrating flow itself holds no GPU.
- `gpt1-finetune` (deployments gpt1-finetune/gpu, /local): one task; the cluster fan-out target.
- `gpt1-finetune-all`: fine-tune every task (and report) from a given checkpoint.

Parameters are typed: a preset by name (the UI offers the list) and `key=value` overrides that add to it, so the
server refuses a malformed run request and a user's overrides never drop what the preset sets.

Whether a stage runs again is decided by the stage itself (its key and `.done` marker on the shared volume, see
gpt1.stages.base), never by Prefect's cache: tasks persist no results, a re-run's tasks find their stages
finished, and two flow runs needing the same stage take turns on its lock (the second reuses the first's output).
Every stage still logs its MLflow child run, tagged `gpt1.cached=true` when it was already done.

Local compute of one flow run: `orchestration.finetune_concurrency` slots, shared by the fine-tunes and, while it
runs locally, pre-training (so N-1 fine-tunes run beside it, and it gets that share of the cores as its
OMP_NUM_THREADS when any do); the fine-tunes run in that many reused worker processes (gpt1.runtime.workers),
started on the run's first fine-tune and ended with the run, also when it fails. Variants that fine-tune from a
random init (the no-pre-training ablation) are submitted as soon as the tokenizer and shards are there, beside
pre-training; the others after it; the report after all. With `fanout=deployment` each (variant, task) is a child
flow run of `orchestration.finetune_deployment` (its work pool's concurrency limit applies), retried up to
`orchestration.retries["finetune"]` times.

Choices where the spec is silent:
- Pre-training takes its slot before the early fine-tunes are submitted, so it never queues behind them.
- The fine-tunes start the likely longest first (`Plan.tasks_heaviest_first`), so a long task (RACE in the demo,
  SST-2 in `mini`) runs beside shorter ones instead of alone at the end. A fine-tune's task run is submitted only
  once it holds a slot, so the order holds and its duration in the UI is its work, not its wait.
- If pre-training fails, the fine-tunes already running beside it are let finish (their results stay for the
  re-run) before the flow run fails.
- A failed child fine-tune is retried by the parent as a new child flow run (`<name>-retry<k>`), so each attempt
  keeps its own logs and state in the UI.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Iterator, Literal

from prefect import flow, get_client, get_run_logger, task
from prefect.artifacts import (create_link_artifact, create_markdown_artifact, create_progress_artifact,
                               create_table_artifact, update_progress_artifact)
from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType,
                                            FlowRunFilterTags)
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment
from prefect.runtime import deployment, flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff
from pydantic import StringConstraints

from gpt1.pipeline import plan as P
from gpt1.config import PipelineConfig, available_presets, config_from_dict, load_config
from gpt1.io import read_json
from gpt1.runtime.processes import threads_per_process
from gpt1.pipeline.preflight import run_checks
from gpt1.runtime.workers import WorkerPool
from gpt1.stages import outputs
from gpt1.stages.outputs import is_done
from gpt1.tracking.runs import start_pipeline_run
from gpt1.tracking.logger import RunLogger

WORK_DIR = os.environ.get("GPT1_WORK_DIR", "runs")
STEP_LINE = re.compile(r"step (\d+)/(\d+) ")  # pre-training's progress lines (gpt1.pretrain)
# What a fine-tune worker imports once (torch, the task metrics, MLflow models), instead of once per task.
FINETUNE_PRELOAD = ("torch", "sklearn.metrics", "gpt1.finetune.stage")

Preset = Literal[tuple(available_presets())]  # a dropdown in the UI; the server refuses other names
Override = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+=")]
Variant = Literal[P.VARIANTS]  # the ablation a deployment runs as its main result, whatever preset and overrides


@dataclass
class LocalCompute:
    """One flow run's local compute: its slots (fine-tunes, and pre-training while it runs here) and the worker
    processes its fine-tunes run in. Tasks run in threads of the flow's process and find it by flow run id."""

    slots: threading.Semaphore
    workers: WorkerPool
    concurrency: int


_local_compute: dict[str, LocalCompute] = {}


@contextlib.contextmanager
def local_compute(plan: P.Plan) -> Iterator[LocalCompute]:
    """This flow run's LocalCompute, for the duration of the flow; its workers are shut down at the end."""
    n = plan.cfg.orchestration.finetune_concurrency
    compute = LocalCompute(threading.Semaphore(n), WorkerPool(n, preload=FINETUNE_PRELOAD), n)
    _local_compute[str(flow_run.id)] = compute
    try:
        yield compute
    finally:
        _local_compute.pop(str(flow_run.id), None)
        compute.workers.shutdown()


def _retrying(t, cfg: PipelineConfig, stage: str):
    n = cfg.orchestration.retries.get(stage, 0)
    return t.with_options(retries=n, retry_delay_seconds=exponential_backoff(cfg.orchestration.retry_delay_seconds)
                          if n else 0)


# -- tasks ------------------------------------------------------------------------------------------------------
@task(name="preflight", persist_result=False)
def preflight_task(cfg: PipelineConfig, work_dir: str) -> None:
    """Everything the run needs, checked before any stage starts (and before any GPU is requested)."""
    found = run_checks(cfg, work_dir)
    logger = get_run_logger()
    for line in [*found.plan, *(f"note: {n}" for n in found.notes)]:
        logger.info(line)
    if found.problems:
        raise RuntimeError(f"preflight: {len(found.problems)} problem(s), nothing was started:\n  "
                           + "\n  ".join(found.problems))


@task(name="stage", task_run_name="{stage}", persist_result=False)
def stage_task(plan: P.Plan, stage: str, parent_run_id: str | None) -> str:
    """An in-process stage (sample, ingest, tokenizer, shards), then its MLflow child run (cached or not)."""
    result = P.run_stage(plan, stage)
    P.log_stage(plan, stage, result, parent_run_id)
    return str(result.path)


def _run_stage(plan: P.Plan, stage: str, parent_run_id: str | None) -> Path:
    return Path(_retrying(stage_task, plan.cfg, stage)(plan, stage, parent_run_id))


def _pretraining_log(plan: P.Plan) -> Callable[[str], None]:
    """Pre-training's output lines to the run's log, and its step/total to a progress artifact in the UI."""
    logger = get_run_logger()
    progress = create_progress_artifact(0.0, key=f"pretraining-{plan.jobs['pretrain'].key()}",
                                        description="GPT-1 pre-training: updates done of the total")
    last = [0.0]

    def log_line(line: str) -> None:
        logger.info(line)
        if (step := STEP_LINE.search(line)) and (done := 100.0 * int(step[1]) / int(step[2])) >= last[0] + 1:
            last[0] = done
            update_progress_artifact(progress, done)

    return log_line


@task(name="pretrain", persist_result=False)
def pretrain_task(plan: P.Plan, parent_run_id: str | None, threads: str | None = None) -> str:
    """Pre-training here, or as a flow run of `orchestration.pretrain_deployment` (waiting for it)."""
    o = plan.cfg.orchestration
    if o.pretrain_deployment is None or is_done(plan.dir("pretrain")):
        result = P.run_pretrain(plan, parent_run_id, threads=threads, log_line=_pretraining_log(plan))
        return str(result.path)
    run = wait_for(_pretrain_run(plan, parent_run_id).id)
    if not run.state.is_completed():
        raise RuntimeError(f"pre-training ({o.pretrain_deployment}, flow run {run.name}): "
                           f"{run.state.message or run.state.name}")
    return str(plan.dir("pretrain"))


@task(name="finetune", task_run_name="finetune-{variant}-{name}", persist_result=False)
def finetune_task(plan: P.Plan, name: str, variant: str, parent_run_id: str | None) -> dict:
    """One fine-tune in a reused worker; submitted only once it holds a slot (see _submit_in_slots)."""
    return P.run_finetune(plan, variant, name, parent_run_id, workers=_local_compute[str(flow_run.id)].workers,
                          log_line=get_run_logger().info)


@task(name="report", persist_result=False)
def report_task(plan: P.Plan, parent_run_id: str | None) -> str:
    """The results table (also a markdown and a table artifact of the flow run, beside the paper's numbers)."""
    result = P.run_report(plan, parent_run_id)
    if parent_run_id:
        P.log_results_on_parent(plan, result.path / "results.json", parent_run_id, files=result.cached)
    key = f"results-{_slug(plan.cfg.preset)}"
    create_markdown_artifact((result.path / "results.md").read_text(encoding="utf-8"), key=key,
                             description=f"GPT-1 results of {plan.cfg.preset} beside the paper's ({result.path})")
    rows = [{"run": label, "task": task, **{k: round(v, 2) for k, v in (entry.get("metrics") or {}).items()}}
            for label, run in read_json(result.path / "results.json")["runs"].items()
            for task, entry in run["tasks"].items()]
    if rows:
        create_table_artifact(rows, key=f"{key}-table", description="primary and secondary metrics per task")
    return str(result.path)


# -- child flow runs (the cluster) ---------------------------------------------------------------------------------
def wait_for(flow_run_id, poll_seconds: float = 5.0):
    """The flow run once it has reached a final state."""
    with get_client(sync_client=True) as client:
        while not (run := client.read_flow_run(flow_run_id)).state.is_final():
            time.sleep(poll_seconds)
    return run


def _pretrain_run(plan: P.Plan, parent_run_id: str | None):
    """The pre-training flow run for this plan's stage key: one already in flight (another flow run, e.g. an
    ablation started beside `full`, needs the same weights) is waited for instead of holding a second set of GPU
    nodes; else a new one. Runs are tagged with the key so they can be found; the look-up and the start hold a
    lock on the shared volume, so two parents arriving together start one run."""
    o, key = plan.cfg.orchestration, plan.jobs["pretrain"].key()
    tag = f"gpt1-pretrain-key:{key}"
    submitting = outputs.lock(plan.dir("pretrain").with_name(f"{key}.submit"), wait=True)
    try:
        with get_client(sync_client=True) as client:
            in_flight = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                tags=FlowRunFilterTags(all_=[tag]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[
                    StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING]))), limit=1)
        if not in_flight:
            return run_deployment(o.pretrain_deployment, parameters={
                "config": plan.cfg.model_dump(mode="json"), "work_dir": str(plan.work),
                "parent_run_id": parent_run_id}, flow_run_name=f"pretrain-{key}", tags=[tag], timeout=0)
    finally:
        submitting.release()
    get_run_logger().info("pre-training %s is already running as flow run %s: waiting for it", key,
                          in_flight[0].name)
    return in_flight[0]


def _fan_out_deployments(plan: P.Plan, variants: list[str], parent_run_id: str | None) -> dict[str, str]:
    """One flow run of the gpt1-finetune deployment per (variant, task), all submitted at once (each waited for
    in a thread of its own; the deployment's concurrency limit paces them); a failed one is retried as a new flow
    run. Returns the failures by name."""
    o = plan.cfg.orchestration
    attempts = 1 + o.retries.get("finetune", 0)
    logger = get_run_logger()

    def one(variant: str, name: str) -> str | None:
        label, message = f"{variant}/{name}", None
        for attempt in range(attempts):
            suffix = f"-retry{attempt}" if attempt else ""
            parameters = {"config": plan.cfg.model_dump(mode="json"), "task_name": name, "variant": variant,
                          "work_dir": str(plan.work), "parent_run_id": parent_run_id,
                          "checkpoint": str(plan.checkpoint.path) if plan.checkpoint else None,
                          "tokenizer_dir": str(plan.given_tokenizer.path) if plan.given_tokenizer else None}
            run = run_deployment(o.finetune_deployment, parameters=parameters,
                                 idempotency_key=f"{flow_run.id}-{variant}-{name}{suffix}",
                                 flow_run_name=f"finetune-{variant}-{name}{suffix}", timeout=None,
                                 job_variables=o.finetune_job_variables.get(name) or None)
            if run.state.is_completed():
                return None
            message = str(run.state.message or run.state.name)
            if attempt + 1 < attempts:
                logger.warning("%s failed (attempt %d of %d): %s; retrying", label, attempt + 1, attempts, message)
                time.sleep(o.retry_delay_seconds * 2**attempt)
        return message

    jobs = [(v, n) for v in variants for n in plan.tasks_heaviest_first()]
    with ThreadPoolExecutor(len(jobs), thread_name_prefix="fan-out") as pool:  # each in this flow run's context
        futures = {f"{v}/{n}": pool.submit(contextvars.copy_context().run, one, v, n) for v, n in jobs}
    return {label: message for label, future in futures.items() if (message := future.result()) is not None}


def _start_fan_out(plan: P.Plan, variants: list[str], parent_run_id: str | None) -> Callable[[], dict[str, str]]:
    """Submit every (variant, task); returns a function that waits for them all and returns the failures by
    name. One failure never stops the others."""
    if not variants:
        return lambda: {}
    for variant in variants:
        P.prepare_start(plan, variant)
    if plan.cfg.orchestration.fanout == "deployment":
        runner = ThreadPoolExecutor(1, thread_name_prefix="fan-out")
        # In this flow run's context: run_deployment and flow_run.id (the idempotency keys) read it.
        pending = runner.submit(contextvars.copy_context().run, _fan_out_deployments, plan, variants, parent_run_id)
        runner.shutdown(wait=False)
        return pending.result
    for name, why in plan.missing_data().items():
        get_run_logger().warning("%s: not run (%s)", name, why)
    ft = _retrying(finetune_task, plan.cfg, "finetune")
    jobs = {f"{variant}/{name}": (plan, name, variant, parent_run_id)
            for variant in variants for name in plan.tasks_heaviest_first()}
    return _submit_in_slots(ft, jobs, _local_compute[str(flow_run.id)].slots)


def _submit_in_slots(ft, jobs: dict[str, tuple], slots: threading.Semaphore) -> Callable[[], dict[str, str]]:
    """Submit each job (label -> task arguments, in order) once it holds one of the slots, from a thread of its
    own; the slot is freed when its task run ends (after its retries). So a fine-tune's task run is Running only
    while it works (its time in the UI is its own) and the jobs start in their order. Returns a function that
    waits for all of them and returns the failures by label."""
    futures: dict[str, object] = {}
    not_submitted: list[str] = []

    def submit_in_order() -> None:
        for label, args in jobs.items():
            slots.acquire()
            try:
                future = ft.submit(*args)
            except Exception as e:  # noqa: BLE001 - reported by failures(), with the jobs never submitted
                slots.release()
                not_submitted.append(f"not submitted: {type(e).__name__}: {e}")
                return
            future.add_done_callback(lambda _: slots.release())
            futures[label] = future

    # In this flow run's context: Task.submit needs its task runner and flow run.
    dispatcher = threading.Thread(target=contextvars.copy_context().run, args=(submit_in_order,),
                                  name="fan-out", daemon=True)
    dispatcher.start()

    def failures() -> dict[str, str]:
        dispatcher.join()
        failed = {}
        for label in jobs:
            if (future := futures.get(label)) is None:
                failed[label] = not_submitted[0]
                continue
            future.wait()
            if not future.state.is_completed():
                failed[label] = str(future.state.message or future.state.name)
        return failed

    return failures


@contextlib.contextmanager
def _pretrain_slot(plan: P.Plan, compute: LocalCompute, beside: bool) -> Iterator[str | None]:
    """Pre-training running on this machine holds one local slot; yields its OMP_NUM_THREADS: its share of the
    cores when fine-tunes run beside it (`beside`), else None (the launcher's default, all cores)."""
    o = plan.cfg.orchestration
    if o.pretrain_launcher != "local" or o.pretrain_deployment or is_done(plan.dir("pretrain")):
        yield None
        return
    with compute.slots:
        yield threads_per_process(compute.concurrency * o.pretrain_nproc) if beside else None


# -- MLflow parent run -------------------------------------------------------------------------------------------
def _parent_run(cfg: PipelineConfig) -> RunLogger:
    """The flow run's MLflow parent run (gpt1.mlflow_features.start_pipeline_run), linked from its artifacts tab."""
    run = start_pipeline_run(cfg, flow=flow_run.flow_name, deployment=deployment.name, flow_run=flow_run.name,
                             flow_run_id=str(flow_run.id))
    if run.run_id and run.uri.startswith("http"):  # a server's UI: a link on the flow run's artifacts tab
        create_link_artifact(f"{run.uri.rstrip('/')}/#/experiments/{run.experiment_id}/runs/{run.run_id}",
                             link_text=f"MLflow run {run.name}", key="mlflow-parent-run",
                             description="this flow run's MLflow parent run (stages and tasks nested under it)")
    return run


def _slug(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "run"


def _finish(run: RunLogger, failures: dict[str, str]) -> None:
    if failures:
        run.log_dict(failures, "failures.json")
        run.set_tags({"gpt1.failed_tasks": ",".join(sorted(failures))})
    run.end("FAILED" if failures else "FINISHED")
    if failures:
        lines = "\n".join(f"  {k}: {v}" for k, v in sorted(failures.items()))
        raise RuntimeError(f"{len(failures)} fine-tune run(s) failed (the rest completed and were logged):\n{lines}")


# -- flows -------------------------------------------------------------------------------------------------------
@flow(name="gpt1", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True,
      result_serializer="json")
def gpt1_pipeline(preset: Preset = "smoke", overrides: list[Override] | None = None, variant: Variant = "full",
                  work_dir: str = WORK_DIR) -> str:
    """The whole GPT-1 recipe for one preset + overrides, its fine-tunes as `variant` (the ablation deployments:
    a run's own preset and overrides never undo it); returns the report directory."""
    cfg = P.variant_config(load_config(preset, overrides), variant)  # bad values fail here, before any stage runs
    plan = P.Plan.make(cfg, work_dir)
    if cfg.orchestration.preflight:
        preflight_task(cfg, work_dir)
    run = _parent_run(cfg)
    try:
        with local_compute(plan) as compute:
            if cfg.ingest.source == "sample" or cfg.finetune.data == "sample":
                _run_stage(plan, "sample", run.run_id)
            for stage in ("ingest", "tokenizer", "shards"):
                _run_stage(plan, stage, run.run_id)
            early = [v for v in plan.variants if plan.from_random_init(v)]  # need no pre-training
            late = [v for v in plan.variants if v not in early]
            beside = cfg.orchestration.fanout == "local" and any(
                not is_done(plan.task_dir(t, v)) for v in early for t in plan.tasks)
            early_failures: Callable[[], dict[str, str]] = lambda: {}  # noqa: E731
            try:
                with _pretrain_slot(plan, compute, beside) as threads:
                    early_failures = _start_fan_out(plan, early, run.run_id)
                    if late:  # else no variant needs pre-training: it is not run at all
                        _retrying(pretrain_task, cfg, "pretrain")(plan, run.run_id, threads)
            except Exception:
                early_failures()  # fine-tunes running beside a failed pre-training finish (kept for the re-run)
                raise
            failures = _start_fan_out(plan, late, run.run_id)()
            failures.update(early_failures())
            report = _retrying(report_task, cfg, "report")(plan, run.run_id)
    except BaseException:
        run.end("FAILED")
        raise
    _finish(run, failures)
    return report


@flow(name="gpt1-pretrain", log_prints=True, result_serializer="json")
def pretrain_flow(config: dict, work_dir: str = WORK_DIR, parent_run_id: str | None = None) -> str:
    """Pre-training of one resolved config, in this flow run's pod (one process per GPU): the GPU-node deployment
    `gpt1` hands pre-training to. Returns the stage folder (its `final/` holds the weights)."""
    plan = P.Plan.make(config_from_dict(config), work_dir)
    return str(P.run_pretrain(plan, parent_run_id, log_line=_pretraining_log(plan)).path)


@flow(name="gpt1-finetune", log_prints=True, result_serializer="json")
def finetune_one(config: dict, task_name: str, work_dir: str = WORK_DIR, variant: str = "full",
                 parent_run_id: str | None = None, checkpoint: str | None = None,
                 tokenizer_dir: str | None = None) -> dict:
    """One task, in this process: the unit the cluster fan-out runs on its own GPU. `checkpoint`: the parent
    fine-tunes from a given checkpoint (gpt1-finetune-all) instead of its pre-training."""
    plan = P.Plan.make(config_from_dict(config), work_dir, checkpoint=checkpoint, tokenizer=tokenizer_dir)
    return P.run_finetune(plan, variant, task_name, parent_run_id, log_line=get_run_logger().info)


@flow(name="gpt1-finetune-all", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True,
      result_serializer="json")
def finetune_all(checkpoint: str, tokenizer_dir: str | None = None, preset: Preset = "paper",
                 overrides: list[Override] | None = None, work_dir: str = WORK_DIR) -> str:
    """Re-run the fine-tune fan-out and the report from an existing pre-trained checkpoint (and its tokenizer:
    `tokenizer_dir`, else the checkpoint's own tokenizer.json)."""
    cfg = load_config(preset, overrides)
    plan = P.Plan.make(cfg, work_dir, checkpoint=checkpoint, tokenizer=tokenizer_dir)
    run = _parent_run(cfg)
    try:
        with local_compute(plan):
            if cfg.finetune.data == "sample":
                _run_stage(plan, "sample", run.run_id)
            failures = _start_fan_out(plan, plan.variants, run.run_id)()
            report = report_task(plan, run.run_id)
    except BaseException:
        run.end("FAILED")
        raise
    _finish(run, failures)
    return report
