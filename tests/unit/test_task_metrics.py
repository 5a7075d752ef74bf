"""Task metrics against independent numpy formulas, the paper's numbers, the GLUE average and baselines."""

from __future__ import annotations

import numpy as np
import pytest

from gpt1.tasks import evaluate, metrics
from gpt1.tasks.examples import ChoiceExample, PairExample
from gpt1.tasks.metrics import PAPER_AVERAGES, PAPER_RESULTS, compute, glue_score, majority_baseline


@pytest.fixture
def binary():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, 200)
    y_pred = np.where(rng.random(200) < 0.7, y_true, 1 - y_true)
    return y_true, y_pred


def confusion(y_true, y_pred):
    tp = np.sum((y_true == 1) & (y_pred == 1))
    tn = np.sum((y_true == 0) & (y_pred == 0))
    fp = np.sum((y_true == 0) & (y_pred == 1))
    fn = np.sum((y_true == 1) & (y_pred == 0))
    return tp, tn, fp, fn


def test_cola_matthews_correlation(binary):
    y_true, y_pred = binary
    tp, tn, fp, fn = confusion(y_true, y_pred)
    expected = (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    out = compute("cola", y_true, y_pred)
    assert out["mcc"] == pytest.approx(100 * expected) and out["primary"] == out["mcc"]
    assert out["accuracy"] == pytest.approx(100 * np.mean(y_true == y_pred))


@pytest.mark.parametrize("task", ["mrpc", "qqp"])
def test_f1_and_accuracy(task, binary):
    y_true, y_pred = binary
    tp, tn, fp, fn = confusion(y_true, y_pred)
    out = compute(task, y_true.tolist(), y_pred.tolist())
    assert out["f1"] == pytest.approx(100 * 2 * tp / (2 * tp + fp + fn)) and out["primary"] == out["f1"]
    assert out["accuracy"] == pytest.approx(100 * (tp + tn) / len(y_true))


def test_stsb_pearson_and_spearman():
    rng = np.random.default_rng(1)
    gold = rng.uniform(0, 5, 100)
    pred = gold + rng.normal(0, 1, 100)
    ranks = lambda x: np.argsort(np.argsort(x)).astype(float)  # noqa: E731 (continuous data: no ties)
    out = compute("stsb", gold, pred)
    assert out["pearson"] == pytest.approx(100 * np.corrcoef(gold, pred)[0, 1])
    assert out["spearman"] == pytest.approx(100 * np.corrcoef(ranks(gold), ranks(pred))[0, 1])
    assert out["primary"] == out["pearson"]
    assert compute("stsb", gold, np.full(100, 2.5))["pearson"] == 0.0  # constant input: defined as 0, not NaN


@pytest.mark.parametrize("task", ["sst2", "qnli", "rte", "snli", "scitail", "storycloze"])
def test_accuracy_tasks(task):
    y_true, y_pred = [0, 1, 1, 0, 1], [0, 1, 0, 0, 0]
    assert compute(task, y_true, y_pred) == {"accuracy": 60.0, "primary": 60.0}


def test_race_middle_high_all():
    y_true = [0, 1, 2, 3, 0, 1, 2]
    y_pred = [0, 1, 0, 3, 1, 1, 3]
    levels = ["middle", "middle", "middle", "high", "high", "high", "high"]
    out = compute("race", y_true, y_pred, extra={"groups": levels})
    assert out["accuracy_middle"] == pytest.approx(100 * 2 / 3)
    assert out["accuracy_high"] == pytest.approx(100 * 2 / 4)
    assert out["accuracy"] == out["primary"] == pytest.approx(100 * 4 / 7)


def test_mnli_matched_mismatched_and_primary():
    y_true = [0, 1, 2, 0, 1, 2]
    y_pred = [0, 1, 2, 0, 0, 0]
    groups = ["matched"] * 3 + ["mismatched"] * 3
    out = compute("mnli", y_true, y_pred, extra={"groups": groups})
    assert (out["accuracy_matched"], out["accuracy_mismatched"]) == (100.0, pytest.approx(100 / 3))
    assert out["primary"] == pytest.approx((100 + 100 / 3) / 2)
    only_matched = compute("mnli", y_true[:3], y_pred[:3], extra={"groups": groups[:3]})
    assert only_matched["primary"] == only_matched["accuracy_matched"] == 100.0


def test_evaluate_takes_labels_and_groups_from_examples():
    examples = [ChoiceExample(str(i), "c", "q", ("a", "b", "c", "d"), label, level)
                for i, (label, level) in enumerate([(0, "middle"), (1, "high"), (2, "high")])]
    out = evaluate("race", examples, [0, 1, 0])
    assert out["accuracy_middle"] == 100.0 and out["accuracy_high"] == 50.0
    with pytest.raises(ValueError, match="unlabelled"):
        evaluate("rte", [PairExample("0", "a", "b", None)], [0])


def test_bad_inputs():
    with pytest.raises(ValueError):
        compute("rte", [0, 1], [0])
    with pytest.raises(ValueError):
        compute("rte", [], [])
    with pytest.raises(ValueError, match="unknown task"):
        compute("no-such-task", [0], [0])
    with pytest.raises(ValueError, match="groups"):
        compute("race", [0, 1], [0, 1], extra={"groups": ["high"]})


def test_paper_results_table():
    expected = {"mnli": ("accuracy_matched", 82.1), "snli": ("accuracy", 89.9), "scitail": ("accuracy", 88.3),
                "qnli": ("accuracy", 88.1), "rte": ("accuracy", 56.0), "race": ("accuracy", 59.0),
                "storycloze": ("accuracy", 86.5), "cola": ("mcc", 45.4), "sst2": ("accuracy", 91.3),
                "mrpc": ("f1", 82.3), "stsb": ("pearson", 82.0), "qqp": ("f1", 70.3)}
    for task, (metric, value) in expected.items():
        assert PAPER_RESULTS[task][metric] == value, task
    assert PAPER_RESULTS["mnli"]["accuracy_mismatched"] == 81.4
    assert (PAPER_RESULTS["race"]["accuracy_middle"], PAPER_RESULTS["race"]["accuracy_high"]) == (62.9, 57.4)
    assert PAPER_RESULTS["glue"]["primary"] == 72.8
    assert set(PAPER_RESULTS) == set(metrics.METRICS) | {"glue"}


def test_glue_score_is_the_paper_table5_average():
    primaries = [45.4, 91.3, 82.3, 82.0, 70.3, (82.1 + 81.4) / 2, 88.1, 56.0]
    assert glue_score(PAPER_RESULTS) == pytest.approx(sum(primaries) / 8, abs=0.01)
    assert abs(glue_score(PAPER_RESULTS) - PAPER_AVERAGES["full"]) < 0.06  # Table 5: 74.7
    assert glue_score({t: 50.0 for t in metrics.GLUE_TASKS}) == 50.0
    with pytest.raises(ValueError, match="rte"):
        glue_score({t: 50.0 for t in metrics.GLUE_TASKS if t != "rte"})


def test_majority_baseline():
    out = majority_baseline("rte", [1, 1, 0, None], [0, 1, 1, 1])
    assert out["accuracy"] == 75.0
    assert majority_baseline("cola", [1, 1, 0], [0, 1, 0, 1])["mcc"] == 0.0
    assert majority_baseline("stsb", [1.0, 3.0], [0.5, 4.0, 2.0])["pearson"] == 0.0
    tie = majority_baseline("storycloze", [0, 1], [0, 0, 1])
    assert tie["accuracy"] == pytest.approx(200 / 3)  # ties go to the smallest label
    with pytest.raises(ValueError):
        majority_baseline("rte", [None], [0])
