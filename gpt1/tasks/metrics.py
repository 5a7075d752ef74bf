"""Task metrics as the paper reports them, the paper's own numbers, the GLUE average and majority baselines.

Scale: every metric is in percent (x100), like the paper's tables: accuracy 91.3, Matthews correlation 45.4,
F1 82.3, Pearson 82.0. `compute` returns a dict with each of the task's metrics (`TaskSpec.metrics`: CoLA MCC
and accuracy, MRPC and QQP F1 and accuracy, STS-B Pearson and Spearman, accuracy for the rest) plus `primary`,
the number the paper puts in its tables (the first metric). Tasks with groups (`TaskSpec.groups`: RACE levels,
MNLI matched/mismatched) also get `accuracy_<group>`; for MNLI (`primary_is_group_mean`) the primary is the mean
of both halves when both are present, as the paper's Table 5 "MNLI" column 81.8 = mean(82.1, 81.4), else the one
present.

Groups come in `extra={"groups": [...]}`, one per example (`example.group`). F1 is for the positive class 1
(paraphrase / duplicate). A correlation with a constant input is undefined; it is reported as 0.0 (no linear
relation) rather than NaN, as scikit-learn does for a degenerate Matthews correlation.

GLUE score: `glue_score(results)` is the paper's Table 5 "Avg. Score": the unweighted mean of the primary metrics
of the 8 GLUE tasks it fine-tunes on (`TaskSpec.glue`). On the paper's numbers it gives 74.65 (Table 5: 74.7).
The 72.8 "GLUE" of Table 4 is the GLUE server's score, which also counts WNLI and averages each task's two
metrics (MRPC F1/acc, STS-B Pearson/Spearman, QQP F1/acc); it is kept in PAPER_RESULTS for reference but cannot
be recomputed from the paper's tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpt1.tasks.registry import GLUE_TASKS, REGISTRY, get

# scikit-learn and scipy are imported inside the metric functions: they take seconds to import, and loading a
# task's data (`gpt1.tasks` imports this module) should not pay for them.

METRICS: dict[str, tuple[str, ...]] = {name: spec.metrics for name, spec in REGISTRY.items()}
# The paper's test-set numbers (Tables 2-4), same keys as `compute`; "glue" is the GLUE server score (Table 4).
GLUE_SERVER_SCORE = 72.8
PAPER_RESULTS: dict[str, dict[str, float]] = {
    **{name: spec.paper for name, spec in REGISTRY.items()},
    "glue": {"primary": GLUE_SERVER_SCORE},
}
# Table 5 "Avg. Score" (what `glue_score` computes) of the full model and the two ablations the pipeline runs; the
# per-task ablation numbers are `TaskSpec.paper_ablations`.
PAPER_AVERAGES = {"full": 74.7, "no_pretrain": 59.9, "no_aux_lm": 75.0}


def accuracy(y_true, y_pred) -> float:
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(y_true, y_pred))


def mcc(y_true, y_pred) -> float:
    from sklearn.metrics import matthews_corrcoef

    return float(matthews_corrcoef(y_true, y_pred))


def f1(y_true, y_pred) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, pos_label=1, average="binary", zero_division=0))


def pearson(y_true, y_pred) -> float:
    from scipy.stats import pearsonr

    return _correlation(pearsonr, y_true, y_pred)


def spearman(y_true, y_pred) -> float:
    from scipy.stats import spearmanr

    return _correlation(spearmanr, y_true, y_pred)


def _correlation(fn, y_true, y_pred) -> float:
    if np.ptp(y_true) == 0 or np.ptp(y_pred) == 0:
        return 0.0
    return float(fn(y_true, y_pred)[0])


FUNCTIONS = {"accuracy": accuracy, "mcc": mcc, "f1": f1, "pearson": pearson, "spearman": spearman}


def compute(
    task: str, y_true: Sequence, y_pred: Sequence, extra: Mapping[str, Any] | None = None
) -> dict:
    """The task's metrics in percent plus `primary`; `extra={"groups": [...]}` adds per-group accuracy."""
    spec = get(task)
    if len(y_true) != len(y_pred) or not len(y_true):
        raise ValueError(
            f"{task}: {len(y_true)} labels vs {len(y_pred)} predictions (need equal, non-zero)"
        )
    if any(y is None for y in y_true):
        raise ValueError(f"{task}: unlabelled examples (label None) cannot be scored")
    dtype = float if spec.regression else np.int64
    truth, predicted = np.asarray(y_true, dtype=dtype), np.asarray(y_pred, dtype=dtype)
    out = {name: 100 * FUNCTIONS[name](truth, predicted) for name in spec.metrics}
    out["primary"] = out[spec.primary_metric]
    groups = (extra or {}).get("groups")
    if spec.groups and groups is not None:
        groups = np.asarray(groups, dtype=object)
        if len(groups) != len(truth):
            raise ValueError(f"{task}: {len(groups)} groups for {len(truth)} examples")
        for group in sorted({g for g in groups if g is not None}):
            selected = groups == group
            out[f"accuracy_{group}"] = 100 * accuracy(truth[selected], predicted[selected])
        group_keys = [f"accuracy_{g}" for g in spec.groups]
        if spec.primary_is_group_mean and all(key in out for key in group_keys):
            out["primary"] = float(np.mean([out[key] for key in group_keys]))
    return out


def glue_score(results: Mapping[str, Mapping[str, float] | float]) -> float:
    """Mean primary metric over the 8 GLUE tasks (paper Table 5 "Avg. Score"); `results[task]` is a `compute`
    dict or the primary number. Raises ValueError naming missing tasks rather than averaging a subset."""
    missing = [t for t in GLUE_TASKS if t not in results]
    if missing:
        raise ValueError(f"glue_score needs all of {list(GLUE_TASKS)}; missing {missing}")
    values = [
        r["primary"] if isinstance(r, Mapping) else float(r)
        for r in (results[t] for t in GLUE_TASKS)
    ]
    return float(np.mean(values))


def majority_baseline(
    task: str, train_labels: Sequence, eval_labels: Sequence, extra: Mapping[str, Any] | None = None
) -> dict:
    """Metrics of always predicting the most frequent training label (ties: the smallest label); a regression
    (STS-B) predicts the mean training score, a constant, so its correlations are 0 by the convention above."""
    train = [y for y in train_labels if y is not None]
    if not train:
        raise ValueError(f"{task}: no training labels for a majority baseline")
    if get(task).regression:
        guess = float(np.mean(train))
    else:
        counts = Counter(train)
        guess = max(sorted(counts), key=counts.__getitem__)
    return compute(task, eval_labels, [guess] * len(eval_labels), extra)
