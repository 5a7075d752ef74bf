"""Prefect flows: orchestration only. Every stage is a thin task over `gpt1.pipeline`.

- `gpt1` (deployments gpt1/smoke, gpt1/full, ablations): sample -> ingest -> train-tokenizer -> tokenize ->
  pretrain -> fan-out of the fine-tunes (x variants) -> report, under one MLflow parent run.
- `gpt1-finetune` (deployments gpt1-finetune/gpu, /local): one task; the cluster fan-out target.
- `gpt1-finetune-all`: fine-tune every task (and report) from a given checkpoint.

Whether a stage runs again is decided by the stage itself (its key and `.done` marker on disk, see
gpt1.stages.base), never by Prefect's cache: tasks persist no results, and a re-run's tasks find their stages
finished. Every stage still logs its MLflow child run, tagged `gpt1.cached=true` when it was already done.

Local compute of one flow run: `orchestration.finetune_concurrency` slots, shared by the fine-tunes and, while it
runs locally, pre-training (so N-1 fine-tunes run beside it, and it gets that share of the cores as its
OMP_NUM_THREADS when any do); the fine-tunes run in that many reused worker processes (gpt1.runtime.workers),
started on the run's first fine-tune and ended with the run, also when it fails. Variants that fine-tune from a
random init (the no-pre-training ablation) are submitted as soon as the tokenizer and shards are there, beside
pre-training; the others after it; the report after all.

Choices where the spec is silent:
- Pre-training takes its slot before the early fine-tunes are submitted, so it never queues behind them.
- If pre-training fails, the fine-tunes already running beside it are let finish (their results stay for the
  re-run) before the flow run fails.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from prefect import flow, get_run_logger, task
from prefect.runtime import deployment, flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff

from gpt1 import pipeline as P
from gpt1.config import PipelineConfig, load_config
from gpt1.distributed import threads_per_process
from gpt1.runtime.workers import WorkerPool
from gpt1.stages.outputs import is_done
from gpt1.tracking import RunLogger, start_pipeline_run

WORK_DIR = os.environ.get("GPT1_WORK_DIR", "runs")
# What a fine-tune worker imports once (torch, the task metrics, MLflow models), instead of once per task.
FINETUNE_PRELOAD = ("torch", "sklearn.metrics", "gpt1.stages.finetune")


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


@task(name="stage", task_run_name="{stage}", persist_result=False)
def stage_task(plan: P.Plan, stage: str, parent_run_id: str | None) -> str:
    """An in-process stage (sample, ingest, tokenizer, shards), then its MLflow child run (cached or not)."""
    result = P.run_stage(plan, stage)
    P.log_stage(plan, stage, result, parent_run_id)
    return str(result.path)


def _run_stage(plan: P.Plan, stage: str, parent_run_id: str | None) -> Path:
    return Path(_retrying(stage_task, plan.cfg, stage)(plan, stage, parent_run_id))


@task(name="pretrain", persist_result=False)
def pretrain_task(plan: P.Plan, parent_run_id: str | None, threads: str | None = None) -> str:
    result = P.run_pretrain(plan, parent_run_id, threads=threads, log_line=get_run_logger().info)
    P.log_cached_pretrain(plan, result, parent_run_id)
    return str(result.path / "final")


@task(name="finetune", task_run_name="finetune-{variant}-{name}", persist_result=False)
def finetune_task(plan: P.Plan, name: str, variant: str, parent_run_id: str | None) -> dict:
    compute = _local_compute[str(flow_run.id)]
    with compute.slots:
        metrics = P.run_finetune(plan, variant, name, parent_run_id, workers=compute.workers,
                                 log_line=get_run_logger().info)
    P.log_cached_finetune(plan, variant, name, parent_run_id)
    return metrics


@task(name="report", persist_result=False)
def report_task(plan: P.Plan, parent_run_id: str | None) -> str:
    result = P.run_report(plan, parent_run_id)
    if parent_run_id:
        P.log_results_on_parent(plan, result.path / "results.json", parent_run_id, files=result.cached)
    return str(result.path)


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
    ft = _retrying(finetune_task, plan.cfg, "finetune")
    futures = {f"{variant}/{name}": ft.submit(plan, name, variant, parent_run_id)
               for variant in variants for name in plan.cfg.finetune.tasks}

    def failures() -> dict[str, str]:
        failed = {}
        for label, future in futures.items():
            future.wait()
            if not future.state.is_completed():
                failed[label] = str(future.state.message or future.state.name)
        return failed

    return failures


def _fan_out_deployments(plan: P.Plan, variants: list[str], parent_run_id: str | None) -> dict[str, str]:
    """Cluster: one flow run of the gpt1-finetune deployment per (variant, task), all at once."""
    import asyncio

    from prefect.deployments import run_deployment

    async def one(variant: str, name: str):
        run = await run_deployment(
            plan.cfg.orchestration.finetune_deployment,
            parameters={"preset": plan.cfg.preset, "config": plan.cfg.model_dump(mode="json"), "task_name": name,
                        "variant": variant, "work_dir": str(plan.work), "parent_run_id": parent_run_id,
                        "checkpoint": str(plan.checkpoint.path) if plan.checkpoint else None,
                        "tokenizer_dir": str(plan.given_tokenizer.path) if plan.given_tokenizer else None},
            idempotency_key=f"{flow_run.id}-{variant}-{name}",
            flow_run_name=f"finetune-{variant}-{name}",
            timeout=None,
        )
        return f"{variant}/{name}", run.state

    async def all_runs():
        return await asyncio.gather(*[one(v, n) for v in variants for n in plan.cfg.finetune.tasks])

    results = asyncio.run(all_runs())
    return {label: str(state.message or state.name) for label, state in results if not state.is_completed()}


@contextlib.contextmanager
def _pretrain_slot(plan: P.Plan, compute: LocalCompute, beside: bool) -> Iterator[str | None]:
    """Pre-training running on this machine holds one local slot; yields its OMP_NUM_THREADS: its share of the
    cores when fine-tunes run beside it (`beside`), else None (the launcher's default, all cores)."""
    orch = plan.cfg.orchestration
    if orch.pretrain_launcher != "local" or is_done(plan.dir("pretrain")):
        yield None
        return
    with compute.slots:
        yield threads_per_process(compute.concurrency * orch.pretrain_nproc) if beside else None


def _parent_run(cfg: PipelineConfig) -> RunLogger:
    return start_pipeline_run(cfg, flow=flow_run.flow_name, deployment=deployment.name, flow_run=flow_run.name,
                              flow_run_id=str(flow_run.id))


def _finish(run: RunLogger, failures: dict[str, str]) -> None:
    if failures:
        run.log_dict(failures, "failures.json")
        run.set_tags({"gpt1.failed_tasks": ",".join(sorted(failures))})
    run.end("FAILED" if failures else "FINISHED")
    if failures:
        lines = "\n".join(f"  {k}: {v}" for k, v in sorted(failures.items()))
        raise RuntimeError(f"{len(failures)} fine-tune run(s) failed (the rest completed and were logged):\n{lines}")


@flow(name="gpt1", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True)
def gpt1_pipeline(preset: str = "smoke", overrides: list[str] | None = None, work_dir: str = WORK_DIR) -> str:
    """The whole GPT-1 recipe for one preset + overrides; returns the report directory."""
    cfg = load_config(preset, overrides)  # bad parameters fail here, before any stage runs
    plan = P.Plan.make(cfg, work_dir)
    run = _parent_run(cfg)
    try:
        with local_compute(plan) as compute:
            if cfg.data.source == "sample" or cfg.finetune.data == "sample":
                _run_stage(plan, "sample", run.run_id)
            for stage in ("ingest", "tokenizer", "shards"):
                _run_stage(plan, stage, run.run_id)
            early = [v for v in plan.variants if plan.from_random_init(v)]  # need no pre-training
            late = [v for v in plan.variants if v not in early]
            beside = cfg.orchestration.fanout == "local" and any(
                not is_done(plan.task_dir(t, v)) for v in early for t in cfg.finetune.tasks)
            early_failures: Callable[[], dict[str, str]] = lambda: {}  # noqa: E731
            try:
                with _pretrain_slot(plan, compute, beside) as threads:
                    early_failures = _start_fan_out(plan, early, run.run_id)
                    if late:
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


@flow(name="gpt1-finetune", log_prints=True)
def finetune_one(config: dict, task_name: str, work_dir: str = WORK_DIR, variant: str = "full",
                 parent_run_id: str | None = None, preset: str = "paper", checkpoint: str | None = None,
                 tokenizer_dir: str | None = None) -> dict:
    """One task, in this process: the unit the cluster fan-out runs on its own GPU. `checkpoint`: the parent
    fine-tunes from a given checkpoint (gpt1-finetune-all) instead of its pre-training."""
    plan = P.Plan.make(load_config(preset, config), work_dir, checkpoint=checkpoint, tokenizer=tokenizer_dir)
    metrics = P.run_finetune(plan, variant, task_name, parent_run_id, log_line=get_run_logger().info)
    P.log_cached_finetune(plan, variant, task_name, parent_run_id)
    return metrics


@flow(name="gpt1-finetune-all", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True)
def finetune_all(checkpoint: str, tokenizer_dir: str | None = None, preset: str = "paper",
                 overrides: list[str] | None = None, work_dir: str = WORK_DIR) -> str:
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
