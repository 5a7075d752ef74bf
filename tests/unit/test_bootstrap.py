"""The paired bootstrap of the report: its vectorised metrics equal the task metrics, its intervals cover a known
difference as often as they claim, and seeds, groups and seeds of the generator behave."""

from __future__ import annotations

import numpy as np
import pytest

from gpt1.report import bootstrap
from gpt1.tasks import metrics


def synthetic(task: str, n: int, skill: float, rng: np.random.Generator):
    """Labels, predictions right with probability `skill` (STS-B: noisier with less skill) and groups."""
    if task == "stsb":
        labels = rng.uniform(0, 5, n)
        return labels, labels + rng.normal(0, 3 * (1 - skill), n), None
    classes = {"mnli": 3, "race": 4}.get(task, 2)
    labels = rng.integers(0, classes, n)
    predictions = np.where(rng.random(n) < skill, labels, rng.integers(0, classes, n))
    groups = {"mnli": ("matched", "mismatched"), "race": ("middle", "high")}.get(task)
    return labels, predictions, None if groups is None else np.array([groups[i % 3 == 0] for i in range(n)], object)


@pytest.mark.parametrize("task", ["cola", "sst2", "mrpc", "stsb", "mnli", "race"])
def test_the_scores_on_the_rows_themselves_are_the_task_metrics(task):
    labels, predictions, groups = synthetic(task, 300, 0.6, np.random.default_rng(1))
    expected = metrics.compute(task, labels.tolist(), predictions.tolist(),
                               None if groups is None else {"groups": groups.tolist()})
    for name, value in expected.items():  # every metric: MCC, F1, Pearson, Spearman, group accuracies, primary
        assert bootstrap.on_rows(task, name, labels, predictions, groups) == pytest.approx(value, abs=1e-9), name


def test_degenerate_resamples_score_zero_as_the_task_metrics_do():
    labels, constant = np.array([0, 1, 1, 0]), np.ones(4, int)
    assert bootstrap.on_rows("cola", "mcc", labels, constant) == metrics.compute("cola", labels, constant)["mcc"] == 0
    assert bootstrap.on_rows("mrpc", "f1", labels, np.zeros(4, int)) == 0
    assert bootstrap.on_rows("stsb", "pearson", np.array([1.0, 2, 3]), np.full(3, 0.1)) == 0


def test_the_interval_covers_a_known_difference_about_as_often_as_it_claims():
    """Two models right on 80% and 70% of rows (independently): the difference is 10 points in the population.
    Over 200 evaluation sets, the 95% interval should hold 10 about 95% of the time."""
    rng = np.random.default_rng(28)
    covered, widths = 0, []
    for trial in range(200):
        labels = rng.integers(0, 2, 400)
        better = np.where(rng.random(400) < 0.8, labels, 1 - labels)
        worse = np.where(rng.random(400) < 0.7, labels, 1 - labels)
        draws = bootstrap.paired_differences("sst2", "primary", labels, None, better, worse, resamples=400,
                                             seed=trial)
        low, high = bootstrap.interval(draws)
        covered += low <= 10 <= high
        widths.append(high - low)
    assert 0.88 <= covered / 200 <= 0.99
    # sd of a difference of two independent accuracies on 400 rows: sqrt(.8*.2/400 + .7*.3/400) = 3.0 points
    assert np.mean(widths) == pytest.approx(2 * 1.96 * 3.04, rel=0.1)


def test_an_interval_narrows_with_more_rows_and_is_zero_for_equal_predictions():
    rng = np.random.default_rng(3)
    widths = []
    for n in (250, 4000):
        labels = rng.integers(0, 2, n)
        first = np.where(rng.random(n) < 0.8, labels, 1 - labels)
        second = np.where(rng.random(n) < 0.7, labels, 1 - labels)
        low, high = bootstrap.interval(bootstrap.paired_differences("sst2", "primary", labels, None, first, second))
        widths.append(high - low)
    assert widths[1] == pytest.approx(widths[0] / 4, rel=0.25)  # 16x the rows: a quarter of the width
    same = bootstrap.paired_differences("sst2", "primary", labels, None, first, first)
    assert same.shape == (bootstrap.RESAMPLES,) and not same.any()


def test_seeds_are_averaged_within_each_resample_and_the_draws_are_reproducible():
    rng = np.random.default_rng(5)
    labels = rng.uniform(0, 5, 200)
    seed_a, seed_b, scratch = (labels + rng.normal(0, s, 200) for s in (1.0, 1.5, 2.5))
    both = bootstrap.paired_differences("stsb", "primary", labels, None, [seed_a, seed_b], [scratch], seed=7)
    each = [bootstrap.paired_differences("stsb", "primary", labels, None, [one], [scratch], seed=7)
            for one in (seed_a, seed_b)]
    assert both == pytest.approx((each[0] + each[1]) / 2)
    assert (bootstrap.paired_differences("stsb", "primary", labels, None, [seed_a], [scratch], seed=7) == each[0]).all()
    assert bootstrap.on_rows("stsb", "primary", labels, [seed_a, seed_b]) == pytest.approx(
        np.mean([metrics.compute("stsb", labels, s)["primary"] for s in (seed_a, seed_b)]))


def test_resamples_keep_each_groups_size_and_large_sets_go_in_blocks(monkeypatch):
    groups = np.array(["matched"] * 30 + ["mismatched"] * 70, dtype=object)
    samples = bootstrap.resample(100, groups, np.random.default_rng(0), 50)
    assert samples.shape == (50, 100)
    assert ((groups[samples] == "matched").sum(axis=1) == 30).all()
    labels, predictions, groups = synthetic("mnli", 100, 0.7, np.random.default_rng(2))
    whole = bootstrap.paired_differences("mnli", "primary", labels, groups, predictions, labels, resamples=30)
    monkeypatch.setattr(bootstrap, "BLOCK_VALUES", 700)  # blocks of 7 resamples
    assert (bootstrap.paired_differences("mnli", "primary", labels, groups, predictions, labels, resamples=30)
            .shape == whole.shape)
