"""Fine-tuning, evaluation, prediction and serving of one task, on a tiny model built here (CPU, seconds each).

Metrics are checked against an independent recomputation from the saved predictions (plain numpy formulas, not
gpt1.tasks.metrics), the model folder against a fresh load, the MLflow model against the in-process predictor.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import shared_path
from gpt1 import cli, tasks
from gpt1.tokenizer import bpe
from gpt1.config import FinetuneConfig, ModelConfig, TrackingConfig, load_config
from gpt1.finetune.train import (FinetuneRun, backward, build_model, micro_batches, evenly_spaced, finetune, held_out_splits,
                               load_task_data)
from gpt1.model.transformer import GPT1
from gpt1.model.optim import lr_factor
from gpt1.finetune.predict import TaskPredictor, class_names, read_inputs

torch.set_num_threads(1)

FOLDERS = {"sst2": "SST-2", "cola": "CoLA", "mnli": "MNLI", "mrpc": "MRPC", "stsb": "STS-B", "race": "RACE",
           "storycloze": "StoryCloze", "rte": "RTE", "snli": "snli_1.0"}
TINY = dict(n_ctx=64, n_layer=2, n_head=2, n_embd=32, d_ff=64)
UNTRACKED = FinetuneRun(enabled=False)
TRACKED = ("mnli", "storycloze")  # the runs that also exercise MLflow logging and the pyfunc model
QUICK = FinetuneConfig(lr=1e-3, batch_size=16, epochs=1, max_train_examples=32, max_eval_examples=24,
                       eval_batch_size=32)


# -- fixtures: sample data, a tiny tokenizer and checkpoint, one tracking store -------------------------------------
@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("finetune")


@pytest.fixture(scope="module")
def checkpoint(work, sample_tasks) -> Path:
    """A tiny random GPT-1 saved as pre-training writes it, with a BPE tokenizer trained on a slice of the books."""
    book = sorted((sample_tasks.parent / "books").glob("*.txt"))[0]
    tok = bpe.train([book.read_text(encoding="utf-8")[:150_000]], merges=300, show_progress=False)
    torch.manual_seed(0)
    path = work / "checkpoint"
    GPT1(ModelConfig(vocab_size=tok.vocab_size, **TINY)).save_pretrained(path)
    tok.save(path)
    return path


@pytest.fixture(scope="module")
def tracking_uri(work, empty_mlflow_db) -> str:
    from mlflow.tracking import MlflowClient

    shutil.copy(empty_mlflow_db, work / "mlflow.db")  # its tables already created
    uri = f"sqlite:///{work / 'mlflow.db'}"  # artifacts and models beside it, not in ./mlruns
    MlflowClient(uri).create_experiment("test-finetune", artifact_location=(work / "artifacts").as_uri())
    return uri


@pytest.fixture(scope="module")
def runs(work, sample_tasks, checkpoint, tracking_uri):
    """One fine-tune per task, run on first use and shared: task -> (out dir, metrics.json)."""
    done: dict[str, tuple[Path, dict]] = {}

    def get(task: str):
        if task not in done:
            out = work / "runs" / task
            result = finetune(task, sample_tasks / FOLDERS[task], checkpoint, out, QUICK,
                              tracking=TrackingConfig(tracking_uri=tracking_uri, experiment="test-finetune"),
                              run=FinetuneRun(enabled=task in TRACKED,
                                              registered_model=f"test-finetune-{task}" if task in TRACKED else None))
            done[task] = (out, result)
        return done[task]

    return get


# -- independent recomputation --------------------------------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def recompute(task: str, rows: list[dict]) -> dict[str, float]:
    spec = tasks.get(task)
    if spec.regression:
        y, p = np.array([r["label"] for r in rows]), np.array([r["prediction"] for r in rows])
        return {"pearson": 100 * float(np.corrcoef(y, p)[0, 1])}
    y = np.array([class_names(spec).index(r["label"]) for r in rows])
    p = np.array([class_names(spec).index(r["prediction"]) for r in rows])
    out = {"accuracy": 100 * float(np.mean(y == p))}
    tp, fp, fn, tn = (int(np.sum((p == a) & (y == b))) for a, b in ((1, 1), (1, 0), (0, 1), (0, 0)))
    if task in ("mrpc", "qqp"):
        out["f1"] = 100 * tp / (tp + 0.5 * (fp + fn)) if tp else 0.0
    if task == "cola":
        denominator = np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
        out["mcc"] = 100 * (tp * tn - fp * fn) / denominator if denominator else 0.0
    for group in sorted({r["group"] for r in rows if "group" in r}):
        selected = np.array([r.get("group") == group for r in rows])
        out[f"accuracy_{group}"] = 100 * float(np.mean(y[selected] == p[selected]))
    return out


def majority_accuracy(task: str, path: Path, rows: list[dict]) -> float:
    spec = tasks.get(task)
    counts = Counter(ex.label for ex in tasks.load(task, path, "train"))
    guess = class_names(spec)[max(sorted(counts), key=counts.__getitem__)]
    return 100 * float(np.mean([r["label"] == guess for r in rows]))


# -- one task of each kind ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["cola", "mnli", "mrpc", "stsb", "race"])
def test_finetune_each_kind_writes_outputs_that_agree(task, runs, sample_tasks):
    """classification (CoLA), entailment (MNLI: matched + mismatched), similarity (MRPC), regression (STS-B),
    multiple choice (RACE: middle/high)."""
    out, result = runs(task)
    spec = tasks.get(task)
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["metrics"] == result["metrics"] and on_disk["task"] == task
    assert result["eval_split"] == spec.eval_splits[0]
    assert result["train"]["steps"] == 2 and result["train"]["examples_per_s"] > 0

    rows = read_jsonl(out / "predictions" / f"{result['eval_split']}.jsonl")
    assert len(rows) == QUICK.max_eval_examples
    for name, value in recompute(task, rows).items():
        assert result["metrics"][name] == pytest.approx(value, abs=1e-6), name
    assert result["metrics"]["primary"] == pytest.approx(
        np.mean([result["metrics"]["accuracy_matched"], result["metrics"]["accuracy_mismatched"]])
        if task == "mnli" else result["metrics"][spec.primary_metric])
    if spec.regression:
        assert result["majority"]["pearson"] == 0.0 and isinstance(rows[0]["prediction"], float)
    else:
        assert result["majority"]["accuracy"] == pytest.approx(majority_accuracy(task, sample_tasks / FOLDERS[task],
                                                                                   rows))
        assert all(len(r["probabilities"]) == len(spec.labels) and abs(sum(r["probabilities"]) - 1) < 1e-4
                   for r in rows)

    model_dir = out / "model"
    info = json.loads((model_dir / "task.json").read_text())
    assert info["task"] == task and (model_dir / "tokenizer.json").is_file()
    reloaded = GPT1.from_pretrained(model_dir)  # the fine-tuned transformer is a regular checkpoint folder
    assert reloaded.config.n_layer == TINY["n_layer"]

    if "test" in spec.splits:  # cut to max_eval_examples: named as a partial file, not a leaderboard's
        test_rows = len(tasks.load(task, sample_tasks / FOLDERS[task], "test"))
        assert test_rows > QUICK.max_eval_examples
        submission = sorted(p.name for p in (out / "submission").iterdir())
        names = ["MNLI-m", "MNLI-mm"] if task == "mnli" else [spec.submission or "RACE"]
        assert submission == [f"{name}.partial.tsv" for name in names]
        assert sum(len(p.read_text().splitlines()) - 1 for p in (out / "submission").iterdir()) == \
            QUICK.max_eval_examples


def test_reloaded_model_reproduces_the_saved_predictions(runs, sample_tasks):
    out, result = runs("mrpc")
    rows = read_jsonl(out / "predictions" / "dev.jsonl")
    dev = tasks.load("mrpc", sample_tasks / "MRPC", "dev")
    picked = [dev[i] for i in evenly_spaced(len(dev), QUICK.max_eval_examples)]
    again = TaskPredictor(out / "model").predict(picked)
    assert [r["prediction"] for r in again] == [r["prediction"] for r in rows]
    assert np.allclose([r["probabilities"] for r in again], [r["probabilities"] for r in rows], atol=1e-5)


@pytest.mark.parametrize("task,names", [("mrpc", {"not_equivalent", "equivalent"}), ("stsb", None)])
def test_finetune_predictions_and_gpt1_predict_spell_labels_alike(task, names, runs, work, sample_tasks):
    """predictions/*.jsonl and `gpt1 predict` on the same rows: a class by its name (MRPC's files write 0 and 1),
    a score as a number."""
    out, _ = runs(task)
    rows = read_jsonl(out / "predictions" / "dev.jsonl")
    target = work / f"{task}-dev-predictions.jsonl"
    assert cli.main(["predict", "--model", str(out), "--input", str(sample_tasks / FOLDERS[task] / "dev.tsv"),
                     "--out", str(target)]) == 0
    predicted = {p["id"]: p for p in read_jsonl(target)}
    for key in ("label", "prediction"):
        ours, theirs = [r[key] for r in rows], [predicted[r["id"]][key] for r in rows]
        if names is None:
            assert all(isinstance(v, float) for v in ours + theirs)
            assert theirs == pytest.approx(ours, abs=1e-5)
        else:
            assert theirs == ours and set(ours) <= names, key


@pytest.mark.parametrize("task,parts", [("rte", ("RTE",)), ("race", ("RACE",))])
def test_finetune_on_real_shared_samples(task, parts, work, checkpoint):
    """Real files: RTE's long premises are truncated to the 64-token context; RACE has no test split here, so the
    headline falls back to dev (middle + high)."""
    data = shared_path("tasks", *parts)
    cfg = QUICK.model_copy(update={"max_train_examples": 16, "max_eval_examples": 16})
    result = finetune(task, data, checkpoint, work / "shared" / task, cfg, run=UNTRACKED)
    assert result["eval_split"] == "dev"
    assert result["eval_split_fallback"] == ({"paper": "test", "used": "dev"} if task == "race" else None)
    assert result["data"]["splits"]["train"]["bad"] == {}
    rows = read_jsonl(work / "shared" / task / "predictions" / "dev.jsonl")
    for name, value in recompute(task, rows).items():
        assert result["metrics"][name] == pytest.approx(value, abs=1e-6), name
    if task == "race":
        assert {"accuracy_middle", "accuracy_high"} <= result["metrics"].keys()


# -- objective, schedule, model construction ------------------------------------------------------------------------
def test_micro_batches_accumulate_the_whole_batch_gradient(checkpoint, sample_tasks):
    """finetune.micro_batch_size changes memory, not the update: same losses and gradients as one forward."""
    spec, tok = tasks.get("rte"), bpe.load(checkpoint)
    train_set, _ = load_task_data(spec, sample_tasks / "RTE", tok, TINY["n_ctx"], QUICK)
    labels, index = torch.tensor(train_set.labels), torch.arange(12)
    results = {}
    for micro in (None, 5):  # 12 examples as 5 + 5 + 2: unequal shares
        torch.manual_seed(0)
        model = build_model(spec, checkpoint, tok.vocab_size, QUICK).eval()  # eval: no dropout, same arithmetic
        cfg, cpu = QUICK.model_copy(update={"micro_batch_size": micro}), torch.device("cpu")
        batch = micro_batches(spec, train_set, index, cfg, cpu)
        assert [len(m.chunk) for m in batch] == ([12] if micro is None else [5, 5, 2])
        losses = backward(model, spec, batch, labels, cfg, cpu)
        losses = {name: float(value) for name, value in losses.items()}  # on the device until read back
        tokens = sum(m.tokens for m in batch)
        results[micro] = losses, tokens, {n: p.grad for n, p in model.named_parameters()}
    (whole, whole_tokens, whole_grads), (parts, part_tokens, part_grads) = results[None], results[5]
    assert part_tokens == whole_tokens > 0
    assert parts == pytest.approx(whole, rel=1e-5) and whole["train/lm_loss"] > 0
    for name, grad in whole_grads.items():
        torch.testing.assert_close(part_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_warmup_then_linear_decay():
    factor = lambda i: lr_factor(i, warmup_steps=4, total_steps=100, schedule="linear")  # noqa: E731
    assert [factor(i) for i in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert factor(4) == pytest.approx(96 / 96) and factor(52) == pytest.approx(48 / 96)
    assert factor(99) == pytest.approx(1 / 96) and factor(100) == 0.0
    assert all(factor(i) > factor(i + 1) for i in range(4, 99))


def test_aux_lm_weight_changes_the_objective(work, sample_tasks, checkpoint):
    results = {}
    for weight in (0.5, 0.0):
        cfg = QUICK.model_copy(update={"aux_lm_weight": weight, "max_train_examples": 16, "max_eval_examples": 8})
        results[weight] = finetune("sst2", sample_tasks / "SST-2", checkpoint, work / f"aux-{weight}", cfg,
                                   run=UNTRACKED)["train"]
    with_lm, without = results[0.5], results[0.0]
    assert without["final_lm_loss"] is None and without["final_loss"] == without["final_clf_loss"]
    assert with_lm["final_lm_loss"] > 0
    assert with_lm["final_loss"] == pytest.approx(with_lm["final_clf_loss"] + 0.5 * with_lm["final_lm_loss"])
    m1 = load_file(str(work / "aux-0.5" / "model" / "gpt1.safetensors"))
    m0 = load_file(str(work / "aux-0.0" / "model" / "gpt1.safetensors"))
    assert not torch.equal(m1["blocks.0.attn.c_attn.weight"], m0["blocks.0.attn.c_attn.weight"])


def test_build_model_ablations(checkpoint, work):
    spec = tasks.get("rte")
    vocab = bpe.load(checkpoint).vocab_size
    saved = load_file(str(checkpoint / "gpt1.safetensors"))
    full = build_model(spec, checkpoint, vocab, FinetuneConfig())
    assert len(full.transformer.blocks) == TINY["n_layer"] and full.clf.out_features == 2
    assert torch.equal(full.transformer.blocks[1].mlp.c_fc.weight, saved["blocks.1.mlp.c_fc.weight"])

    first = build_model(spec, checkpoint, vocab, FinetuneConfig(transfer_layers=1))
    assert len(first.transformer.blocks) == 1
    assert torch.equal(first.transformer.blocks[0].attn.c_attn.weight, saved["blocks.0.attn.c_attn.weight"])

    torch.manual_seed(1)
    scratch = build_model(spec, checkpoint, vocab, FinetuneConfig(from_scratch=True))
    assert len(scratch.transformer.blocks) == TINY["n_layer"]
    assert not torch.equal(scratch.transformer.tokens_embed.weight, saved["tokens_embed.weight"])
    assert scratch.transformer.tokens_embed.weight.shape == saved["tokens_embed.weight"].shape

    # a checkpoint without the 3 special rows (an imported openai-gpt) is grown to the tokenizer's vocabulary
    small = work / "no-specials"
    torch.manual_seed(0)
    GPT1(ModelConfig(vocab_size=vocab - 3, **TINY)).save_pretrained(small)
    grown = build_model(tasks.get("race"), small, vocab, FinetuneConfig())
    assert grown.transformer.tokens_embed.weight.shape[0] == vocab and grown.clf.out_features == 1
    assert torch.equal(grown.transformer.tokens_embed.weight[: vocab - 3],
                       load_file(str(small / "gpt1.safetensors"))["tokens_embed.weight"])


def test_the_specials_pretraining_never_reads_are_drawn_afresh_and_nothing_else(checkpoint):
    tok = bpe.load(checkpoint)
    saved = load_file(str(checkpoint / "gpt1.safetensors"))["tokens_embed.weight"]
    new = [tok.delimiter_id, tok.classify_id]
    torch.manual_seed(0)
    redrawn = build_model(tasks.get("rte"), checkpoint, tok.vocab_size, FinetuneConfig(redraw_specials=True),
                          new_tokens=new)
    weight = redrawn.transformer.tokens_embed.weight
    kept = [i for i in range(len(saved)) if i not in new]
    assert torch.equal(weight[kept], saved[kept]) and not torch.equal(weight[new], saved[new])
    assert abs(float(weight[new].detach().std()) - ModelConfig().init_std) < 0.01  # drawn as at initialisation
    torch.manual_seed(0)
    kept_all = build_model(tasks.get("rte"), checkpoint, tok.vocab_size, FinetuneConfig(), new_tokens=new)
    assert torch.equal(kept_all.transformer.tokens_embed.weight, saved)
    assert torch.equal(kept_all.clf.weight, redrawn.clf.weight)  # the redraw leaves the head's draw alone


def test_from_scratch_with_transfer_layers_is_refused_and_recorded(work, sample_tasks, checkpoint, capsys):
    out = work / "conflict"
    with pytest.raises(ValueError, match="exclude each other"):
        finetune("sst2", sample_tasks / "SST-2", checkpoint, out, FinetuneConfig(from_scratch=True, transfer_layers=1),
                 run=UNTRACKED)
    args = ["finetune", "--task", "sst2", "--data", str(sample_tasks / "SST-2"), "--checkpoint", str(checkpoint),
            "--out", str(out), "--no-tracking", "--set", "finetune.from_scratch=true",
            "--set", "finetune.transfer_layers=1"]
    assert cli.main(args) == 2 and "exclude each other" in capsys.readouterr().err
    assert "exclude each other" in json.loads((out / "error.json").read_text())["error"]  # for the report
    assert sorted(p.name for p in out.iterdir()) == ["error.json"]


def test_same_seed_same_metrics_and_weights(work, sample_tasks, checkpoint):
    cfg = QUICK.model_copy(update={"max_train_examples": 16, "max_eval_examples": 8, "seed": 3})
    results = [finetune("rte", sample_tasks / "RTE", checkpoint, work / f"seed-{i}", cfg, run=UNTRACKED)
               for i in range(2)]
    assert results[0]["metrics"] == results[1]["metrics"]
    assert results[0]["train"]["final_loss"] == results[1]["train"]["final_loss"]
    weights = [load_file(str(work / f"seed-{i}" / "model" / name)) for i in range(2)
               for name in ("gpt1.safetensors", "head.safetensors")]
    for a, b in ((weights[0], weights[2]), (weights[1], weights[3])):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_held_out_splits_follow_the_task_registry():
    assert held_out_splits(tasks.get("sst2")) == ["dev", "test"]
    assert held_out_splits(tasks.get("storycloze")) == ["test"]
    assert held_out_splits(tasks.get("mnli")) == ["dev", "test"]


# -- MLflow run, pyfunc model, CLI ----------------------------------------------------------------------------------
def test_mlflow_run_and_logged_pyfunc_model_on_raw_inputs(runs, tracking_uri, sample_tasks):
    import mlflow
    import pandas as pd
    from mlflow.tracking import MlflowClient

    out, result = runs("mnli")
    client = MlflowClient(tracking_uri)
    run = client.get_run(result["run_id"])
    assert run.data.metrics["task/mnli/accuracy_matched"] == pytest.approx(result["metrics"]["accuracy_matched"])
    assert "task/mnli/majority/accuracy" in run.data.metrics
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == result["train"]["steps"]
    inputs = {d.dataset.name: d.dataset for d in run.inputs.dataset_inputs}
    assert set(inputs) >= {"mnli/train", "mnli/dev"}
    assert json.loads(inputs["mnli/train"].profile)["rows"] == result["data"]["splits"]["train"]["rows"]
    assert run.data.params["finetune.aux_lm_weight"] == "0.5"
    assert run.data.tags["gpt1.stage"] == "finetune" and run.data.tags["gpt1.cached"] == "false"
    assert "system/cpu_utilization_percentage" in run.data.metrics  # a run shorter than the interval: one sample

    # an MLflow 3 logged model of the run, named after the task, linked to the final metrics
    [output] = run.outputs.model_outputs
    model_info = client.get_logged_model(output.model_id)
    assert model_info.name == "mnli" and model_info.source_run_id == run.info.run_id
    assert {m.key for m in model_info.metrics} >= {"task/mnli/accuracy", "task/mnli/primary"}
    assert model_info.params["finetune.aux_lm_weight"] == "0.5"

    mlflow.set_tracking_uri(tracking_uri)
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/mnli")
    assert [c.name for c in model.metadata.get_input_schema().inputs] == ["premise", "hypothesis"]
    rows = read_jsonl(out / "predictions" / "dev.jsonl")[::4]
    dev = {(ex.group, ex.id): ex for ex in tasks.load("mnli", sample_tasks / "MNLI", "dev")}  # ids restart per half
    pairs = [dev[r["group"], r["id"]] for r in rows]
    frame = pd.DataFrame([{"premise": ex.text_a, "hypothesis": ex.text_b} for ex in pairs])
    predicted = model.predict(frame)
    assert list(predicted["prediction"]) == [r["prediction"] for r in rows]
    assert np.allclose(np.stack(predicted["probabilities"]), [r["probabilities"] for r in rows], atol=1e-5)

    # registered in the Model Registry: a version of the logged model, the champion of its registered model
    [version] = client.search_model_versions("name='test-finetune-mnli'")
    assert version.run_id == run.info.run_id and version.tags["task"] == "mnli"
    assert version.source == f"models:/{output.model_id}"
    assert float(version.tags["gpt1.headline"]) == pytest.approx(result["metrics"]["primary"])
    assert client.get_registered_model("test-finetune-mnli").aliases == {"champion": version.version}
    registered = mlflow.pyfunc.load_model("models:/test-finetune-mnli@champion")
    assert list(registered.predict(frame)["prediction"]) == list(predicted["prediction"])


def test_pyfunc_multiple_choice_takes_options_lists(runs, tracking_uri, sample_tasks):
    import mlflow
    import pandas as pd

    out, result = runs("storycloze")
    mlflow.set_tracking_uri(tracking_uri)
    model = mlflow.pyfunc.load_model(f"runs:/{result['run_id']}/storycloze")
    rows = read_jsonl(out / "predictions" / "test.jsonl")[:4]
    test = {ex.id: ex for ex in tasks.load("storycloze", sample_tasks / "StoryCloze", "test")}
    frame = pd.DataFrame([{"context": test[r["id"]].context, "question": "", "options": list(test[r["id"]].options)}
                          for r in rows])
    assert list(model.predict(frame)["prediction"]) == [  # the chosen ending, as words
        test[r["id"]].options[tasks.get("storycloze").labels.index(r["prediction"])] for r in rows]


def test_predict_cli_on_raw_jsonl_and_task_file(runs, work, sample_tasks, capsys):
    out, _ = runs("mrpc")
    rows = read_jsonl(out / "predictions" / "dev.jsonl")[:6]
    dev = {ex.id: ex for ex in tasks.load("mrpc", sample_tasks / "MRPC", "dev")}
    raw = work / "raw.jsonl"
    raw.write_text("".join(json.dumps({"id": r["id"], "sentence1": dev[r["id"]].text_a,
                                       "sentence2": dev[r["id"]].text_b}) + "\n" for r in rows))
    target = work / "raw-predictions.jsonl"
    assert cli.main(["predict", "--model", str(out / "model"), "--task", "mrpc", "--input", str(raw),
                     "--out", str(target)]) == 0
    predicted = read_jsonl(target)
    assert [p["id"] for p in predicted] == [r["id"] for r in rows]
    assert [p["prediction"] for p in predicted] == [r["prediction"] for r in rows]

    # an official task file (labelled): predictions on stdout, its metrics on stderr
    assert cli.main(["predict", "--model", str(out), "--input", str(sample_tasks / "MRPC" / "dev.tsv")]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == len(dev) and "f1" in captured.err
    assert len(read_inputs(tasks.get("mrpc"), sample_tasks / "MRPC" / "test.tsv")) == 50

    assert cli.main(["predict", "--model", str(out / "model"), "--task", "sst2", "--input", str(raw)]) == 2
    assert "fine-tuned for mrpc" in capsys.readouterr().err


def test_finetune_cli_with_preset_overrides_and_bad_checkpoint(work, sample_tasks, checkpoint, capsys):
    out = work / "cli"
    args = ["finetune", "--task", "storycloze", "--data", str(sample_tasks / "StoryCloze"), "--checkpoint",
            str(checkpoint), "--out", str(out), "--preset", "smoke", "--no-tracking",
            "--set", "finetune.max_train_examples=16", "--set", "finetune.max_eval_examples=8",
            "--set", "finetune.epochs=2", "--set", "finetune.aux_lm_weight=0"]
    assert cli.main(args) == 0
    result = json.loads((out / "metrics.json").read_text())
    smoke = load_config("smoke").finetune
    assert result["finetune_config"]["lr"] == smoke.lr and result["finetune_config"]["epochs"] == 2
    assert result["ablation"] == "no_aux_lm" and result["train"]["steps"] == 2 * -(-16 // smoke.batch_size)
    assert "storycloze (test, 8 rows): accuracy" in capsys.readouterr().out

    bad = ["finetune", "--task", "sst2", "--data", str(sample_tasks / "SST-2"), "--checkpoint",
           str(work / "nowhere"), "--out", str(work / "bad"), "--no-tracking"]
    assert cli.main(bad) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    assert not (work / "bad").exists()  # refused before anything was written


def test_report_from_finetune_outputs(runs, work):
    from gpt1.report.render import build_report

    for task in ("cola", "mnli"):
        runs(task)
    files = build_report([work / "runs"], work / "report", labels=["tiny"])
    text = files["markdown"].read_text()
    cola = runs("cola")[1]["metrics"]["mcc"]
    assert f"| ours: tiny | {cola:.1f}" in text and "45.4" in text  # with " †" when below its baseline
    assert files["plot"].stat().st_size > 0
