"""Pre-trained minus from scratch, per task and for the mean over the headline tasks, each with a paired-bootstrap
95% interval over the evaluation examples (gpt1.report.bootstrap), from the predictions every fine-tune wrote on
its evaluation rows (`predictions/<split>.jsonl`, named in its metrics.json).

Which runs are compared: runs whose fine-tune settings (metrics.json `finetune_config`) differ only in the seed
are seeds of one variant, scored per seed and averaged within each resample; each from-scratch variant
(`from_scratch`) is compared with the pre-trained variant whose other settings are the same (the paper's Table 5
"w/o pre-training" row against the full model). A result without recorded settings is placed by its ablation name.

A task is compared when both variants scored it on the same rows (the same ids and labels, in the same order);
otherwise the reason is listed. Its metric is its headline metric (`report.headline_tasks`, `task:metric`), else
its primary one. The headline mean is the mean of the headline tasks' differences, resample by resample (each
task's rows are drawn on their own), over the headline tasks that were compared; the ones that were not are
listed. Each task's resamples come from a generator seeded with SEED and the task's place in the registry, so
adding a task moves no other task's interval.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpt1.io import stable_hash
from gpt1.report import bootstrap
from gpt1.report.markdown import MISSING, fmt, markdown_table, signed
from gpt1.tasks import REGISTRY, get

SEED = 0
SETTINGS = {"resamples": bootstrap.RESAMPLES, "confidence": bootstrap.CONFIDENCE, "seed": SEED}
NOT_A_SETTING = ("seed", "from_scratch", "tasks", "data", "task_data")  # what may differ within one comparison


def variant_of(run) -> tuple[str, bool] | None:
    """(the run's fine-tune settings but the seed and the start, whether it started from scratch); None for a run
    with no finished task."""
    result = next(iter(run.results.values()), None)
    if result is None:
        return None
    settings = result.get("finetune_config")
    if settings is None:
        parts = set(result.get("ablation", "full").split("+"))
        return "+".join(sorted(parts - {"full", "no_pretrain"})), "no_pretrain" in parts
    return (stable_hash({k: v for k, v in settings.items() if k not in NOT_A_SETTING}),
            bool(settings.get("from_scratch")))


def pairs(runs: list) -> list[tuple[list, list]]:
    """(pre-trained runs, from-scratch runs) of every from-scratch variant that has a pre-trained twin."""
    variants: dict[tuple[str, bool], list] = {}
    for run in runs:
        key = variant_of(run)
        if key is not None:
            variants.setdefault(key, []).append(run)
    return [(variants[(setting, False)], scratch) for (setting, from_scratch), scratch in variants.items()
            if from_scratch and (setting, False) in variants]


def read_predictions(task: str, result: dict, task_dir: Path) -> dict:
    """The rows a fine-tune scored and what it predicted: ids, labels and predictions as numbers, groups."""
    spec = get(task)
    files = (result.get("files") or {}).get(result["eval_split"])
    if not files:
        raise FileNotFoundError(f"{task_dir}: its metrics.json names no predictions of {result['eval_split']}")
    lines = (task_dir / files[0]).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]

    def number(value):
        return float(value) if spec.regression else spec.labels.index(value)

    groups = [r.get("group") for r in records]
    return {"ids": [r["id"] for r in records], "labels": np.array([number(r["label"]) for r in records]),
            "predicted": np.array([number(r["prediction"]) for r in records]),
            "groups": None if all(g is None for g in groups) else np.array(groups, dtype=object)}


def compare_task(task: str, metric: str, pretrained: list, scratch: list) -> tuple[dict, np.ndarray | None]:
    """One task's entry (both variants' seed-averaged scores, the difference and its interval) and its draws; an
    entry holding only `reason` and no draws when it cannot be compared."""
    sides = []
    for runs in (pretrained, scratch):
        failed = [r.label for r in runs if task in r.errors]
        if failed or not any(task in r.results for r in runs):
            labels = ", ".join(failed or [r.label for r in runs])
            return {"reason": f"failed in {labels}" if failed else f"not run in {labels}"}, None
        try:
            sides.append([read_predictions(task, r.results[task], r.dirs[task]) for r in runs if task in r.results])
        except (OSError, ValueError, KeyError) as err:
            return {"reason": f"no predictions to compare ({type(err).__name__}: {err})"}, None
    first = sides[0][0]
    if any(s["ids"] != first["ids"] or not np.array_equal(s["labels"], first["labels"])
           for side in sides for s in side):
        return {"reason": "the variants were scored on different rows"}, None
    predictions = [np.stack([s["predicted"] for s in side]) for side in sides]
    labels, groups = first["labels"], first["groups"]
    draws = bootstrap.paired_differences(task, metric, labels, groups, *predictions,
                                         seed=[SEED, list(REGISTRY).index(task)])
    scores = [bootstrap.on_rows(task, metric, labels, p, groups) for p in predictions]
    low, high = bootstrap.interval(draws)
    return {"metric": metric_label(task, metric), "pretrained": scores[0], "from_scratch": scores[1],
            "difference": scores[0] - scores[1], "low": low, "high": high, "examples": len(labels),
            "seeds": [len(p) for p in predictions]}, draws


def metric_label(task: str, metric: str) -> str:
    spec = get(task)
    return spec.primary_metric if metric == "primary" and not spec.primary_is_group_mean else metric


def compare(runs: list, headline: tuple[tuple[str, str], ...] | None = None) -> list[dict]:
    """Every pre-trained vs from-scratch comparison among `runs` (see the module docstring)."""
    found = []
    for pretrained, scratch in pairs(runs):
        ran = {t for r in pretrained + scratch for t in (*r.results, *r.errors)}
        wanted = headline if headline is not None else tuple(
            (t, "primary") for t in sorted(ran, key=list(REGISTRY).index))
        metric_of = dict(wanted)
        tasks, draws = {}, {}
        for task in sorted(ran | set(metric_of), key=list(REGISTRY).index):
            tasks[task], task_draws = compare_task(task, metric_of.get(task, "primary"), pretrained, scratch)
            if task_draws is not None:
                draws[task] = task_draws
        found.append({"pretrained": label(pretrained), "from_scratch": label(scratch),
                      "runs": {"pretrained": [r.label for r in pretrained], "from_scratch": [r.label for r in scratch]},
                      **SETTINGS, "tasks": tasks, "headline": headline_mean(wanted, tasks, draws)})
    return found


def label(runs: list) -> str:
    return runs[0].label if len(runs) == 1 else f"{runs[0].label} ({len(runs)} seeds)"


def headline_mean(wanted: tuple[tuple[str, str], ...], tasks: dict, draws: dict) -> dict:
    """The mean over the headline tasks that were compared, with its interval; `missing`: the others."""
    compared = [task for task, _ in wanted if task in draws]
    entry = {"tasks": {task: metric_label(task, metric) for task, metric in wanted},
             "missing": [task for task, _ in wanted if task not in draws]}
    if not compared:
        return entry
    low, high = bootstrap.interval(np.mean([draws[task] for task in compared], axis=0))
    mean = {side: float(np.mean([tasks[task][side] for task in compared]))
            for side in ("pretrained", "from_scratch", "difference")}
    return {**entry, **mean, "low": low, "high": high, "verdict": verdict(low, high)}


def verdict(low: float, high: float) -> str:
    """What a headline interval says: `gain` (above 0), `loss` (below 0) or `not shown` (it spans 0)."""
    return "gain" if low > 0 else "loss" if high < 0 else "not shown"


VERDICT_LINES = {
    "gain": "**Verdict: pre-training helps here.** The headline mean's interval lies above 0.",
    "loss": "**Verdict: pre-training hurts here.** The headline mean's interval lies below 0: the from-scratch "
            "model did better.",
    "not shown": "**Verdict: this run does not show that pre-training helps.** The headline mean's interval spans "
                 "0, so these evaluation rows cannot tell its difference from none.",
}


# -- results.md ---------------------------------------------------------------------------------------------------
def markdown(comparisons: list[dict]) -> str:
    """The comparisons as results.md shows them, with how to read an interval."""
    parts = ["### Pre-trained minus from scratch (paired bootstrap, 95% interval)", "",
             f"Each interval resamples the evaluation rows {bootstrap.RESAMPLES:,} times (seed {SEED}) and scores "
             "both variants on the same resample. An interval above 0 is a gain that the choice of evaluation rows "
             "does not explain; one that spans 0 is a difference these rows cannot tell from none."]
    for comparison in comparisons:
        pre, scratch = comparison["pretrained"], comparison["from_scratch"]
        rows = [[f"{REGISTRY[task].title} ({entry['metric']})", fmt(entry["pretrained"]), fmt(entry["from_scratch"]),
                 signed(entry["difference"]), f"[{signed(entry['low'])}, {signed(entry['high'])}]",
                 str(entry["examples"])]
                for task, entry in comparison["tasks"].items() if "reason" not in entry]
        mean = comparison["headline"]
        names = ", ".join(f"{REGISTRY[task].title} {metric}" for task, metric in mean["tasks"].items())
        if "difference" in mean:
            rows.append([f"**headline mean** ({names})", fmt(mean["pretrained"]), fmt(mean["from_scratch"]),
                         f"**{signed(mean['difference'])}**", f"**[{signed(mean['low'])}, {signed(mean['high'])}]**",
                         MISSING])
        parts += ["", markdown_table(["Task (metric)", pre, scratch, "difference", "95% interval", "rows"], rows)]
        if "verdict" in mean:
            parts += ["", VERDICT_LINES[mean["verdict"]]]
        missing = [f"{REGISTRY[task].title}: {entry['reason']}" for task, entry in comparison["tasks"].items()
                   if "reason" in entry]
        if mean["missing"]:
            missing.append(f"headline mean without {', '.join(REGISTRY[t].title for t in mean['missing'])}")
        if missing:
            parts += ["", f"Not compared ({pre} vs {scratch}): " + "; ".join(missing) + "."]
    return "\n".join(parts)
