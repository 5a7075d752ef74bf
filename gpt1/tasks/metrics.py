"""Task metrics as the paper reports them, the paper's own numbers, the GLUE average and majority baselines.

Scale: every metric is in percent (x100), like the paper's tables: accuracy 91.3, Matthews correlation 45.4,
F1 82.3, Pearson 82.0. `compute` returns a dict with each metric of the task plus `primary`, the number the paper
puts in its tables:

    cola  mcc (+ accuracy)            sst2 qnli rte snli scitail storycloze  accuracy
    mrpc  f1 (+ accuracy)             qqp   f1 (+ accuracy)
    stsb  pearson (+ spearman)        race  accuracy (+ accuracy_middle, accuracy_high with groups)
    mnli  accuracy (+ accuracy_matched, accuracy_mismatched with groups; primary = their mean when both are
          present, as the paper's Table 5 "MNLI" column 81.8 = mean(82.1, 81.4), else the one present)

Groups come in `extra={"groups": [...]}`, one per example (`example.group`: RACE level, MNLI matched/mismatched).
F1 is for the positive class 1 (paraphrase / duplicate). A correlation with a constant input is undefined; it is
reported as 0.0 (no linear relation) rather than NaN, as scikit-learn does for a degenerate Matthews correlation.

GLUE score: `glue_score(results)` is the paper's Table 5 "Avg. Score": the unweighted mean of the primary metrics
of the 8 GLUE tasks it fine-tunes on, CoLA (MCC), SST-2 (acc), MRPC (F1), STS-B (Pearson), QQP (F1), MNLI (mean of
matched and mismatched acc), QNLI (acc), RTE (acc). On the paper's numbers it gives 74.65 (Table 5: 74.7). The
72.8 "GLUE" of Table 4 is the GLUE server's score, which also counts WNLI and averages each task's two metrics
(MRPC F1/acc, STS-B Pearson/Spearman, QQP F1/acc); it is kept in PAPER_RESULTS for reference but cannot be
recomputed from the paper's tables.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

# scikit-learn and scipy are imported inside the metric functions: they take seconds to import, and loading a
# task's data (which imports this module through the registry) should not pay for them.

METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc", "accuracy"),
    "sst2": ("accuracy",),
    "mrpc": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
    "qqp": ("f1", "accuracy"),
    "mnli": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "snli": ("accuracy",),
    "scitail": ("accuracy",),
    "race": ("accuracy",),
    "storycloze": ("accuracy",),
}
PRIMARY = {task: names[0] for task, names in METRICS.items()}
GROUPED = ("mnli", "race")  # tasks whose sub-populations the paper reports separately
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")

# The paper's test-set numbers (Tables 2-4), same keys as `compute`; "glue" is the GLUE server score (Table 4).
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "mnli": {"accuracy_matched": 82.1, "accuracy_mismatched": 81.4, "primary": 81.8},
    "snli": {"accuracy": 89.9, "primary": 89.9},
    "scitail": {"accuracy": 88.3, "primary": 88.3},
    "qnli": {"accuracy": 88.1, "primary": 88.1},
    "rte": {"accuracy": 56.0, "primary": 56.0},
    "race": {"accuracy": 59.0, "accuracy_middle": 62.9, "accuracy_high": 57.4, "primary": 59.0},
    "storycloze": {"accuracy": 86.5, "primary": 86.5},
    "cola": {"mcc": 45.4, "primary": 45.4},
    "sst2": {"accuracy": 91.3, "primary": 91.3},
    "mrpc": {"f1": 82.3, "primary": 82.3},
    "stsb": {"pearson": 82.0, "primary": 82.0},
    "qqp": {"f1": 70.3, "primary": 70.3},
    "glue": {"primary": 72.8},
}
# Table 5 "Avg. Score" (what `glue_score` computes) of the full model and the two ablations the pipeline runs.
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


def compute(task: str, y_true: Sequence, y_pred: Sequence, extra: Mapping[str, Any] | None = None) -> dict:
    """The task's metrics in percent plus `primary`; `extra={"groups": [...]}` adds per-group accuracy."""
    if task not in METRICS:
        raise ValueError(f"unknown task {task!r}; known: {list(METRICS)}")
    if len(y_true) != len(y_pred) or not len(y_true):
        raise ValueError(f"{task}: {len(y_true)} labels vs {len(y_pred)} predictions (need equal, non-zero)")
    if any(y is None for y in y_true):
        raise ValueError(f"{task}: unlabelled examples (label None) cannot be scored")
    dtype = float if task == "stsb" else np.int64
    y_true, y_pred = np.asarray(y_true, dtype=dtype), np.asarray(y_pred, dtype=dtype)
    out = {name: 100 * FUNCTIONS[name](y_true, y_pred) for name in METRICS[task]}
    out["primary"] = out[PRIMARY[task]]
    groups = (extra or {}).get("groups")
    if task in GROUPED and groups is not None:
        groups = np.asarray(groups, dtype=object)
        if len(groups) != len(y_true):
            raise ValueError(f"{task}: {len(groups)} groups for {len(y_true)} examples")
        for group in sorted({g for g in groups if g is not None}):
            selected = groups == group
            out[f"accuracy_{group}"] = 100 * accuracy(y_true[selected], y_pred[selected])
        if task == "mnli" and {"accuracy_matched", "accuracy_mismatched"} <= out.keys():
            out["primary"] = (out["accuracy_matched"] + out["accuracy_mismatched"]) / 2
    return out


def glue_score(results: Mapping[str, Mapping[str, float] | float]) -> float:
    """Mean primary metric over the 8 GLUE tasks (paper Table 5 "Avg. Score"); `results[task]` is a `compute`
    dict or the primary number. Raises ValueError naming missing tasks rather than averaging a subset."""
    missing = [t for t in GLUE_TASKS if t not in results]
    if missing:
        raise ValueError(f"glue_score needs all of {list(GLUE_TASKS)}; missing {missing}")
    values = [r["primary"] if isinstance(r, Mapping) else float(r) for r in (results[t] for t in GLUE_TASKS)]
    return float(np.mean(values))


def majority_baseline(task: str, train_labels: Sequence, eval_labels: Sequence,
                      extra: Mapping[str, Any] | None = None) -> dict:
    """Metrics of always predicting the most frequent training label (ties: the smallest label); STS-B predicts
    the mean training score, a constant, so its correlations are 0 by the convention above."""
    train = [y for y in train_labels if y is not None]
    if not train:
        raise ValueError(f"{task}: no training labels for a majority baseline")
    if task == "stsb":
        guess = float(np.mean(train))
    else:
        counts = Counter(train)
        guess = max(sorted(counts), key=counts.__getitem__)
    return compute(task, eval_labels, [guess] * len(eval_labels), extra)
