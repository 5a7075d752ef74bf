"""What a pre-training run starts from, checked before any worker launches (gpt1.pretrain.stage) and again by each
worker (gpt1.pretrain): the resolved config, the tokenizer, where the zero-shot probes read task data, the
checkpoint to resume from, the number of updates.

Design choices:
- The model's vocabulary is the tokenizer's: model.vocab_size is set from the shards' manifest.
- Total updates: pretrain.max_steps, else epochs x (train blocks // global batch) (the reader drops each epoch's
  incomplete final global batch, so an epoch is a whole number of updates).
- Without --resume, an OUT that already has checkpoints is refused (no silent restart from scratch).
- Zero-shot probe data: --task-data DIR, else finetune.data when it is 'hf' or a folder ('sample' needs
  --task-data); the Winograd probe always runs (built-in items). Probes cap examples at pretrain.probe_max_examples.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gpt1.config import PipelineConfig, PretrainConfig
from gpt1.tokenizer import bpe

log = logging.getLogger("gpt1.pretrain")  # these checks speak in the pre-training log

FINAL = "final"  # OUT/final: the consolidated model
CHECKPOINTS = "checkpoints"  # OUT/checkpoints/step-N: resumable checkpoints
CURVE = "curve"  # OUT/curve/step-N: the whole model at each of pretrain.curve_steps, with its training.json


def curve_point(step: int) -> str:
    """Where, inside OUT, the model at update `step` of pretrain.curve_steps is written."""
    return f"{CURVE}/step-{step:08d}"


def total_steps(pretrain: PretrainConfig, train_blocks: int) -> int:
    """pretrain.max_steps, else epochs x whole global batches of the train blocks."""
    if pretrain.max_steps is not None:
        return pretrain.max_steps
    return pretrain.epochs * (train_blocks // pretrain.global_batch_size)


def check_curve_steps(pretrain: PretrainConfig, total: int) -> None:
    """Every update of pretrain.curve_steps must come before the run's last (the final model ends the curve)."""
    late = [step for step in pretrain.curve_steps if step >= total]
    if late:
        raise ValueError(
            f"pretrain.curve_steps {late}: this run trains {total} updates; each curve point must "
            "come before the last"
        )


def resolve_config(cfg: PipelineConfig, manifest: dict) -> PipelineConfig:
    """The config a run uses: model vocabulary from the shards; context checked against the shards."""
    if manifest["n_ctx"] != cfg.model.n_ctx:
        raise ValueError(
            f"shards hold blocks of n_ctx={manifest['n_ctx']} (+1) tokens but model.n_ctx="
            f"{cfg.model.n_ctx}: re-tokenize with --ctx {cfg.model.n_ctx} or --set "
            f"model.n_ctx={manifest['n_ctx']}"
        )
    if manifest["vocab_size"] != cfg.model.vocab_size:
        log.info(
            "model.vocab_size set to the shards' tokenizer vocabulary: %d", manifest["vocab_size"]
        )
        cfg = cfg.model_copy(
            update={"model": cfg.model.model_copy(update={"vocab_size": manifest["vocab_size"]})}
        )
    return cfg


def load_tokenizer(path: str | os.PathLike | None, manifest: dict):
    """The tokenizer the shards were made with (checked by hash), or None when no path is given."""
    if path is None:
        return None
    tokenizer = bpe.load(path)
    if tokenizer.sha256 != manifest.get("tokenizer_sha256"):
        raise ValueError(
            f"tokenizer {path} (sha256 {tokenizer.sha256[:12]}) is not the one the shards were made "
            f"with (manifest tokenizer_sha256 {str(manifest.get('tokenizer_sha256'))[:12]})"
        )
    return tokenizer


def task_data_source(cfg: PipelineConfig, task_data: str | None) -> str | None:
    """Where the zero-shot probes read task data: --task-data, else finetune.data unless it is 'sample'."""
    if task_data is not None:
        if not Path(task_data).is_dir():
            raise FileNotFoundError(f"--task-data {task_data}: not a directory")
        return task_data
    if cfg.finetune.data == "sample":
        log.info(
            "finetune.data is 'sample' but no --task-data given: data-driven zero-shot probes are skipped"
        )
        return None
    return cfg.finetune.data


def resume_point(out: Path, resume: str | None, model_cfg: dict) -> Path | None:
    """The checkpoint to resume from (None: start fresh); refuses an OUT with checkpoints when not resuming."""
    from gpt1.pretrain.checkpoint import (
        CheckpointManager,
        files_problem,
        read_meta,
        refusal,
    )  # torch: only to run

    latest = CheckpointManager(out / CHECKPOINTS).latest_complete()
    if resume is None:
        if latest is not None:
            raise ValueError(
                f"{out} already has checkpoints (latest {latest.name}); pass --resume auto to continue "
                "or use a new --out"
            )
        return None
    path = latest if resume == "auto" else Path(resume)
    if path is None:
        log.info(
            "--resume auto: no complete checkpoint in %s, starting from scratch", out / CHECKPOINTS
        )
        return None
    meta = read_meta(path)
    # also checked by the workers: here it fails before any starts
    problem = files_problem(path, meta["files"])
    if problem:
        raise refusal(path, problem)
    saved = meta.get("model")
    if saved is not None and saved != model_cfg:
        changed = sorted(k for k in model_cfg if saved.get(k) != model_cfg[k])
        raise ValueError(
            f"cannot resume {path}: model config changed since it was written ({changed})"
        )
    return path
