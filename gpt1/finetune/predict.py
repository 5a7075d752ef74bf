"""Inference with a fine-tuned task model: the model folder format, batched prediction, raw-input scoring.

    predictor = TaskPredictor("runs/finetune/rte/model")
    predictor.predict_records([{"sentence1": "A man plays.", "sentence2": "Someone plays."}])
    gpt1 predict --model runs/finetune/rte/model --task rte --input pairs.jsonl --out predictions.jsonl

A task model folder (written by `gpt1 finetune` into OUT/model, read by `load_task_model`, `gpt1 predict` and the
MLflow pyfunc model of gpt1.finetune.serving):

    (weights and config)     the fine-tuned transformer, as `GPT1.save_pretrained` writes it
    head.safetensors         the task head
    tokenizer.json           the tokenizer it was trained with
    task.json                the task, head kind and width, labels, input columns, checkpoint

Raw inputs are the task's fields under their Hugging Face column names (`input_columns`): `sentence`;
`premise, hypothesis`; `sentence1, sentence2`; `question1, question2`; `question, sentence`; and
`context, question, options` for multiple choice. A prediction is said in words (`readable_prediction`): the
label's name (`positive`, `entailment`, `not_duplicate`), the chosen option of a multiple-choice question, the
STS-B score. Fine-tuning evaluates with the same `predict_logits` and `decode`, so a prediction here is what the
evaluation scored; its own prediction files spell classes by the same names (`prediction_records`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gpt1 import tasks
from gpt1.errors import Diverged
from gpt1.io import (
    InputError,
    atomic_dir,
    positive_int,
    read_json,
    read_jsonl,
    write_json,
    write_text,
)
from gpt1.model.transformer import GPT1, GPT1ForTask, load_weights, save_weights
from gpt1.runtime.devices import torch_device
from gpt1.runtime.prefetch import prefetch
from gpt1.stages.integrity import FOLDER_FIELD, folder_record
from gpt1.tasks import TASKS, ChoiceExample, Encoded, TaskSpec
from gpt1.tasks.formats import text_or_pair
from gpt1.tokenizer import bpe

log = logging.getLogger(__name__)

MODEL_DIR = "model"
HEAD_NAME = "head.safetensors"
TASK_FILE = "task.json"


# -- the task model folder ------------------------------------------------------------------------------------
def n_outputs(spec: TaskSpec) -> int:
    """Head width: classes, 1 for the STS-B score, or K candidates for multiple choice."""
    if spec.kind == "multiple_choice":
        assert spec.n_choices is not None  # TaskSpec refuses a multiple-choice task without it
        return spec.n_choices
    return spec.n_outputs


def save_task_model(
    model: GPT1ForTask, tokenizer, info: dict, directory: str | os.PathLike
) -> Path:
    """Write the fine-tuned model folder, swapped in whole (gpt1.io.atomic_dir); task.json, written last, records
    every other file of it (its config and tokenizer as much as its weights), checked where each is read."""
    with atomic_dir(directory) as tmp:
        model.transformer.save_pretrained(tmp)
        save_weights(
            {k: v.detach().contiguous().cpu() for k, v in model.clf.state_dict().items()},
            tmp / HEAD_NAME,
        )
        tokenizer.save(tmp)
        write_json(tmp / TASK_FILE, {**info, FOLDER_FIELD: folder_record(tmp)})
    return Path(directory)


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """A fine-tuned model folder, or a task output folder holding one in `model/`."""
    path = Path(path)
    for candidate in (path, path / MODEL_DIR):
        if (candidate / TASK_FILE).is_file():
            return candidate
    if not path.exists():
        raise FileNotFoundError(f"model folder {path} does not exist")
    raise FileNotFoundError(
        f"{path}: not a fine-tuned model folder (no {TASK_FILE}; expected the `model/` folder "
        f"written by `gpt1 finetune`)"
    )


def load_task_model(
    model_dir: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[GPT1ForTask, Any, dict]:
    """(model in eval mode, tokenizer, task.json) from a folder written by `save_task_model`."""
    model_dir = resolve_model_dir(model_dir)
    info = read_json(model_dir / TASK_FILE)
    for key in ("task", "head", "n_outputs"):
        if key not in info:
            raise InputError("missing field", file=model_dir / TASK_FILE, field=key)
    labels = tasks.get(info["task"]).labels
    if "labels" in info and info["labels"] != (list(labels) if labels else None):
        raise InputError(
            f"{info['labels']!r:.80} is not the task's label list {list(labels or [])} (edited after "
            "training?)",
            file=model_dir / TASK_FILE,
            field="labels",
        )
    model = GPT1ForTask(
        GPT1.from_pretrained(model_dir), info["head"], info["n_outputs"], info.get("clf_pdrop", 0.0)
    )
    head = load_weights(model_dir / HEAD_NAME, record_key="head_sha256")
    try:
        model.clf.load_state_dict(head)
    except RuntimeError as err:
        raise InputError(
            f"head weights do not match task.json: {err}", file=model_dir / HEAD_NAME
        ) from None
    tokenizer = bpe.load(model_dir)
    if info.get("tokenizer_sha256") not in (
        None,
        tokenizer.sha256,
    ):  # folders written before the hash was kept
        raise InputError(
            f"tokenizer.json (sha256 {tokenizer.sha256[:12]}) is not the one the model was fine-tuned "
            f"with (task.json: {info['tokenizer_sha256'][:12]})",
            file=model_dir,
        )
    return model.to(device).eval(), tokenizer, info


# -- batched prediction ---------------------------------------------------------------------------------------
def host_batch(
    encoded: Sequence[Encoded], index: Sequence[int], device: torch.device
) -> dict[str, torch.Tensor]:
    """The examples `index` of `encoded`, padded into host tensors; in page-locked memory when they are bound for
    a GPU, so that `to_device` copies them without blocking."""
    tensors = {
        k: torch.from_numpy(v) for k, v in tasks.collate([encoded[i] for i in index]).items()
    }
    return {k: v.pin_memory() for k, v in tensors.items()} if device.type == "cuda" else tensors


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@torch.no_grad()
def predict_logits(
    model: GPT1ForTask,
    encoded: Sequence[Encoded],
    batch_size: int,
    device: torch.device,
    precision: str = "fp32",
    desc: str = "predict",
) -> np.ndarray:
    """Head outputs for every example, (N, n_outputs) or (N, K); batches of similar length to limit padding."""
    model.eval()
    order = sorted(range(len(encoded)), key=lambda i: -max(map(len, encoded[i].input_ids)))
    logits: dict[int, np.ndarray] = {}  # example index -> its outputs
    indices = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    host_batches = prefetch(lambda index: host_batch(encoded, index, device), indices)
    for index, host in tqdm(
        zip(indices, host_batches),
        total=len(indices),
        desc=desc,
        unit="batch",
        disable=None,
        leave=False,
    ):
        batch = to_device(host, device)
        with autocast(device, precision):
            out = model(batch["input_ids"], batch["classify_pos"], with_lm_logits=False)
        for i, row in zip(index, out.logits.float().cpu().numpy()):
            logits[i] = row
    result = np.stack([logits[i] for i in range(len(encoded))])
    bad = ~np.isfinite(result).all(axis=1)
    if (
        bad.any()
    ):  # softmax/argmax of NaN would still "predict" class 0: no metric or prediction from these
        raise Diverged(
            f"{desc}: the model's outputs are not finite (NaN or inf) for {int(bad.sum())} of "
            f"{len(result)} examples; its weights are damaged (a diverged fine-tune?)"
        )
    return result


def decode(spec: TaskSpec, logits: np.ndarray) -> tuple[list, np.ndarray | None]:
    """(predicted class/candidate index, or score for a regression; softmax probabilities or None)."""
    if spec.regression:
        return logits[:, 0].astype(float).tolist(), None
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    return probabilities.argmax(axis=1).tolist(), probabilities


# Tasks whose files write their classes as digits: the names Hugging Face's GLUE datasets give them, in class order.
LABEL_NAMES = {
    "cola": ("unacceptable", "acceptable"),
    "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"),
    "qqp": ("not_duplicate", "duplicate"),
}


def class_names(spec: TaskSpec) -> tuple[str, ...]:
    """A task's labels in class order as every prediction output spells them: the names above for the tasks
    whose files write digits, else the labels of its files (a submission file alone writes what its benchmark
    demands)."""
    if spec.labels is None:
        raise ValueError(f"{spec.name}: a regression has no classes")
    return LABEL_NAMES.get(spec.name, spec.labels)


def label_name(spec: TaskSpec, value) -> str | float:
    """How a label or prediction is written out: the class's name (`class_names`), or the score."""
    return float(value) if spec.labels is None else class_names(spec)[int(value)]


def readable_prediction(spec: TaskSpec, example, value) -> str | float:
    """A class index, candidate index or score as a user reads it: the chosen option's text (multiple choice),
    else as `label_name` writes it."""
    if spec.kind == "multiple_choice":
        return example.options[int(value)]
    return label_name(spec, value)


def prediction_records(
    spec: TaskSpec, examples: Sequence, predictions: list, probabilities: np.ndarray | None
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


# -- predict on raw inputs ------------------------------------------------------------------------------------
def input_columns(spec: TaskSpec) -> tuple[str, ...]:
    """The raw input fields of a task: {"sentence"}, {"premise","hypothesis"}, {"sentence1","sentence2"}, ... (the
    Hugging Face column names), and {"context","question","options"} for multiple choice."""
    return ("context", "question", "options") if spec.kind == "multiple_choice" else spec.hf_text


def missing_field(spec: TaskSpec, record: dict, name: str, source: str, line: int) -> InputError:
    return InputError(
        f"no field {name!r}: {spec.name} takes the fields {', '.join(input_columns(spec))} (this "
        f"row has {', '.join(map(str, record)) or 'none'})",
        file=source,
        line=line,
        field=name,
    )


def example_from_record(spec: TaskSpec, record: dict, index: int, source: str = "input"):
    """A raw input record -> the task's example type; `id` (or `idx`) is kept when present, else the row index."""
    fields = ", ".join(input_columns(spec))
    if not isinstance(record, dict):
        raise InputError(
            f"expected an object with the fields {fields}", file=source, line=index + 1
        )
    example_id = str(record.get("id", record.get("idx", index)))

    def text(name: str, optional: bool = False) -> str:
        value = record.get(name)
        if value is None and optional:
            return ""
        if value is None:
            raise missing_field(spec, record, name, source, index + 1)
        if not isinstance(value, str):
            raise InputError(
                f"expected a string, got {type(value).__name__}",
                file=source,
                line=index + 1,
                field=name,
            )
        return value.strip()

    if spec.kind != "multiple_choice":
        return text_or_pair(example_id, tuple(text(c) for c in spec.hf_text), None, None)
    options = record.get("options")
    if isinstance(options, np.ndarray):
        options = options.tolist()
    if not isinstance(options, (list, tuple)) or len(options) != spec.n_choices:
        raise InputError(
            f"expected a list of {spec.n_choices} answer options",
            file=source,
            line=index + 1,
            field="options",
        )
    return ChoiceExample(
        example_id,
        text("context"),
        text("question", optional=True),
        tuple(str(o).strip() for o in options),
    )


class TaskPredictor:
    """A fine-tuned model folder ready to score raw inputs: tokenizer + input transformation + model + head."""

    def __init__(
        self, model_dir: str | os.PathLike, device: str | None = None, batch_size: int = 64
    ):
        self.device = torch_device(device, "prediction")
        self.model, self.tokenizer, self.info = load_task_model(model_dir, self.device)
        self.spec = tasks.get(self.info["task"])
        self.batch_size = batch_size
        self.max_len = self.model.transformer.config.n_ctx

    @property
    def columns(self) -> tuple[str, ...]:
        return input_columns(self.spec)

    def decide(self, examples: Sequence) -> tuple[list, np.ndarray | None]:
        """(class or candidate index, or score, per example; probabilities per label/candidate, or None)."""
        if not examples:
            return [], None
        encoded = [self.spec.encode(ex, self.tokenizer, self.max_len) for ex in examples]
        return decode(self.spec, predict_logits(self.model, encoded, self.batch_size, self.device))

    def records(
        self, examples: Sequence, predictions: list, probabilities: np.ndarray | None
    ) -> list[dict]:
        """One record per example: id, prediction and (when the example has one) label in words
        (`readable_prediction`), probabilities (per label/candidate, in task.json's order)."""
        records = prediction_records(self.spec, examples, predictions, probabilities)
        for record, example, prediction in zip(records, examples, predictions):
            record["prediction"] = readable_prediction(self.spec, example, prediction)
            if example.label is not None:
                record["label"] = readable_prediction(self.spec, example, example.label)
        return records

    def predict(self, examples: Sequence) -> list[dict]:
        return self.records(examples, *self.decide(examples))

    def predict_records(self, records: Iterable[dict], source: str = "input") -> list[dict]:
        return self.predict(
            [example_from_record(self.spec, r, i, source) for i, r in enumerate(records)]
        )


def read_inputs(spec: TaskSpec, path: str | os.PathLike, split: str = "test") -> list:
    """Examples from a jsonl of raw inputs (the task's `input_columns`) or from any task file/folder
    `gpt1.tasks.load` reads (official layout, hub export). A jsonl that is neither is refused by naming the fields
    the task takes."""
    path = Path(path)
    # any JSON per line: records of another shape are read as a task file instead
    records = (
        read_jsonl(path, expect=object) if path.suffix == ".jsonl" and path.is_file() else None
    )
    if (
        records
        and isinstance(records[0], dict)
        and set(input_columns(spec)) - {"question"} <= records[0].keys()
    ):
        return [example_from_record(spec, r, i, str(path)) for i, r in enumerate(records)]
    try:
        return list(tasks.load(spec.name, path, split))
    except InputError:
        if not (records and isinstance(records[0], dict)):
            raise
        absent = next(c for c in input_columns(spec) if c != "question" and c not in records[0])
        raise missing_field(spec, records[0], absent, str(path), 1) from None


def raw_inputs(spec: TaskSpec, example) -> dict:
    """An example back as the raw input record `gpt1 predict` and the MLflow model take (inverse of
    `example_from_record`)."""
    if isinstance(example, ChoiceExample):
        return {
            "context": example.context,
            "question": example.question,
            "options": list(example.options),
        }
    texts = (example.text,) if len(spec.hf_text) == 1 else (example.text_a, example.text_b)
    return dict(zip(spec.hf_text, texts))


# -- CLI ------------------------------------------------------------------------------------------------------
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, type=Path, help="fine-tuned model folder (OUT/model of finetune)"
    )
    parser.add_argument(
        "--task", choices=TASKS, help="the model's task (checked against the model)"
    )
    parser.add_argument(
        "--input",
        required=True,
        type=Path,
        help='jsonl of raw inputs (e.g. {"premise", "hypothesis"}) or a task file/folder',
    )
    parser.add_argument(
        "--split", default="test", help="split to read when --input is a task folder"
    )
    parser.add_argument("--out", type=Path, help="output jsonl (default: stdout)")
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")


def run_cli(args: argparse.Namespace) -> int:
    predictor = TaskPredictor(args.model, device=args.device, batch_size=args.batch_size)
    if args.task and args.task != predictor.spec.name:
        raise ValueError(
            f"--task {args.task}: the model in {args.model} was fine-tuned for {predictor.spec.name}"
        )
    examples = read_inputs(predictor.spec, args.input, args.split)
    started = time.perf_counter()
    predictions, probabilities = predictor.decide(examples)
    seconds = time.perf_counter() - started
    records = predictor.records(examples, predictions, probabilities)
    text = "".join(json.dumps(r) + "\n" for r in records)
    if args.out:
        write_text(args.out, text)
    else:
        sys.stdout.write(text)
    log.info(
        "predicted %d examples in %.1fs (%.1f examples/s)",
        len(records),
        seconds,
        len(records) / max(seconds, 1e-9),
    )
    if examples and all(ex.label is not None for ex in examples):
        scores = tasks.evaluate(predictor.spec.name, examples, predictions)
        print(", ".join(f"{k} {v:.2f}" for k, v in scores.items()), file=sys.stderr)
    return 0
