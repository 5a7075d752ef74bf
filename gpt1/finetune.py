"""Stage 5: fine-tune GPT-1 on one task from a pre-trained checkpoint, evaluate it, and predict with it.

    metrics = finetune("rte", "glue_data/RTE", "runs/pretrain/final", "runs/finetune/rte", cfg.finetune)
    gpt1 finetune --task rte --data glue_data/RTE --checkpoint runs/pretrain/final --out runs/finetune/rte
    gpt1 predict --model runs/finetune/rte/model --task rte --input pairs.jsonl --out predictions.jsonl

The paper's recipe (section 3.2, 4.1) is the default `FinetuneConfig`: the task's examples go through its input
transformation (`spec.encode`), a linear head reads the `_classify_` state (`GPT1ForTask`), and the objective is
L3 = L2 + lambda * L1: the task loss (cross-entropy; MSE for the STS-B regression) plus lambda times the language
modelling loss on the same sequences, padding excluded. AdamW, lr 6.25e-5, batch 32, 3 epochs, linear warmup over
0.2% of the updates then linear decay to 0, classifier dropout 0.1, weight decay 0.01 on weight matrices only,
gradient clipping. Ablations (paper Table 5, Fig. 2): `aux_lm_weight=0`, `from_scratch` (random init, same
architecture), `transfer_layers=k` (only the first k pre-trained blocks).

Outputs in OUT (each file written atomically; metrics.json last, so its presence means the task finished):

    metrics.json              headline metrics, majority baseline, every evaluated split, throughput, settings
    predictions/<split>.jsonl one line per example: id, group, gold label, prediction, probabilities
    submission/<Task>.tsv     test-split predictions in the GLUE server format (`gpt1.tasks.write_submission`)
    model/                    model.safetensors + config.json (the fine-tuned transformer, loadable by
                              `GPT1.from_pretrained`), head.safetensors, tokenizer.json, task.json
    error.json                only when the run failed: the error, for the report

and an MLflow child run: params, per-update curves (`train/*`), per-epoch evaluation (`eval/<split>/<metric>`),
final metrics `task/<name>/<metric>` (`task/<name>/majority/<metric>` for the baseline, `task/<name>/<split>/...`
for a split other than the headline one), the task files as dataset lineage, and the model as an MLflow pyfunc
model (`gpt1.serving`) that takes raw task inputs.

Choices where the spec is silent:
- Which split is scored: every held-out split the task has (dev, the paper's `eval_splits`, test) is predicted;
  each labelled one is scored. The headline (`task/<name>/...`) is the paper's evaluation split when it is there
  and labelled (dev for GLUE; test for SNLI, SciTail, RACE, Story Cloze), else dev (e.g. RACE without its test
  split). Model selection is not done (the paper trains a fixed 3 epochs): the metrics are those after the last
  epoch; the per-epoch evaluations are curves only, of the headline split (every split is evaluated once, at the
  end: scoring dev and test after every epoch cost a fifth of a small task's fine-tuning time).
- Schedule: update i (0-based) gets lr * (i+1)/W during the W = ceil(warmup_fraction * total) warmup updates,
  then lr * (total - i)/(total - W): a continuous version of the release's `warmup_linear`, ending just above 0.
- The LM loss is averaged per sequence, then over sequences (as the release does); every real token after the
  first is a target, `_classify_` included. Multiple choice and similarity count all K (or 2) sequences.
- Weight decay applies to every parameter with 2+ dimensions (matrices, embeddings) and not to biases and
  LayerNorm gains, as the release's `vector_l2`. Adam betas/eps are the release's (0.9, 0.999, 1e-8).
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

import argparse
import json
import logging
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from gpt1 import tasks
from gpt1.config import TASKS, FinetuneConfig, PipelineConfig, load_config
from gpt1.io import InputError, read_json, sha256_file, stable_hash, write_json, write_text
from gpt1.losses import task_loss
from gpt1.model import CONFIG_NAME, WEIGHTS_NAME, GPT1, GPT1ForTask, load_model_config
from gpt1.tasks import ChoiceExample, Encoded, TaskSpec
from gpt1.tasks.formats import text_or_pair
from gpt1.tracking import RunLogger, start_run

log = logging.getLogger(__name__)

MODEL_DIR = "model"
HEAD_NAME = "head.safetensors"
TASK_FILE = "task.json"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.json"
ERROR_FILE = "error.json"
PREDICTIONS_DIR = "predictions"
SUBMISSION_DIR = "submission"
MAX_CURVE_POINTS = 1000
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # the release's Adam settings


# -- data -----------------------------------------------------------------------------------------------------
@dataclass
class Split:
    """One task split as the model sees it: the examples, their encodings and where they came from."""

    name: str
    examples: list
    encoded: list[Encoded]
    report: dict  # LoadReport.to_dict(): sources, rows, malformed/excluded counts
    digest: str  # content hash of the files read (dataset lineage)
    all_labels: list  # labels of the whole split, also the examples a max_*_examples subset left out

    @property
    def labelled(self) -> bool:
        return all(ex.label is not None for ex in self.examples)

    @property
    def labels(self) -> list:
        return [ex.label for ex in self.examples]

    @property
    def groups(self) -> list:
        return [ex.group for ex in self.examples]


def held_out_splits(spec: TaskSpec) -> list[str]:
    """dev, the paper's evaluation split(s), test: each one the task has, in that order, once."""
    wanted = ["dev", *spec.eval_splits, "test"]
    return [s for i, s in enumerate(wanted) if s in spec.splits and s not in wanted[:i]]


def evenly_spaced(n: int, k: int | None) -> list[int]:
    """k indices spread over range(n) (all of them when k is None or >= n)."""
    if k is None or k >= n:
        return list(range(n))
    return sorted({(i * n) // k for i in range(k)})


def load_split(spec: TaskSpec, path: str | os.PathLike, split: str, tokenizer, max_len: int,
               limit: int | None, max_bad_fraction: float) -> Split:
    data = spec.load(path, split, max_bad_fraction)
    examples = [data[i] for i in evenly_spaced(len(data), limit)]
    if len(examples) < len(data):
        log.info("%s/%s: using %d of %d examples (evenly spaced)", spec.name, split, len(examples), len(data))
    report = data.report.to_dict()
    files = [s for s in data.report.sources if Path(s).is_file()]
    digest = stable_hash([(Path(f).name, sha256_file(f)) for f in files] or data.report.sources, length=64)
    return Split(split, examples, spec.encode_all(examples, tokenizer, max_len), report, digest,
                 [ex.label for ex in data])


def load_task_data(spec: TaskSpec, path: str | os.PathLike, tokenizer, max_len: int, cfg: FinetuneConfig
                   ) -> tuple[Split, dict[str, Split]]:
    """The train split and every held-out split present; errors (missing files, bad rows) before any compute."""
    common = dict(tokenizer=tokenizer, max_len=max_len, max_bad_fraction=cfg.max_bad_row_fraction)
    train = load_split(spec, path, "train", limit=cfg.max_train_examples, **common)
    if not train.labelled:
        raise InputError(f"{spec.name}: the train split has unlabelled examples", file=path)
    held_out = {}
    for name in held_out_splits(spec):
        try:
            held_out[name] = load_split(spec, path, name, limit=cfg.max_eval_examples, **common)
        except FileNotFoundError as err:
            log.info("%s: no %s split (%s)", spec.name, name, err)
    if not any(s.labelled for s in held_out.values()):
        raise InputError(f"{spec.name}: no labelled evaluation split ({', '.join(held_out_splits(spec))}) found",
                         file=path)
    return train, held_out


def headline_split(spec: TaskSpec, held_out: dict[str, Split]) -> str:
    """The paper's evaluation split when present and labelled, else dev, else any labelled split."""
    labelled = [name for name, s in held_out.items() if s.labelled]
    return next((s for s in (*spec.eval_splits, "dev") if s in labelled), labelled[0])


def to_tensors(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(device) for k, v in batch.items()}


# -- model ----------------------------------------------------------------------------------------------------
def n_outputs(spec: TaskSpec) -> int:
    """Head width: classes, 1 for the STS-B score, or K candidates for multiple choice."""
    return spec.n_choices if spec.kind == "multiple_choice" else spec.n_outputs


def build_model(spec: TaskSpec, checkpoint_dir: str | os.PathLike, vocab_size: int, cfg: FinetuneConfig
                ) -> GPT1ForTask:
    """The pre-trained transformer (or, ablating pre-training, a random one of the same shape) plus the task head.

    Seed the global RNG first: the head, any new embedding rows and a from-scratch model are drawn from it."""
    checkpoint_dir = Path(checkpoint_dir)
    model_cfg = load_model_config(checkpoint_dir / CONFIG_NAME)
    vocab = max(model_cfg.vocab_size, vocab_size)
    if cfg.from_scratch:
        base = GPT1(model_cfg.model_copy(update={"vocab_size": vocab}))
    else:
        base = GPT1.from_pretrained(checkpoint_dir, transfer_layers=cfg.transfer_layers, vocab_size=vocab)
    return GPT1ForTask(base, spec.head, n_outputs(spec), cfg.clf_pdrop)


def save_task_model(model: GPT1ForTask, tokenizer, info: dict, directory: str | os.PathLike) -> Path:
    """Write the fine-tuned model folder into a temporary folder, then swap it in whole."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.transformer.save_pretrained(tmp)
    head = {k: v.detach().contiguous().cpu() for k, v in model.clf.state_dict().items()}
    save_file(head, str(tmp / HEAD_NAME), metadata={"format": "pt"})
    tokenizer.save(tmp)
    write_json(tmp / TASK_FILE, info)
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old)
    else:
        os.replace(tmp, directory)
    return directory


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """A fine-tuned model folder, or a task output folder holding one in `model/`."""
    path = Path(path)
    for candidate in (path, path / MODEL_DIR):
        if (candidate / TASK_FILE).is_file():
            return candidate
    if not path.exists():
        raise FileNotFoundError(f"model folder {path} does not exist")
    raise FileNotFoundError(f"{path}: not a fine-tuned model folder (no {TASK_FILE}; expected the `model/` folder "
                            f"written by `gpt1 finetune`)")


def load_task_model(model_dir: str | os.PathLike, device: str | torch.device = "cpu"
                    ) -> tuple[GPT1ForTask, Any, dict]:
    """(model in eval mode, tokenizer, task.json) from a folder written by `save_task_model`."""
    from gpt1 import tokenizer as tokenization

    model_dir = resolve_model_dir(model_dir)
    info = read_json(model_dir / TASK_FILE)
    for key in ("task", "head", "n_outputs"):
        if key not in info:
            raise InputError("missing field", file=model_dir / TASK_FILE, field=key)
    model = GPT1ForTask(GPT1.from_pretrained(model_dir), info["head"], info["n_outputs"], info.get("clf_pdrop", 0.0))
    head = load_file(str(model_dir / HEAD_NAME))
    try:
        model.clf.load_state_dict(head)
    except RuntimeError as err:
        raise InputError(f"head weights do not match task.json: {err}", file=model_dir / HEAD_NAME) from None
    return model.to(device).eval(), tokenization.load(model_dir), info


# -- objective and schedule -----------------------------------------------------------------------------------
def warmup_linear(total: int, warmup: int):
    """lr multiplier of update i: linear warmup over `warmup` updates, then linear decay towards 0 at `total`."""

    def factor(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        return max(total - i, 0) / max(total - warmup, 1)

    return factor


def make_optimizer(model: torch.nn.Module, cfg: FinetuneConfig) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = params[0].device.type in ("cpu", "cuda")  # one kernel per tensor: several times faster on CPU
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=ADAM_BETAS, eps=ADAM_EPS, fused=fused)


# -- evaluation and prediction --------------------------------------------------------------------------------
def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@torch.no_grad()
def predict_logits(model: GPT1ForTask, encoded: Sequence[Encoded], batch_size: int, device: torch.device,
                   precision: str = "fp32", desc: str = "predict") -> np.ndarray:
    """Head outputs for every example, (N, n_outputs) or (N, K); batches of similar length to limit padding."""
    model.eval()
    order = sorted(range(len(encoded)), key=lambda i: -max(map(len, encoded[i].input_ids)))
    logits: list[np.ndarray | None] = [None] * len(encoded)
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", disable=None, leave=False):
        index = order[start:start + batch_size]
        batch = to_tensors(tasks.collate([encoded[i] for i in index]), device)
        with autocast(device, precision):
            out = model(batch["input_ids"], batch["classify_pos"], with_lm_logits=False)
        for i, row in zip(index, out.logits.float().cpu().numpy()):
            logits[i] = row
    return np.stack(logits)


def decode(spec: TaskSpec, logits: np.ndarray) -> tuple[list, np.ndarray | None]:
    """(predicted class/candidate index, or score for a regression; softmax probabilities or None)."""
    if spec.regression:
        return logits[:, 0].astype(float).tolist(), None
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    return probabilities.argmax(axis=1).tolist(), probabilities


def label_name(spec: TaskSpec, value) -> str | float:
    """How a label or prediction is written out: the task's label string, or the score."""
    return float(value) if spec.regression else spec.labels[int(value)]


def prediction_records(spec: TaskSpec, examples: Sequence, predictions: list, probabilities: np.ndarray | None
                       ) -> list[dict]:
    records = []
    for i, (example, prediction) in enumerate(zip(examples, predictions)):
        record: dict[str, Any] = {"id": example.id, "prediction": label_name(spec, prediction)}
        if example.group is not None:
            record["group"] = example.group
        if example.label is not None:
            record["label"] = label_name(spec, example.label)
        if probabilities is not None:
            record["probabilities"] = [round(float(p), 6) for p in probabilities[i]]
        records.append(record)
    return records


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


def evaluate_split(model: GPT1ForTask, spec: TaskSpec, split: Split, train: Split, cfg: FinetuneConfig,
                   device: torch.device) -> Evaluation:
    started = time.perf_counter()
    logits = predict_logits(model, split.encoded, cfg.eval_batch_size, device, cfg.precision,
                            desc=f"eval {spec.name}/{split.name}")
    predictions, probabilities = decode(spec, logits)
    result = Evaluation(split.name, predictions, probabilities, seconds=time.perf_counter() - started)
    if split.labelled:
        result.metrics = tasks.evaluate(spec.name, split.examples, predictions)
        result.majority = tasks.metrics.majority_baseline(spec.name, train.all_labels, split.labels,
                                                          extra={"groups": split.groups})
        target = torch.tensor(split.labels, dtype=torch.float if spec.regression else torch.long)
        result.loss = float(task_loss(torch.from_numpy(logits), target, regression=spec.regression))
    return result


# -- predict on raw inputs ------------------------------------------------------------------------------------
def input_columns(spec: TaskSpec) -> tuple[str, ...]:
    """The raw input fields of a task: {"sentence"}, {"premise","hypothesis"}, {"sentence1","sentence2"}, ... (the
    Hugging Face column names), and {"context","question","options"} for multiple choice."""
    return ("context", "question", "options") if spec.kind == "multiple_choice" else spec.hf_text


def example_from_record(spec: TaskSpec, record: dict, index: int, source: str = "input"):
    """A raw input record -> the task's example type; `id` (or `idx`) is kept when present, else the row index."""
    if not isinstance(record, dict):
        raise InputError(f"expected an object with {list(input_columns(spec))}", file=source, line=index + 1)
    example_id = str(record.get("id", record.get("idx", index)))

    def text(name: str, optional: bool = False) -> str:
        value = record.get(name)
        if value is None and optional:
            return ""
        if not isinstance(value, str):
            raise InputError(f"expected a string, got {type(value).__name__}", file=source, line=index + 1,
                             field=name)
        return value.strip()

    if spec.kind != "multiple_choice":
        return text_or_pair(example_id, tuple(text(c) for c in spec.hf_text), None, None)
    options = record.get("options")
    if isinstance(options, np.ndarray):
        options = options.tolist()
    if not isinstance(options, (list, tuple)) or len(options) != spec.n_choices:
        raise InputError(f"expected a list of {spec.n_choices} answer options", file=source, line=index + 1,
                         field="options")
    return ChoiceExample(example_id, text("context"), text("question", optional=True),
                         tuple(str(o).strip() for o in options))


class TaskPredictor:
    """A fine-tuned model folder ready to score raw inputs: tokenizer + input transformation + model + head."""

    def __init__(self, model_dir: str | os.PathLike, device: str | None = None, batch_size: int = 64):
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model, self.tokenizer, self.info = load_task_model(model_dir, self.device)
        self.spec = tasks.get(self.info["task"])
        self.batch_size = batch_size
        self.max_len = self.model.transformer.config.n_ctx

    @property
    def columns(self) -> tuple[str, ...]:
        return input_columns(self.spec)

    def predict(self, examples: Sequence) -> list[dict]:
        """One record per example: id, prediction (label string or score), probabilities (per label/candidate)."""
        if not examples:
            return []
        encoded = [self.spec.encode(ex, self.tokenizer, self.max_len) for ex in examples]
        logits = predict_logits(self.model, encoded, self.batch_size, self.device)
        predictions, probabilities = decode(self.spec, logits)
        return prediction_records(self.spec, examples, predictions, probabilities)

    def predict_records(self, records: Iterable[dict], source: str = "input") -> list[dict]:
        return self.predict([example_from_record(self.spec, r, i, source) for i, r in enumerate(records)])


def read_jsonl(path: Path) -> list:
    records = []
    with open(path, encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise InputError(f"invalid JSON: {err.msg}", file=path, line=number) from None
    return records


def read_inputs(spec: TaskSpec, path: str | os.PathLike, split: str = "test") -> list:
    """Examples from a jsonl of raw inputs (the task's `input_columns`) or from any task file/folder
    `gpt1.tasks.load` reads (official layout, hub export)."""
    path = Path(path)
    if path.suffix in (".jsonl", ".json") and path.is_file():
        records = read_jsonl(path) if path.suffix == ".jsonl" else None
        if records and isinstance(records[0], dict) and set(input_columns(spec)) - {"question"} <= records[0].keys():
            return [example_from_record(spec, r, i, str(path)) for i, r in enumerate(records)]
    return list(tasks.load(spec.name, path, split))


# -- the training run -----------------------------------------------------------------------------------------
def find_tokenizer(checkpoint_dir: Path, tokenizer_dir: str | os.PathLike | None) -> Path:
    where = Path(tokenizer_dir) if tokenizer_dir else checkpoint_dir
    if where.is_file() or (where / TOKENIZER_FILE).is_file():
        return where
    hint = "" if tokenizer_dir else " (the checkpoint has none: pass the tokenizer folder, --tokenizer DIR)"
    raise FileNotFoundError(f"no {TOKENIZER_FILE} in {where}{hint}")


def check_inputs(checkpoint_dir: Path, cfg: FinetuneConfig) -> None:
    if cfg.from_scratch and cfg.transfer_layers is not None:
        raise ValueError("finetune: from_scratch and transfer_layers exclude each other (nothing is transferred "
                         "from scratch)")
    needed = [CONFIG_NAME] if cfg.from_scratch else [CONFIG_NAME, WEIGHTS_NAME]
    if not checkpoint_dir.is_dir():
        raise FileNotFoundError(f"checkpoint folder {checkpoint_dir} does not exist")
    missing = [n for n in needed if not (checkpoint_dir / n).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint {checkpoint_dir}: no {' or '.join(missing)} (expected a folder "
                                f"written by `gpt1 pretrain` (final/) or `gpt1 convert`)")


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
            self.run.log_metrics({**{k: v / self.count for k, v in self.sums.items()}, **instant}, step=step)
            self.sums, self.count = {}, 0


def backward(model: GPT1ForTask, spec: TaskSpec, train_set: Split, index: torch.Tensor, labels: torch.Tensor,
             cfg: FinetuneConfig, device: torch.device) -> tuple[dict[str, float], int]:
    """Forward and backward of one update's batch (L3 = L2 + lambda * L1), in micro-batches of
    `cfg.micro_batch_size` when set. Both losses are means over examples, so weighting each micro-batch's loss by
    its share of the batch accumulates exactly the whole batch's gradient. Returns the batch's losses and its
    real-token count."""
    use_lm = cfg.aux_lm_weight > 0
    losses: dict[str, float] = {}
    tokens = 0
    for chunk in index.split(cfg.micro_batch_size or len(index)):
        batch = to_tensors(tasks.collate([train_set.encoded[i] for i in chunk.tolist()]), device)
        with autocast(device, cfg.precision):
            out = model(batch["input_ids"], batch["classify_pos"], lm_mask=batch["mask"] if use_lm else None)
        parts = {"train/clf_loss": task_loss(out.logits, labels[chunk].to(device), regression=spec.regression)}
        if use_lm:
            parts["train/lm_loss"] = out.lm_loss
        parts["train/loss"] = parts["train/clf_loss"] + cfg.aux_lm_weight * parts.get("train/lm_loss", 0.0)
        share = len(chunk) / len(index)
        (parts["train/loss"] * share).backward()
        for name, value in parts.items():
            losses[name] = losses.get(name, 0.0) + value.item() * share
        tokens += int(batch["mask"].sum())
    return losses, tokens


def train(model: GPT1ForTask, spec: TaskSpec, train_set: Split, held_out: dict[str, Split], cfg: FinetuneConfig,
          device: torch.device, run: RunLogger, headline: str) -> tuple[dict, dict[str, Evaluation]]:
    """The fine-tuning loop; evaluates the headline split after each epoch and every split at the end."""
    n, bs = len(train_set.examples), cfg.batch_size
    steps_per_epoch = math.ceil(n / bs)
    total = steps_per_epoch * cfg.epochs
    warmup = math.ceil(cfg.warmup_fraction * total)
    optimizer = make_optimizer(model, cfg)
    model.transformer.compile_for(device.type)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_linear(total, warmup))
    shuffle = torch.Generator().manual_seed(cfg.seed)
    labels = torch.tensor(train_set.labels, dtype=torch.float if spec.regression else torch.long)
    curves = CurveLogger(run, total)
    log.info("%s: fine-tuning on %d examples, %d epochs x %d updates (batch %d, warmup %d, aux LM weight %g, %s)",
             spec.name, n, cfg.epochs, steps_per_epoch, bs, warmup, cfg.aux_lm_weight, ablation_name(cfg))

    step, seen, tokens, train_seconds, last = 0, 0, 0, 0.0, {}
    evaluations: dict[str, Evaluation] = {}
    bar = tqdm(total=total, desc=f"finetune {spec.name}", unit="step", disable=None)
    for epoch in range(cfg.epochs):
        model.train()
        started = time.perf_counter()
        for index in torch.randperm(n, generator=shuffle).split(bs):
            optimizer.zero_grad(set_to_none=True)
            last, batch_tokens = backward(model, spec, train_set, index, labels, cfg, device)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
            last["train/grad_norm"] = float(grad_norm)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            schedule.step()

            step += 1
            seen += len(index)
            tokens += batch_tokens
            elapsed = train_seconds + time.perf_counter() - started
            curves.add(step, last, {"train/lr": lr, "train/epoch": step / steps_per_epoch,
                                    "train/examples_per_s": seen / elapsed})
            bar.update()
            bar.set_postfix(loss=f"{last['train/loss']:.4f}", lr=f"{lr:.2e}", ex_s=f"{seen / elapsed:.1f}")
        train_seconds += time.perf_counter() - started

        final = epoch == cfg.epochs - 1
        evaluations = {name: evaluate_split(model, spec, split, train_set, cfg, device)
                       for name, split in held_out.items() if final or name == headline}
        epoch_metrics = {}
        for name, result in evaluations.items():
            epoch_metrics.update({f"eval/{name}/{k}": v for k, v in result.metrics.items()})
            if result.loss is not None:
                epoch_metrics[f"eval/{name}/loss"] = result.loss
        run.log_metrics({**epoch_metrics, "eval/epoch": epoch + 1}, step=step)
        log.info("%s epoch %d/%d: train loss %.4f, %s (%.1f examples/s)", spec.name, epoch + 1, cfg.epochs,
                 last["train/loss"], ", ".join(f"{k.removeprefix('eval/')} {v:.2f}" for k, v in epoch_metrics.items()),
                 seen / max(train_seconds, 1e-9))
    bar.close()

    eval_examples = sum(len(held_out[name].examples) for name in evaluations)
    eval_seconds = sum(e.seconds for e in evaluations.values())
    stats = {"examples": n, "epochs": cfg.epochs, "steps": step, "warmup_steps": warmup, "seconds": train_seconds,
             "examples_per_s": seen / max(train_seconds, 1e-9), "tokens_per_s": tokens / max(train_seconds, 1e-9),
             "final_loss": last.get("train/loss"), "final_clf_loss": last.get("train/clf_loss"),
             "final_lm_loss": last.get("train/lm_loss"), "eval_examples_per_s": eval_examples / max(eval_seconds, 1e-9)}
    return stats, evaluations


def write_predictions(spec: TaskSpec, held_out: dict[str, Split], evaluations: dict[str, Evaluation],
                      out_dir: Path) -> dict[str, list[str]]:
    written: dict[str, list[str]] = {}
    for name, result in evaluations.items():
        split = held_out[name]
        lines = prediction_records(spec, split.examples, result.predictions, result.probabilities)
        path = write_text(out_dir / PREDICTIONS_DIR / f"{name}.jsonl",
                          "".join(json.dumps(line) + "\n" for line in lines))
        written[name] = [str(path.relative_to(out_dir))]
        if name == "test":
            files = tasks.write_submission(spec.name, split.examples, result.predictions, out_dir / SUBMISSION_DIR)
            written["submission"] = [str(Path(f).relative_to(out_dir)) for f in files]
    return written


def finetune(task: str, data_path: str | os.PathLike, checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike,
             cfg: FinetuneConfig | None = None, *, tokenizer_dir: str | os.PathLike | None = None,
             parent_run_id: str | None = None, tracking_uri: str | None = None, experiment: str = "gpt1",
             run_name: str | None = None, track: bool = True, device: str | None = None,
             registered_model: str | None = None) -> dict:
    """Fine-tune `task` from a checkpoint folder, evaluate, predict; returns what metrics.json holds.

    `registered_model`: also register the logged MLflow model as a new version of this Model Registry name.

    On failure, OUT/error.json records the error (the results report lists it) and the exception propagates."""
    cfg = cfg or FinetuneConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ERROR_FILE).unlink(missing_ok=True)
    try:
        return _finetune(tasks.get(task), data_path, Path(checkpoint_dir), out_dir, cfg, tokenizer_dir,
                         dict(experiment=experiment, uri=tracking_uri, parent_run_id=parent_run_id, enabled=track),
                         run_name or f"finetune/{task}", device, registered_model)
    except BaseException as err:
        write_json(out_dir / ERROR_FILE, {"task": task, "error": f"{type(err).__name__}: {err}",
                                          "ablation": ablation_name(cfg), "time": time.time()})
        raise


def _finetune(spec: TaskSpec, data_path, checkpoint_dir: Path, out_dir: Path, cfg: FinetuneConfig, tokenizer_dir,
              tracking: dict, run_name: str, device: str | None, registered_model: str | None) -> dict:
    from gpt1 import tokenizer as tokenization

    check_inputs(checkpoint_dir, cfg)
    tokenizer = tokenization.load(find_tokenizer(checkpoint_dir, tokenizer_dir))
    max_len = load_model_config(checkpoint_dir / CONFIG_NAME).n_ctx
    train_set, held_out = load_task_data(spec, data_path, tokenizer, max_len, cfg)
    headline = headline_split(spec, held_out)

    torch.manual_seed(cfg.seed)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = build_model(spec, checkpoint_dir, tokenizer.vocab_size, cfg).to(dev)
    if spec.regression:  # start at the mean score, so the first updates fit the spread rather than the offset
        torch.nn.init.constant_(model.clf.bias, float(np.mean(train_set.labels)))
    model_cfg = model.transformer.config

    tags = {"gpt1.stage": "finetune", "gpt1.task": spec.name, "gpt1.ablation": ablation_name(cfg)}
    with start_run(run_name, tags=tags, **tracking) as run:
        run.log_params({"task": spec.name, "data": str(data_path), "checkpoint": str(checkpoint_dir.resolve()),
                        "tokenizer_sha256": tokenizer.sha256, "ablation": ablation_name(cfg), "device": str(dev),
                        "n_parameters": model.transformer.num_parameters(), "train_examples": len(train_set.examples),
                        "headline_split": headline,
                        **{f"finetune.{k}": v for k, v in cfg.model_dump(exclude={"tasks", "data"}).items()},
                        **{f"model.{k}": v for k, v in model_cfg.model_dump().items()}})
        counts = {}
        for split in (train_set, *held_out.values()):
            context = "training" if split.name == "train" else "testing" if split.name == "test" else "evaluation"
            run.log_dataset(f"{spec.name}/{split.name}", split.digest, str(data_path), context=context)
            counts.update({f"data/{split.name}/rows": split.report["rows"],
                           f"data/{split.name}/malformed": sum(split.report["bad"].values()),
                           f"data/{split.name}/excluded": sum(split.report["excluded"].values())})
        run.log_metrics(counts)
        if run.enabled and not cfg.from_scratch:
            run.log_reference("checkpoint", checkpoint_dir / WEIGHTS_NAME, sha256_file(checkpoint_dir / WEIGHTS_NAME))

        train_stats, evaluations = train(model, spec, train_set, held_out, cfg, dev, run, headline)

        info = {"task": spec.name, "kind": spec.kind, "head": spec.head, "n_outputs": n_outputs(spec),
                "labels": list(spec.labels) if spec.labels else None, "clf_pdrop": cfg.clf_pdrop,
                "input_columns": list(input_columns(spec)), "checkpoint": str(checkpoint_dir.resolve())}
        model_dir = save_task_model(model.cpu(), tokenizer, info, out_dir / MODEL_DIR)
        files = write_predictions(spec, held_out, evaluations, out_dir)

        best = evaluations[headline]
        final = {f"task/{spec.name}/{k}": v for k, v in best.metrics.items()}
        final.update({f"task/{spec.name}/majority/{k}": v for k, v in best.majority.items()})
        for name, result in evaluations.items():
            if name != headline and result.metrics:
                final.update({f"task/{spec.name}/{name}/{k}": v for k, v in result.metrics.items()})
        final[f"task/{spec.name}/train_examples_per_s"] = train_stats["examples_per_s"]
        final[f"task/{spec.name}/eval_examples_per_s"] = train_stats["eval_examples_per_s"]
        run.log_metrics(final, step=train_stats["steps"])

        result = {
            "task": spec.name, "title": spec.title, "kind": spec.kind, "primary_metric": spec.primary_metric,
            "ablation": ablation_name(cfg), "eval_split": headline,
            "metrics": best.metrics, "majority": best.majority,
            "splits": {name: {"examples": len(held_out[name].examples), "metrics": e.metrics,
                              "majority": e.majority, "loss": e.loss} for name, e in evaluations.items()},
            "train": train_stats, "files": files, "model_dir": MODEL_DIR,
            "data": {"path": str(data_path), "splits": {s.name: {**s.report, "sha256": s.digest}
                                                         for s in (train_set, *held_out.values())}},
            "checkpoint": str(checkpoint_dir.resolve()), "tokenizer_sha256": tokenizer.sha256,
            "finetune_config": cfg.model_dump(), "model_config": model_cfg.model_dump(),
            "n_parameters": model.transformer.num_parameters(), "device": str(dev), "run_id": run.run_id,
        }
        run.log_artifact(out_dir / PREDICTIONS_DIR, PREDICTIONS_DIR)
        if (out_dir / SUBMISSION_DIR).exists():
            run.log_artifact(out_dir / SUBMISSION_DIR, SUBMISSION_DIR)
        if run.enabled:
            from gpt1.serving import ARTIFACT_PATH, log_model

            run.log_reference("model", model_dir, sha256_file(model_dir / WEIGHTS_NAME))
            examples = held_out[headline].examples[:2]
            log_model(run, model_dir, [raw_inputs(spec, ex) for ex in examples], out_dir)
            if registered_model:
                run.register_model(registered_model, ARTIFACT_PATH, tags={
                    "task": spec.name, "ablation": ablation_name(cfg), spec.primary_metric: best.metrics["primary"]})
        write_json(out_dir / METRICS_FILE, result)  # last: its presence means the task is complete
        run.log_artifact(out_dir / METRICS_FILE)
    log.info("%s: %s = %.2f on %s (majority baseline %.2f); outputs in %s", spec.name, spec.primary_metric,
             best.metrics["primary"], headline, best.majority["primary"], out_dir)
    return result


def raw_inputs(spec: TaskSpec, example) -> dict:
    """An example back as the raw input record `gpt1 predict` and the MLflow model take (inverse of
    `example_from_record`)."""
    if isinstance(example, ChoiceExample):
        return {"context": example.context, "question": example.question, "options": list(example.options)}
    texts = (example.text,) if len(spec.hf_text) == 1 else (example.text_a, example.text_b)
    return dict(zip(spec.hf_text, texts))


def registered_model_name(cfg: PipelineConfig, task: str) -> str | None:
    """Model Registry name of a task model: `<experiment>-<task>`, plus `-<ablation>` for an ablation, so each
    registered model's versions are comparable runs of one recipe (None when tracking.register_models is off)."""
    if not cfg.tracking.register_models:
        return None
    ablation = ablation_name(cfg.finetune)
    return f"{cfg.tracking.experiment}-{task}" + ("" if ablation == "full" else f"-{ablation}")


# -- CLI ------------------------------------------------------------------------------------------------------
def add_finetune_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--data", required=True, help="the task's folder as distributed, a file, or hf:<id>")
    parser.add_argument("--checkpoint", required=True, type=Path,
                        help="pre-trained model folder (model.safetensors + config.json)")
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


def run_finetune(args: argparse.Namespace) -> int:
    cfg = load_config(args.preset, args.overrides)
    result = finetune(args.task, args.data, args.checkpoint, args.out, cfg.finetune, tokenizer_dir=args.tokenizer,
                      parent_run_id=args.parent_run_id, tracking_uri=args.tracking_uri or cfg.tracking.tracking_uri,
                      experiment=cfg.tracking.experiment, run_name=args.run_name, track=not args.no_tracking,
                      device=args.device, registered_model=registered_model_name(cfg, args.task))
    scores = ", ".join(f"{k} {v:.2f}" for k, v in result["metrics"].items())
    print(f"{args.task} ({result['eval_split']}): {scores}; majority baseline {result['majority']['primary']:.2f}")
    print(f"wrote {args.out}/{METRICS_FILE}, {PREDICTIONS_DIR}/, {MODEL_DIR}/")
    return 0


def add_predict_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, type=Path, help="fine-tuned model folder (OUT/model of finetune)")
    parser.add_argument("--task", choices=TASKS, help="the model's task (checked against the model)")
    parser.add_argument("--input", required=True, type=Path,
                        help="jsonl of raw inputs (e.g. {\"premise\", \"hypothesis\"}) or a task file/folder")
    parser.add_argument("--split", default="test", help="split to read when --input is a task folder")
    parser.add_argument("--out", type=Path, help="output jsonl (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")


def run_predict(args: argparse.Namespace) -> int:
    predictor = TaskPredictor(args.model, device=args.device, batch_size=args.batch_size)
    if args.task and args.task != predictor.spec.name:
        raise ValueError(f"--task {args.task}: the model in {args.model} was fine-tuned for {predictor.spec.name}")
    examples = read_inputs(predictor.spec, args.input, args.split)
    started = time.perf_counter()
    records = predictor.predict(examples)
    seconds = time.perf_counter() - started
    text = "".join(json.dumps(r) + "\n" for r in records)
    if args.out:
        write_text(args.out, text)
    else:
        sys.stdout.write(text)
    log.info("predicted %d examples in %.1fs (%.1f examples/s)", len(records), seconds, len(records) / max(seconds, 1e-9))
    if examples and all(ex.label is not None for ex in examples):
        scores = tasks.evaluate(predictor.spec.name, examples, [_label_index(predictor.spec, r) for r in records])
        print(", ".join(f"{k} {v:.2f}" for k, v in scores.items()), file=sys.stderr)
    return 0


def _label_index(spec: TaskSpec, record: dict):
    return record["prediction"] if spec.regression else spec.labels.index(record["prediction"])
