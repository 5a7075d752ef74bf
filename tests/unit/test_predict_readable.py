"""`gpt1 predict` and the task predictor behind the MLflow model: predictions in words, and raw inputs with the
wrong field names refused by naming the fields the task takes (not blamed on a task file format).

The models are untrained (random weights of a tiny GPT-1 saved as fine-tuning saves them): these tests are about
what a prediction looks like, not what it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpt1 import cli, tasks
from gpt1.config import FinetuneConfig, ModelConfig
from gpt1.tokenizer import bpe
from gpt1.finetune.predict import LABEL_NAMES, TaskPredictor, n_outputs, save_task_model
from gpt1.finetune.train import build_model
from gpt1.model.transformer import GPT1

TEXT = ("the film was delightful and moving . the play was dull . a heron flew over the pond while an oak stood "
        "still . she fed the heron and watered the oak . ") * 20


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """task -> a task model folder of that task (untrained, tiny)."""
    root = tmp_path_factory.mktemp("predict")
    tok = bpe.train([TEXT], merges=40, show_progress=False)
    torch.manual_seed(0)
    checkpoint = root / "checkpoint"
    GPT1(ModelConfig(vocab_size=tok.vocab_size, n_ctx=64, n_layer=1, n_head=2, n_embd=16, d_ff=32)
         ).save_pretrained(checkpoint)
    made: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in made:
            spec = tasks.get(task)
            model = build_model(spec, checkpoint, tok.vocab_size, FinetuneConfig())
            info = {"task": task, "kind": spec.kind, "head": spec.head, "n_outputs": n_outputs(spec),
                    "labels": list(spec.labels) if spec.labels else None}
            made[task] = save_task_model(model, tok, info, root / task / "model")
        return made[task]

    return get


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_classes_are_said_by_their_names_not_the_digits_of_the_task_files(model_dir):
    for task, names in (("sst2", LABEL_NAMES["sst2"]), ("rte", ("entailment", "not_entailment"))):
        columns = tasks.get(task).hf_text
        rows = [dict.fromkeys(columns, text) for text in ("a delightful film", "the play was dull", "an oak")]
        records = TaskPredictor(model_dir(task), device="cpu").predict_records(rows)
        assert {r["prediction"] for r in records} <= set(names), records
        assert all(len(r["probabilities"]) == len(names) for r in records)


def test_a_multiple_choice_prediction_is_the_chosen_option_and_a_score_stays_a_number(model_dir):
    options = ["She fed the heron.", "She fed the oak."]
    [record] = TaskPredictor(model_dir("storycloze"), device="cpu").predict_records(
        [{"context": "She went to the pond. A heron flew by.", "question": "", "options": options}])
    assert record["prediction"] in options
    [score] = TaskPredictor(model_dir("stsb"), device="cpu").predict_records(
        [{"sentence1": "a heron flew", "sentence2": "a bird flew"}])
    assert isinstance(score["prediction"], float) and "probabilities" not in score


def test_a_labelled_task_file_is_scored_and_its_labels_said_in_words(model_dir, tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\na delightful film \t1\nthe play was dull \t0\n", encoding="utf-8")
    out = tmp_path / "predictions.jsonl"
    assert cli.main(["predict", "--model", str(model_dir("sst2")), "--task", "sst2", "--input", str(dev),
                     "--split", "dev", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in records] == ["positive", "negative"]
    assert "accuracy" in capsys.readouterr().err  # scored from the class indices, whatever they are called


def test_a_wrong_field_name_is_refused_naming_the_fields_the_task_takes(model_dir, tmp_path, capsys):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": "a delightful film"}])
    assert cli.main(["predict", "--model", str(model_dir("sst2")), "--input", str(rows)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{rows}:1 [sentence]" in err[0] and "sst2 takes the fields sentence" in err[0], err
    assert "this row has text" in err[0] and "format" not in err[0], err

    later = write_jsonl(tmp_path / "later.jsonl", [{"sentence1": "a", "sentence2": "b"}, {"sentence1": "a"}])
    assert cli.main(["predict", "--model", str(model_dir("rte")), "--input", str(later)]) == 2
    err = capsys.readouterr().err
    assert f"{later}:2 [sentence2]" in err and "rte takes the fields sentence1, sentence2" in err, err
