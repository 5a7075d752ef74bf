"""Pre-trained minus from scratch, per task and for the mean over the headline tasks, each with a paired-bootstrap
95% interval over the evaluation examples (gpt1.report.bootstrap), from the predictions every fine-tune wrote on
its evaluation rows (`predictions/<split>.jsonl`, named in its metrics.json).

Which runs are compared: runs whose fine-tune settings (metrics.json `finetune_config`) differ only in the seed
and that started from the same weights are seeds of one variant, scored per seed and averaged within each
resample; each from-scratch variant (`from_scratch`) is compared with the pre-trained variant whose other settings
are the same (the paper's Table 5 "w/o pre-training" row against the full model). A result without recorded
settings is placed by its ablation name.

The curve: when several pre-trained variants share those settings (fine-tunes of the models pre-training wrote
at `pretrain.curve_steps` beside its final one: metrics.json `pretraining` records each start's updates and
tokens), the one with the most pre-training tokens is the comparison and every one of them is a point of the
curve: its headline mean difference from the same from-scratch twin, with its interval, against the tokens.

A task is compared when both variants scored it on the same rows (the same ids and labels, in the same order);
otherwise the reason is listed. Its metric is its headline metric (`report.headline_tasks`, `task:metric`), else
its primary one. The headline mean is the mean of the headline tasks' differences, resample by resample (each
task's rows are drawn on their own), over the headline tasks that were compared; the ones that were not are
listed. Each task's resamples come from a generator seeded with SEED and the task's place in the registry, so
adding a task moves no other task's interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpt1.data.ingest.corpus import CORPUS, TASK_TEXT_ORIGIN
from gpt1.io import read_jsonl, stable_hash
from gpt1.report import bootstrap
from gpt1.report.markdown import MISSING, fmt, markdown_table, signed
from gpt1.tasks import REGISTRY, get

SEED = 0
SETTINGS = {"resamples": bootstrap.RESAMPLES, "confidence": bootstrap.CONFIDENCE, "seed": SEED}
# what may differ within one comparison
NOT_A_SETTING = (
    "seed",
    "seeds",
    "from_scratch",
    "tasks",
    "data",
    "task_data",
)


SCRATCH = "scratch"


def variant_of(run) -> tuple[str, str | None] | None:
    """(the run's fine-tune settings but the seed and the start, what it started from: SCRATCH, the pre-trained
    weights' sha256 as metrics.json `pretraining` records it, or None when unrecorded); None for a run with no
    finished task."""
    result = next(iter(run.results.values()), None)
    if result is None:
        return None
    settings = result.get("finetune_config")
    if settings is None:
        parts = set(result.get("ablation", "full").split("+"))
        return "+".join(
            sorted(parts - {"full", "no_pretrain"})
        ), SCRATCH if "no_pretrain" in parts else None
    start = (
        SCRATCH
        if settings.get("from_scratch")
        else (result.get("pretraining") or {}).get("weights_sha256")
    )
    return stable_hash({k: v for k, v in settings.items() if k not in NOT_A_SETTING}), start


def pretraining(runs: list) -> dict:
    """What the runs' start had of pre-training (`steps`, `tokens_seen`; empty when unrecorded)."""
    result = next(iter(runs[0].results.values()))
    return result.get("pretraining") or {}


def pairs(runs: list) -> list[tuple[list[list], list]]:
    """(its pre-trained twins, fewest pre-training tokens first, the unrecorded last; the from-scratch runs) of
    every from-scratch variant that has a pre-trained twin."""
    variants: dict[tuple[str, str | None], list] = {}
    for run in runs:
        key = variant_of(run)
        if key is not None:
            variants.setdefault(key, []).append(run)
    found = []
    for (setting, start), scratch in variants.items():
        twins = [
            group
            for (other, begun), group in variants.items()
            if other == setting and begun != SCRATCH
        ]
        if start == SCRATCH and twins:
            found.append(
                (
                    sorted(
                        twins, key=lambda group: pretraining(group).get("tokens_seen", float("inf"))
                    ),
                    scratch,
                )
            )
    return found


def read_predictions(task: str, result: dict, task_dir: Path) -> dict:
    """The rows a fine-tune scored and what it predicted: ids, labels and predictions as numbers, groups."""
    spec = get(task)
    files = (result.get("files") or {}).get(result["eval_split"])
    if not files:
        raise FileNotFoundError(
            f"{task_dir}: its metrics.json names no predictions of {result['eval_split']}"
        )
    records = read_jsonl(task_dir / files[0])

    from gpt1.finetune.predict import (
        class_names,
    )  # here: torch, which it imports, only when comparing

    names = () if spec.labels is None else class_names(spec)
    written = spec.labels or ()  # what a fine-tune wrote before classes were spelled by name

    def number(value) -> float:
        if spec.regression:
            return float(value)
        return names.index(value) if value in names else written.index(value)

    groups = [r.get("group") for r in records]
    return {
        "ids": [r["id"] for r in records],
        "labels": np.array([number(r["label"]) for r in records]),
        "predicted": np.array([number(r["prediction"]) for r in records]),
        "groups": None if all(g is None for g in groups) else np.array(groups, dtype=object),
    }


def compare_task(
    task: str, metric: str, pretrained: list, scratch: list
) -> tuple[dict, np.ndarray | None]:
    """One task's entry (both variants' seed-averaged scores, the difference and its interval) and its draws; an
    entry holding only `reason` and no draws when it cannot be compared."""
    sides = []
    for runs in (pretrained, scratch):
        failed = [r.label for r in runs if task in r.errors]
        if failed or not any(task in r.results for r in runs):
            labels = ", ".join(failed or [r.label for r in runs])
            return {"reason": f"failed in {labels}" if failed else f"not run in {labels}"}, None
        try:
            sides.append(
                [
                    read_predictions(task, r.results[task], r.dirs[task])
                    for r in runs
                    if task in r.results
                ]
            )
        except (OSError, ValueError, KeyError) as err:
            return {"reason": f"no predictions to compare ({type(err).__name__}: {err})"}, None
    first = sides[0][0]
    if any(
        s["ids"] != first["ids"] or not np.array_equal(s["labels"], first["labels"])
        for side in sides
        for s in side
    ):
        return {"reason": "the variants were scored on different rows"}, None
    predictions = [np.stack([s["predicted"] for s in side]) for side in sides]
    labels, groups = first["labels"], first["groups"]
    draws = bootstrap.paired_differences(
        task, metric, labels, groups, *predictions, seed=[SEED, list(REGISTRY).index(task)]
    )
    scores = [bootstrap.on_rows(task, metric, labels, p, groups) for p in predictions]
    low, high = bootstrap.interval(draws)
    bar = next(
        (
            r.baselines[task].get("metrics", {}).get(metric)
            for r in pretrained
            if task in r.baselines
        ),
        None,
    )
    return {
        "metric": metric_label(task, metric),
        "pretrained": scores[0],
        "from_scratch": scores[1],
        "difference": scores[0] - scores[1],
        "low": low,
        "high": high,
        "examples": len(labels),
        "seeds": [len(p) for p in predictions],
        "baseline": bar,
    }, draws


def metric_label(task: str, metric: str) -> str:
    spec = get(task)
    return spec.primary_metric if metric == "primary" and not spec.primary_is_group_mean else metric


def compare(runs: list, headline: tuple[tuple[str, str], ...] | None = None) -> list[dict]:
    """Every pre-trained vs from-scratch comparison among `runs`, each with its curve (see the module docstring)."""
    found = []
    for twins, scratch in pairs(runs):
        pretrained = twins[-1]
        ran = {t for r in pretrained + scratch for t in (*r.results, *r.errors)}
        wanted = (
            headline
            if headline is not None
            else tuple((t, "primary") for t in sorted(ran, key=list(REGISTRY).index))
        )
        tasks, draws = compare_tasks(
            sorted(ran | set(dict(wanted)), key=list(REGISTRY).index), wanted, pretrained, scratch
        )
        curve, curve_draws = [], []
        for group in twins if len(twins) > 1 else []:
            point_tasks, point_draws = compare_tasks(
                [task for task, _ in wanted], wanted, group, scratch
            )
            curve.append(
                {
                    "pretrained": label(group),
                    "runs": [r.label for r in group],
                    "steps": pretraining(group).get("steps"),
                    "tokens": pretraining(group).get("tokens_seen"),
                    "tasks": point_tasks,
                    "headline": headline_mean(wanted, point_tasks, point_draws),
                }
            )
            curve_draws.append(point_draws)
        found.append(
            {
                "pretrained": label(pretrained),
                "from_scratch": label(scratch),
                "runs": {
                    "pretrained": [r.label for r in pretrained],
                    "from_scratch": [r.label for r in scratch],
                },
                **SETTINGS,
                "pretraining": pretraining(pretrained),
                "tasks": tasks,
                "headline": headline_mean(wanted, tasks, draws),
                "per_seed": per_seed(wanted, pretrained, scratch),
                "curve": curve,
                "trend": trend(curve, curve_draws, [task for task, _ in wanted]) if curve else None,
            }
        )
    return found


def seed_of(run) -> int | None:
    result: dict = next(iter(run.results.values()), {})
    return (result.get("finetune_config") or {}).get("seed")


def per_seed(wanted: tuple[tuple[str, str], ...], pretrained: list, scratch: list) -> list[dict]:
    """With several seeds: each seed's headline mean difference on its own (the pre-trained and from-scratch
    fine-tunes of that seed), with its interval; how much of the averaged gain one seed carries."""
    both = {seed_of(r) for r in pretrained} & {seed_of(r) for r in scratch}
    seeds = sorted(seed for seed in both if seed is not None)
    if len(seeds) < 2:
        return []
    found = []
    for seed in seeds:
        ours = [r for r in pretrained if seed_of(r) == seed]
        twin = [r for r in scratch if seed_of(r) == seed]
        tasks, draws = compare_tasks([task for task, _ in wanted], wanted, ours, twin)
        mean = headline_mean(wanted, tasks, draws)
        found.append(
            {
                "seed": seed,
                "runs": [r.label for r in ours + twin],
                **{
                    key: mean[key]
                    for key in ("difference", "low", "high", "verdict")
                    if key in mean
                },
            }
        )
    return found


def trend(curve: list[dict], draws: list[dict], headline: list[str]) -> dict:
    """How the headline mean difference changes per doubling of pre-training tokens: the least-squares slope over
    the curve's points against log2(tokens), and its interval from the slopes of the same resamples (every point
    draws the same rows of a task, so the resamples are paired across points too); `reason` when there is none."""
    if any(p["tokens"] is None for p in curve):
        return {"reason": "a point's pre-training tokens are not recorded"}
    if any(task not in point for point in draws for task in headline):
        return {"reason": "a headline task was not compared at every point"}
    x = np.log2([p["tokens"] for p in curve])
    x = (x - x.mean()) / ((x - x.mean()) @ (x - x.mean()))
    # (points, draws)
    means = np.stack([np.mean([point[task] for task in headline], axis=0) for point in draws])
    low, high = bootstrap.interval(x @ means)
    slope = float(x @ np.array([p["headline"]["difference"] for p in curve]))
    return {"per_doubling": slope, "low": low, "high": high, "verdict": verdict(low, high)}


def compare_tasks(
    names: list[str], wanted: tuple[tuple[str, str], ...], pretrained: list, scratch: list
) -> tuple[dict, dict]:
    """Each of `names` compared on its headline metric (else its primary one): (entries, the draws of those
    compared)."""
    metric_of = dict(wanted)
    tasks, draws = {}, {}
    for task in names:
        tasks[task], task_draws = compare_task(
            task, metric_of.get(task, "primary"), pretrained, scratch
        )
        if task_draws is not None:
            draws[task] = task_draws
    return tasks, draws


def curve_only(comparisons: list[dict]) -> set[str]:
    """The labels of runs that are only points of a curve (fine-tunes from fewer pre-training tokens than the run
    they are compared beside): the report shows them in the curve, not in the paper's tables."""
    return {
        name for c in comparisons for point in c.get("curve", [])[:-1] for name in point["runs"]
    }


def label(runs: list) -> str:
    return runs[0].label if len(runs) == 1 else f"{runs[0].label} ({len(runs)} seeds)"


def headline_mean(wanted: tuple[tuple[str, str], ...], tasks: dict, draws: dict) -> dict:
    """The mean over the headline tasks that were compared, with its interval; `missing`: the others."""
    compared = [task for task, _ in wanted if task in draws]
    entry = {
        "tasks": {task: metric_label(task, metric) for task, metric in wanted},
        "missing": [task for task, _ in wanted if task not in draws],
    }
    if not compared:
        return entry
    low, high = bootstrap.interval(np.mean([draws[task] for task in compared], axis=0))
    mean = {
        side: float(np.mean([tasks[task][side] for task in compared]))
        for side in ("pretrained", "from_scratch", "difference")
    }
    bars = [tasks[task].get("baseline") for task in compared]
    if None not in bars:
        mean["baseline"] = float(np.mean(bars))
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
def markdown(comparisons: Sequence[dict]) -> str:
    """The comparisons as results.md shows them, with how to read an interval."""
    parts = [
        "### Pre-trained minus from scratch (paired bootstrap, 95% interval)",
        "",
        f"Each interval resamples the evaluation rows {bootstrap.RESAMPLES:,} times (seed {SEED}) and scores "
        "both variants on the same resample. An interval above 0 is a gain that the choice of evaluation rows "
        "does not explain; one that spans 0 is a difference these rows cannot tell from none.",
    ]
    for comparison in comparisons:
        pre, scratch = comparison["pretrained"], comparison["from_scratch"]
        rows = [
            [
                f"{REGISTRY[task].title} ({entry['metric']})",
                fmt(entry["pretrained"]),
                fmt(entry["from_scratch"]),
                signed(entry["difference"]),
                f"[{signed(entry['low'])}, {signed(entry['high'])}]",
                fmt(entry.get("baseline")),
                str(entry["examples"]),
            ]
            for task, entry in comparison["tasks"].items()
            if "reason" not in entry
        ]
        mean = comparison["headline"]
        names = ", ".join(
            f"{REGISTRY[task].title} {metric}" for task, metric in mean["tasks"].items()
        )
        if "difference" in mean:
            rows.append(
                [
                    f"**headline mean** ({names})",
                    fmt(mean["pretrained"]),
                    fmt(mean["from_scratch"]),
                    f"**{signed(mean['difference'])}**",
                    f"**[{signed(mean['low'])}, {signed(mean['high'])}]**",
                    fmt(mean.get("baseline")),
                    MISSING,
                ]
            )
        parts += [
            "",
            markdown_table(
                ["Task (metric)", pre, scratch, "difference", "95% interval", "non-neural", "rows"],
                rows,
            ),
        ]
        if "verdict" in mean:
            parts += ["", VERDICT_LINES[mean["verdict"]]]
        if comparison.get("per_seed"):
            parts += ["", seeds_line(comparison["per_seed"])]
        standing = baseline_standing(comparison, pre, scratch)
        if standing:
            parts += ["", standing]
        quality = pretraining_lines(comparison["pretraining"])
        if quality:
            parts += ["", *quality]
        missing = [
            f"{REGISTRY[task].title}: {entry['reason']}"
            for task, entry in comparison["tasks"].items()
            if "reason" in entry
        ]
        if mean["missing"]:
            missing.append(
                f"headline mean without {', '.join(REGISTRY[t].title for t in mean['missing'])}"
            )
        if missing:
            parts += ["", f"Not compared ({pre} vs {scratch}): " + "; ".join(missing) + "."]
        if comparison["curve"]:
            parts += ["", curve_markdown(comparison)]
    return "\n".join(parts)


def seeds_line(seeds: list[dict]) -> str:
    cells = [
        f"seed {entry['seed']} {signed(entry['difference'])} [{signed(entry['low'])}, {signed(entry['high'])}]"
        for entry in seeds
        if "difference" in entry
    ]
    return (
        "**Per seed** (each seed's pre-trained and from-scratch fine-tunes on their own; the interval above "
        "averages them within each resample): " + "; ".join(cells) + "."
    )


def baseline_standing(comparison: dict, pre: str, scratch: str) -> str | None:
    """Where both variants stand against the non-neural baseline on the headline tasks, in words."""
    names = list(comparison["headline"]["tasks"])
    entries = {task: comparison["tasks"].get(task, {}) for task in names}
    scored = {
        task: e
        for task, e in entries.items()
        if e.get("baseline") is not None and "difference" in e
    }
    if not scored:
        return None

    def side(key: str, name: str) -> str:
        gaps = {task: e[key] - e["baseline"] for task, e in scored.items()}
        above = [f"{REGISTRY[t].title} {signed(g)}" for t, g in gaps.items() if g > 0]
        below = [f"{REGISTRY[t].title} {signed(g)}" for t, g in gaps.items() if g <= 0]
        text = f"{name} is above it on {len(above)} of {len(gaps)}"
        text += f" ({', '.join(above)})" if above else ""
        return text + (f" and below on {', '.join(below)}" if below else "")

    return (
        "**Against the non-neural baseline** (the same rows and metric; the table's column): "
        f"{side('pretrained', pre)}; {side('from_scratch', scratch)}."
    )


def pretraining_lines(found: dict) -> list[str]:
    """What the pre-trained side read and how good a language model it became, when pre-training recorded it."""
    lines = []
    corpus = found.get("corpus")
    if corpus:
        tokens = corpus["train_tokens"]
        total = max(sum(tokens.values()), 1)
        mix = ", ".join(
            f"{ORIGIN_NAMES.get(origin, origin)} {n:,} ({n / total:.0%})"
            for origin, n in tokens.items()
            if n
        )
        text = f"**Pre-training corpus**: {total:,} train tokens: {mix}"
        if corpus.get("task_text_tasks"):
            text += f" (the train rows of {', '.join(REGISTRY[t].title for t in corpus['task_text_tasks'])})"
        text += f"; {corpus['blocks_starting_a_document']:.0%} of its blocks start with a document's `_start_`."
        leak = corpus.get("leak_check")
        if leak:
            removed = leak["sentences_removed"]
            text += (
                f" Leak check: {sum(removed.values()):,} sentences removed because a dev or test file of "
                f"{', '.join(REGISTRY[t].title for t in leak['tasks'])} holds them ("
                + ", ".join(f"{ORIGIN_NAMES.get(o, o)} {n:,}" for o, n in removed.items())
                + ")."
            )
        lines.append(text)
    model = found.get("language_model")
    if model:
        ahead = model["beats_bigram_by"]
        lines.append(
            f"**Pre-training quality**: validation loss {model['val_loss']:.3f} nats/token against "
            f"{model['bigram_loss']:.3f} for an interpolated bigram and {model['unigram_loss']:.3f} for a "
            f"unigram model fitted on the same train tokens and scored on the same "
            f"{model['scored_tokens']:,} validation tokens: the language model is "
            f"{abs(ahead):.3f} nats/token {'below' if ahead > 0 else 'above'} the bigram."
        )
    return lines


ORIGIN_NAMES = {CORPUS: "books (ingest.source)", TASK_TEXT_ORIGIN: "task text"}


def curve_markdown(comparison: dict) -> str:
    """The curve as a table: per pre-trained model, its updates, tokens, headline tasks' differences and the
    headline mean with its interval and verdict."""
    names = list(comparison["headline"]["tasks"])
    rows = []
    for point in comparison["curve"]:
        mean = point["headline"]
        cells = [
            signed(point["tasks"][t]["difference"])
            if "difference" in point["tasks"].get(t, {})
            else MISSING
            for t in names
        ]
        interval = (
            f"{signed(mean['difference'])} [{signed(mean['low'])}, {signed(mean['high'])}]"
            if "difference" in mean
            else MISSING
        )
        rows.append(
            [
                point["pretrained"],
                fmt_count(point["steps"]),
                fmt_count(point["tokens"]),
                *cells,
                interval,
                mean.get("verdict", MISSING),
            ]
        )
    header = [
        "Pre-trained model",
        "updates",
        "tokens",
        *(f"{REGISTRY[t].title} ({m})" for t, m in comparison["headline"]["tasks"].items()),
        "headline mean [95% interval]",
        "verdict",
    ]
    return "\n".join(
        [
            f"#### The curve: {comparison['pretrained']} minus {comparison['from_scratch']} against "
            "pre-training tokens",
            "",
            "The same fine-tuning of the headline tasks from the models pre-training wrote on its way "
            "(pretrain.curve_steps) and at its end, each against the same from-scratch twin (0 tokens). "
            "Each row's verdict is its own interval's; among several points one may clear 0 by chance, "
            "so the curve is read by its trend.",
            "",
            markdown_table(header, rows),
            "",
            trend_line(comparison["trend"]),
        ]
    )


TREND_WORDS = {
    "gain": "it rises with more pre-training",
    "loss": "it falls with more pre-training",
    "not shown": "these points cannot tell it from flat",
}


def trend_line(found: dict) -> str:
    if "reason" in found:
        return f"No trend: {found['reason']}."
    return (
        f"**Trend**: per doubling of pre-training tokens the headline mean changes by "
        f"{signed(found['per_doubling'])} [{signed(found['low'])}, {signed(found['high'])}] (least squares "
        f"against log2 tokens, its interval from the same resamples): {TREND_WORDS[found['verdict']]}."
    )


def fmt_count(value: int | None) -> str:
    return MISSING if value is None else f"{value:,}"
