"""The paired bootstrap: how sure a difference between two variants' scores on the same evaluation rows is.

    draws = paired_differences("sst2", "primary", labels, None, pretrained, scratch, seed=1)   # (RESAMPLES,)
    low, high = interval(draws)

Each resample draws the evaluation examples with replacement, scores both variants on that same draw with the
task's metric, and keeps the difference; the 95% interval is the 2.5th and 97.5th percentile of the differences
(the percentile bootstrap). Examples with a group (MNLI's matched and mismatched files, RACE's levels) are drawn
within their group, so each group keeps the size its files have. A variant given as several prediction rows (one
fine-tune per seed) is scored per seed and averaged within each resample: the interval is that of the
seed-averaged score over the choice of evaluation examples; the seeds themselves are not resampled.

The metrics are those of `gpt1.tasks.metrics.compute`, in percent, computed for a whole block of resamples at once
with numpy (one scikit-learn call per resample would take most of a report's time at 1,000 resamples); on the
rows themselves they equal `compute` (checked in the tests). A correlation with a constant side is 0, as there.
"""

from __future__ import annotations

import numpy as np

from gpt1.tasks import REGISTRY

RESAMPLES = 1000
CONFIDENCE = 0.95
BLOCK_VALUES = (
    2_000_000  # predictions gathered per block of resamples: bounds memory on large evaluation sets
)


def metric_name(task: str, metric: str, groups: np.ndarray | None) -> str:
    """What `metric` is for this task and these rows: `primary` resolved as `metrics.compute` resolves it (MNLI:
    the mean of the groups' accuracies when every group is present)."""
    spec = REGISTRY[task]
    if metric != "primary":
        return metric
    present = set() if groups is None else set(groups.tolist())
    if spec.primary_is_group_mean and set(spec.groups) <= present:
        return "group_mean"
    return spec.primary_metric


def _accuracy(y, p, g):
    return (y == p).mean(axis=1)


def _f1(y, p, g):
    """F1 of the positive class 1; 0 when there is no positive prediction nor label (scikit-learn's zero_division=0)."""
    true_pos = ((p == 1) & (y == 1)).sum(axis=1)
    wrong = ((p == 1) != (y == 1)).sum(axis=1)  # false positives + false negatives
    return _ratio(2 * true_pos, 2 * true_pos + wrong)


def _mcc(y, p, g):
    """Matthews correlation from the confusion counts (the multiclass form scikit-learn uses)."""
    n = y.shape[1]
    classes = np.union1d(np.unique(y), np.unique(p))
    true_counts = np.stack([(y == c).sum(axis=1) for c in classes], axis=1).astype(float)
    pred_counts = np.stack([(p == c).sum(axis=1) for c in classes], axis=1).astype(float)
    correct = (y == p).sum(axis=1).astype(float)
    covariance = correct * n - (true_counts * pred_counts).sum(axis=1)
    spread = (n * n - (true_counts**2).sum(axis=1)) * (n * n - (pred_counts**2).sum(axis=1))
    return _ratio(covariance, np.sqrt(spread))


def _pearson(y, p, g):
    constant = (np.ptp(y, axis=1) == 0) | (np.ptp(p, axis=1) == 0)
    y = y - y.mean(axis=1, keepdims=True)
    p = p - p.mean(axis=1, keepdims=True)
    r = _ratio((y * p).sum(axis=1), np.sqrt((y**2).sum(axis=1) * (p**2).sum(axis=1)))
    return np.where(constant, 0.0, r)


def _spearman(y, p, g):
    from scipy.stats import rankdata

    return _pearson(rankdata(y, axis=1), rankdata(p, axis=1), g)


def _group_accuracy(group: str):
    def accuracy(y, p, g):
        member = g == group
        return _ratio(((y == p) & member).sum(axis=1), member.sum(axis=1))

    return accuracy


def _ratio(numerator, denominator):
    numerator, denominator = np.asarray(numerator, float), np.asarray(denominator, float)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


FUNCTIONS = {
    "accuracy": _accuracy,
    "f1": _f1,
    "mcc": _mcc,
    "pearson": _pearson,
    "spearman": _spearman,
}


def _function(task: str, name: str):
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    if name.startswith("accuracy_"):
        return _group_accuracy(name.removeprefix("accuracy_"))
    if name == "group_mean":
        parts = [_group_accuracy(group) for group in REGISTRY[task].groups]
        return lambda y, p, g: np.mean([part(y, p, g) for part in parts], axis=0)
    raise ValueError(f"{task}: no metric {name!r}")


def scores(
    task: str,
    metric: str,
    labels: np.ndarray,
    predictions: np.ndarray,
    samples: np.ndarray,
    groups: np.ndarray | None = None,
) -> np.ndarray:
    """`metric` (percent) of each prediction row (a seed) on each resample: shape (len(samples), len(predictions)).
    `samples` holds one row of example indices per resample."""
    function = _function(task, metric_name(task, metric, groups))
    y, g = labels[samples], None if groups is None else groups[samples]
    return 100 * np.stack([function(y, row[samples], g) for row in predictions], axis=1)


def resample(n: int, groups: np.ndarray | None, rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` resamples of range(n), with replacement, drawn within each group: shape (count, n)."""
    if groups is None:
        return rng.integers(0, n, size=(count, n))
    blocks = []
    for group in sorted(set(groups.tolist()), key=str):
        members = np.flatnonzero(groups == group)
        blocks.append(members[rng.integers(0, len(members), size=(count, len(members)))])
    return np.concatenate(blocks, axis=1)


def paired_differences(
    task: str,
    metric: str,
    labels,
    groups,
    first,
    second,
    *,
    resamples: int = RESAMPLES,
    seed: int | list[int] = 0,
) -> np.ndarray:
    """The seed-averaged score of `first` minus that of `second` (each a (seeds, n) array of predictions on the same
    n rows) on each of `resamples` paired resamples of the rows."""
    labels = np.asarray(labels)
    groups = None if groups is None else np.asarray(groups, dtype=object)
    first, second = np.atleast_2d(np.asarray(first)), np.atleast_2d(np.asarray(second))
    n = len(labels)
    if first.shape[1] != n or second.shape[1] != n:
        raise ValueError(
            f"{task}: predictions of {first.shape[1]} and {second.shape[1]} rows for {n} labels"
        )
    rng = np.random.default_rng(seed)
    block = max(1, BLOCK_VALUES // (n * max(len(first), len(second))))
    draws = []
    for start in range(0, resamples, block):
        samples = resample(n, groups, rng, min(block, resamples - start))
        draws.append(
            scores(task, metric, labels, first, samples, groups).mean(axis=1)
            - scores(task, metric, labels, second, samples, groups).mean(axis=1)
        )
    return np.concatenate(draws)


def on_rows(task: str, metric: str, labels, predictions, groups=None) -> float:
    """The seed-averaged score on the rows themselves (no resampling)."""
    labels = np.asarray(labels)
    groups = None if groups is None else np.asarray(groups, dtype=object)
    rows = np.arange(len(labels))[None, :]
    return float(
        scores(task, metric, labels, np.atleast_2d(np.asarray(predictions)), rows, groups).mean()
    )


def interval(draws: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of the draws."""
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)
