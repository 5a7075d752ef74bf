"""The results report: the paper's table layout, our runs beside the paper, ablations, missing and failed tasks,
the bar chart, on synthetic results. Logging to an MLflow parent run, and reports on generated sample data:
tests/integration/test_report_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpt1 import cli
from gpt1.finetune.predict import label_name
from gpt1.io import write_json, write_text
from gpt1.report.comparison import read_predictions
from gpt1.report.render import PAPER_ABLATIONS, build_report, read_runs
from gpt1.tasks import get, load, metrics

ALL = tuple(metrics.METRICS)


def fake_result(task: str, rng: np.random.Generator, ablation: str, skill: float) -> tuple[dict, list[dict]]:
    """A metrics.json as `gpt1 finetune` writes it (the fields the report reads) and its predictions file's records,
    from synthetic predictions (`rng`) on synthetic rows that are the same in every run."""
    n = 60
    rows = np.random.default_rng(list(ALL).index(task))
    groups = None
    if task == "stsb":
        y, train = rows.uniform(0, 5, n), rows.uniform(0, 5, n)
        pred = y + rng.normal(0, 2 - skill, n)
    else:
        k = {"mnli": 3, "snli": 3, "race": 4}.get(task, 2)
        y, train = rows.integers(0, k, n), rows.integers(0, k, n)
        pred = np.where(rng.random(n) < skill, y, rng.integers(0, k, n))
        groups = {"mnli": ["matched", "mismatched"], "race": ["middle", "high"]}.get(task)
    extra = {"groups": [groups[i % 2] for i in range(n)]} if groups else None
    split = "test" if task in ("snli", "scitail") else "dev"
    spec = get(task)
    records = [{"id": str(i), "label": label_name(spec, y[i]), "prediction": label_name(spec, pred[i]),
                **({"group": extra["groups"][i]} if extra else {})} for i in range(n)]
    return {"task": task, "ablation": ablation, "eval_split": split, "files": {split: [f"predictions/{split}.jsonl"]},
            "metrics": metrics.compute(task, y.tolist(), pred.tolist(), extra),
            "majority": metrics.majority_baseline(task, train.tolist(), y.tolist(), extra)}, records


def write_run(root: Path, ablation: str, skill: float, tasks=ALL, failed: dict | None = None, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for task in tasks:
        result, records = fake_result(task, rng, ablation, skill)
        write_json(root / task / "metrics.json", result)
        write_text(root / task / "predictions" / f"{result['eval_split']}.jsonl",
                   "".join(json.dumps(r) + "\n" for r in records))
    for task, error in (failed or {}).items():
        write_json(root / task / "error.json", {"task": task, "error": error})
    return root


def table_rows(markdown: str, title: str) -> dict[str, list[str]]:
    """The rows of one table of the report: first cell -> the other cells."""
    section = markdown.split(f"### {title}")[1].split("###")[0]
    rows = [line.strip("|").split("|") for line in section.strip().splitlines() if line.startswith("|")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[2:]}


def test_paper_ablation_rows_reproduce_the_paper_averages():
    for setting, values in PAPER_ABLATIONS.items():
        assert np.mean(list(values.values())) == pytest.approx(metrics.PAPER_AVERAGES[setting], abs=0.05)
        assert set(values) == set(metrics.GLUE_TASKS)


def test_report_tables_ablations_missing_and_failed(tmp_path):
    full = write_run(tmp_path / "full", "full", 0.8)
    no_aux = write_run(tmp_path / "no_aux_lm", "no_aux_lm", 0.7, seed=1,
                       tasks=[t for t in ALL if t not in ("race", "qqp")], failed={"qqp": "InputError: QQP/train.tsv:7 [is_duplicate]: unknown label"})
    files = build_report([full, no_aux], tmp_path / "out")
    text = files["markdown"].read_text()
    runs = {r.label: r for r in read_runs([full, no_aux])}

    table2 = table_rows(text, "Table 2")
    assert table2["GPT-1 (paper)"] == ["82.1", "81.4", "89.9", "88.3", "88.1", "56.0"]
    mnli = runs["full"].results["mnli"]["metrics"]
    assert table2["ours: full"][:2] == [f"{mnli['accuracy_matched']:.1f}", f"{mnli['accuracy_mismatched']:.1f}"]
    assert table2["majority class"][0] == f"{runs['full'].results['mnli']['majority']['accuracy_matched']:.1f}"

    table3 = table_rows(text, "Table 3")
    assert table3["GPT-1 (paper)"] == ["86.5", "62.9", "57.4", "59.0"]
    assert table3["ours: no_aux_lm"][1:] == ["—", "—", "—"]  # RACE not run

    table4 = table_rows(text, "Table 4")
    assert table4["GPT-1 (paper)"][-1] == "72.8"
    glue = metrics.glue_score({t: runs["full"].results[t]["metrics"] for t in metrics.GLUE_TASKS})
    assert table4["ours: full"][-1] == f"{glue:.1f}"
    assert table4["ours: no_aux_lm"][4] == "failed" and table4["ours: no_aux_lm"][-1] == "—"  # no QQP: no average

    table5 = table_rows(text, "Table 5")
    assert table5["paper: Transformer w/o aux LM"][0] == "75.0"
    assert table5["paper: Transformer w/o pre-training"][1:] == [f"{v:.1f}" for v in PAPER_ABLATIONS["no_pretrain"].values()]
    assert table5["ours: full (full)"][0] == f"{glue:.1f}"
    assert table5["ours: no_aux_lm (no_aux_lm)"][5] == "failed"

    assert "no_aux_lm/qqp: InputError: QQP/train.tsv:7 [is_duplicate]: unknown label" in text
    summary = json.loads(files["json"].read_text())
    assert summary["runs"]["full"]["glue_score"] == pytest.approx(glue)
    assert summary["runs"]["no_aux_lm"]["errors"] == {"qqp": "InputError: QQP/train.tsv:7 [is_duplicate]: unknown label"}
    assert files["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_single_run_has_no_ablation_table_and_notes_other_splits(tmp_path):
    run = write_run(tmp_path / "runs" / "abc123", "full", 0.9, tasks=["race", "sst2"])
    text = build_report([run], tmp_path / "out", labels=["smoke"])["markdown"].read_text()
    assert "### Table 5" not in text and "| ours: smoke |" in text
    assert "smoke/race: scored on dev (the paper: test)" in text
    assert "sst2: scored" not in text  # GLUE tasks are scored on dev, as their eval split says


def test_a_newer_error_overrides_an_older_result(tmp_path):
    run = write_run(tmp_path / "r", "full", 0.8, tasks=["rte"])
    write_json(run / "rte" / "error.json", {"task": "rte", "error": "RuntimeError: out of memory"})
    (loaded,) = read_runs([run])
    assert loaded.errors == {"rte": "RuntimeError: out of memory"} and "rte" not in loaded.results


def test_plot_labels_every_value_shows_a_zero_and_a_failure_and_fits_mlflows_viewer(tmp_path):
    from gpt1.report.render import results_figure

    run = write_run(tmp_path / "r", "full", 0.8, tasks=["cola", "sst2"], failed={"rte": "RuntimeError: boom"})
    result = json.loads((run / "cola" / "metrics.json").read_text())
    result["metrics"].update(mcc=0.0, primary=0.0)  # a model predicting one class: MCC 0 (the bar has no length)
    write_json(run / "cola" / "metrics.json", result)
    fig = results_figure(read_runs([run], ["full"]))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["RTE", "CoLA (mc)", "SST-2 (acc)"]  # our tasks only
    labels = [t.get_text().strip() for t in ax.texts]
    sst2 = json.loads((run / "sst2" / "metrics.json").read_text())["metrics"]["accuracy"]
    # per task, top to bottom: the paper, ours, the majority baseline
    assert labels == ["56.0", "failed", "45.4", "0.0", f"{result['majority']['primary']:.1f}", "91.3",
                      f"{sst2:.1f}", labels[-1]]
    assert ax.get_xlim()[0] < 0  # the zero's mark at x=0 is inside the axes, not hidden by the spine
    width, height = fig.get_size_inches() * fig.dpi
    assert width == 750 and 300 < height < 1000
    fig.canvas.draw()  # laid out as saved: the titled legend sits above the bars, inside the image
    legend, bars = fig.legends[0].get_window_extent(), ax.get_window_extent()
    assert fig.legends[0].get_title().get_text() == "GPT-1 fine-tuning: ours vs the paper"
    assert bars.y1 <= legend.y0 and legend.y1 <= height and legend.x0 >= 0 and legend.x1 <= width


def test_per_task_wall_time_and_peak_rss_tables(tmp_path):
    """Each fine-tune's wall seconds (its stage marker) and peak RSS (its metrics.json) in results.md and .json."""
    from gpt1.io import read_json
    from gpt1.stages.outputs import mark_done

    run = write_run(tmp_path / "full", "full", 0.8, tasks=("rte", "cola"))
    for task, seconds, rss in (("rte", 41.6, 512.4), ("cola", 73.2, None)):  # cola: a result from before RSS
        result = read_json(run / task / "metrics.json")
        write_json(run / task / "metrics.json", {**result, "train": {"peak_rss_mb": rss}})
        mark_done(run / task, "finetune", f"key-{task}", {"seconds": seconds})
    files = build_report([run], tmp_path / "out")
    text = files["markdown"].read_text()
    assert table_rows(text, "Fine-tune wall time (s)")["ours: full"] == ["73", "42"]  # registry order: CoLA, RTE
    assert table_rows(text, "Fine-tune peak RSS (MB)")["ours: full"] == ["—", "512"]
    tasks = read_json(files["json"])["runs"]["full"]["tasks"]
    assert (tasks["rte"]["wall_seconds"], tasks["rte"]["peak_rss_mb"]) == (41.6, 512.4)
    assert tasks["cola"]["peak_rss_mb"] is None


def sample_result(root: Path, sample: Path, task: str, variant: str, seed: int, predict,
                  pretraining: dict | None = None) -> None:
    """A fine-tune's metrics.json and predictions on the sample data's rows of `task`, as `gpt1 finetune` writes
    them, with predictions made by `predict(label)`, from a start with `pretraining` (its training.json)."""
    spec = get(task)
    folder = sample / "tasks" / spec.folder
    dev = list(load(task, folder, "dev"))
    predictions = [predict(ex.label) for ex in dev]
    write_text(root / task / "predictions" / "dev.jsonl", "".join(
        json.dumps({"id": ex.id, "label": label_name(spec, ex.label), "prediction": label_name(spec, p)}) + "\n"
        for ex, p in zip(dev, predictions)))
    settings = {"seed": seed, "from_scratch": variant == "no_pretrain", "max_train_examples": 300,
                "max_eval_examples": None, "max_bad_row_fraction": 0.0, "lr": 1e-3}
    write_json(root / task / "metrics.json", {
        "task": task, "ablation": variant, "eval_split": "dev", "files": {"dev": ["predictions/dev.jsonl"]},
        "data": {"path": str(folder), "splits": {}}, "finetune_config": settings, "pretraining": pretraining,
        "metrics": metrics.compute(task, [ex.label for ex in dev], predictions),
        "majority": metrics.majority_baseline(task, [ex.label for ex in load(task, folder, "train")],
                                              [ex.label for ex in dev])})


def test_predictions_are_read_by_class_name_and_by_the_task_files_labels_of_older_fine_tunes(tmp_path):
    result, records = fake_result("sst2", np.random.default_rng(0), "full", 0.8)
    assert {r["prediction"] for r in records} <= {"negative", "positive"}
    older = [{**r, "label": str(("negative", "positive").index(r["label"])),
              "prediction": str(("negative", "positive").index(r["prediction"]))} for r in records]
    read = []
    for name, rows in (("named", records), ("older", older)):
        write_text(tmp_path / name / "predictions" / "dev.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        read.append(read_predictions("sst2", result, tmp_path / name))
    assert np.array_equal(read[0]["labels"], read[1]["labels"])
    assert np.array_equal(read[0]["predicted"], read[1]["predicted"])


def test_a_from_scratch_run_is_compared_only_with_its_twin_and_a_headline_task_not_run_is_listed(tmp_path):
    write_run(tmp_path / "no_aux_lm", "no_aux_lm", 0.8, tasks=["rte"])
    write_run(tmp_path / "no_pretrain", "no_pretrain", 0.5, tasks=["rte"], seed=1)
    assert json.loads(build_report([tmp_path / "no_aux_lm", tmp_path / "no_pretrain"], tmp_path / "o1")["json"]
                      .read_text())["comparisons"] == []  # no_aux_lm's twin would be no_pretrain+no_aux_lm
    write_run(tmp_path / "full", "full", 0.8, tasks=["rte"])
    files = build_report([tmp_path / "full", tmp_path / "no_pretrain"], tmp_path / "o2",
                         headline=(("rte", "primary"), ("sst2", "primary")))
    [compared] = json.loads(files["json"].read_text())["comparisons"]
    assert compared["tasks"]["sst2"] == {"reason": "not run in full"} and compared["headline"]["missing"] == ["sst2"]
    assert "headline mean without SST-2" in files["markdown"].read_text()


def test_the_headline_verdict_reads_its_interval():
    from gpt1.report.comparison import verdict

    assert verdict(0.1, 4.0) == "gain" and verdict(-3.0, -0.2) == "loss"
    assert verdict(-0.5, 2.0) == verdict(0.0, 2.0) == "not shown"  # touching 0 is not above it


def test_the_reports_key_follows_its_inputs_and_its_headline(tmp_path, capsys):
    """A fine-tune redone (another train file or cap gives it another key) or another headline redoes the report."""
    from gpt1.report.stage import Job
    from gpt1.stages.outputs import mark_done

    run = write_run(tmp_path / "full", "full", 0.8, tasks=["rte", "sst2"])
    mark_done(run / "rte", "finetune", "rte-key-1")
    first = Job((run,), ("full",)).key()
    assert Job((run,), ("full",), headline=(("rte", "primary"),)).key() != first
    mark_done(run / "rte", "finetune", "rte-key-2")  # e.g. finetune.max_train_examples changed
    assert Job((run,), ("full",)).key() != first

    write_run(tmp_path / "scratch", "no_pretrain", 0.5, tasks=["rte", "sst2"], seed=1)
    assert cli.main(["report", "--results", str(run), str(tmp_path / "scratch"), "--headline", "rte", "sst2:accuracy",
                     "--out", str(tmp_path / "out")]) == 0
    [compared] = json.loads((tmp_path / "out" / "results.json").read_text())["comparisons"]
    assert compared["headline"]["tasks"] == {"rte": "accuracy", "sst2": "accuracy"}
    capsys.readouterr()
    assert cli.main(["report", "--results", str(run), "--headline", "rte:f1", "--out", str(tmp_path / "o2")]) == 2
    assert "rte has no metric 'f1'" in capsys.readouterr().err


def test_a_report_on_the_generated_sample_data_says_so_and_names_the_real_data_runs(tmp_path):
    from gpt1.report.render import Run, render_markdown

    (tmp_path / "sample" / "tasks" / "SST-2").mkdir(parents=True)
    write_json(tmp_path / "sample" / "sample_data.json", {})
    (tmp_path / "glue" / "SST-2").mkdir(parents=True)

    def run(data: Path) -> Run:
        return Run("full", tmp_path, results={"sst2": {"metrics": {"primary": 90.0, "accuracy": 90.0},
                                                         "data": {"path": str(data), "splits": {}}}})

    on_sample = render_markdown([run(tmp_path / "sample" / "tasks" / "SST-2")])
    assert on_sample.startswith("# GPT-1 fine-tuning results on generated sample data\n")
    assert "gpt1/mini" in on_sample.split("###")[0] and "gpt1/full" in on_sample.split("###")[0]
    on_glue = render_markdown([run(tmp_path / "glue" / "SST-2")])
    assert on_glue.startswith("# GPT-1 fine-tuning results\n") and "sample data" not in on_glue.split("###")[0]


def test_each_seed_gets_its_own_gain_beside_the_averaged_interval_and_pretraining_is_described(tmp_path,
                                                                                               sample_tasks):
    """Two seeds per variant: seed 0's pre-trained model is always right, seed 1's right on SST-2 only; the
    from-scratch twins always wrong. Each seed's headline gain is reported on its own; the pre-training's corpus and
    its language model beside the n-gram baselines come from the pre-trained side's recorded pre-training."""
    sample = sample_tasks.parent
    pretraining = {"steps": 10, "tokens_seen": 1280, "weights_sha256": "ab" * 32,
                   "corpus": {"train_tokens": {"corpus": 900, "task_text": 300}, "blocks_starting_a_document": 0.8,
                              "task_text_tasks": ["sst2"],
                              "leak_check": {"sentences_removed": {"corpus": 2, "task_text": 5},
                                             "sentences_indexed": 40, "tasks": ["sst2", "stsb"]}},
                   "language_model": {"val_loss": 4.0, "unigram_loss": 6.0, "bigram_loss": 4.5,
                                      "bigram_weight": 0.7, "fit_tokens": 1000, "heldout_tokens": 50,
                                      "scored_tokens": 256, "beats_bigram_by": 0.5}}
    for seed, stsb in ((0, lambda label: label), (1, lambda label: 5 - label)):
        sample_result(tmp_path / f"full{seed}", sample, "sst2", "full", seed, lambda label: label, pretraining)
        sample_result(tmp_path / f"full{seed}", sample, "stsb", "full", seed, stsb, pretraining)
        sample_result(tmp_path / f"scratch{seed}", sample, "sst2", "no_pretrain", seed, lambda label: 1 - label)
        sample_result(tmp_path / f"scratch{seed}", sample, "stsb", "no_pretrain", seed, lambda label: 5 - label)
    labels = ["full", "full_seed1", "no_pretrain", "no_pretrain_seed1"]
    files = build_report([tmp_path / name for name in ("full0", "full1", "scratch0", "scratch1")], tmp_path / "out",
                         labels, headline=(("stsb", "primary"), ("sst2", "primary")))
    [compared] = json.loads(files["json"].read_text())["comparisons"]
    seeds = {entry["seed"]: entry for entry in compared["per_seed"]}
    assert seeds[0]["difference"] == pytest.approx(150) and seeds[0]["runs"] == ["full", "no_pretrain"]
    assert seeds[1]["difference"] == pytest.approx(50)  # STS-B: no gain for this seed, SST-2 +100
    assert compared["headline"]["difference"] == pytest.approx(np.mean([150, 50]), abs=1)
    text = files["markdown"].read_text()
    assert "**Per seed**" in text and "seed 0 +150.0 [+150.0, +150.0]" in text
    assert "validation loss 4.000 nats/token against 4.500 for an interpolated bigram" in text
    assert "0.500 nats/token below the bigram" in text
    assert "1,200 train tokens: books (ingest.source) 900 (75%), task text 300 (25%)" in text
    assert "Leak check: 7 sentences removed" in text and "80% of its blocks start" in text
