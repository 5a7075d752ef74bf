"""The GPT-1 run, top to bottom: one function wires every job to the outputs it reads.

    plan = gpt1.recipe.plan(load_config("smoke"), "runs/")   # this recipe, for one config
    for name in plan.steps:                                   # in order; each after the steps it reads from
        run_step(plan, name)                                  # gpt1.pipeline.run; the flows run the same steps

Each `plan.add(job)` returns a reference to the job's output folder (`WORK/<stage>/<key>`, its key computed before
anything runs); a job that holds that reference waits for it. The experiment's design (variants, seeds, the
curve, where each task's files come from) is gpt1.recipe.experiment's. Adding a stage is its module (job and
command) and one line here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gpt1.config import PipelineConfig
from gpt1.data.ingest import stage as ingest
from gpt1.data.tokenize import stage as tokenize
from gpt1.data.train_tokenizer import stage as train_tokenizer
from gpt1.pretrain import stage as pretrain
from gpt1.recipe.experiment import Experiment, finetune_step
from gpt1.sample_data import stage as sample_data
from gpt1.stages.base import stage_jobs


def plan(
    cfg: PipelineConfig,
    work: str | os.PathLike,
    checkpoint: str | os.PathLike | None = None,
    tokenizer: str | os.PathLike | None = None,
    data_keys: Mapping[str, str] | None = None,
) -> Experiment:
    """The run `cfg` describes, its folders under `work`; with `checkpoint` (and `tokenizer` when it holds none),
    fine-tunes of that model instead of this run's pre-training; `data_keys`: the tasks' content keys a parent run
    planned (Experiment)."""
    unknown = sorted(set(cfg.orchestration.retries) - set(stage_jobs()))
    if unknown:
        raise ValueError(
            f"orchestration.retries: unknown stage(s) {unknown}; stages: {list(stage_jobs())}"
        )
    return recipe(Experiment(cfg, work, checkpoint, tokenizer, data_keys))


def recipe(x: Experiment) -> Experiment:
    """Plan the run `x.cfg` describes; keeps the steps the report needs (no pre-training when every variant starts
    from a random init or a given checkpoint, no sample data when nothing reads it)."""
    cfg = x.cfg
    if "sample" in (cfg.ingest.source, cfg.finetune.data):
        x.samples = x.add(sample_data.Job(seed=cfg.sample_data.seed))

    books = x.samples.inside("books") if x.samples and cfg.ingest.source == "sample" else None
    task_files = [ingest.TaskFiles(task, *x.task_data(task)) for task in x.tasks]
    x.corpus = corpus = x.add(ingest.Job.of(cfg.ingest, books, task_files))
    x.tokenizer_out = tokenizer = x.add(train_tokenizer.Job(corpus, cfg.train_tokenizer))
    x.shards = shards = x.add(tokenize.Job.of(corpus, tokenizer, cfg))
    if x.checkpoint is None:
        x.model = x.add(pretrain.Job.of(shards, tokenizer, cfg, task_data=x.probe_data()))

    for task in x.tasks_heaviest_first():
        for variant in (v for v in x.variants if task in x.variant_tasks(v)):
            job = x.finetune_job(variant, task)
            x.add(job, name=finetune_step(variant, task), out=x.task_dir(task, variant))

    results = x.add(x.report_job(), out=x.report_dir(), force=True)
    x.keep_what_makes(results)
    return x
