"""Prefect flows: orchestration only. Every stage is a thin task over `gpt1.pipeline`.

- `gpt1` (deployments gpt1/smoke, gpt1/full, ablations): sample -> ingest -> train-tokenizer -> tokenize ->
  pretrain -> fan-out of the fine-tunes (x variants) -> report, under one MLflow parent run.
- `gpt1-finetune` (deployments gpt1-finetune/gpu, /local): one task; the cluster fan-out target.
- `gpt1-finetune-all`: fine-tune every task (and report) from a given checkpoint.

Caching: each task's Prefect cache key is the stage's content key from `gpt1.pipeline.Plan`, and the stage
directories carry `.done` markers, so a re-run skips finished stages even when Prefect's result store is gone
(and a cached result whose stage directory is no longer finished is recomputed, not trusted).

Local compute of one flow run: `orchestration.finetune_concurrency` slots, shared by the fine-tunes and, while it
runs locally, pre-training (so N-1 fine-tunes run beside it, and it gets that share of the cores as its
OMP_NUM_THREADS when any do); the fine-tunes run in that many reused worker processes (`gpt1.pipeline.
FinetuneWorkers`), started on the run's first fine-tune and ended with the run, also when it fails. Variants that
fine-tune from a random init (the no-pre-training ablation) are submitted as soon as the tokenizer and shards are
there, beside pre-training; the others after it; the report after all.

Choices where the spec is silent:
- Pre-training takes its slot before the early fine-tunes are submitted, so it never queues behind them.
- If pre-training fails, the fine-tunes already running beside it are let finish (their results stay cached for
  the re-run) before the flow run fails.
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
from gpt1.io import stable_hash
from gpt1.tracking import RunLogger

WORK_DIR = os.environ.get("GPT1_WORK_DIR", "runs")


@dataclass
class LocalCompute:
    """One flow run's local compute: its slots (fine-tunes, and pre-training while it runs here) and the worker
    processes its fine-tunes run in. Tasks run in threads of the flow's process and find it by flow run id."""

    slots: threading.Semaphore
    workers: P.FinetuneWorkers
    concurrency: int


_local_compute: dict[str, LocalCompute] = {}


@contextlib.contextmanager
def local_compute(plan: P.Plan) -> Iterator[LocalCompute]:
    """This flow run's LocalCompute, for the duration of the flow; its workers are shut down at the end."""
    n = plan.cfg.orchestration.finetune_concurrency
    compute = LocalCompute(threading.Semaphore(n), P.FinetuneWorkers(n), n)
    _local_compute[str(flow_run.id)] = compute
    try:
        yield compute
    finally:
        _local_compute.pop(str(flow_run.id), None)
        compute.workers.shutdown()


def _key(stage: str):
    """Prefect cache key: the stage's content key, in this work dir (another work dir has its own outputs)."""
    return lambda _ctx, params: f"gpt1-{stage}-{params['plan'].keys[stage]}-{stable_hash(str(params['plan'].work))}"


def _stage_task(stage: str, fn):
    """A Prefect task for an in-process stage, cached by content key."""

    @task(name=stage, cache_key_fn=_key(stage), persist_result=True)
    def run(plan: P.Plan, *inputs: Path) -> Path:
        return fn(plan, *inputs)

    return run


def _uri(cfg: PipelineConfig) -> str | None:
    return cfg.tracking.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")


def _retrying(t, cfg: PipelineConfig, stage: str):
    n = cfg.orchestration.retries.get(stage, 0)
    return t.with_options(retries=n, retry_delay_seconds=exponential_backoff(cfg.orchestration.retry_delay_seconds)
                          if n else 0)


def _stage(t, plan: P.Plan, stage: str):
    """A cached stage task that trusts Prefect's cache only while the stage's output is still finished on disk
    (a deleted or half-written stage directory re-runs instead of returning a stale path)."""
    return _retrying(t, plan.cfg, stage).with_options(refresh_cache=not P.is_done(plan.dir(stage)))


sample_task = _stage_task("sample", lambda plan: P.run_sample_data(plan))
ingest_task = _stage_task("ingest", lambda plan: P.run_ingest(plan))
tokenizer_task = _stage_task("tokenizer", P.run_train_tokenizer)
shards_task = _stage_task("shards", P.run_tokenize)
STAGE_TASKS = {"sample": sample_task, "ingest": ingest_task, "tokenizer": tokenizer_task, "shards": shards_task}


def _run_stage(plan: P.Plan, stage: str, parent_run_id: str | None, *inputs: Path) -> Path:
    """Run (or take from cache) an in-process stage, then log its MLflow child run. The logging sits outside the
    Prefect task so a re-run served from Prefect's cache still shows every stage (tagged gpt1.cached=true)."""
    cached = P.is_done(plan.dir(stage))
    out = _stage(STAGE_TASKS[stage], plan, stage)(plan, *inputs)
    P.log_stage(plan, stage, out, tracking_uri=_uri(plan.cfg), parent_run_id=parent_run_id, cached=cached)
    return out


@task(name="pretrain", cache_key_fn=_key("pretrain"), persist_result=True)
def pretrain_task(plan: P.Plan, parent_run_id: str | None, shards: Path, tokenizer_dir: Path,
                  threads: str | None = None) -> Path:
    logger = get_run_logger()
    return P.run_pretrain(plan, shards, tokenizer_dir, tracking_uri=_uri(plan.cfg), parent_run_id=parent_run_id,
                          log_line=logger.info, threads=threads)


@task(name="finetune", task_run_name="finetune-{variant}-{name}")
def finetune_task(plan: P.Plan, name: str, variant: str, checkpoint: Path, tokenizer_dir: Path,
                  parent_run_id: str | None) -> dict:
    logger = get_run_logger()
    compute = _local_compute[str(flow_run.id)]
    with compute.slots:
        return P.run_finetune(plan, name, checkpoint, tokenizer_dir, variant, tracking_uri=_uri(plan.cfg),
                              parent_run_id=parent_run_id, log_line=logger.info, workers=compute.workers)


@task(name="report")
def report_task(plan: P.Plan, parent_run_id: str | None) -> Path:
    return P.run_report(plan, tracking_uri=_uri(plan.cfg), parent_run_id=parent_run_id,
                        log_line=get_run_logger().info)


def _start_fan_out(plan: P.Plan, variants: list[str], checkpoints: dict[str, Path], tokenizer_dir: Path,
                   parent_run_id: str | None) -> Callable[[], dict[str, str]]:
    """Submit every (variant, task), each variant from its checkpoint; returns a function that waits for them all
    and returns the failures by name. One failure never stops the others."""
    if not variants:
        return lambda: {}
    if plan.cfg.orchestration.fanout == "deployment":
        runner = ThreadPoolExecutor(1, thread_name_prefix="fan-out")
        # In this flow run's context: run_deployment and flow_run.id (the idempotency keys) read it.
        pending = runner.submit(contextvars.copy_context().run, _fan_out_deployments, plan, variants, checkpoints,
                                tokenizer_dir, parent_run_id)
        runner.shutdown(wait=False)
        return pending.result
    ft = _retrying(finetune_task, plan.cfg, "finetune")
    futures = {
        f"{variant}/{name}": ft.submit(plan, name, variant, checkpoints[variant], tokenizer_dir, parent_run_id)
        for variant in variants
        for name in plan.cfg.finetune.tasks
    }

    def failures() -> dict[str, str]:
        failed = {}
        for label, future in futures.items():
            future.wait()
            if not future.state.is_completed():
                failed[label] = str(future.state.message or future.state.name)
        return failed

    return failures


def _fan_out_deployments(plan: P.Plan, variants: list[str], checkpoints: dict[str, Path], tokenizer_dir: Path,
                         parent_run_id: str | None) -> dict[str, str]:
    """Cluster: one flow run of the gpt1-finetune deployment per (variant, task), all at once."""
    import asyncio

    from prefect.deployments import run_deployment

    async def one(variant: str, name: str):
        run = await run_deployment(
            plan.cfg.orchestration.finetune_deployment,
            parameters={"preset": plan.cfg.preset, "config": plan.variant_config(variant).model_dump(mode="json"),
                        "task_name": name, "variant": variant, "checkpoint": str(checkpoints[variant]),
                        "tokenizer_dir": str(tokenizer_dir), "work_dir": str(plan.work),
                        "parent_run_id": parent_run_id,
                        "external_checkpoint": plan.external_checkpoint is not None},
            idempotency_key=f"{flow_run.id}-{variant}-{name}",
            flow_run_name=f"finetune-{variant}-{name}",
            timeout=None,
        )
        return f"{variant}/{name}", run.state

    async def all_runs():
        jobs = [one(v, n) for v in variants for n in plan.cfg.finetune.tasks]
        return await asyncio.gather(*jobs)

    results = asyncio.run(all_runs())
    return {label: str(state.message or state.name) for label, state in results if not state.is_completed()}


@contextlib.contextmanager
def _pretrain_slot(plan: P.Plan, compute: LocalCompute, beside: bool) -> Iterator[str | None]:
    """Pre-training running on this machine holds one local slot; yields its OMP_NUM_THREADS: its share of the
    cores when fine-tunes run beside it (`beside`), else None (the launcher's default, all cores)."""
    orch = plan.cfg.orchestration
    if orch.pretrain_launcher != "local" or P.is_done(plan.dir("pretrain")):
        yield None
        return
    with compute.slots:
        yield threads_per_process(compute.concurrency * orch.pretrain_nproc) if beside else None


def _parent_run(cfg: PipelineConfig, name: str) -> RunLogger:
    from gpt1.config import flatten

    run = RunLogger(name, experiment=cfg.tracking.experiment, uri=_uri(cfg), tags={
        "prefect.flow_run_id": str(flow_run.id), "prefect.deployment": str(deployment.name or "(none)"),
        "gpt1.preset": cfg.preset})
    run.log_params(flatten(cfg.model_dump(mode="json")))
    return run


def _finish(plan: P.Plan, run: RunLogger, failures: dict[str, str]) -> None:
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
    run = _parent_run(cfg, f"gpt1-{cfg.preset}")
    try:
        with local_compute(plan) as compute:
            if cfg.data.source == "sample" or cfg.finetune.data == "sample":
                _run_stage(plan, "sample", run.run_id)
            corpus = _run_stage(plan, "ingest", run.run_id)
            tok = _run_stage(plan, "tokenizer", run.run_id, corpus)
            shards = _run_stage(plan, "shards", run.run_id, corpus, tok)
            early = [v for v in plan.variants if plan.from_random_init(v)]  # need no pre-training
            late = [v for v in plan.variants if v not in early]
            beside = cfg.orchestration.fanout == "local" and any(
                not P.is_done(plan.task_dir(t, v)) for v in early for t in cfg.finetune.tasks)
            early_failures: Callable[[], dict[str, str]] = lambda: {}  # noqa: E731
            try:
                with _pretrain_slot(plan, compute, beside) as threads:
                    early_failures = _start_fan_out(plan, early, {v: P.write_random_init(plan, v, tok)
                                                                  for v in early}, tok, run.run_id)
                    checkpoint = _stage(pretrain_task, plan, "pretrain")(plan, run.run_id, shards, tok, threads)
            except Exception:
                early_failures()  # fine-tunes running beside a failed pre-training finish (kept for the re-run)
                raise
            failures = _start_fan_out(plan, late, dict.fromkeys(late, checkpoint), tok, run.run_id)()
            failures.update(early_failures())
            report = _retrying(report_task, cfg, "report")(plan, run.run_id)
    except BaseException:
        run.end("FAILED")
        raise
    _finish(plan, run, failures)
    return str(report)


@flow(name="gpt1-finetune", log_prints=True)
def finetune_one(config: dict, task_name: str, checkpoint: str, tokenizer_dir: str, work_dir: str = WORK_DIR,
                 variant: str = "full", parent_run_id: str | None = None, preset: str = "paper",
                 external_checkpoint: bool = False) -> dict:
    """One task: the unit the cluster fan-out runs on its own GPU, as a `gpt1 finetune` subprocess (one task: no
    worker to reuse). `external_checkpoint`: the parent fine-tunes from a given checkpoint (gpt1-finetune-all), so
    the task directory is keyed by that checkpoint, as the parent's report expects."""
    cfg = load_config(preset, config)
    plan = P.Plan.make(cfg, work_dir, checkpoint=checkpoint if external_checkpoint else None)
    return P.run_finetune(plan, task_name, Path(checkpoint), Path(tokenizer_dir), variant,
                          tracking_uri=_uri(cfg), parent_run_id=parent_run_id, log_line=get_run_logger().info)


@flow(name="gpt1-finetune-all", task_runner=ThreadPoolTaskRunner(max_workers=16), log_prints=True)
def finetune_all(checkpoint: str, tokenizer_dir: str, preset: str = "paper", overrides: list[str] | None = None,
                 work_dir: str = WORK_DIR) -> str:
    """Re-run the fine-tune fan-out and the report from an existing pre-trained checkpoint."""
    cfg = load_config(preset, overrides)
    plan = P.Plan.make(cfg, work_dir, checkpoint=checkpoint)
    run = _parent_run(cfg, f"gpt1-{cfg.preset}-finetune")
    try:
        with local_compute(plan):
            if cfg.finetune.data == "sample":
                _run_stage(plan, "sample", run.run_id)
            failures = _start_fan_out(plan, plan.variants, dict.fromkeys(plan.variants, Path(checkpoint)),
                                      Path(tokenizer_dir), run.run_id)()
            report = report_task(plan, run.run_id)
    except BaseException:
        run.end("FAILED")
        raise
    _finish(plan, run, failures)
    return str(report)
