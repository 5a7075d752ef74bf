"""The stage graph, declared once: every stage of the pipeline, in order, with what it reads and how it is run.

Everything that walks stages reads this list: the plan (gpt1.pipeline), the flows, preflight, the CLI (each stage's
name is its command), MLflow lineage and the rehearsal. A stage's one name is used everywhere: its CLI command, its
work folder `WORK/<name>/<key>`, its MLflow child run and Prefect task run, and (with `_` for `-`) its folder in the
package and its config section.

A stage's module (`module`) holds its job and the two things the pipeline and the CLI ask of it:

    def plan(plan) -> list[Step]        # the jobs this stage adds to a plan (empty: not needed for this config)
    def add_cli_args(parser) / run_cli(args)   # `gpt1 <name> ...`

Adding a stage is its folder (job, `plan`, CLI) plus one entry here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Stage:
    name: str  # the CLI command, the work folder, the MLflow and Prefect run name
    module: str  # where its job, `plan`, `add_cli_args` and `run_cli` are
    summary: str  # one line, for `gpt1 --help`
    inputs: tuple[str, ...] = ()  # stages whose outputs its jobs may read (a job may need fewer)
    section: str | None = None  # its settings in gpt1.config.PipelineConfig (None: it has none of its own)
    retries: int = 0  # how often the flow retries a failed job of this stage
    compute: bool = False  # holds one of the flow's local compute slots while it runs (training)
    in_worker: bool = False  # run in one of the flow's reused worker processes, not in the flow's own process
    logs_itself: bool = False  # its jobs log their own MLflow run (else the pipeline logs a child run for them)
    after_failures: bool = False  # runs once its inputs have finished, even if some of them failed (the report)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


STAGES: tuple[Stage, ...] = (
    Stage("sample-data", "gpt1.sample_data.stage", "write the offline sample corpus and the 12 tasks in official layouts",
          section="sample_data"),
    Stage("ingest", "gpt1.data.ingest.stage", "clean, dedup and split a corpus into Parquet documents + stats.json",
          inputs=("sample-data",), section="ingest", retries=2),
    Stage("train-tokenizer", "gpt1.data.train_tokenizer.stage", "train the GPT-1 BPE tokenizer on an ingested corpus",
          inputs=("ingest",), section="train_tokenizer", retries=1),
    Stage("tokenize", "gpt1.data.tokenize.stage", "tokenize and pack a corpus into Arrow shards + manifest.json",
          inputs=("ingest", "train-tokenizer"), section="tokenize", retries=2),
    Stage("pretrain", "gpt1.pretrain.stage", "pre-train with DeepSpeed (launches workers)",
          inputs=("tokenize", "train-tokenizer", "sample-data"), section="pretrain", retries=2, compute=True,
          logs_itself=True),
    Stage("finetune", "gpt1.finetune.stage", "fine-tune and evaluate one task from a checkpoint",
          inputs=("pretrain", "train-tokenizer", "sample-data"), section="finetune", retries=1, compute=True,
          in_worker=True, logs_itself=True),
    Stage("report", "gpt1.report.stage", "results table beside the paper's numbers (markdown + PNG)",
          inputs=("finetune",), section="report", retries=1, logs_itself=True, after_failures=True),
)


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"no stage {name!r}; stages: {names()}")


def names() -> list[str]:
    return [s.name for s in STAGES]
