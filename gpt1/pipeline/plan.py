"""The whole recipe for one config: every stage's job and folder planned before anything runs, then run.

    plan = Plan.make(load_config("smoke"), "runs/")
    for stage in ("sample", "ingest", "tokenizer", "shards"):
        run_stage(plan, stage)
    run_pretrain(plan); run_finetune(plan, "full", "sst2"); run_report(plan)

Each stage writes `WORK/<stage>/<key>`, named by the key its own job computes (gpt1.stages.base): the key hashes
the stage's settings and its inputs' keys, so a changed parameter re-runs exactly what depends on it, and the
stage job, the only place that decides, skips what is finished. Fine-tunes of a variant (the full run and each
ablation of `orchestration.ablations`) share `WORK/finetune/<variant key>/<task>`. The flows (flows/pipeline.py)
call these functions as Prefect tasks; nothing here imports Prefect.

Variants that fine-tune from a random init (the no-pre-training ablation) do not depend on pre-training: they
start from `WORK/random-init/<key>`, the model config with the tokenizer's vocabulary, keyed by the model settings
and the tokenizer. With a given checkpoint (`Plan.make(..., checkpoint=)`) the architecture is
that checkpoint's, so every variant starts from it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from gpt1 import tasks
from gpt1.data.train_tokenizer import bpe
from gpt1.config import FinetuneConfig, PipelineConfig, flatten
from gpt1.io import read_json, size_on_disk, stable_hash
from gpt1.runtime.workers import JobFailed, WorkerDied, WorkerPool
from gpt1.finetune import stage as finetune
from gpt1.data.ingest import stage as ingest
from gpt1.pretrain import stage as pretrain
from gpt1.report import stage as report
from gpt1.sample_data import stage as sample
from gpt1.data.tokenize import stage as shards
from gpt1.data.train_tokenizer import stage as train_tokenizer
from gpt1.stages.base import Ref, Result
from gpt1.stages.outputs import ERROR
from gpt1.tracking.logger import RunLogger

VARIANTS = ("full", "no_pretrain", "no_aux_lm", "transfer_layers")  # the paper's Table 5 and Fig. 2 (left)


def variant_config(cfg: PipelineConfig, variant: str) -> PipelineConfig:
    """`cfg` with the fine-tune settings of one Table 5 variant: as configured, or one ablation of it."""
    changes = {"full": {}, "no_pretrain": {"from_scratch": True}, "no_aux_lm": {"aux_lm_weight": 0.0},
               "transfer_layers": {"transfer_layers": cfg.orchestration.ablation_transfer_layers}}[variant]
    return cfg.model_copy(update={"finetune": cfg.finetune.model_copy(update=changes)})


@dataclass
class Plan:
    """Every stage's job and folder for one config and work dir."""

    cfg: PipelineConfig
    work: Path
    jobs: dict
    checkpoint: Ref | None = None  # fine-tune from this model instead of this plan's pre-training
    given_tokenizer: Ref | None = None  # with `checkpoint`: its tokenizer when the checkpoint holds none

    @classmethod
    def make(cls, cfg: PipelineConfig, work: str | os.PathLike, checkpoint: str | os.PathLike | None = None,
             tokenizer: str | os.PathLike | None = None) -> "Plan":
        plan = cls(cfg, Path(work).absolute(), {}, Ref.to(checkpoint) if checkpoint else None,
                   Ref.to(tokenizer) if tokenizer else None)
        jobs, d = plan.jobs, cfg.ingest
        jobs["sample"] = sample.Job(seed=cfg.sample_data.seed)
        books = plan.ref("sample").inside("books")
        source = (str(books), books.key) if d.source == "sample" else (d.source, ingest.source_key(d.source))
        jobs["ingest"] = ingest.Job(*source, d)
        jobs["tokenizer"] = train_tokenizer.Job(plan.ref("ingest"), cfg.train_tokenizer)
        jobs["shards"] = shards.Job(plan.ref("ingest"), plan.ref("tokenizer"), n_ctx=cfg.model.n_ctx,
                                    shard_rows=cfg.tokenize.shard_rows, workers=cfg.tokenize.workers)
        o = cfg.orchestration
        jobs["pretrain"] = pretrain.Job(plan.ref("shards"), plan.ref("tokenizer"), cfg, task_data=plan.probe_data(),
                                        resume="auto", nproc=o.pretrain_nproc, nnodes=o.pretrain_nnodes,
                                        launcher=o.pretrain_launcher)
        return plan

    def ref(self, stage: str) -> Ref:
        """A stage's output as the input of the next: its folder and its planned key."""
        return Ref(self.dir(stage), self.jobs[stage].key())

    def dir(self, stage: str) -> Path:
        return self.work / stage / self.jobs[stage].key()

    # -- fine-tuning ---------------------------------------------------------------------------------------------
    @property
    def variants(self) -> list[str]:
        return ["full", *self.cfg.orchestration.ablations]

    def finetune_config(self, variant: str) -> FinetuneConfig:
        return variant_config(self.cfg, variant).finetune

    def variant_config(self, variant: str) -> PipelineConfig:
        return variant_config(self.cfg, variant)

    def from_random_init(self, variant: str) -> bool:
        """Fine-tunes a randomly initialised model of this plan's architecture: needs the tokenizer only."""
        return self.finetune_config(variant).from_scratch and self.checkpoint is None

    def start(self, variant: str) -> Ref:
        """What a variant fine-tunes from: the given checkpoint, pre-training's final/, or a random init (shared by
        every from-scratch variant of this architecture and tokenizer)."""
        if self.checkpoint is not None:
            return self.checkpoint
        if self.from_random_init(variant):
            key = stable_hash({"random_init": self.cfg.model.model_dump(exclude={"vocab_size"}),
                               "tokenizer": self.ref("tokenizer").key})
            return Ref(self.work / "random-init" / key, key)
        return self.ref("pretrain").inside(pretrain.FINAL)

    @property
    def tokenizer(self) -> Ref | None:
        """The fine-tunes' tokenizer: this plan's, or with a given checkpoint the one given (None: its own)."""
        return self.given_tokenizer if self.checkpoint is not None else self.ref("tokenizer")

    def variant_dir(self, variant: str) -> Path:
        settings = self.finetune_config(variant).model_dump(exclude={"tasks", "data", "task_data"})
        tokenizer_key = self.tokenizer.key if self.tokenizer else None
        # Where each task's data is read from is in the key: another data folder gets another folder, never one
        # holding a result of other inputs. (Its content is in each task's own stage key: files edited in place
        # are refused there, by name, rather than silently mixing results across a running flow's tasks.)
        data = {task: self.task_source(task) for task in self.tasks}
        return self.work / "finetune" / stable_hash({"start": self.start(variant).key, "finetune": settings,
                                                     "tokenizer": tokenizer_key, "data": data})

    def task_dir(self, task: str, variant: str = "full") -> Path:
        return self.variant_dir(variant) / task

    def task_source(self, task: str) -> str:
        """Where a task's files are: its own `finetune.task_data` entry, else the generated sample data, a folder of
        official layouts, or its hub id (`finetune.data`)."""
        spec, source = tasks.get(task), self.cfg.finetune.data
        if task in self.cfg.finetune.task_data:
            return self.cfg.finetune.task_data[task]
        if source == "sample":
            return str(self.dir("sample") / "tasks" / spec.folder)
        return spec.hf_id if source == "hf" else str(Path(source) / spec.folder)

    def task_data(self, task: str) -> tuple[str, str]:
        """(where a task's files are, their content key)."""
        where = self.task_source(task)
        if self.cfg.finetune.data == "sample" and task not in self.cfg.finetune.task_data:
            return where, self.ref("sample").inside(f"tasks/{tasks.get(task).folder}").key  # not written yet
        return where, finetune.data_key(where)

    def finetune_job(self, variant: str, task: str, parent_run_id: str | None = None) -> finetune.Job:
        data, data_key = self.task_data(task)
        return finetune.Job(task, data, data_key, self.start(variant), self.tokenizer,
                            self.variant_config(variant), run_name=f"{variant}/{task}", parent_run_id=parent_run_id)

    def missing_data(self) -> dict[str, str]:
        """Tasks left out because their files are not there (`finetune.missing_data=skip`), and why."""
        if self.cfg.finetune.missing_data != "skip":
            return {}
        missing = {}
        for task in self.cfg.finetune.tasks:
            where = self.task_source(task)
            if not where.startswith("hf:") and not (self.cfg.finetune.data == "sample"
                                                    and task not in self.cfg.finetune.task_data):
                if not Path(where).exists():
                    missing[task] = f"no files at {where}"
        return missing

    @property
    def tasks(self) -> list[str]:
        """The tasks this plan fine-tunes: finetune.tasks but the missing ones it may skip."""
        return [t for t in self.cfg.finetune.tasks if t not in self.missing_data()]

    def tasks_heaviest_first(self) -> list[str]:
        """`tasks`, the likely longest fine-tunes first, so that a fan-out with fewer slots than tasks does not end
        on a long task that started last (RACE did in the demo). The estimate is the bytes of the task's local
        files times its answers per example (each answer is a sequence through the model); a hub source counts
        as one byte, so hub tasks keep their configured order among themselves."""

        def weight(task: str) -> int:
            return (size_on_disk(self.task_source(task)) or 1) * (tasks.get(task).n_choices or 1)

        return sorted(self.tasks, key=weight, reverse=True)  # stable: equal weights keep finetune.tasks' order

    def probe_data(self) -> str | None:
        """Where pre-training's zero-shot probes read task folders (None: the hub, per finetune.data)."""
        source = self.cfg.finetune.data
        return str(self.dir("sample") / "tasks") if source == "sample" else None if source == "hf" else source

    def report_dir(self) -> Path:
        return self.work / "report" / stable_hash([str(self.variant_dir(v)) for v in self.variants])


# -- running stages -------------------------------------------------------------------------------------------------
def run_stage(plan: Plan, stage: str) -> Result:
    """Sample, ingest, tokenizer or shards, in this process (waiting if another run is making the same output)."""
    return plan.jobs[stage].run(plan.dir(stage), wait=True)


def run_pretrain(plan: Plan, parent_run_id: str | None = None, *, threads: str | None = None,
                 log_line: Callable[[str], None] = print) -> Result:
    """Pre-training: local workers (`threads`: their OMP_NUM_THREADS beside fine-tunes) or the Slurm job; found
    finished, its recorded metrics as a cached child run of the parent."""
    job = replace(plan.jobs["pretrain"], parent_run_id=parent_run_id, threads=threads, log_line=log_line)
    result = job.run(plan.dir("pretrain"), wait=True)
    log_cached_pretrain(plan, result, parent_run_id)
    return result


def prepare_start(plan: Plan, variant: str) -> Ref:
    """The random init a variant starts from, written now that the tokenizer (its vocabulary) exists."""
    start = plan.start(variant)
    if plan.from_random_init(variant):
        vocab = bpe.load(plan.dir("tokenizer")).vocab_size
        finetune.random_init(start.path, plan.cfg.model.model_copy(update={"vocab_size": vocab}).model_dump(),
                             start.key)
    return start


def run_finetune(plan: Plan, variant: str, task: str, parent_run_id: str | None = None, *,
                 workers: WorkerPool | None = None, log_line: Callable[[str], None] = print) -> dict:
    """One task's fine-tune + evaluation; returns its metrics.json. In a worker of `workers` when given (the local
    fan-out), else in this process (the cluster's one-task flow). A failure names its cause (error.json). Found
    finished by an earlier run, its recorded metrics become a cached child run of the parent."""
    job, out = plan.finetune_job(variant, task, parent_run_id), plan.task_dir(task, variant)
    label = f"{variant}/{task}"
    started = time.time()
    try:
        if workers is not None:
            workers.run(finetune.InWorker(job, out), lambda line: log_line(f"[{label}] {line}"))
        else:
            job.run(out, wait=True)
    except (JobFailed, WorkerDied) as err:
        error = out / ERROR
        if error.is_file() and error.stat().st_mtime >= started:
            raise RuntimeError(f"{label}: {read_json(error)['error']} ({err})") from None
        raise RuntimeError(f"{label}: {err}") from None
    log_cached_finetune(plan, variant, task, parent_run_id)
    return finetune.metrics_of(out)


def run_report(plan: Plan, parent_run_id: str | None = None) -> Result:
    """The results of every variant beside the paper's; logged on the parent run (redone when a result changed)."""
    variants = [v for v in plan.variants if plan.variant_dir(v).is_dir()]
    job = report.Job(tuple(report.results_ref(plan.variant_dir(v)) for v in variants), tuple(variants),
                     tuple(sorted(plan.missing_data().items())), parent_run_id=parent_run_id,
                     tracking_uri=plan.cfg.tracking.tracking_uri)
    return job.run(plan.report_dir(), wait=True, force=True)


# -- MLflow ---------------------------------------------------------------------------------------------------------
def log_stage(plan: Plan, stage: str, result: Result, parent_run_id: str | None) -> None:
    """A child MLflow run per in-process stage: its settings, numeric outputs, lineage and key (cached or not).
    The tokenizer stage also records on the parent run the values the later stages really use (`resolved.*`
    params): the vocabulary learnt (the model's vocab_size) and the merges learnt, beside the config as asked."""
    from gpt1.tracking.runs import stage_tags

    cfg = plan.cfg
    section = {"sample": "sample_data", "ingest": "ingest", "tokenizer": "train_tokenizer", "shards": "tokenize"}[stage]
    run = RunLogger(stage, experiment=cfg.tracking.experiment, uri=cfg.tracking.tracking_uri,
                    parent_run_id=parent_run_id,
                    tags=stage_tags(stage, key=result.key, preset=cfg.preset, cached=result.cached))
    run.log_params({f"{section}.{k}": v for k, v in flatten(getattr(cfg, section).model_dump()).items()})
    numbers = {k: v for k, v in flatten(result.marker).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    run.log_metrics({k.replace("[", "_").replace("]", ""): v for k, v in numbers.items()})
    job = plan.jobs[stage]
    if stage == "ingest":
        run.log_dataset("source", job.source_key, corpus_source(job.source), context="input")
    for name, value in vars(job).items():
        if isinstance(value, Ref):
            run.log_dataset(name, value.key, str(value.path), context="input")
    run.log_dataset(f"{stage}-output", result.key, str(result.path), context="output")
    for name in ("stats.json", "manifest.json", bpe.STATS_FILE):
        if (result.path / name).exists():
            run.log_artifact(result.path / name)
    run.end()
    if stage == "tokenizer" and parent_run_id:
        stats = result.marker["stats"]
        parent = RunLogger("parent", uri=cfg.tracking.tracking_uri, run_id=parent_run_id)
        parent.log_params({"resolved.train_tokenizer.merges": stats["merges"],
                           "resolved.train_tokenizer.vocab_size": stats["vocab_size"],
                           "resolved.model.vocab_size": stats["vocab_size"]})
        parent.flush()


def corpus_source(spec: str):
    """The ingest source as an `mlflow.data` source: hub id, split and revision for hub data, else the path."""
    from gpt1.data.ingest.ingest import HFSource
    from gpt1.tracking.runs import hub_dataset_source

    if spec.startswith("hf:"):
        source = HFSource(spec)
        if not source.local:
            return hub_dataset_source(source.id, split=source.split, revision=source.revision)
        return str(source.folder.resolve())
    return spec


def log_cached_pretrain(plan: Plan, result: Result, parent_run_id: str | None) -> None:
    """Pre-training found finished (`result.cached`) still shows under the parent: a child run `pretrain` with its
    recorded metrics, tagged `gpt1.cached=true` (a pre-training that ran logged its own run)."""
    from gpt1.pretrain.outputs import log_finished
    from gpt1.tracking.runs import stage_tags

    if not result.cached or not parent_run_id:
        return
    cfg = plan.cfg
    log_finished(result.path, parent_run_id=parent_run_id, experiment=cfg.tracking.experiment,
                 tracking_uri=cfg.tracking.tracking_uri,
                 tags=stage_tags("pretrain", key=result.key, preset=cfg.preset, cached=True))


def log_cached_finetune(plan: Plan, variant: str, task: str, parent_run_id: str | None) -> None:
    """A fine-tune found finished still shows under the parent: unless its metrics.json says it was logged under
    this parent (it ran in this flow run), a child run `<variant>/<task>` with its recorded metrics, tagged
    `gpt1.cached=true`."""
    from gpt1.finetune.train import log_finished
    from gpt1.stages.outputs import read_marker
    from gpt1.tracking.runs import stage_tags

    out = plan.task_dir(task, variant)
    if not parent_run_id or read_json(out / finetune.METRICS_FILE).get("parent_run_id") == parent_run_id:
        return
    cfg = plan.cfg
    log_finished(out, run_name=f"{variant}/{task}", parent_run_id=parent_run_id,
                 experiment=cfg.tracking.experiment, tracking_uri=cfg.tracking.tracking_uri,
                 tags=stage_tags("finetune", key=(read_marker(out) or {}).get("key"), preset=cfg.preset, cached=True))


def log_results_on_parent(plan: Plan, results_json: Path, parent_run_id: str, *, files: bool = False) -> None:
    """Headline metrics on the pipeline's parent run, named alike in every run so MLflow's compare view lines
    up runs and ablation deployments: `task/<task>/<metric>`, `glue_score` (and `<variant>/...` for ablations).
    `files`: also the report's files (results.md/png/json under `report/`), for a report an earlier run wrote
    (a report built now logs them itself)."""
    metrics: dict[str, float] = {}
    for variant, result in read_json(results_json)["runs"].items():
        prefix = "" if variant == "full" else f"{variant}/"
        for task, entry in result.get("tasks", {}).items():
            for name, value in (entry.get("metrics") or {}).items():
                metrics[f"{prefix}task/{task}/{name}"] = value
        if result.get("glue_score") is not None:
            metrics[f"{prefix}glue_score"] = result["glue_score"]
    run = RunLogger("report", experiment=plan.cfg.tracking.experiment, uri=plan.cfg.tracking.tracking_uri,
                    run_id=parent_run_id)
    run.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    if files:
        from gpt1.report.render import REPORT_JSON, REPORT_MD, REPORT_PNG

        for name in (REPORT_JSON, REPORT_MD, REPORT_PNG):
            run.log_artifact(results_json.parent / name, "report")
    run.flush()
