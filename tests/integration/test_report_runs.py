"""The results report on a tracking store and on generated sample data: `gpt1 report` logging to an MLflow parent run
(a SQLite store of its own), and reports on fine-tunes' rows of freshly generated sample data (the non-neural baseline,
the differences and their intervals, the curve of earlier models of a pre-training). The report on synthetic results:
tests/unit/test_report.py."""

from __future__ import annotations

import json
import re

import pytest

from gpt1 import cli
from gpt1.report.render import build_report
from gpt1.tasks import get
from tests.unit.test_report import ALL, sample_result, table_rows, write_run


def test_report_cli_logs_to_the_parent_run(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("report-test", artifact_location=(tmp_path / "artifacts").as_uri())
    parent = client.create_run(experiment).info.run_id
    runs = [write_run(tmp_path / "full", "full", 0.8), write_run(tmp_path / "np", "no_pretrain", 0.4, seed=2)]
    code = cli.main(["report", "--results", *map(str, runs), "--labels", "full", "no_pretrain", "--out",
                     str(tmp_path / "out"), "--tracking-uri", uri, "--run-id", parent])
    assert code == 0 and "### Table 5" in capsys.readouterr().out
    assert sorted(a.path for a in client.list_artifacts(parent, "report")) == [
        "report/results.json", "report/results.md", "report/results.png"]
    logged = client.get_run(parent)
    # named alike in every run: the full run's plain, an ablation's under its name (no second name for a score)
    assert {"glue_score", "no_pretrain/glue_score", "task/sst2/accuracy", "no_pretrain/task/sst2/accuracy"} <= set(
        logged.data.metrics)
    # the pre-trained minus from-scratch differences, with their intervals; every task is a headline task by default
    gains = {"gain/task/sst2/accuracy", "gain/task/mnli/primary/low", "gain/task/stsb/pearson/high",
             "gain/headline_mean", "gain/headline_mean/low", "gain/headline_mean/high"}
    assert gains <= set(logged.data.metrics)
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    [compared] = summary["comparisons"]
    assert logged.data.metrics["gain/headline_mean"] == pytest.approx(compared["headline"]["difference"])
    assert len(compared["headline"]["tasks"]) == len(ALL) and compared["headline"]["missing"] == []
    assert not [name for name in logged.data.metrics if name.startswith("report/")]
    assert logged.info.status == "RUNNING"  # the report attaches to the pipeline's run; it does not end it

    assert cli.main(["report", "--results", str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")]) == 2
    assert re.search(r"nothing.*does not exist", capsys.readouterr().err)


def test_baselines_flags_and_intervals_from_the_fine_tunes_rows(tmp_path):
    """Two seeds of a pre-trained variant that is always right and a from-scratch twin that is always wrong (SST-2)
    or anti-correlated (STS-B), on the sample data's rows: the baseline row, the marks of scores below it, the
    differences and their intervals in results.md, results.json and the MLflow metrics."""
    from gpt1.report import baselines
    from gpt1.report.render import headline_metrics
    from gpt1.sample_data import write_sample_data

    sample = tmp_path / "sample"
    write_sample_data(sample, seed=0)
    for seed in (0, 1):
        for task in ("sst2", "stsb"):
            sample_result(tmp_path / f"full{seed}", sample, task, "full", seed, lambda label: label)
    sample_result(tmp_path / "scratch", sample, "sst2", "no_pretrain", 0, lambda label: 1 - label)
    sample_result(tmp_path / "scratch", sample, "stsb", "no_pretrain", 0, lambda label: 5 - label)
    files = build_report([tmp_path / "full0", tmp_path / "full1", tmp_path / "scratch"], tmp_path / "out",
                         ["full", "full_seed1", "no_pretrain"], headline=(("stsb", "primary"), ("sst2", "primary")))
    text, summary = files["markdown"].read_text(), json.loads(files["json"].read_text())

    expected = {task: baselines.score(baselines.Rows(task, str(sample / "tasks" / get(task).folder), "dev", 300))
                for task in ("sst2", "stsb")}
    assert summary["baselines"]["sst2"]["train_rows"] == 300 and summary["baselines"]["sst2"]["eval_rows"] == 200
    table4 = table_rows(text, "Table 4")
    sst2, stsb = 1, 3  # Table 4's columns: CoLA, SST-2, MRPC, STS-B, QQP, GLUE
    assert table4["non-neural baseline"][sst2] == f"{expected['sst2']['metrics']['accuracy']:.1f}"
    assert table4["non-neural baseline"][stsb] == f"{expected['stsb']['metrics']['pearson']:.1f}"
    assert table4["ours: full"][sst2] == "100.0" and table4["ours: no_pretrain"][sst2] == "0.0 †"
    assert table4["ours: no_pretrain"][stsb] == "-100.0 †" and "† below the non-neural baseline" in text
    assert summary["runs"]["no_pretrain"]["tasks"]["sst2"]["below_baseline"] is True
    assert summary["runs"]["full"]["tasks"]["sst2"]["below_baseline"] is False

    [compared] = summary["comparisons"]
    assert compared["runs"] == {"pretrained": ["full", "full_seed1"], "from_scratch": ["no_pretrain"]}
    assert compared["pretrained"] == "full (2 seeds)" and compared["tasks"]["sst2"]["seeds"] == [2, 1]
    entry = compared["tasks"]["sst2"]
    assert (entry["difference"], entry["low"], entry["high"], entry["examples"]) == (100.0, 100.0, 100.0, 200)
    assert compared["tasks"]["stsb"]["difference"] == pytest.approx(200)
    assert compared["headline"]["difference"] == pytest.approx(150) and compared["headline"]["missing"] == []
    gains = table_rows(text, "Pre-trained minus from scratch")
    bar = f"{expected['sst2']['metrics']['accuracy']:.1f}"
    assert gains["SST-2 (accuracy)"] == ["100.0", "0.0", "+100.0", "[+100.0, +100.0]", bar, "200"]
    assert entry["baseline"] == expected["sst2"]["metrics"]["accuracy"]
    assert "**Against the non-neural baseline**" in text and "full (2 seeds) is above it on 2 of 2" in text
    assert gains["**headline mean** (STS-B pearson, SST-2 accuracy)"][2] == "**+150.0**"
    assert compared["headline"]["verdict"] == "gain" and "**Verdict: pre-training helps here.**" in text
    assert table_rows(text, "Baselines")["SST-2"][2:] == [baselines.METHODS["text"], "300", "dev: 200"]

    logged = headline_metrics(summary)
    assert logged["baseline/task/sst2/accuracy"] == expected["sst2"]["metrics"]["accuracy"]
    assert logged["gain/task/stsb/pearson/low"] == pytest.approx(200) and logged["gain/headline_mean"] == 150


def test_fine_tunes_of_earlier_models_of_the_pretraining_are_its_curve(tmp_path):
    """The full run's fine-tunes beside those of two earlier models of its pre-training (pretrain.curve_steps):
    the final model is the comparison, every model a point of the curve in token order, each against the same
    from-scratch twin; the earlier ones are left out of the paper's tables, and the curve has a table and a figure."""
    from gpt1.sample_data import write_sample_data

    sample = tmp_path / "sample"
    write_sample_data(sample, seed=0)
    starts = {"step_1000": (1000, lambda label: label if label else 1),  # right on one class only
              "full": (2000, lambda label: label), "step_500": (500, lambda label: 1 - label)}  # out of order
    for name, (steps, predict) in starts.items():
        record = {"steps": steps, "tokens_seen": steps * 64, "weights_sha256": f"sha-{steps}"}
        sample_result(tmp_path / name, sample, "sst2", "full", 0, predict, pretraining=record)
    sample_result(tmp_path / "no_pretrain", sample, "sst2", "no_pretrain", 0, lambda label: 1 - label)
    files = build_report([tmp_path / name for name in (*starts, "no_pretrain")], tmp_path / "out",
                         [*starts, "no_pretrain"], headline=(("sst2", "primary"),))
    text, summary = files["markdown"].read_text(), json.loads(files["json"].read_text())

    [compared] = summary["comparisons"]
    assert compared["pretrained"] == "full" and compared["pretraining"]["steps"] == 2000
    curve = compared["curve"]
    assert [(p["pretrained"], p["steps"], p["tokens"]) for p in curve] == [
        ("step_500", 500, 32000), ("step_1000", 1000, 64000), ("full", 2000, 128000)]
    gains = [p["headline"]["difference"] for p in curve]
    assert gains[0] == 0 and 0 < gains[1] < gains[2] == compared["headline"]["difference"] == 100
    assert curve[2]["headline"]["verdict"] == "gain" and curve[0]["headline"]["verdict"] == "not shown"
    assert set(table_rows(text, "Table 4")) == {"GPT-1 (paper)", "ours: full", "ours: no_pretrain",
                                                "majority class", "non-neural baseline"}
    rows = table_rows(text, "The curve")
    assert list(rows) == ["step_500", "step_1000", "full"]
    assert rows["full"][:2] == ["2,000", "128,000"] and rows["full"][-1] == "gain"
    # the trend: the slope against log2 tokens (0, then +100 over two doublings), on every resample alike
    assert compared["trend"] == {"per_doubling": 50.0, "low": 50.0, "high": 50.0, "verdict": "gain"}
    assert "per doubling of pre-training tokens the headline mean changes by +50.0 [+50.0, +50.0]" in text
    assert files["curve"].name == "curve.png" and files["curve"].stat().st_size > 10_000
    assert set(summary["runs"]) == {*starts, "no_pretrain"}  # every score stays in results.json
