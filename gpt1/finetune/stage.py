"""Stage `finetune`: fine-tune and evaluate one task from a checkpoint (gpt1.finetune does the work).

    gpt1 finetune --task NAME --data PATH --checkpoint DIR --out DIR [--preset P] [--set k=v ...]

The key hashes the starting weights, the tokenizer, the task, its data and the fine-tune settings (not the task
list nor where the data root is: adding a task or moving a folder re-runs nothing else). A fine-tune cannot resume,
so an unfinished output of the same key is cleared and run again; metrics.json is written last, and the report
trusts only finished outputs.

`InWorker(job, out)` is the same run as a picklable job for the reused worker processes of the local fan-out
(gpt1.runtime.workers), with the CLI's checks, error.json and exit codes.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpt1 import errors
from gpt1.tracking import runs as mlflow_features, logger as tracking
from gpt1.config import PipelineConfig, load_config
from gpt1.finetune.train import METRICS_FILE, PREDICTIONS_DIR, ablation_name, finetune, registered_model_name
from gpt1.io import read_json, write_json
from gpt1.model.transformer import CONFIG_NAME
from gpt1.finetune.predict import MODEL_DIR
from gpt1.stages.base import Ref, StageJob, add_output_args, input_key, run_from_args
from gpt1.stages.outputs import is_done, mark_done
from gpt1.tasks import TASKS

COMMAND, SUMMARY = "finetune", "fine-tune and evaluate one task from a checkpoint"


def data_key(data: str) -> str:
    """The content key of a task's data: a hub reference as written (pin @revision), else its files."""
    return data if data.startswith("hf:") else input_key(data)


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "finetune"
    mode: ClassVar[str] = "restart"
    record_failure: ClassVar[bool] = True  # the report lists failed tasks with their error
    task: str
    data: str  # the task's folder or file, or hf:<id>
    data_key: str
    checkpoint: Ref
    tokenizer: Ref | None  # None: the checkpoint's own tokenizer.json
    cfg: PipelineConfig  # finetune settings + tracking
    run_name: str | None = None
    parent_run_id: str | None = None
    track: bool = True
    device: str | None = None

    def identity(self) -> dict:
        return {"start": self.checkpoint.key, "tokenizer": self.tokenizer.key if self.tokenizer else None,
                "finetune": self.cfg.finetune.model_dump(exclude={"tasks", "data"}), "task": self.task,
                "data": self.data_key}

    def input_paths(self) -> dict[str, str]:
        return {**super().input_paths(), "data": self.data}

    @property
    def label(self) -> str:
        return self.run_name or f"finetune/{self.task}"

    def build(self, out: Path) -> dict:
        cfg = self.cfg
        result = finetune(self.task, self.data, self.checkpoint.path, out, cfg.finetune,
                          tokenizer_dir=self.tokenizer.path if self.tokenizer else None,
                          parent_run_id=self.parent_run_id, tracking_uri=cfg.tracking.tracking_uri,
                          experiment=cfg.tracking.experiment, run_name=self.label, track=self.track,
                          device=self.device, registered_model=registered_model_name(cfg, self.task),
                          run_tags=mlflow_features.stage_tags("finetune", key=self.key(), preset=cfg.preset))
        return {"task": self.task, "ablation": ablation_name(cfg.finetune), "eval_split": result["eval_split"],
                "primary": result["metrics"].get("primary"), "run_id": result.get("run_id")}


@dataclass(frozen=True)
class InWorker:
    """`job.run(out)` in a reused worker process: waits for a concurrent writer, exit codes as `gpt1 finetune`."""

    job: Job
    out: Path

    @property
    def label(self) -> str:
        return self.job.label

    def __call__(self) -> int:
        def run() -> int:
            self.job.run(self.out, wait=True)
            return 0

        with tracking.as_own_process():  # a fresh process's tracking state, drained at the end as at exit
            return errors.exit_code(run, prefix="gpt1 finetune")


def random_init(folder: Path, model_config: dict, key: str) -> Ref:
    """The "checkpoint" of a fine-tune from a random init (the no-pre-training ablation): a folder holding only
    the model's config (with the tokenizer's vocabulary size), marked with `key` so it is keyed like any input."""
    if not is_done(folder, key) or read_json(folder / CONFIG_NAME) != model_config:
        write_json(folder / CONFIG_NAME, model_config)
        mark_done(folder, "random-init", key)
    return Ref(folder.absolute(), key)


def metrics_of(out: Path) -> dict:
    return read_json(out / METRICS_FILE)


# -- CLI ------------------------------------------------------------------------------------------------------
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--data", required=True, help="the task's folder as distributed, a file, or hf:<id>")
    parser.add_argument("--checkpoint", required=True, type=Path,
                        help="pre-trained model folder (written by gpt1 pretrain (final/) or gpt1 convert)")
    parser.add_argument("--out", required=True, type=Path, help="output folder for this task")
    parser.add_argument("--preset", default="paper", help="config preset name or YAML file (default: paper)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. finetune.aux_lm_weight=0 (repeatable)")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer folder/file (default: the checkpoint's)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: config, $MLFLOW_TRACKING_URI, sqlite)")
    parser.add_argument("--parent-run-id", help="MLflow run to nest this task's run under")
    parser.add_argument("--run-name", help="MLflow run name (default: finetune/<task>)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--allow-eval-on-train", action="store_true",
                        help="score a split that is the training data (e.g. one file as --data), labelled as such")
    add_output_args(parser)


def job_from_args(args: argparse.Namespace) -> Job:
    overrides = list(args.overrides) + ([f"tracking.tracking_uri={args.tracking_uri}"] if args.tracking_uri else [])
    overrides += ["finetune.allow_eval_on_train=true"] if args.allow_eval_on_train else []
    return Job(args.task, str(args.data), data_key(str(args.data)), Ref.to(args.checkpoint),
               Ref.to(args.tokenizer) if args.tokenizer else None, load_config(args.preset, overrides),
               run_name=args.run_name, parent_run_id=args.parent_run_id, track=not args.no_tracking,
               device=args.device)


def run_cli(args: argparse.Namespace) -> int:
    result = run_from_args(job_from_args(args), args)
    metrics = metrics_of(result.path)
    scores = ", ".join(f"{k} {v:.2f}" for k, v in metrics["metrics"].items())
    rows = metrics["evaluated_on"]
    on = f"{rows['split']}, {rows['rows']} rows" + (", TRAINING ROWS" if metrics["eval_on_training_rows"] else "")
    print(f"{args.task} ({on}): {scores}; majority baseline {metrics['majority']['primary']:.2f}")
    print(f"wrote {result.path}/{METRICS_FILE}, {PREDICTIONS_DIR}/, {MODEL_DIR}/")
    return 0
