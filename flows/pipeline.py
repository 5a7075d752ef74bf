"""Prefect flows: orchestration only. Each step of a plan (gpt1.recipe) is a Prefect task run named after it,
which calls gpt1.pipeline.run.run_step.

- `gpt1` (deployments gpt1/smoke, gpt1/mini, gpt1/full, ablations): preflight, then every step of the plan
  (gpt1.recipe), under one MLflow parent run.
- `gpt1-pretrain` (deployment gpt1-pretrain/gpu-node): the pretrain step alone, on whole GPU nodes; `gpt1` hands it
  over when `orchestration.pretrain_deployment` is set, so the orchestrating flow itself holds no GPU.
- `gpt1-finetune` (deployments gpt1-finetune/gpu, /local): one fine-tune step, or several sharing one pod
  (`orchestration.finetunes_per_pod`); the cluster fan-out target.
- `gpt1-finetune-all`: every fine-tune (and the report) from a given checkpoint.

Parameters are typed: a preset by name (the UI offers the list) and `key=value` overrides that add to it, so the
server refuses a malformed run request and a user's overrides never drop what the preset sets.

The plan decides what runs and what each step waits for, gpt1.pipeline.schedule which step starts next (the first
ready one in plan order; a step that needs a failed step is not run, except the report); this module decides where
and runs them. Whether a step has work to
do is decided by its job (its key and `.done` marker on the shared volume), never by Prefect's cache: tasks persist
no results, and two flow runs needing the same step take turns on its lock (the second reuses the first's output).

Cancelling a flow run (`prefect flow-run cancel`, or the UI) stops every process its steps started (pre-training
and its ranks, the worker processes), so their stage locks are released at once; the steps it interrupted end
Cancelled, not Crashed, and its MLflow parent run and the stage runs it interrupted end KILLED. What they left is
taken up by the next run: pre-training and shards resume, a fine-tune starts its folder afresh.

Local compute: `orchestration.finetune_concurrency` slots, held by the steps of compute stages (their job class's
`compute`: pre-training and fine-tunes) while they run on this worker. A step's task run is submitted only once it
holds its slot, so its time in the Prefect UI is its work, not its wait (which steps get one: gpt1.pipeline.schedule).
Fine-tunes run in that many reused worker processes
(gpt1.runtime.workers), started with the run (their imports overlap its first stages) and ended with it.
Pre-training started while other compute steps can still run beside it (the from-scratch fine-tunes need only the
tokenizer) gets their share of the cores as its OMP_NUM_THREADS. With `fanout=deployment` fine-tunes are child
flow runs of `orchestration.finetune_deployment` (its work pool's concurrency limit applies), up to
`orchestration.finetunes_per_pod` in one, started by the first of their task runs; Prefect's task retries (the
one retry layer, for every step) start a failed one again, alone, as a new child flow run (`<name>-retry<k>`), so
each attempt keeps its own logs and state in the UI.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

from prefect import flow, get_client, get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
    FlowRunFilterTags,
)
from prefect.client.schemas.objects import FlowRun, State, StateType
from prefect.deployments import run_deployment
from prefect.exceptions import TerminationSignal
from prefect.runtime import deployment, flow_run, task_run
from prefect.states import Cancelled
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff
from pydantic import StringConstraints

from flows.prefect_api import RESULTS_ARTIFACT, REUSED
from flows.preflight import run_checks
from gpt1.config import PipelineConfig, available_presets, config_from_dict, load_config
from gpt1.finetune import stage as finetune
from gpt1.finetune.stage import metrics_of
from gpt1.finetune.train import METRICS_FILE, registered_model_name
from gpt1.io import read_json
from gpt1.pipeline.run import run_step
from gpt1.pipeline.schedule import Schedule, batches
from gpt1.pretrain import stage as pretrain
from gpt1.recipe import Experiment
from gpt1.recipe import plan as plan_run
from gpt1.recipe.experiment import VARIANTS, finetune_step, finetune_variant_task, variant_config
from gpt1.redact import redact
from gpt1.report import stage as report
from gpt1.report.render import REPORT_JSON, REPORT_MD
from gpt1.runtime.processes import stop_stage_processes, threads_per_process
from gpt1.runtime.workers import WorkerPool
from gpt1.stages import outputs
from gpt1.stages.base import Step, stage_jobs
from gpt1.stages.outputs import ERROR, is_done
from gpt1.tracking.logger import RunLogger
from gpt1.tracking.runs import describe_pipeline_run, end_running_children, start_pipeline_run

WORK_DIR = os.environ.get("GPT1_WORK_DIR", "runs")
STEP_LINE = re.compile(r"step (\d+)/(\d+) ")  # a long step's progress lines (pre-training's)
STOP_SECONDS = 20.0  # a cancelled run's processes get this long to exit before they are killed
STEP_THREADS = 64  # steps in flight at once: local ones wait for a compute slot first, child flow runs for their pool
EARLY_POLL_SECONDS = 5.0  # how often the scheduler looks for models written before their step ends
# What a worker process imports once (torch, the task metrics, the stages that run in workers), not once per job.
WORKER_PRELOAD = (
    "torch",
    "sklearn.metrics",
    *(job.__module__ for job in stage_jobs().values() if job.in_worker),
)

Override = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+=")]
if TYPE_CHECKING:  # Literals built at run time, which a type checker cannot read: strings to it
    Preset = str
    Variant = str
else:
    # a dropdown in the UI; the server refuses other names
    Preset = Literal[tuple(available_presets())]
    # the ablation a deployment runs as its main result, whatever preset and overrides
    Variant = Literal[VARIANTS]


@dataclass
class SharedRun:
    """Fine-tune steps handed to one child flow run (`orchestration.finetunes_per_pod`): the first of their task
    runs to get there starts it for all of them, and each then waits for it and reads its own output."""

    steps: list[str]
    run: FlowRun | None = None
    starting: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class LocalCompute:
    """One flow run's compute: its slot count, the worker processes that in-worker steps run in, the steps'
    task runs submitted so far and the child flow runs fine-tunes share. Tasks run in threads of the flow's
    process and find it by flow run id."""

    concurrency: int
    workers: WorkerPool
    submitted: list = field(default_factory=list)
    # step name -> the child flow run it shares
    shared_runs: dict[str, SharedRun] = field(default_factory=dict)


_local_compute: dict[str, LocalCompute] = {}


@contextlib.contextmanager
def local_compute(plan: Experiment) -> Iterator[LocalCompute]:
    """This flow run's LocalCompute, for the duration of the flow; its workers are started at once when a step
    will run in them, and shut down at the end."""
    n = plan.cfg.orchestration.finetune_concurrency
    compute = LocalCompute(n, WorkerPool(n, preload=WORKER_PRELOAD), shared_runs=_shared_runs(plan))
    _local_compute[str(flow_run.id)] = compute
    if any(step.job.in_worker and _holds_slot(plan, step) for step in plan.steps.values()):
        compute.workers.start()
    try:
        yield compute
    except (
        TerminationSignal,
        KeyboardInterrupt,
    ):  # cancelled, or the flow's process is being stopped
        stop_stage_processes(STOP_SECONDS)
        compute.workers.shutdown()  # terminates the busy ones
        for submitted in (
            compute.submitted
        ):  # the interrupted steps end (Cancelled) once their processes are gone
            submitted.wait(timeout=STOP_SECONDS)
        raise
    finally:
        _local_compute.pop(str(flow_run.id), None)
        compute.workers.shutdown()


def _retrying(t, cfg: PipelineConfig, step: Step):
    """The task with the retries of the step's stage: `orchestration.retries`, else its job class's."""
    n = cfg.orchestration.retries.get(step.stage, step.job.retries)
    return t.with_options(
        retries=n,
        retry_delay_seconds=exponential_backoff(cfg.orchestration.retry_delay_seconds) if n else 0,
    )


# -- tasks ------------------------------------------------------------------------------------------------------
@task(name="preflight", persist_result=False)
def preflight_task(cfg: PipelineConfig, work_dir: str) -> None:
    """Everything the run needs, checked before any stage starts (and before any GPU is requested)."""
    found = run_checks(cfg, work_dir)
    log_line = _log_lines()
    for line in [*found.plan, *(f"note: {n}" for n in found.notes)]:
        log_line(line)
    if found.problems:
        raise RuntimeError(
            redact(
                f"preflight: {len(found.problems)} problem(s), nothing was started:\n  "
                + "\n  ".join(found.problems)
            )
        )


@task(name="step", task_run_name="{name}", persist_result=False)
def step_task(
    plan: Experiment, name: str, parent_run_id: str | None, threads: str | None = None
) -> str | State:
    """One step: here (in a reused worker process when its stage runs in one), or on its deployment; a Cancelled
    state when the flow run's cancellation stopped it."""
    step = plan.steps[name]
    o = plan.cfg.orchestration
    if (target := _deployment_of(plan, step)) is not None:
        return _run_on_deployment(plan, step, target, parent_run_id)
    if isinstance(step.job, pretrain.Job) and o.pretrain_deployment and not is_done(step.out):
        run = wait_for(_pretrain_run(plan, o.pretrain_deployment, parent_run_id).id)
        failure = _failure(run)
        if failure is not None:
            raise RuntimeError(
                f"pre-training ({o.pretrain_deployment}, flow run {run.name}): {failure}"
            )
        return str(step.out)
    compute = _local_compute.get(str(flow_run.id))
    try:
        result = run_step(
            plan,
            name,
            parent_run_id,
            workers=compute.workers if compute else None,
            threads=threads,
            log_line=_progress_log(name),
        )
    except Exception:
        if _cancelling():  # its processes were stopped because the flow run is being cancelled
            return Cancelled(message=f"{name}: stopped, its flow run was cancelled")
        raise
    if result.cached:  # scripts/watch_run.py marks the step reused from this line
        get_run_logger().info(f"{name}: {REUSED} ({result.path})")
    if isinstance(step.job, report.Job):
        _publish_report(plan, result.path)
    return str(result.path)


def _cancelling() -> bool:
    """Whether this flow run is being cancelled (Prefect sets Cancelling before it signals the flow's process)."""
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run.id).state
    except Exception:  # noqa: BLE001 - the API out of reach: the step's own error is the one to report
        return False
    return state is not None and state.type in (StateType.CANCELLING, StateType.CANCELLED)


def _log_lines() -> Callable[[str], None]:
    """Lines to the run's log with their credentials redacted (a line may quote a tracking URI as given)."""
    logger = get_run_logger()
    return lambda line: logger.info(redact(line))


def _progress_log(name: str) -> Callable[[str], None]:
    """A step's output lines to the run's log; its `step N/M` lines (pre-training's) to a progress artifact."""
    to_log = _log_lines()
    progress: list = []  # the artifact, made at the first progress line
    last = [0.0]

    def log_line(line: str) -> None:
        to_log(line)
        if step := STEP_LINE.search(line):
            if not progress:
                progress.append(
                    create_progress_artifact(
                        0.0,
                        key=_slug(f"{name}-{flow_run.id}"),
                        description=f"{name}: updates done of the total",
                    )
                )
            if (done := 100.0 * int(step[1]) / int(step[2])) >= last[0] + 1:
                last[0] = done
                update_progress_artifact(progress[0], done)

    return log_line


def _publish_report(plan: Experiment, folder) -> None:
    """The results table as artifacts of the flow run: markdown, and a table of every score."""
    key = f"{RESULTS_ARTIFACT}{_slug(plan.cfg.preset)}"
    create_markdown_artifact(
        (folder / REPORT_MD).read_text(encoding="utf-8"),
        key=key,
        description=f"GPT-1 results of {plan.cfg.preset} beside the paper's ({folder})",
    )
    report = read_json(folder / REPORT_JSON)
    rows = [
        {
            "run": label,
            "task": task,
            **{k: round(v, 2) for k, v in (entry.get("metrics") or {}).items()},
        }
        for label, run in report["runs"].items()
        for task, entry in run["tasks"].items()
    ]
    rows += [
        {
            "run": f"baseline: {baseline['method']}",
            "task": task,
            **{k: round(v, 2) for k, v in baseline["metrics"].items()},
        }
        for task, baseline in (report.get("baselines") or {}).items()
        if "metrics" in baseline
    ]
    if rows:
        create_table_artifact(
            rows,
            key=f"{key}-table",
            description="metrics per task: every run, then the "
            "non-neural baselines on the same rows",
        )
    gains = [
        {
            "comparison": f"{c['pretrained']} - {c['from_scratch']}",
            "task": task,
            "metric": t["metric"],
            **{k: round(t[k], 2) for k in ("difference", "low", "high")},
        }
        for c in report.get("comparisons") or []
        for task, t in c["tasks"].items()
        if "difference" in t
    ]
    gains += [
        {
            "comparison": f"{c['pretrained']} - {c['from_scratch']}",
            "task": "headline mean",
            "metric": "",
            **{k: round(c["headline"][k], 2) for k in ("difference", "low", "high")},
        }
        for c in report.get("comparisons") or []
        if "difference" in c.get("headline", {})
    ]
    gains += [
        {
            "comparison": f"{c['pretrained']} - {c['from_scratch']}",
            "task": "headline mean",
            "metric": f"seed {seed['seed']} alone",
            **{k: round(seed[k], 2) for k in ("difference", "low", "high")},
        }
        for c in report.get("comparisons") or []
        for seed in c.get("per_seed", [])
        if "difference" in seed
    ]
    gains += [
        {
            "comparison": f"{point['pretrained']} - {c['from_scratch']}",
            "task": "headline mean",
            "metric": f"{point['tokens']:,} pre-training tokens"
            if point["tokens"] is not None
            else "",
            **{k: round(point["headline"][k], 2) for k in ("difference", "low", "high")},
        }
        for c in report.get("comparisons") or []
        for point in c.get("curve", [])
        if "difference" in point["headline"]
    ]
    if gains:
        create_table_artifact(
            gains,
            key=f"{key}-gains",
            description="pre-trained minus from-scratch, with paired-bootstrap 95% intervals",
        )


# -- running a plan ------------------------------------------------------------------------------------------------
def _deployment_of(plan: Experiment, step: Step) -> str | None:
    """The deployment a step is handed to as a child flow run of its own (None: it runs in this flow run)."""
    o = plan.cfg.orchestration
    if isinstance(step.job, finetune.Job) and o.fanout == "deployment":
        return o.finetune_deployment
    return None


def _shared_runs(plan: Experiment) -> dict[str, SharedRun]:
    """The fine-tunes handed to a deployment, batched by `orchestration.finetunes_per_pod` among those that
    become ready at one moment (the same needs, the same model to start from). A task with job variables of
    its own (more memory, say) runs alone, under them."""
    o = plan.cfg.orchestration
    handed = [name for name, step in plan.steps.items() if _deployment_of(plan, step)]

    def key(name: str) -> tuple:
        job = plan.steps[name].job
        assert isinstance(job, finetune.Job)  # only fine-tunes are handed to a deployment
        if job.task in o.finetune_job_variables:
            return (name,)
        return (plan.needs[name], job.checkpoint.path)

    return {
        name: run
        for run in map(SharedRun, batches(handed, key, o.finetunes_per_pod))
        for name in run.steps
    }


def _holds_slot(plan: Experiment, step: Step) -> int:
    """The local compute slots a step holds: one for a compute step running on this machine (not on a deployment,
    a Slurm job or a finished output), all of them for local pre-training with `orchestration.pretrain_alone`."""
    o = plan.cfg.orchestration
    if not step.job.compute or _deployment_of(plan, step) or is_done(step.out):
        return 0
    if not isinstance(step.job, pretrain.Job):
        return 1
    if o.pretrain_deployment or o.pretrain_launcher != "local":
        return 0
    return o.finetune_concurrency if o.pretrain_alone else 1


def _execute(plan: Experiment, parent_run_id: str | None) -> dict[str, str]:
    """Run every step of the plan (gpt1.pipeline.schedule decides which starts next); returns the failures by step
    name."""
    compute = _local_compute[str(flow_run.id)]
    schedule = Schedule(
        plan.needs,
        list(plan.steps),
        compute.concurrency,
        holds_slot=lambda name: _holds_slot(plan, plan.steps[name]),
        runs_after_failures=lambda name: plan.steps[name].job.after_failures,
        available=plan.ready_early,
    )
    changed = threading.Condition()

    def finished(name: str, failure: str | None) -> None:
        with changed:
            schedule.finish(name, failure)
            changed.notify_all()

    while not schedule.finished:
        with changed:
            ready = schedule.next_step()
            if ready is None:
                if (
                    not schedule.finished
                ):  # a step's end wakes it; a model written early is seen within seconds
                    changed.wait(timeout=EARLY_POLL_SECONDS)
                continue
            schedule.start(*ready)
        _start(plan, ready[0], parent_run_id, compute, finished)
    return schedule.failures()


def _start(
    plan: Experiment,
    name: str,
    parent_run_id: str | None,
    compute: LocalCompute,
    finished: Callable[[str, str | None], None],
) -> None:
    """Submit one step; `finished(name, failure)` is called when it ends."""
    step = plan.steps[name]
    threads = None
    if (
        isinstance(step.job, pretrain.Job)
        and _holds_slot(plan, step) == 1
        and any(_holds_slot(plan, plan.steps[other]) for other in plan.independent_of(name))
    ):
        threads = threads_per_process(compute.concurrency * plan.cfg.orchestration.pretrain_nproc)
    try:
        submitted = _retrying(step_task, plan.cfg, step).submit(plan, name, parent_run_id, threads)
    except Exception as err:  # noqa: BLE001 - reported as this step's failure
        finished(name, f"not submitted: {type(err).__name__}: {err}")
        return

    def settle(future) -> None:
        future.wait()  # done already; this records its final state, which `state` would otherwise ask the API for
        state = future.state
        finished(name, None if state.is_completed() else str(state.message or state.name))

    submitted.add_done_callback(settle)
    compute.submitted.append(submitted)


# -- child flow runs (the cluster) ---------------------------------------------------------------------------------
def wait_for(flow_run_id: UUID, poll_seconds: float = 5.0) -> FlowRun:
    """The flow run once it has reached a final state."""
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        while run.state is None or not run.state.is_final():
            time.sleep(poll_seconds)
            run = client.read_flow_run(flow_run_id)
    return run


def _failure(run: FlowRun) -> str | None:
    """Why a child flow run in a final state did not complete (None: it did)."""
    assert run.state is not None  # every caller waited for a final state
    return None if run.state.is_completed() else str(run.state.message or run.state.name)


def _pretrain_run(plan: Experiment, target: str, parent_run_id: str | None):
    """The pre-training flow run for this plan's stage key: one already in flight (another flow run, e.g. an
    ablation started beside `full`, needs the same weights) is waited for instead of holding a second set of GPU
    nodes; else a new one. Runs are tagged with the key so they can be found; the look-up and the start hold a
    lock on the shared volume, so two parents arriving together start one run."""
    # a plan with a pre-training step planned its model
    assert plan.model is not None
    key = plan.model.key
    tag = f"gpt1-pretrain-key:{key}"
    submitting = outputs.lock(plan.model.path.with_name(f"{key}.submit"), wait=True)
    try:
        with get_client(sync_client=True) as client:
            in_flight = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    tags=FlowRunFilterTags(all_=[tag]),
                    state=FlowRunFilterState(
                        type=FlowRunFilterStateType(
                            any_=[StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING]
                        )
                    ),
                ),
                limit=1,
            )
        if not in_flight:
            return run_deployment(
                target,
                parameters={
                    "config": _parameter(plan.cfg),
                    "work_dir": str(plan.work),
                    "parent_run_id": parent_run_id,
                    "data_keys": _data_keys(plan),
                },
                flow_run_name=f"pretrain-{key}",
                tags=[tag],
                timeout=0,
            )
    finally:
        submitting.release()
    get_run_logger().info(
        "pre-training %s is already running as flow run %s: waiting for it", key, in_flight[0].name
    )
    return in_flight[0]


def _run_on_deployment(plan: Experiment, step: Step, target: str, parent_run_id: str | None) -> str:
    """A fine-tune as a child flow run of `target`, shared with the other steps of its batch on a first attempt
    (`orchestration.finetunes_per_pod`), alone on a retry (`-retry<k>` from the second attempt on, each with its
    own idempotency key); returns its folder, or raises with the child's failure."""
    attempt = task_run.run_count - 1
    compute = _local_compute.get(str(flow_run.id))
    shared = compute.shared_runs.get(step.name) if compute and attempt == 0 else None
    if shared is None or len(shared.steps) == 1:
        suffix = f"-retry{attempt}" if attempt > 0 else ""
        run = wait_for(_start_child(plan, [step.name], target, parent_run_id, suffix).id)
    else:
        with shared.starting:
            if shared.run is None:
                shared.run = _start_child(plan, shared.steps, target, parent_run_id, "")
        run = wait_for(shared.run.id)
    # judged by its own output, as a shared run's other steps may have failed
    if not is_done(step.out):
        error = step.out / ERROR
        why = read_json(error)["error"] if error.is_file() else _failure(run) or "no output"
        raise RuntimeError(f"{step.name} (flow run {run.name}): {why}")
    return str(step.out)


def _parameter(cfg: PipelineConfig) -> dict:
    """The config as a deployment's parameter, which Prefect stores and shows: credentials redacted, the flow run
    on the other side takes them from its environment (gpt1.tracking.logger.tracking_uri)."""
    return redact(cfg.model_dump(mode="json"))


def _data_keys(plan: Experiment) -> dict[str, str]:
    """Each task's content key as this run planned it: a child flow run given them plans the folders this run waits
    on, even if a task file changed since."""
    return {task: plan.task_data(task)[1] for task in plan.tasks}


def _start_child(
    plan: Experiment, steps: list[str], target: str, parent_run_id: str | None, suffix: str
) -> FlowRun:
    """A child flow run of `target` for fine-tune `steps` (the first named by its parameters, the others
    `alongside` it), not waited for."""
    variant, task_name = finetune_variant_task(steps[0])
    parameters: dict[str, Any] = {
        "config": _parameter(plan.cfg),
        "task_name": task_name,
        "variant": variant,
        "work_dir": str(plan.work),
        "parent_run_id": parent_run_id,
        "checkpoint": str(plan.checkpoint.path) if plan.checkpoint else None,
        "tokenizer_dir": str(plan.given_tokenizer.path) if plan.given_tokenizer else None,
        "data_keys": _data_keys(plan),
    }
    # only then: a deployment made before the parameter existed still takes one step
    if len(steps) > 1:
        parameters["alongside"] = steps[1:]
    name = "+".join(steps) + suffix
    run = run_deployment(
        target,
        parameters=parameters,
        idempotency_key=f"{flow_run.id}-{name}",
        flow_run_name=name,
        timeout=0,
        job_variables=plan.cfg.orchestration.finetune_job_variables.get(task_name) or None,
    )
    assert isinstance(run, FlowRun)  # the coroutine Prefect's types allow is for async callers
    return run


# -- MLflow parent run -------------------------------------------------------------------------------------------
def _parent_run(cfg: PipelineConfig) -> RunLogger:
    """The flow run's MLflow parent run (gpt1.tracking.runs.start_pipeline_run), linked from its artifacts tab."""
    run = start_pipeline_run(
        cfg,
        flow=flow_run.flow_name,
        deployment=deployment.name,
        flow_run=flow_run.name,
        flow_run_id=str(flow_run.id),
    )
    if run.run_id and run.uri.startswith(
        "http"
    ):  # a server's UI: a link on the flow run's artifacts tab
        create_link_artifact(
            f"{run.where.rstrip('/')}/#/experiments/{run.experiment_id}/runs/{run.run_id}",
            link_text=f"MLflow run {run.name}",
            key="mlflow-parent-run",
            description="this flow run's MLflow parent run (stages and tasks nested under it)",
        )
    return run


def _registered_models(plan: Experiment) -> list[str]:
    """The Model Registry names of the task models this run fine-tuned."""
    names = [
        registered_model_name(plan.variant_config(variant), task)
        for variant in plan.variants
        for task in plan.tasks
        if (plan.task_dir(task, variant) / METRICS_FILE).is_file()
    ]
    return [name for name in names if name]


def _slug(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "run"


def _run_plan(plan: Experiment) -> str:
    """Every step of `plan` under one MLflow parent run; fails, after the others have finished and the report is
    written, when any step failed. Returns the report folder."""
    for name, why in plan.missing_data().items():
        get_run_logger().warning("%s: not run (%s)", name, why)
    run = _parent_run(plan.cfg)
    try:
        with local_compute(plan):
            failures = _execute(plan, run.run_id)
    except (TerminationSignal, KeyboardInterrupt):  # local_compute has stopped the steps' processes
        end_running_children(run, "KILLED")
        run.end("KILLED")
        raise
    except BaseException:
        run.end("FAILED")
        raise
    if failures:
        run.log_dict(failures, "failures.json")
        run.set_tags({"gpt1.failed_steps": ",".join(sorted(failures))})
    if (plan.report_dir() / REPORT_MD).is_file():
        describe_pipeline_run(
            run,
            plan.cfg,
            (plan.report_dir() / REPORT_MD).read_text(encoding="utf-8"),
            _registered_models(plan),
        )
    run.end("FAILED" if failures else "FINISHED")
    if failures:
        lines = "\n".join(f"  {k}: {v}" for k, v in sorted(failures.items()))
        raise RuntimeError(
            f"{len(failures)} step(s) failed (the others completed and were logged):\n{lines}"
        )
    return str(plan.report_dir())


# -- flows -------------------------------------------------------------------------------------------------------
@flow(
    name="gpt1",
    # Prefect's own types refuse its ThreadPoolTaskRunner here (PrefectHQ/prefect#16938)
    task_runner=ThreadPoolTaskRunner(max_workers=STEP_THREADS),  # type: ignore[arg-type]
    log_prints=True,
    result_serializer="json",
)
def gpt1_pipeline(
    preset: Preset = "smoke",
    overrides: list[Override] | None = None,
    variant: Variant = "full",
    work_dir: str = WORK_DIR,
) -> str:
    """The whole GPT-1 recipe for one preset + overrides, its fine-tunes as `variant` (the ablation deployments:
    a run's own preset and overrides never undo it); returns the report directory."""
    # bad values fail here, before any stage runs
    cfg = variant_config(load_config(preset, overrides), variant)
    plan = plan_run(cfg, work_dir)
    if cfg.orchestration.preflight:
        preflight_task(cfg, work_dir)
    return _run_plan(plan)


@flow(name="gpt1-pretrain", log_prints=True, result_serializer="json")
def pretrain_flow(
    config: dict,
    work_dir: str = WORK_DIR,
    parent_run_id: str | None = None,
    data_keys: dict[str, str] | None = None,
) -> str:
    """Pre-training of one resolved config, in this flow run's pod (one process per GPU): the GPU-node deployment
    `gpt1` hands pre-training to. Returns the stage folder (its `final/` holds the weights). `data_keys`: as
    finetune_one's."""
    plan = plan_run(config_from_dict(config), work_dir, data_keys=data_keys)
    name = next(name for name, step in plan.steps.items() if isinstance(step.job, pretrain.Job))
    return str(run_step(plan, name, parent_run_id, log_line=_progress_log(name)).path)


@flow(name="gpt1-finetune", log_prints=True, result_serializer="json")
def finetune_one(
    config: dict,
    task_name: str,
    work_dir: str = WORK_DIR,
    variant: str = "full",
    parent_run_id: str | None = None,
    checkpoint: str | None = None,
    tokenizer_dir: str | None = None,
    alongside: list[str] | None = None,
    data_keys: dict[str, str] | None = None,
) -> dict:
    """One task, in this process: the unit the cluster fan-out runs on its own GPU; returns its metrics.
    `checkpoint`: the parent fine-tunes from a given checkpoint (gpt1-finetune-all) instead of its pre-training.
    `alongside`: other fine-tune steps of the same plan (`finetune-<variant>-<task>`) sharing this pod
    (`orchestration.finetunes_per_pod`): all run at once, each in its own process on the pod's GPU, and the
    flow run returns each one's metrics by step name; it fails, naming them, if any failed. `data_keys`: the tasks'
    content keys the parent planned, so that this run writes the folders the parent waits on."""
    plan = plan_run(
        config_from_dict(config),
        work_dir,
        checkpoint=checkpoint,
        tokenizer=tokenizer_dir,
        data_keys=data_keys,
    )
    names = [finetune_step(variant, task_name), *(alongside or [])]
    log_line = _log_lines()
    if len(names) == 1:
        return metrics_of(run_step(plan, names[0], parent_run_id, log_line=log_line).path)
    unknown = [
        n for n in names if n not in plan.steps or not isinstance(plan.steps[n].job, finetune.Job)
    ]
    if unknown or len(set(names)) < len(names):
        raise ValueError(
            f"alongside: {unknown or names} are not distinct fine-tune steps of this plan"
        )
    workers = WorkerPool(len(names), preload=WORKER_PRELOAD)
    workers.start()
    try:
        with ThreadPoolExecutor(len(names)) as threads:
            running = {
                n: threads.submit(
                    run_step, plan, n, parent_run_id, workers=workers, log_line=log_line
                )
                for n in names
            }
    finally:
        workers.shutdown()
    failures = {n: str(r.exception()) for n, r in running.items() if r.exception() is not None}
    if failures:
        lines = "\n".join(f"  {why}" for why in failures.values())
        raise RuntimeError(f"{len(failures)} of {len(names)} fine-tunes failed:\n{lines}")
    return {n: metrics_of(r.result().path) for n, r in running.items()}


@flow(
    name="gpt1-finetune-all",
    # Prefect's own types refuse its ThreadPoolTaskRunner here (PrefectHQ/prefect#16938)
    task_runner=ThreadPoolTaskRunner(max_workers=STEP_THREADS),  # type: ignore[arg-type]
    log_prints=True,
    result_serializer="json",
)
def finetune_all(
    checkpoint: str,
    tokenizer_dir: str | None = None,
    preset: Preset = "paper",
    overrides: list[Override] | None = None,
    work_dir: str = WORK_DIR,
) -> str:
    """Re-run the fine-tunes and the report from an existing pre-trained checkpoint (and its tokenizer:
    `tokenizer_dir`, else the checkpoint's own tokenizer.json)."""
    return _run_plan(
        plan_run(
            load_config(preset, overrides), work_dir, checkpoint=checkpoint, tokenizer=tokenizer_dir
        )
    )
