"""The Python API (DESIGN.md, Public interface): `gpt1.tasks`, `gpt1.model.GPT1`, `gpt1.tokenizer`, `gpt1.config`,
`gpt1.finetune.predict.TaskPredictor`, called wrongly and rightly.

A refusal is an exception the CLI would show as a user error (or a TypeError for an argument of the wrong type),
with one line naming the argument, file or field; an acceptance returns something the case checks.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.battery.core import Case, api

API = "Python API"


def _tasks():
    from gpt1 import tasks

    return tasks


def _model():
    from gpt1.model import GPT1

    return GPT1


def _finite_logits(fx, work: Path, outcome) -> str | None:
    logits = outcome.value
    if tuple(logits.shape[:2]) != (2, 5) or not bool(torch.isfinite(logits).all()):
        return f"logits of shape {tuple(logits.shape)}, finite: {bool(torch.isfinite(logits).all())}"
    return None


def _ids(fx, work: Path, outcome) -> str | None:
    ids = outcome.value
    return None if ids and all(isinstance(i, int) for i in ids) else f"encode gave {ids!r}"


def _predictions(fx, work: Path, outcome) -> str | None:
    rows = outcome.value
    if len(rows) != 2 or any("prediction" not in r for r in rows):
        return f"predictions {rows!r}"
    return None


def _predictor(fx, **kwargs):
    from gpt1.finetune.predict import TaskPredictor

    return TaskPredictor(fx.finetuned / "model", **kwargs)


def _config(*args):
    from gpt1.config import load_config

    return load_config(*args)


def cases() -> list[Case]:
    a = lambda name, call, refuse=None, check=None, **kw: api(API, name, call, refuse=refuse, check=check,  # noqa
                                                              **kw)
    sst2 = lambda fx: fx.tasks / "SST-2"  # noqa: E731
    return [
        a("tasks-load-unknown-task", lambda fx, w: _tasks().load("imdb", sst2(fx), "train"), ["imdb"], fast=True),
        a("tasks-get-unknown-task", lambda fx, w: _tasks().get("imdb"), ["imdb"]),
        a("tasks-load-hub-offline", lambda fx, w: _tasks().load("sst2", "hf:glue/sst2", "train"), ["glue"]),
        a("tasks-load-nowhere", lambda fx, w: _tasks().load("sst2", w / "nowhere", "train"), ["nowhere"]),
        a("tasks-load-folder-of-all-tasks", lambda fx, w: _tasks().load("sst2", fx.tasks, "train"),
          ["train.tsv", "places"]),
        a("tasks-evaluate-length-mismatch", lambda fx, w: _tasks().evaluate(
            "sst2", _tasks().load("sst2", sst2(fx), "dev")[:3], [0, 1]), ["3", "2"]),
        a("tasks-write-submission-mismatch", lambda fx, w: _tasks().write_submission(
            "sst2", _tasks().load("sst2", sst2(fx), "test")[:3], [0], w / "sub"), ["3", "1"]),
        a("tasks-load-mnli-dev-both-halves", lambda fx, w: len(_tasks().load("mnli", fx.tasks / "MNLI", "dev")),
          check=lambda fx, w, o: None if o.value == 400 else f"{o.value} examples, expected 200 + 200"),
        a("model-from-nowhere", lambda fx, w: _model().from_pretrained(w / "nowhere"), ["nowhere"]),
        a("model-transfer-zero-layers", lambda fx, w: _model().from_pretrained(fx.model, transfer_layers=0),
          ["transfer_layers"]),
        a("model-transfer-too-many-layers", lambda fx, w: _model().from_pretrained(fx.model, transfer_layers=7),
          ["transfer_layers", "7"]),
        a("model-override-a-shape", lambda fx, w: _model().from_pretrained(fx.model, n_embd=64), ["n_embd"]),
        a("model-forward", lambda fx, w: _model().from_pretrained(fx.model)(torch.zeros(2, 5, dtype=torch.long))
          .logits, check=_finite_logits, fast=True),
        a("model-forward-one-dimension", lambda fx, w: _model().from_pretrained(fx.model)(
            torch.zeros(5, dtype=torch.long)), ["input_ids", "(batch, time)"]),
        a("model-forward-too-long", lambda fx, w: _model().from_pretrained(fx.model)(
            torch.zeros(1, 64, dtype=torch.long)), ["64", "n_ctx"]),
        a("tokenizer-load-nowhere", lambda fx, w: _tokenizer().load(w / "nowhere"), ["nowhere"]),
        a("tokenizer-load-an-empty-folder", lambda fx, w: _tokenizer().load(_folder(w / "empty")),
          ["empty", "tokenizer.json"]),
        a("tokenizer-encode", lambda fx, w: _tokenizer().load(fx.tokenizer).encode("the old man looked at"),
          check=_ids),
        a("tokenizer-from-openai-garbage", lambda fx, w: _tokenizer().from_openai(
            _write(w / "encoder.json", "{"), _write(w / "vocab.bpe", "#version: 0.2\n")), ["encoder.json", "JSON"]),
        a("tokenizer-from-openai-not-a-map", lambda fx, w: _tokenizer().from_openai(
            _write(w / "encoder.json", "[1]"), _write(w / "vocab.bpe", "#version: 0.2\n")), ["encoder.json"]),
        a("config-unknown-preset", lambda fx, w: _config("tiny"), ["tiny"]),
        a("config-bad-betas", lambda fx, w: _config("smoke", ["pretrain.adam_betas=[1,1]"]),
          ["pretrain.adam_betas"]),
        a("config-preset-file-not-yaml", lambda fx, w: _config(str(_write(w / "p.yaml", "a: [1,"))), ["p.yaml"]),
        a("config-preset-file-a-list", lambda fx, w: _config(str(_write(w / "p.yaml", "- 1\n"))), ["p.yaml"]),
        a("predictor-cuda-on-cpu", lambda fx, w: _predictor(fx, device="cuda"), ["cuda"]),
        a("predictor-records-missing-field", lambda fx, w: _predictor(fx).predict_records([{"text": "fine"}]),
          ["sentence"]),
        a("predictor-records", lambda fx, w: _predictor(fx).predict_records(
            [{"sentence": "a fine film"}, {"sentence": "a dull film"}]), check=_predictions),
    ]


def _tokenizer():
    import gpt1.tokenizer

    return gpt1.tokenizer


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
