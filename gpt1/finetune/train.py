"""Fine-tune GPT-1 on one task from a pre-trained checkpoint and evaluate it (the training side of stage 5).

    metrics = finetune("rte", "glue_data/RTE", "runs/pretrain/final", "runs/finetune/rte", cfg.finetune)

`gpt1 finetune` (gpt1.finetune.stage) runs this as a stage; inference with the model it writes is gpt1.finetune.predict.

The paper's recipe (section 3.2, 4.1) is the default `FinetuneConfig`: the task's examples go through its input
transformation (`spec.encode`), a linear head reads the `_classify_` state (`GPT1ForTask`), and the objective is
L3 = L2 + lambda * L1: the task loss (cross-entropy; MSE for the STS-B regression) plus lambda times the language
modelling loss on the same sequences, padding excluded. AdamW, lr 6.25e-5, batch 32, 3 epochs, linear warmup over
0.2% of the updates then linear decay to 0, classifier dropout 0.1, weight decay 0.01 on weight matrices only,
gradient clipping. Ablations (paper Table 5, Fig. 2): `aux_lm_weight=0`, `from_scratch` (random init, same
architecture), `transfer_layers=k` (only the first k pre-trained blocks).

Outputs in OUT (each file written atomically; metrics.json last, so its presence means the task finished):

    metrics.json              headline metrics, majority baseline, every evaluated split, throughput, settings
    predictions/<split>.jsonl one line per example: id, group, gold label and prediction (a class by its name, as
                              `gpt1 predict` says it; a score), probabilities
    submission/<Task>.tsv     test-split predictions in the GLUE server format (`gpt1.tasks.write_submission`)
    model/                    the task model folder (gpt1.finetune.predict: transformer, head, tokenizer, task.json)

and an MLflow child run: params, system metrics, per-update curves (`train/*`), per-epoch evaluation
(`eval/<split>/<metric>`), final metrics `task/<name>/<metric>` (`task/<name>/majority/<metric>` for the baseline,
`task/<name>/<split>/...` for a split other than the headline one), the task files as `mlflow.data` datasets (hub
id, config, split and revision for `hf:` data), and the model as an MLflow 3 logged pyfunc model
(`gpt1.finetune.serving`, named `<task>[-<ablation>]`, linked to the final metrics) that takes raw task inputs; with
`registered_model`, a Model Registry version of it, the alias `champion` on the best version
(gpt1.tracking.models.update_champion).

Design choices:
- Which split is scored: every held-out split the task has (dev, the paper's `eval_splits`, test) is predicted;
  each labelled one is scored. The headline (`task/<name>/...`) is the paper's evaluation split when it is there
  and labelled (dev for GLUE; test for SNLI, SciTail, RACE, Story Cloze), else dev (e.g. RACE without its test
  split). Model selection is not done (the paper trains a fixed 3 epochs): the metrics are those after the last
  epoch; the per-epoch evaluations are curves only, of the headline split (every split is evaluated once, at the
  end: scoring dev and test after every epoch cost a fifth of a small task's fine-tuning time).
- Schedule: linear warmup over W = ceil(warmup_fraction * total) updates, then linear decay (gpt1.model.optim).
- The LM loss is averaged per sequence, then over sequences (as the release does); every real token after the
  first is a target, `_classify_` included. Multiple choice and similarity count all K (or 2) sequences.
- Weight decay applies to every parameter with 2+ dimensions (matrices, embeddings) and not to biases and
  LayerNorm gains, as the release's `vector_l2` (gpt1.model.optim); Adam betas/eps are finetune.adam_betas/adam_eps.
- `max_train_examples` / `max_eval_examples` keep evenly spaced examples (the same ones whatever the seed, so
  ablations are scored on the same subset, and sorted files still yield every class). The majority baseline is
  the most frequent label of the whole train split, scored on the same evaluation examples as the model.
- Curves are logged every update up to 1,000 updates and at ~1,000 evenly spaced updates beyond (losses averaged
  over the interval), so long runs do not flood the tracking server.
- The vocabulary is grown to the tokenizer's size when the checkpoint lacks rows (e.g. the 3 specials of an
  imported openai-gpt); a larger checkpoint vocabulary is kept as it is.
- STS-B is regressed on the raw 0-5 score with MSE; the head's bias starts at the mean training score (with 0,
  the first updates spend themselves on the offset); predictions are not clipped (Pearson ignores scale).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from tqdm import tqdm

from gpt1 import tasks
from gpt1.config import FinetuneConfig, PipelineConfig, TrackingConfig
from gpt1.errors import Diverged
from gpt1.finetune.predict import (
    MODEL_DIR,
    autocast,
    decode,
    host_batch,
    input_columns,
    n_outputs,
    predict_logits,
    prediction_records,
    raw_inputs,
    save_task_model,
    to_device,
)
from gpt1.finetune.rows import check_not_training_rows, evenly_spaced, sources_digest
from gpt1.finetune.serving import log_model
from gpt1.io import InputError, read_json, sha256_file, write_json, write_text
from gpt1.model import optim
from gpt1.model.files import TRAINING_NAME
from gpt1.model.losses import task_loss
from gpt1.model.transformer import (
    GPT1,
    WEIGHTS_NAME,
    GPT1ForTask,
    TaskHead,
    check_vocabulary,
    load_model_config,
    missing_model_files,
    model_files,
)
from gpt1.progress import Every, duration
from gpt1.runtime.cuda import use_tf32_matmuls
from gpt1.runtime.devices import torch_device
from gpt1.runtime.prefetch import prefetch
from gpt1.runtime.processes import peak_rss_mb, reset_peak_rss
from gpt1.tasks import Encoded, TaskSpec, hub
from gpt1.tokenizer import bpe
from gpt1.tokenizer.bpe import TOKENIZER_FILE
from gpt1.tracking.logger import RunLogger, start_run
from gpt1.tracking.models import register_model
from gpt1.tracking.runs import hub_dataset_source, monitor_system, stage_tags

if TYPE_CHECKING:
    from mlflow.data.dataset_source import DatasetSource

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
PREDICTIONS_DIR = "predictions"
SUBMISSION_DIR = "submission"
PARTIAL = ".partial"  # in the name of a submission file of fewer rows than the test split holds
MAX_CURVE_POINTS = 1000
PROGRESS_SECONDS = (
    30.0  # a progress line at least this often while training (the logs' only sign of life)
)


# -- data -----------------------------------------------------------------------------------------------------
@dataclass
class Split:
    """One task split as the model sees it: the examples, their encodings and where they came from."""

    name: str
    examples: list
    encoded: list[Encoded]
    report: dict  # LoadReport.to_dict(): sources, rows, malformed/excluded counts
    digest: str  # content hash of the files read (dataset lineage)
    all_labels: (
        list  # labels of the whole split, also the examples a max_*_examples subset left out
    )
    contents: (
        frozenset  # hashes of the whole split's examples without id and group (`tasks.content`)
    )
    training_rows: int = (
        0  # held-out examples that are also training examples (same inputs and label)
    )
    on_training_rows: bool = (
        False  # scored although it is the training data (finetune.allow_eval_on_train)
    )

    @property
    def labelled(self) -> bool:
        return all(ex.label is not None for ex in self.examples)

    @property
    def labels(self) -> list:
        return [ex.label for ex in self.examples]

    @property
    def groups(self) -> list:
        return [ex.group for ex in self.examples]

    def rows(self) -> dict:
        """Which rows a score on this split is computed on: the split, how many, the files they came from."""
        return {
            "split": self.name,
            "rows": len(self.examples),
            "files": self.report["sources"],
            "training_rows": self.training_rows,
            "on_training_rows": self.on_training_rows,
        }


def held_out_splits(spec: TaskSpec) -> list[str]:
    """dev, the paper's evaluation split(s), test: each one the task has, in that order, once."""
    wanted = ["dev", *spec.eval_splits, "test"]
    return [s for i, s in enumerate(wanted) if s in spec.splits and s not in wanted[:i]]


def load_split(
    spec: TaskSpec,
    path: str | Path,
    split: str,
    tokenizer,
    max_len: int,
    limit: int | None,
    max_bad_fraction: float,
) -> Split:
    data = tasks.load(spec.name, path, split, max_bad_fraction)
    examples = [data[i] for i in evenly_spaced(len(data), limit)]
    if len(examples) < len(data):
        log.info(
            "%s/%s: using %d of %d examples (evenly spaced)",
            spec.name,
            split,
            len(examples),
            len(data),
        )
    return Split(
        split,
        examples,
        spec.encode_all(examples, tokenizer, max_len),
        data.report.to_dict(),
        sources_digest(data.report.sources),
        [ex.label for ex in data],
        frozenset(hash(tasks.content(ex)) for ex in data),
    )


def load_task_data(
    spec: TaskSpec, path: str | Path, tokenizer, max_len: int, cfg: FinetuneConfig
) -> tuple[Split, dict[str, Split]]:
    """The train split and every held-out split present; errors (missing files, bad rows) before any compute."""
    common = dict(tokenizer=tokenizer, max_len=max_len, max_bad_fraction=cfg.max_bad_row_fraction)
    train = load_split(spec, path, "train", limit=cfg.max_train_examples, **common)
    if not train.labelled:
        raise InputError(f"{spec.name}: the train split has unlabelled examples", file=path)
    held_out, absent = {}, {}
    for name in held_out_splits(spec):
        try:
            held_out[name] = load_split(spec, path, name, limit=cfg.max_eval_examples, **common)
        except FileNotFoundError as err:
            absent[name] = str(err)
            (log.warning if name in spec.eval_splits else log.info)(
                "%s: no %s split (%s)", spec.name, name, err
            )
    if not any(s.labelled for s in held_out.values()):
        raise InputError(
            f"{spec.name}: no labelled evaluation split found: "
            + "; ".join(absent.get(name, f"{name}: unlabelled") for name in held_out_splits(spec)),
            file=path,
        )
    for split in held_out.values():
        check_not_training_rows(spec, split, train, path, cfg.allow_eval_on_train)
    return train, held_out


def headline_split(spec: TaskSpec, held_out: dict[str, Split]) -> str:
    """The paper's evaluation split when present and labelled, else dev, else any labelled split (a WARNING: the
    number is then not comparable to the paper's; metrics.json records it as `eval_split_fallback`)."""
    labelled = [name for name, s in held_out.items() if s.labelled]
    headline = next((s for s in (*spec.eval_splits, "dev") if s in labelled), labelled[0])
    if headline not in spec.eval_splits:
        log.warning(
            "%s: the paper's evaluation split %s is absent or unlabelled; scoring %s instead, which is not "
            "comparable to the paper's number",
            spec.name,
            spec.eval_splits[0],
            headline,
        )
    return headline


# -- model ----------------------------------------------------------------------------------------------------
def build_model(
    spec: TaskSpec,
    checkpoint_dir: str | os.PathLike,
    vocab_size: int,
    cfg: FinetuneConfig,
    new_tokens: Sequence[int] = (),
) -> GPT1ForTask:
    """The pre-trained transformer (or, ablating pre-training, a random one of the same shape) plus the task head;
    with `finetune.redraw_specials`, the embeddings of `new_tokens` drawn afresh.

    Seed the global RNG first: the head, any new embedding rows and a from-scratch model are drawn from it."""
    checkpoint_dir = Path(checkpoint_dir)
    model_cfg = load_model_config(model_files(checkpoint_dir)[0])
    vocab = max(model_cfg.vocab_size, vocab_size)
    if cfg.from_scratch:
        base = GPT1(model_cfg.model_copy(update={"vocab_size": vocab}))
    else:
        base = GPT1.from_pretrained(
            checkpoint_dir, transfer_layers=cfg.transfer_layers, vocab_size=vocab
        )
        if cfg.redraw_specials:
            base.redraw_token_embeddings(list(new_tokens), seed=cfg.seed)
    # TaskSpec.head is a plain str; GPT1ForTask refuses one that is not a TaskHead
    return GPT1ForTask(base, cast(TaskHead, spec.head), n_outputs(spec), cfg.clf_pdrop)


# -- objective and schedule -----------------------------------------------------------------------------------


# -- evaluation and prediction --------------------------------------------------------------------------------
@dataclass
class Evaluation:
    """Predictions on one held-out split and, when it is labelled, its metrics and the majority baseline."""

    split: str
    predictions: list
    probabilities: np.ndarray | None
    metrics: dict = field(default_factory=dict)
    majority: dict = field(default_factory=dict)
    loss: float | None = None
    seconds: float = 0.0


def evaluate_split(
    model: GPT1ForTask,
    spec: TaskSpec,
    split: Split,
    train: Split,
    cfg: FinetuneConfig,
    device: torch.device,
) -> Evaluation:
    started = time.perf_counter()
    logits = predict_logits(
        model,
        split.encoded,
        cfg.eval_batch_size,
        device,
        cfg.precision,
        desc=f"eval {spec.name}/{split.name}",
    )
    predictions, probabilities = decode(spec, logits)
    result = Evaluation(
        split.name, predictions, probabilities, seconds=time.perf_counter() - started
    )
    if split.labelled:
        result.metrics = tasks.evaluate(spec.name, split.examples, predictions)
        result.majority = tasks.metrics.majority_baseline(
            spec.name, train.all_labels, split.labels, extra={"groups": split.groups}
        )
        target = torch.tensor(split.labels, dtype=torch.float if spec.regression else torch.long)
        result.loss = float(task_loss(torch.from_numpy(logits), target, regression=spec.regression))
    return result


# -- the training run -----------------------------------------------------------------------------------------
def find_tokenizer(checkpoint_dir: Path, tokenizer_dir: str | os.PathLike | None) -> Path:
    where = Path(tokenizer_dir) if tokenizer_dir else checkpoint_dir
    if where.is_file() or (where / TOKENIZER_FILE).is_file():
        return where
    hint = (
        ""
        if tokenizer_dir
        else " (the checkpoint has none: pass the tokenizer folder, --tokenizer DIR)"
    )
    raise FileNotFoundError(f"no {TOKENIZER_FILE} in {where}{hint}")


def check_inputs(checkpoint_dir: Path, cfg: FinetuneConfig) -> None:
    if cfg.from_scratch and cfg.transfer_layers is not None:
        raise ValueError(
            "finetune: from_scratch and transfer_layers exclude each other (nothing is transferred "
            "from scratch)"
        )
    if not checkpoint_dir.is_dir():
        raise FileNotFoundError(f"checkpoint folder {checkpoint_dir} does not exist")
    problem = missing_model_files(checkpoint_dir, weights=not cfg.from_scratch)
    if problem:
        raise FileNotFoundError(f"checkpoint {checkpoint_dir}: {problem}")


def pretraining_of(checkpoint_dir: Path) -> dict | None:
    """The pre-training the starting weights had (`steps`, `tokens_seen`, `weights_sha256`; for a final model also
    the corpus it read, `corpus`, and its validation loss beside n-gram baselines, `language_model`), from the
    training.json gpt1 pretrain writes beside them; None for a random init or weights from elsewhere (an import)."""
    path = checkpoint_dir / TRAINING_NAME
    if not path.is_file():
        return None
    summary = read_json(path)
    found = {key: summary.get(key) for key in ("steps", "tokens_seen", "weights_sha256")}
    return found | {key: summary[key] for key in ("corpus", "language_model") if summary.get(key)}


def ablation_name(cfg: FinetuneConfig) -> str:
    """Which Table 5 / Fig. 2 variant a config is: full, no_pretrain, no_aux_lm, transfer_<k> (joined by +)."""
    parts = []
    if cfg.from_scratch:
        parts.append("no_pretrain")
    if cfg.aux_lm_weight == 0:
        parts.append("no_aux_lm")
    if cfg.transfer_layers is not None:
        parts.append(f"transfer_{cfg.transfer_layers}")
    return "+".join(parts) or "full"


class CurveLogger:
    """Per-update training curves: every update for short runs, `every` updates (interval means) for long ones."""

    def __init__(self, run: RunLogger, total_steps: int):
        self.run, self.every = run, max(1, math.ceil(total_steps / MAX_CURVE_POINTS))
        self.sums: dict[str, float] = {}
        self.count = 0

    def add(self, step: int, values: dict[str, float], instant: dict[str, float]) -> None:
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1
        if step % self.every == 0:
            self.run.log_metrics(
                {**{k: v / self.count for k, v in self.sums.items()}, **instant}, step=step
            )
            self.sums, self.count = {}, 0


def examples_per_forward(spec: TaskSpec, cfg: FinetuneConfig) -> int:
    """Examples per micro-batch: finetune.micro_batch_size (default the whole batch), fewer when their sequences
    would exceed finetune.forward_sequences (a similarity pair is 2 sequences, a K-way choice K)."""
    sequences = (
        n_outputs(spec) if spec.head == "multiple_choice" else 2 if spec.head == "similarity" else 1
    )
    return max(1, min(cfg.micro_batch_size or cfg.batch_size, cfg.forward_sequences // sequences))


def training_precision(cfg: FinetuneConfig, device: torch.device) -> str:
    """finetune.precision as it runs on `device`: `auto` is bf16 autocast on CUDA (tensor cores; the fp32 matmuls
    autocast leaves run as TF32 there), fp32 elsewhere (a CPU without bf16 units computes bf16 far slower)."""
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16" if device.type == "cuda" else "fp32"


@dataclass
class MicroBatch:
    """One forward's examples of an update: their indices in the train split, their padded inputs (host
    tensors) and how many real tokens they hold."""

    chunk: torch.Tensor
    inputs: dict[str, torch.Tensor]
    tokens: int


def micro_batches(
    spec: TaskSpec, train_set: Split, index: torch.Tensor, cfg: FinetuneConfig, device: torch.device
) -> list[MicroBatch]:
    """An update's batch `index` in micro-batches of `examples_per_forward`, padded (on the prefetch thread)."""
    made = []
    for chunk in index.split(examples_per_forward(spec, cfg)):
        inputs = host_batch(train_set.encoded, chunk.tolist(), device)
        made.append(MicroBatch(chunk, inputs, int(inputs["mask"].sum())))
    return made


def backward(
    model: GPT1ForTask,
    spec: TaskSpec,
    batch: list[MicroBatch],
    labels: torch.Tensor,
    cfg: FinetuneConfig,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Forward and backward of one update's micro-batches (L3 = L2 + lambda * L1). Both losses are means over
    examples, so weighting each micro-batch's loss by its share of the batch accumulates exactly the whole
    batch's gradient. Returns the batch's losses, which stay on the device (reading them back would wait for it
    every update)."""
    use_lm = cfg.aux_lm_weight > 0
    losses: dict[str, torch.Tensor] = {}
    examples = sum(len(micro.chunk) for micro in batch)
    for micro in batch:
        inputs = to_device(micro.inputs, device)
        with autocast(device, cfg.precision):
            out = model(
                inputs["input_ids"],
                inputs["classify_pos"],
                lm_mask=inputs["mask"] if use_lm else None,
            )
        parts = {
            "train/clf_loss": task_loss(
                out.logits, labels[micro.chunk].to(device), regression=spec.regression
            )
        }
        if use_lm:
            parts["train/lm_loss"] = out.lm_loss
        parts["train/loss"] = parts["train/clf_loss"] + cfg.aux_lm_weight * parts.get(
            "train/lm_loss", 0.0
        )
        share = len(micro.chunk) / examples
        (parts["train/loss"] * share).backward()
        for name, value in parts.items():
            part = value.detach().float() * share
            losses[name] = losses[name] + part if name in losses else part
    return losses


def train(
    model: GPT1ForTask,
    spec: TaskSpec,
    train_set: Split,
    held_out: dict[str, Split],
    cfg: FinetuneConfig,
    device: torch.device,
    run: RunLogger,
    headline: str,
) -> tuple[dict, dict[str, Evaluation]]:
    """The fine-tuning loop; evaluates the headline split after each epoch and every split at the end."""
    n, bs = len(train_set.examples), cfg.batch_size
    steps_per_epoch = math.ceil(n / bs)
    total = steps_per_epoch * cfg.epochs
    warmup = math.ceil(cfg.warmup_fraction * total)
    optimizer = optim.adamw(
        model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.adam_betas, eps=cfg.adam_eps
    )
    schedule = optim.scheduler(optimizer, warmup_steps=warmup, total_steps=total, schedule="linear")
    model.transformer.compile_for(device.type)
    shuffle = torch.Generator().manual_seed(cfg.seed)
    labels = torch.tensor(train_set.labels, dtype=torch.float if spec.regression else torch.long)
    curves = CurveLogger(run, total)
    log.info(
        "%s: fine-tuning on %d examples, %d epochs x %d updates (batch %d, warmup %d, aux LM weight %g, %s)",
        spec.name,
        n,
        cfg.epochs,
        steps_per_epoch,
        bs,
        warmup,
        cfg.aux_lm_weight,
        ablation_name(cfg),
    )

    step, seen, tokens, train_seconds = 0, 0, 0, 0.0
    last: dict[str, float] = {}  # the latest update read back: its losses and gradient norm
    # The updates since the last read back, their losses and gradient norms still on the device: (update, losses,
    # gradient norm, lr, examples seen, seconds). Read once per curve point or progress line, not every update.
    pending: list[tuple[int, dict[str, torch.Tensor], torch.Tensor, float, int, float]] = []
    evaluations: dict[str, Evaluation] = {}
    bar = tqdm(total=total, desc=f"finetune {spec.name}", unit="step", disable=None)
    progress = Every(PROGRESS_SECONDS)

    def read_back() -> None:
        """Wait for the device once for the pending updates: each is checked for divergence, in order, before
        its curves are logged."""
        nonlocal last
        if not pending:
            return
        names = list(pending[0][1])
        rows = torch.stack(
            [
                torch.stack([*(losses[k] for k in names), norm.float()])
                for _, losses, norm, *_ in pending
            ]
        ).tolist()
        for (at, _, _, lr, seen_then, elapsed), row in zip(pending, rows):
            last = {**dict(zip(names, row[:-1])), "train/grad_norm": row[-1]}
            if not all(math.isfinite(v) for v in row):
                raise Diverged(
                    f"{spec.name}: fine-tuning diverged at update {at} of {total}: loss "
                    f"{last['train/loss']}, gradient norm {last['train/grad_norm']} (lr {lr:.3g}); no "
                    "model or metrics written. Lower finetune.lr"
                )
            curves.add(
                at,
                last,
                {
                    "train/lr": lr,
                    "train/epoch": at / steps_per_epoch,
                    "train/examples_per_s": seen_then / elapsed,
                },
            )
        bar.update(len(pending))
        bar.set_postfix(loss=f"{last['train/loss']:.4f}", lr=f"{pending[-1][3]:.2e}")
        pending.clear()

    for epoch in range(cfg.epochs):
        model.train()
        started = time.perf_counter()
        updates = torch.randperm(n, generator=shuffle).split(bs)
        for batch in prefetch(
            lambda index: micro_batches(spec, train_set, index, cfg, device), updates
        ):
            optimizer.zero_grad(set_to_none=True)
            losses = backward(model, spec, batch, labels, cfg, device)
            grad_norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), cfg.grad_clip or float("inf")
            )
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            schedule.step()

            step += 1
            seen += sum(len(micro.chunk) for micro in batch)
            tokens += sum(micro.tokens for micro in batch)
            elapsed = train_seconds + time.perf_counter() - started
            pending.append((step, losses, grad_norm, lr, seen, elapsed))
            due = progress.due()
            if step % curves.every == 0 or due:
                read_back()
            if due:
                rate = seen / elapsed
                log.info(
                    "%s: update %d/%d (epoch %d/%d) loss %.4f, %.1f examples/s, ETA %s",
                    spec.name,
                    step,
                    total,
                    epoch + 1,
                    cfg.epochs,
                    last["train/loss"],
                    rate,
                    duration((n * cfg.epochs - seen) / rate),
                )
        read_back()  # the epoch's last updates, before its evaluation
        train_seconds += time.perf_counter() - started

        final = epoch == cfg.epochs - 1
        evaluations = {
            name: evaluate_split(model, spec, split, train_set, cfg, device)
            for name, split in held_out.items()
            if final or name == headline
        }
        epoch_metrics = {}
        for name, result in evaluations.items():
            epoch_metrics.update({f"eval/{name}/{k}": v for k, v in result.metrics.items()})
            if result.loss is not None:
                epoch_metrics[f"eval/{name}/loss"] = result.loss
        run.log_metrics({**epoch_metrics, "eval/epoch": epoch + 1}, step=step)
        log.info(
            "%s epoch %d/%d: train loss %.4f, %s (%.1f examples/s)",
            spec.name,
            epoch + 1,
            cfg.epochs,
            last["train/loss"],
            ", ".join(f"{k.removeprefix('eval/')} {v:.2f}" for k, v in epoch_metrics.items()),
            seen / max(train_seconds, 1e-9),
        )
    bar.close()

    eval_examples = sum(len(held_out[name].examples) for name in evaluations)
    eval_seconds = sum(e.seconds for e in evaluations.values())
    stats = {
        "examples": n,
        "epochs": cfg.epochs,
        "steps": step,
        "warmup_steps": warmup,
        "seconds": train_seconds,
        "examples_per_s": seen / max(train_seconds, 1e-9),
        "tokens_per_s": tokens / max(train_seconds, 1e-9),
        "final_loss": last.get("train/loss"),
        "final_clf_loss": last.get("train/clf_loss"),
        "final_lm_loss": last.get("train/lm_loss"),
        "eval_examples_per_s": eval_examples / max(eval_seconds, 1e-9),
    }
    return stats, evaluations


def write_predictions(
    spec: TaskSpec, held_out: dict[str, Split], evaluations: dict[str, Evaluation], out_dir: Path
) -> dict[str, list[str]]:
    written: dict[str, list[str]] = {}
    for name, result in evaluations.items():
        split = held_out[name]
        lines = prediction_records(spec, split.examples, result.predictions, result.probabilities)
        path = write_text(
            out_dir / PREDICTIONS_DIR / f"{name}.jsonl",
            "".join(json.dumps(line) + "\n" for line in lines),
        )
        written[name] = [str(path.relative_to(out_dir))]
        if name == "test" and not split.on_training_rows:  # no leaderboard file of training rows
            # a benchmark scores every test row: a file cut to finetune.max_eval_examples says so in its name
            rows = len(split.all_labels)
            suffix = "" if len(split.examples) == rows else PARTIAL
            if suffix:
                log.warning(
                    "%s: test predictions on %d of %d rows (finetune.max_eval_examples): the submission "
                    "file is named *%s.tsv, not one a leaderboard takes",
                    spec.name,
                    len(split.examples),
                    rows,
                    suffix,
                )
            files = tasks.write_submission(
                spec.name, split.examples, result.predictions, out_dir / SUBMISSION_DIR, suffix
            )
            written["submission"] = [str(Path(f).relative_to(out_dir)) for f in files]
    return written


@dataclass(frozen=True)
class FinetuneRun:
    """The MLflow run a fine-tune logs to. `name` defaults to `finetune-<task>`; `tags` are added to the run's
    (the stage's key and preset); `registered_model`: also register the logged model as a new version of this
    Model Registry name; `enabled=False`: log nothing."""

    name: str | None = None
    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    registered_model: str | None = None
    enabled: bool = True


def finetune(
    task: str,
    data_path: str | os.PathLike,
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    cfg: FinetuneConfig | None = None,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    tracking: TrackingConfig | None = None,
    run: FinetuneRun | None = None,
    device: str | None = None,
) -> dict:
    """Fine-tune `task` from a checkpoint folder, evaluate, predict; returns what metrics.json holds.

    `tracking`: the MLflow server and experiment (the pipeline config's section); `run`: the run logged there.
    Writing into a folder that may hold other files, failures and re-runs are the stage's business
    (gpt1.finetune.stage); this function only writes its outputs."""
    cfg = cfg or FinetuneConfig()
    tracking = tracking or TrackingConfig()
    run = run or FinetuneRun()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tags = {
        **stage_tags("finetune"),
        **run.tags,
        "gpt1.task": task,
        "gpt1.ablation": ablation_name(cfg),
    }
    logger_args = dict(
        experiment=tracking.experiment,
        uri=tracking.tracking_uri,
        parent_run_id=run.parent_run_id,
        enabled=run.enabled,
        tags=tags,
    )
    return _finetune(
        tasks.get(task),
        data_path,
        Path(checkpoint_dir),
        out_dir,
        cfg,
        tokenizer_dir,
        logger_args,
        run.name or f"finetune-{task}",
        device,
        run.registered_model,
    )


def _finetune(
    spec: TaskSpec,
    data_path,
    checkpoint_dir: Path,
    out_dir: Path,
    cfg: FinetuneConfig,
    tokenizer_dir,
    logger_args: dict,
    run_name: str,
    device: str | None,
    registered_model: str | None,
) -> dict:
    reset_peak_rss()  # this task's own peak, also in a worker that ran other tasks before
    dev = torch_device(device, "fine-tuning")  # first: a GPU job without CUDA stops at once
    # what ran, in params and metrics
    cfg = cfg.model_copy(update={"precision": training_precision(cfg, dev)})
    if dev.type == "cuda":
        use_tf32_matmuls()
    check_inputs(checkpoint_dir, cfg)
    tokenizer_path = find_tokenizer(checkpoint_dir, tokenizer_dir)
    tokenizer = bpe.load(tokenizer_path)
    bpe.check_matches(tokenizer, checkpoint_dir, f"tokenizer {tokenizer_path}")
    config_file = model_files(checkpoint_dir)[0]
    model_config = load_model_config(config_file)
    check_vocabulary(model_config, tokenizer, config_file)
    max_len = model_config.n_ctx
    train_set, held_out = load_task_data(spec, data_path, tokenizer, max_len, cfg)
    headline = headline_split(spec, held_out)

    torch.manual_seed(cfg.seed)
    model = build_model(
        spec,
        checkpoint_dir,
        tokenizer.vocab_size,
        cfg,
        new_tokens=[tokenizer.delimiter_id, tokenizer.classify_id],
    ).to(dev)
    if (
        spec.regression
    ):  # start at the mean score, so the first updates fit the spread rather than the offset
        torch.nn.init.constant_(model.clf.bias, float(np.mean(train_set.labels)))
    model_cfg = model.transformer.config

    data_splits = {
        s.name: {**s.report, "sha256": s.digest} for s in (train_set, *held_out.values())
    }
    with start_run(run_name, **logger_args) as run:
        monitor_system(run)
        run.log_params(
            {
                "task": spec.name,
                "data": str(data_path),
                "checkpoint": str(checkpoint_dir.resolve()),
                "tokenizer_sha256": tokenizer.sha256,
                "ablation": ablation_name(cfg),
                "device": str(dev),
                "n_parameters": model.transformer.num_parameters(),
                "train_examples": len(train_set.examples),
                "headline_split": headline,
                "headline_rows": len(held_out[headline].examples),
                **{
                    f"finetune.{k}": v for k, v in cfg.model_dump(exclude={"tasks", "data"}).items()
                },
                **{f"model.{k}": v for k, v in model_cfg.model_dump().items()},
            }
        )
        log_task_data(run, spec, data_path, data_splits)
        if held_out[headline].on_training_rows:
            run.set_tags({"gpt1.eval_on_training_rows": "true"})
        if run.enabled and not cfg.from_scratch:
            weights = model_files(checkpoint_dir)[1]
            run.log_reference("checkpoint", weights, sha256_file(weights))

        train_stats, evaluations = train(model, spec, train_set, held_out, cfg, dev, run, headline)
        train_stats["peak_rss_mb"] = peak_rss_mb()

        info = {
            "task": spec.name,
            "kind": spec.kind,
            "head": spec.head,
            "n_outputs": n_outputs(spec),
            "tokenizer_sha256": tokenizer.sha256,
            "labels": list(spec.labels) if spec.labels else None,
            "clf_pdrop": cfg.clf_pdrop,
            "input_columns": list(input_columns(spec)),
            "checkpoint": str(checkpoint_dir.resolve()),
        }
        model_dir = save_task_model(model.cpu(), tokenizer, info, out_dir / MODEL_DIR)
        files = write_predictions(spec, held_out, evaluations, out_dir)

        best = evaluations[headline]
        result = {
            "task": spec.name,
            "title": spec.title,
            "kind": spec.kind,
            "primary_metric": spec.primary_metric,
            "ablation": ablation_name(cfg),
            "eval_split": headline,
            "eval_split_fallback": None
            if headline in spec.eval_splits
            else {"paper": spec.eval_splits[0], "used": headline},
            "metrics": best.metrics,
            "majority": best.majority,
            "evaluated_on": held_out[headline].rows(),
            "eval_on_training_rows": held_out[headline].on_training_rows,
            "splits": {
                name: {
                    "examples": len(held_out[name].examples),
                    "metrics": e.metrics,
                    "majority": e.majority,
                    "loss": e.loss,
                    "evaluated_on": held_out[name].rows(),
                }
                for name, e in evaluations.items()
            },
            "train": train_stats,
            "files": files,
            "model_dir": MODEL_DIR,
            "data": {"path": str(data_path), "splits": data_splits},
            "checkpoint": str(checkpoint_dir.resolve()),
            "pretraining": pretraining_of(checkpoint_dir),
            "tokenizer_sha256": tokenizer.sha256,
            "finetune_config": cfg.model_dump(),
            "model_config": model_cfg.model_dump(),
            "n_parameters": model.transformer.num_parameters(),
            "device": str(dev),
            "run_id": run.run_id,
            "parent_run_id": run.parent_run_id,
        }
        run.log_metrics(final_metrics(result), step=train_stats["steps"])
        run.log_artifact(out_dir / PREDICTIONS_DIR, PREDICTIONS_DIR)
        if (out_dir / SUBMISSION_DIR).exists():
            run.log_artifact(out_dir / SUBMISSION_DIR, SUBMISSION_DIR)
        if run.enabled:
            run.log_reference("model", model_dir, sha256_file(model_dir / WEIGHTS_NAME))
            name = logged_model_name(spec.name, cfg)
            examples = held_out[headline].examples[:2]
            log_model(
                run,
                model_dir,
                [raw_inputs(spec, ex) for ex in examples],
                name=name,
                step=train_stats["steps"],
                tags={"gpt1.task": spec.name, "gpt1.ablation": ablation_name(cfg)},
            )
            if registered_model:
                register_model(
                    run,
                    registered_model,
                    name,
                    headline=best.metrics["primary"],
                    tags={
                        "task": spec.name,
                        "ablation": ablation_name(cfg),
                        "eval_split": headline,
                        spec.primary_metric: best.metrics["primary"],
                    },
                )
        write_json(out_dir / METRICS_FILE, result)  # last: its presence means the task is complete
        run.log_artifact(out_dir / METRICS_FILE)
    log.info(
        "%s: %s = %.2f on %s (majority baseline %.2f); outputs in %s",
        spec.name,
        spec.primary_metric,
        best.metrics["primary"],
        headline,
        best.majority["primary"],
        out_dir,
    )
    return result


# -- MLflow ---------------------------------------------------------------------------------------------------
def final_metrics(result: dict) -> dict[str, float]:
    """A task run's final metrics, from what metrics.json holds: `task/<name>/<metric>` on the headline split
    (`primary` among them), `task/<name>/majority/<metric>` for the baseline, `task/<name>/<split>/<metric>` for the
    other scored splits, the throughput and the peak RSS."""
    name = result["task"]
    final = {f"task/{name}/{k}": v for k, v in result["metrics"].items()}
    final[f"task/{name}/eval_rows"] = result["splits"][result["eval_split"]]["examples"]
    final.update({f"task/{name}/majority/{k}": v for k, v in result["majority"].items()})
    for split, entry in result["splits"].items():
        if split != result["eval_split"] and entry["metrics"]:
            final.update({f"task/{name}/{split}/{k}": v for k, v in entry["metrics"].items()})
    final[f"task/{name}/train_examples_per_s"] = result["train"]["examples_per_s"]
    final[f"task/{name}/eval_examples_per_s"] = result["train"]["eval_examples_per_s"]
    if "peak_rss_mb" in result["train"]:  # absent from metrics.json written before it was measured
        final[f"task/{name}/peak_rss_mb"] = result["train"]["peak_rss_mb"]
    return final


def log_task_data(run: RunLogger, spec: TaskSpec, data_path, splits: dict[str, dict]) -> None:
    """Each split read as an `mlflow.data` dataset (a hub source with its repo, config, split and revision for
    `hf:` data, else the local path; digest = the files' hash; profile = rows read, malformed, excluded), and the
    counts as metrics `data/<split>/*`."""
    counts = {}
    for split, report in splits.items():
        context = "training" if split == "train" else "testing" if split == "test" else "evaluation"
        profile = {
            "rows": report["rows"],
            "malformed": sum(report["bad"].values()),
            "excluded": sum(report["excluded"].values()),
        }
        source: str | DatasetSource
        if isinstance(data_path, str) and data_path.startswith("hf:"):
            repo, config, revision = hub.parse_ref(data_path)
            hub_split = "+".join(name for name, _ in hub.hf_splits(spec, split))
            source = hub_dataset_source(repo, config=config, split=hub_split, revision=revision)
        else:
            source = str(Path(data_path).resolve())
        run.log_dataset(
            f"{spec.name}/{split}", report["sha256"], source, context=context, profile=profile
        )
        counts.update({f"data/{split}/{k}": v for k, v in profile.items()})
    run.log_metrics(counts)


def logged_model_name(task: str, cfg: FinetuneConfig) -> str:
    """The logged model's name (`runs:/<run_id>/<name>`): the task, plus `-<ablation>` for an ablation."""
    ablation = ablation_name(cfg)
    return task if ablation == "full" else f"{task}-{ablation}"


def log_finished(
    out_dir: str | os.PathLike,
    *,
    run_name: str,
    parent_run_id: str | None,
    experiment: str,
    tracking_uri: str | None,
    tags: dict[str, str],
) -> str | None:
    """A child run for a fine-tune that an earlier run did (a cached re-run): its settings, data and recorded
    metrics from metrics.json, tagged `gpt1.source_run_id` (the run that trained it, holding its logged model).
    Returns the new run's id."""
    result = read_json(Path(out_dir) / METRICS_FILE)
    spec = tasks.get(result["task"])
    run_tags = {**tags, "gpt1.task": spec.name, "gpt1.ablation": result["ablation"]}
    if result.get("run_id"):
        run_tags["gpt1.source_run_id"] = result["run_id"]
    with start_run(
        run_name,
        experiment=experiment,
        uri=tracking_uri,
        parent_run_id=parent_run_id,
        tags=run_tags,
    ) as run:
        run.log_params(
            {
                "task": spec.name,
                "data": result["data"]["path"],
                "checkpoint": result["checkpoint"],
                "ablation": result["ablation"],
                "headline_split": result["eval_split"],
                **{
                    f"finetune.{k}": v
                    for k, v in result["finetune_config"].items()
                    if k not in ("tasks", "data")
                },
                **{f"model.{k}": v for k, v in result["model_config"].items()},
            }
        )
        log_task_data(run, spec, result["data"]["path"], result["data"]["splits"])
        run.log_metrics(final_metrics(result), step=result["train"]["steps"])
        run.log_artifact(Path(out_dir) / METRICS_FILE)
    return run.run_id


def registered_model_name(cfg: PipelineConfig, task: str) -> str | None:
    """Model Registry name of a task model: `<experiment>-<task>`, plus `-<ablation>` for an ablation, so each
    registered model's versions are comparable runs of one recipe (None when tracking.register_models is off)."""
    if not cfg.tracking.register_models:
        return None
    ablation = ablation_name(cfg.finetune)
    return f"{cfg.tracking.experiment}-{task}" + ("" if ablation == "full" else f"-{ablation}")
