"""Stage `finetune`: fine-tune and evaluate one task from a checkpoint (train.py beside it does the work).

    gpt1 finetune --task NAME --data PATH --checkpoint DIR --out DIR [--preset P] [--set k=v ...]

The key hashes the starting weights, the tokenizer, the task, its data (by content) and the fine-tune settings off
their default (not the task list, nor where any task's data is: adding a task, giving another task other data or
adding a setting at its default re-runs nothing else). A fine-tune cannot resume, so an unfinished output of the
same key is cleared and run again; metrics.json is written last, and the report trusts only finished outputs.
The training code (torch, MLflow) is imported where a job runs, so declaring the stage (`gpt1 --help`) stays fast.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpt1.config import Override, PipelineConfig, Setting, load_config
from gpt1.io import read_json, write_json
from gpt1.model.files import CONFIG_NAME
from gpt1.stages.base import (
    Ref,
    Result,
    StageJob,
    add_config_args,
    add_output_args,
    data_key,
    keyed_settings,
    run_from_args,
)
from gpt1.stages.outputs import is_done, mark_done, read_marker
from gpt1.tasks import TASKS
from gpt1.tokenizer import bpe
from gpt1.tracking import runs

# FinetuneConfig fields that are not a fine-tune's settings: which tasks and data a run has and whether it skips a
# task whose files are missing, how many seeds it fans out (each fine-tune has its own `seed`): outside every
# fine-tune's key (a task's data is in it by content).
NOT_FINETUNE_SETTINGS = {"tasks", "data", "task_data", "missing_data", "seeds"}


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "finetune"
    summary: ClassVar[str] = "fine-tune and evaluate one task from a checkpoint"
    section: ClassVar[str] = "finetune"
    retries: ClassVar[int] = 1
    compute: ClassVar[bool] = True
    in_worker: ClassVar[bool] = True
    logs_itself: ClassVar[bool] = True
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
    random_init: dict | None = (
        None  # a model config: `checkpoint` is that model randomly initialised (written first)
    )

    def identity(self) -> dict:
        return {
            "start": self.checkpoint.key,
            "tokenizer": self.tokenizer.key if self.tokenizer else None,
            "finetune": keyed_settings(self.cfg.finetune, exclude=NOT_FINETUNE_SETTINGS),
            "task": self.task,
            "data": self.data_key,
        }

    def input_paths(self) -> dict[str, str]:
        return {**super().input_paths(), "data": self.data}

    @property
    def label(self) -> str:
        return self.run_name or f"finetune-{self.task}"

    def build(self, out: Path) -> dict:
        from gpt1.finetune.train import FinetuneRun, ablation_name, finetune, registered_model_name

        cfg = self.cfg
        if (
            self.random_init is not None
        ):  # the vocabulary is the tokenizer's, known once it is trained
            assert self.tokenizer is not None  # a random init is planned with the run's tokenizer
            vocab = bpe.load(self.tokenizer.path).vocab_size
            write_random_init(self.checkpoint, {**self.random_init, "vocab_size": vocab})
        result = finetune(
            self.task,
            self.data,
            self.checkpoint.path,
            out,
            cfg.finetune,
            tokenizer_dir=self.tokenizer.path if self.tokenizer else None,
            tracking=cfg.tracking,
            run=FinetuneRun(
                name=self.label,
                parent_run_id=self.parent_run_id,
                tags=runs.stage_tags("finetune", key=self.key(), preset=cfg.preset),
                registered_model=registered_model_name(cfg, self.task),
                enabled=self.track,
            ),
            device=self.device,
        )
        return {
            "task": self.task,
            "ablation": ablation_name(cfg.finetune),
            "eval_split": result["eval_split"],
            "primary": result["metrics"].get("primary"),
            "run_id": result.get("run_id"),
        }

    def log_reuse(self, result: Result, parent_run_id: str | None) -> None:
        """Unless it was logged under this parent (it ran in this flow run), a child run with its recorded
        metrics, tagged `gpt1.cached=true`."""
        if not parent_run_id or metrics_of(result.path).get("parent_run_id") == parent_run_id:
            return
        from gpt1.finetune.train import log_finished

        cfg = self.cfg
        log_finished(
            result.path,
            run_name=self.label,
            parent_run_id=parent_run_id,
            experiment=cfg.tracking.experiment,
            tracking_uri=cfg.tracking.tracking_uri,
            tags=runs.stage_tags(
                "finetune",
                key=(read_marker(result.path) or {}).get("key"),
                preset=cfg.preset,
                cached=True,
            ),
        )


def write_random_init(start: Ref, model_config: dict) -> None:
    """The "checkpoint" of a fine-tune from a random init (the no-pre-training ablation): a folder holding only
    the model's config (with the tokenizer's vocabulary size), marked with its key so it is keyed like any input.
    Every task of the variant writes the same bytes, so concurrent writers agree."""
    if not is_done(start.path, start.key) or read_json(start.path / CONFIG_NAME) != model_config:
        write_json(start.path / CONFIG_NAME, model_config)
        mark_done(start.path, "random-init", start.key)


def metrics_of(out: Path) -> dict:
    from gpt1.finetune.train import METRICS_FILE

    return read_json(out / METRICS_FILE)


# -- CLI ------------------------------------------------------------------------------------------------------
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument(
        "--data", required=True, help="the task's folder as distributed, a file, or hf:<id>"
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        type=Path,
        help="pre-trained model folder (written by gpt1 pretrain (final/) or gpt1 convert)",
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder for this task")
    add_config_args(parser, example="finetune.aux_lm_weight=0")
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer folder/file (default: the checkpoint's)"
    )
    parser.add_argument(
        "--tracking-uri", help="MLflow tracking URI (default: config, $MLFLOW_TRACKING_URI, sqlite)"
    )
    parser.add_argument("--parent-run-id", help="MLflow run to nest this task's run under")
    parser.add_argument("--run-name", help="MLflow run name (default: finetune-<task>)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument(
        "--allow-eval-on-train",
        action="store_true",
        help="score a split that is the training data (e.g. one file as --data), labelled as such",
    )
    add_output_args(parser)


def job_from_args(args: argparse.Namespace) -> Job:
    overrides: list[Override] = list(args.overrides)
    if args.tracking_uri:
        overrides.append(
            Setting(
                "tracking.tracking_uri", args.tracking_uri, f"--tracking-uri {args.tracking_uri}"
            )
        )
    if args.allow_eval_on_train:
        overrides.append(Setting("finetune.allow_eval_on_train", True, "--allow-eval-on-train"))
    return Job(
        args.task,
        str(args.data),
        data_key(str(args.data)),
        Ref.to(args.checkpoint),
        Ref.to(args.tokenizer) if args.tokenizer else None,
        load_config(args.preset, overrides),
        run_name=args.run_name,
        parent_run_id=args.parent_run_id,
        track=not args.no_tracking,
        device=args.device,
    )


def run_cli(args: argparse.Namespace) -> int:
    from gpt1.finetune.predict import MODEL_DIR
    from gpt1.finetune.train import METRICS_FILE, PREDICTIONS_DIR

    result = run_from_args(job_from_args(args), args)
    metrics = metrics_of(result.path)
    scores = ", ".join(f"{k} {v:.2f}" for k, v in metrics["metrics"].items())
    rows = metrics["evaluated_on"]
    on = f"{rows['split']}, {rows['rows']} rows" + (
        ", TRAINING ROWS" if metrics["eval_on_training_rows"] else ""
    )
    print(f"{args.task} ({on}): {scores}; majority baseline {metrics['majority']['primary']:.2f}")
    print(f"wrote {result.path}/{METRICS_FILE}, {PREDICTIONS_DIR}/, {MODEL_DIR}/")
    return 0
