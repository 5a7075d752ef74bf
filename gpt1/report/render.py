"""The results report: our fine-tuned numbers beside the paper's, in the paper's table layout, plus a bar chart.

    gpt1 report --results runs/finetune/<key> [more runs ...] [--labels full no_aux_lm ...] --out DIR
                [--tracking-uri URI --run-id PARENT_RUN_ID]

Each results DIR is one run (a configuration or ablation): a task output folder of `gpt1 finetune` (metrics.json,
or error.json when it failed) or a folder holding such task folders (up to two levels down). Runs are labelled by
`--labels` in order, else by folder name. Writes DIR/results.md (Tables 2, 3 and 4 of the paper: one row for the
paper, one per run, one for the majority class and one for the non-neural baseline, a run's score below that
baseline marked †; Table 5 with the ablations side by side when there are several runs or any ablation; the
pre-trained minus from-scratch differences with their intervals; the baselines' methods and rows),
DIR/results.png (primary metric per task, grouped bars), DIR/results.json (everything results.md shows, in the
shape docs/tracking.md gives) and, when the runs hold a curve (fine-tunes of the models pre-training wrote at
`pretrain.curve_steps`), DIR/curve.png: the headline gain against pre-training tokens. The curve's earlier points
appear in its table and figure, not in the paper's tables. With --run-id the three files are also logged as
artifacts of that MLflow run (the pipeline's parent run) together with the numbers of `headline_metrics`.

The baselines (gpt1.report.baselines) are fitted here, on the rows each fine-tune's metrics.json records; the
comparisons (gpt1.report.comparison) are computed from the fine-tunes' predictions.

Design choices:
- The paper's numbers are test-set results (GLUE: the test server); ours are on the split each task's metrics.json
  names (dev for GLUE tasks); the split of every non-paper-split task is listed under the tables.
- "GLUE" for our runs is `metrics.glue_score`, the paper's Table 5 "Avg. Score" (mean primary metric of the 8 GLUE
  tasks; the paper's own 74.7); the paper row of Table 4 shows its GLUE server score 72.8, which counts WNLI and
  cannot be recomputed. A run missing any of the 8 tasks has no GLUE average ("—").
- A missing task is "—"; a failed one (its error.json newer than any metrics.json) is "failed" and its error is
  listed. The baseline rows are taken from the first run that has the task; each run's mark † compares it with
  the baseline on its own rows (runs of one report normally read the same ones).
- The tables' columns, the paper's numbers and the Table 5 ablation values come from the task specs
  (`TaskSpec.table`, `table_columns`, `paper`, `ablation_column`, `paper_ablations`); the per-task ablation
  values' means reproduce `metrics.PAPER_AVERAGES` (checked in the tests).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpt1.io import atomic_path, read_json, write_json, write_text
from gpt1.report import baselines, comparison
from gpt1.report.markdown import MISSING, fmt, markdown_table
from gpt1.stages.outputs import read_marker
from gpt1.tasks import REGISTRY, metrics

log = logging.getLogger(__name__)

METRICS_FILE, ERROR_FILE = "metrics.json", "error.json"
FAILED = "failed"
BELOW = " †"  # the mark of a score below its non-neural baseline
REPORT_MD, REPORT_PNG, REPORT_JSON = "results.md", "results.png", "results.json"
CURVE_PNG = "curve.png"  # the headline gain against pre-training tokens, when the runs hold a curve

GLUE = "glue"  # the GLUE average's pseudo-task in the tables: `metrics.glue_score` for runs
TABLE_TITLES = {
    2: "Table 2: natural language inference",
    3: "Table 3: question answering and commonsense reasoning",
    4: "Table 4: semantic similarity and classification",
}
GLUE_TABLE = 4


def tables() -> tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...]:
    """The paper's tables: (title, ((column header, task, metric key of `metrics.compute`), ...)), from the specs;
    tasks the paper does not report (`TaskSpec.table` None) get a table of their own."""
    found = []
    for number, title in (*TABLE_TITLES.items(), (None, "Other tasks (not in the paper)")):
        specs = sorted(
            (s for s in REGISTRY.values() if s.table == number), key=lambda s: s.table_order
        )
        columns = [(c.header, s.name, c.metric) for s in specs for c in s.report_columns]
        if number == GLUE_TABLE:
            columns.append(("GLUE", GLUE, "primary"))
        if columns:
            found.append((title, tuple(columns)))
    return tuple(found)


# Table 5 columns: the GLUE tasks' primary metrics (MNLI: mean of matched and mismatched); TaskSpec requires
# a column header of every GLUE task.
ABLATION_COLUMNS = tuple(
    (s.ablation_column, s.name)
    for s in REGISTRY.values()
    if s.glue and s.ablation_column is not None
)
# Paper Table 5 rows of the two ablations the pipeline runs ("full" is the specs' primary numbers).
ABLATIONS = ("no_pretrain", "no_aux_lm")
PAPER_ABLATIONS = {
    setting: {s.name: s.paper_ablations[setting] for s in REGISTRY.values() if s.glue}
    for setting in ABLATIONS
}
ABLATION_TITLES = {
    "full": "Transformer w/ aux LM (full)",
    "no_pretrain": "Transformer w/o pre-training",
    "no_aux_lm": "Transformer w/o aux LM",
}


@dataclass
class Run:
    """One results folder: per task, its metrics.json (or the error that stopped it)."""

    label: str
    path: Path
    results: dict[str, dict] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # task -> the folder its result was read from
    dirs: dict[str, Path] = field(default_factory=dict)
    # task -> the non-neural baseline on its rows
    baselines: dict[str, dict] = field(default_factory=dict)

    def value(self, task: str, key: str) -> float | None:
        if task == GLUE:
            return self.glue_score()
        return self.results.get(task, {}).get("metrics", {}).get(key)

    def majority(self, task: str, key: str) -> float | None:
        if task == GLUE:
            return _glue({t: r.get("majority", {}) for t, r in self.results.items()})
        return self.results.get(task, {}).get("majority", {}).get(key)

    def baseline(self, task: str, key: str) -> float | None:
        """The non-neural baseline on this run's rows of the task (its GLUE average for GLUE)."""
        if task == GLUE:
            return _glue({t: b.get("metrics", {}) for t, b in self.baselines.items()})
        return self.baselines.get(task, {}).get("metrics", {}).get(key)

    def below_baseline(self, task: str, key: str) -> bool | None:
        value, bar = self.value(task, key), self.baseline(task, key)
        return None if value is None or bar is None else value < bar

    def glue_score(self) -> float | None:
        """The GLUE average; none when a GLUE task is missing or was scored on its training rows."""
        return _glue(
            {
                t: r.get("metrics", {})
                for t, r in self.results.items()
                if not r.get("eval_on_training_rows")
            }
        )

    def cell(self, task: str, key: str) -> str:
        if task in self.errors:
            return FAILED
        return fmt(self.value(task, key)) + (BELOW if self.below_baseline(task, key) else "")

    @property
    def ablation(self) -> str:
        settings = sorted({r.get("ablation", "full") for r in self.results.values()})
        return "/".join(settings) or MISSING


def _glue(per_task: dict[str, dict]) -> float | None:
    if not all("primary" in per_task.get(t, {}) for t in metrics.GLUE_TASKS):
        return None
    return metrics.glue_score(per_task)


# -- reading --------------------------------------------------------------------------------------------------
def is_task_dir(path: Path) -> bool:
    return (path / METRICS_FILE).is_file() or (path / ERROR_FILE).is_file()


def task_of(path: Path) -> str:
    """The task a task folder holds, by its path: `<task>` or the pipeline's `<task>/<data key>` (an error.json,
    unlike metrics.json, does not name its task)."""
    return next((part for part in reversed(path.parts) if part in REGISTRY), path.name)


def task_dirs(root: Path, only: Sequence[str] | None = None) -> list[Path]:
    """`root` itself when it is a task folder, else the task folders one or two levels below it; with `only`, those
    of its folders (relative paths) that hold a result."""
    if only is not None:
        return [root / name for name in only if is_task_dir(root / name)]
    if is_task_dir(root):
        return [root]
    found = [p for p in sorted(root.glob("*")) if p.is_dir() and is_task_dir(p)]
    return found or [p for p in sorted(root.glob("*/*")) if p.is_dir() and is_task_dir(p)]


def read_run(root: str | os.PathLike, label: str, only: Sequence[str] | None = None) -> Run:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist")
    dirs = task_dirs(root, only)
    if not dirs:
        raise FileNotFoundError(
            f"{root}: no task results ({METRICS_FILE} or {ERROR_FILE}) in it or its sub-folders"
        )
    run = Run(label, root)
    for path in dirs:
        done, failed = path / METRICS_FILE, path / ERROR_FILE
        if failed.is_file() and (
            not done.is_file() or failed.stat().st_mtime >= done.stat().st_mtime
        ):
            error = read_json(failed)
            run.errors[error.get("task", task_of(path))] = error.get("error", "unknown error")
            continue
        result = read_json(done)
        task = result.get("task", task_of(path))
        if task not in REGISTRY:
            log.warning("%s: unknown task %r, skipped", done, task)
            continue
        if task in run.results:
            log.warning("%s: a second result for %s in %s, ignored", done, task, root)
            continue
        # the whole stage, as it measured it
        result["wall_seconds"] = (read_marker(path) or {}).get("seconds")
        result["peak_rss_mb"] = (result.get("train") or {}).get("peak_rss_mb")
        run.results[task] = result
        run.dirs[task] = path
    return run


def read_runs(
    paths: list[str | os.PathLike],
    labels: list[str] | None = None,
    tasks: Sequence[Sequence[str]] | None = None,
) -> list[Run]:
    """Each results folder as a run; `tasks`: per folder, the task folders to read (default: all there are)."""
    if labels and len(labels) != len(paths):
        raise ValueError(f"--labels: {len(labels)} labels for {len(paths)} results folders")
    runs, seen = [], set()
    for i, path in enumerate(paths):
        path = Path(path)
        label = labels[i] if labels else (path.parent.name if is_task_dir(path) else path.name)
        while (
            label in seen
        ):  # the same folder name twice (e.g. two `.../full`): keep both, distinguishable
            label += "'"
        seen.add(label)
        runs.append(read_run(path, label, tasks[i] if tasks else None))
    return runs


# -- rendering ------------------------------------------------------------------------------------------------
def paper_value(task: str, key: str) -> float | None:
    return metrics.PAPER_RESULTS.get(task, {}).get(key)


def first_majority(runs: list[Run], task: str, key: str) -> float | None:
    return next((v for v in (r.majority(task, key) for r in runs) if v is not None), None)


def first_baseline(runs: list[Run], task: str, key: str) -> float | None:
    return next((v for v in (r.baseline(task, key) for r in runs) if v is not None), None)


def score_baselines(runs: list[Run]) -> None:
    """Each run's non-neural baseline per task, on the rows its fine-tune read; runs that read the same rows share
    one fit."""
    scored: dict[baselines.Rows, dict] = {}
    for run in runs:
        for task, result in run.results.items():
            try:
                rows = baselines.Rows.of(result)
            except KeyError as err:
                run.baselines[task] = {
                    "error": f"its metrics.json does not say which rows it read (no {err})"
                }
                continue
            if rows not in scored:
                scored[rows] = _baseline(rows)
            run.baselines[task] = scored[rows]


def _baseline(rows: baselines.Rows) -> dict:
    try:
        outcome = baselines.score(rows)
    except Exception as err:  # noqa: BLE001 - a baseline that cannot be made is a note, never a missing report
        log.warning("%s: no non-neural baseline: %s: %s", rows.task, type(err).__name__, err)
        return {"error": f"{type(err).__name__}: {err}"}
    log.info(
        "%s: non-neural baseline %.2f (%s; %d train rows, %s: %d rows, %.1fs)",
        rows.task,
        outcome["metrics"]["primary"],
        outcome["method"],
        outcome["train_rows"],
        outcome["eval_split"],
        outcome["eval_rows"],
        outcome["seconds"],
    )
    return outcome


def paper_tables(runs: list[Run]) -> str:
    parts = []
    for title, columns in tables():
        header = ["Method"] + [name for name, _, _ in columns]
        rows = [["GPT-1 (paper)"] + [fmt(paper_value(t, k)) for _, t, k in columns]]
        rows += [[f"ours: {run.label}"] + [run.cell(t, k) for _, t, k in columns] for run in runs]
        rows.append(["majority class"] + [fmt(first_majority(runs, t, k)) for _, t, k in columns])
        rows.append(
            ["non-neural baseline"] + [fmt(first_baseline(runs, t, k)) for _, t, k in columns]
        )
        parts.append(f"### {title}\n\n{markdown_table(header, rows)}")
    if any(r.below_baseline(t, k) for r in runs for _, columns in tables() for _, t, k in columns):
        parts.append(
            f'{BELOW.strip()} below the non-neural baseline of its task (the row "non-neural baseline": '
            "trained on the fine-tune's own train rows and scored on its rows; see Baselines)."
        )
    return "\n\n".join(parts)


def ablation_table(runs: list[Run]) -> str:
    header = ["Method", "Avg. Score"] + [name for name, _ in ABLATION_COLUMNS]
    full = {t: paper_value(t, "primary") for _, t in ABLATION_COLUMNS}
    rows = []
    paper: list[tuple[str, Mapping[str, float | None]]] = [("full", full), *PAPER_ABLATIONS.items()]
    for setting, values in paper:
        rows.append(
            [f"paper: {ABLATION_TITLES[setting]}", fmt(metrics.PAPER_AVERAGES[setting])]
            + [fmt(values[t]) for _, t in ABLATION_COLUMNS]
        )
    for run in runs:
        rows.append(
            [f"ours: {run.label} ({run.ablation})", fmt(run.glue_score())]
            + [run.cell(t, "primary") for _, t in ABLATION_COLUMNS]
        )
    for name, first in (
        ("majority class", first_majority),
        ("non-neural baseline", first_baseline),
    ):
        rows.append(
            [name, fmt(first(runs, GLUE, "primary"))]
            + [fmt(first(runs, t, "primary")) for _, t in ABLATION_COLUMNS]
        )
    return f"### Table 5: ablations (GLUE tasks, primary metric)\n\n{markdown_table(header, rows)}"


def notes(runs: list[Run]) -> list[str]:
    out = []
    missing: dict[str, str] = {}
    for run in runs:
        for task, outcome in run.baselines.items():
            if "error" in outcome:
                missing.setdefault(task, outcome["error"])
    out += [f"{task}: no non-neural baseline ({error})" for task, error in sorted(missing.items())]
    for run in runs:
        for task, result in sorted(run.results.items()):
            split, paper_split = result.get("eval_split"), REGISTRY[task].eval_splits[0]
            if result.get("eval_on_training_rows"):
                out.append(
                    f"{run.label}/{task}: SCORED ON TRAINING ROWS (--allow-eval-on-train): not a result"
                )
            if split and split != paper_split:
                out.append(f"{run.label}/{task}: scored on {split} (the paper: {paper_split})")
    return out


def scored_rows_table(runs: list[Run]) -> str:
    """Which rows each score was computed on: split and number of examples (metrics.json `evaluated_on`)."""
    tasks_run = sorted({t for r in runs for t in r.results}, key=lambda t: list(REGISTRY).index(t))

    def cell(result: dict) -> str:
        rows = result.get("evaluated_on")
        if not rows:
            return MISSING
        if result.get("eval_on_training_rows"):
            return f"{rows['split']}: {rows['rows']} (training rows)"
        overlap = f" ({rows['training_rows']} also in train)" if rows.get("training_rows") else ""
        return f"{rows['split']}: {rows['rows']}{overlap}"

    table = [[f"ours: {r.label}", *(cell(r.results.get(t, {})) for t in tasks_run)] for r in runs]
    return "### Rows scored (split: examples)\n\n" + markdown_table(
        ["Run", *(REGISTRY[t].title for t in tasks_run)], table
    )


def baselines_table(runs: list[Run]) -> str:
    """Per task, the baselines of the tables: the majority class and the non-neural method, with the rows it learnt
    from and the rows it was scored on (the first run's that has the task)."""
    rows = []
    for task in sorted({t for r in runs for t in r.results}, key=list(REGISTRY).index):
        outcome = next((r.baselines[task] for r in runs if task in r.baselines), {})
        rows.append(
            [
                REGISTRY[task].title,
                fmt(first_majority(runs, task, "primary")),
                fmt(outcome.get("metrics", {}).get("primary")),
                outcome.get("method", MISSING),
                str(outcome.get("train_rows", MISSING)),
                f"{outcome['eval_split']}: {outcome['eval_rows']}"
                if "eval_rows" in outcome
                else MISSING,
            ]
        )
    return "### Baselines (primary metric)\n\n" + markdown_table(
        ["Task", "majority class", "non-neural", "method", "train rows", "rows scored"], rows
    )


def per_task_table(runs: list[Run], field: str, title: str) -> str:
    """One number per fine-tune: `wall_seconds` (the stage's own measure: loading, training, evaluation, outputs)
    or `peak_rss_mb` (the fine-tune's own peak resident memory)."""
    tasks_run = sorted({t for r in runs for t in r.results}, key=lambda t: list(REGISTRY).index(t))
    rows = [
        [
            f"ours: {r.label}",
            *(
                f"{r.results[t][field]:.0f}" if r.results.get(t, {}).get(field) else MISSING
                for t in tasks_run
            ),
        ]
        for r in runs
    ]
    return f"### {title}\n\n" + markdown_table(
        ["Run", *(REGISTRY[t].title for t in tasks_run)], rows
    )


SAMPLE_DATA_NOTE = (
    "**Generated sample data**: easy by construction, so these numbers show the mechanism (pre-trained "
    "above from-scratch), not the paper's. Real text and the complete GLUE files: the `gpt1/mini` "
    "deployment (`python scripts/watch_run.py gpt1/mini`, docs/mini.md); the paper's recipe: "
    "`prefect deployment run gpt1/full` on a GPU cluster (docs/cluster.md)."
)


def on_sample_data(runs: list[Run]) -> bool:
    """Whether every task result was fine-tuned on the generated sample data (its folder under a `gpt1 sample-data`
    output, which holds sample_data.json)."""
    paths = [
        Path(result["data"]["path"])
        for run in runs
        for result in run.results.values()
        if isinstance(result.get("data"), dict) and result["data"].get("path")
    ]
    return bool(paths) and all(
        any((parent / "sample_data.json").is_file() for parent in path.parents[:3])
        for path in paths
    )


def render_markdown(
    runs: list[Run], not_run: dict[str, str] | None = None, comparisons: Sequence[dict] = ()
) -> str:
    sample = on_sample_data(runs)
    text = [
        "# GPT-1 fine-tuning results" + (" on generated sample data" if sample else ""),
        "",
        *([SAMPLE_DATA_NOTE, ""] if sample else []),
        "Paper: Radford et al. (2018), test-set numbers. Ours: the evaluation split of each task's metrics.json "
        "(dev for the GLUE tasks, whose test labels are hidden). GLUE for our runs is the mean primary metric "
        'of the 8 GLUE tasks (the paper\'s Table 5 "Avg. Score", 74.7 for GPT-1); the paper row shows its GLUE '
        "server score. — = not run, failed = see Errors.",
        "",
        "Runs: " + ", ".join(f"`{r.label}` ({r.path})" for r in runs),
        "",
        paper_tables(runs),
    ]
    if len(runs) > 1 or any(r.ablation not in ("full", MISSING) for r in runs):
        text += ["", ablation_table(runs)]
    if comparisons:
        text += ["", comparison.markdown(comparisons)]
    if any(r.results for r in runs):
        text += [
            "",
            baselines_table(runs),
            "",
            scored_rows_table(runs),
            "",
            per_task_table(runs, "wall_seconds", "Fine-tune wall time (s)"),
            "",
            per_task_table(runs, "peak_rss_mb", "Fine-tune peak RSS (MB)"),
        ]
    if not_run:
        text += ["", "### Not run", ""] + [
            f"- {REGISTRY[t].title}: {why}" for t, why in sorted(not_run.items())
        ]
    extra = notes(runs)
    if extra:
        text += ["", "### Notes", ""] + [f"- {n}" for n in extra]
    errors = [(r.label, t, e) for r in runs for t, e in sorted(r.errors.items())]
    if errors:
        text += ["", "### Errors", ""] + [
            f"- {label}/{task}: {error}" for label, task, error in errors
        ]
    return "\n".join(text) + "\n"


def plot(fig, path: Path) -> Path:
    """Write a figure as a PNG (atomically) and close it."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return path


def results_figure(runs: list[Run]):
    """Horizontal grouped bars, one group per table column our runs have (every column when none has any): the
    paper, each run, the majority class and the non-neural baseline, each bar labelled with its value, so a zero or
    negative score is a visible number and a missing one reads "not run" or "failed". 750 px wide (MLflow's
    artifact viewer scales a wider image down to its pane, ~600 px) and as tall as the groups need, so its text
    stays readable there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_columns = [c for _, cols in tables() for c in cols]
    ours = [
        c
        for c in all_columns
        if any(r.value(c[1], c[2]) is not None or c[1] in r.errors for r in runs)
    ]
    columns = ours or all_columns
    # (name, value per column, what a column without a value says: None leaves it blank)
    series: list[tuple[str, list[float | None], list[str | None]]] = [
        ("GPT-1 (paper)", [paper_value(t, k) for _, t, k in columns], [None] * len(columns))
    ]
    series += [
        (
            f"ours: {r.label}",
            [r.value(t, k) for _, t, k in columns],
            [FAILED if t in r.errors else "not run" for _, t, _ in columns],
        )
        for r in runs
    ]
    series.append(
        (
            "majority class",
            [first_majority(runs, t, k) for _, t, k in columns],
            [None] * len(columns),
        )
    )
    series.append(
        (
            "non-neural baseline",
            [first_baseline(runs, t, k) for _, t, k in columns],
            [None] * len(columns),
        )
    )
    colors = ["#9e9e9e", *matplotlib.color_sequences["tab10"][: len(runs)], "#d9d9d9", "#d8b365"]

    bar, gap = 0.32, 0.45  # inches per bar and between groups
    group = bar * len(series) + gap
    fig, ax = plt.subplots(figsize=(7.5, 1.6 + group * len(columns)), dpi=100, layout="constrained")
    values = [v for _, vals, _ in series for v in vals if v is not None]
    low, high = min([0.0, *values]), max([100.0, *values])
    for g in range(len(columns)):
        for i, (label, vals, missing) in enumerate(series):
            y = g * group / bar + i  # in bar units, top to bottom
            value = vals[g]
            if value is None:
                if missing[g]:
                    ax.text(
                        0, y, f" {missing[g]}", va="center", ha="left", fontsize=10, color="#555555"
                    )
                continue
            ax.barh(y, value, height=0.85, color=colors[i], label=label if g == 0 else None)
            # shows a zero too
            ax.plot([0], [y], marker="|", markersize=11, markeredgewidth=3, color=colors[i])
            ax.text(
                value,
                y,
                f" {value:.1f} ",
                va="center",
                ha="left" if value >= 0 else "right",
                fontsize=10,
            )
    centers = [g * group / bar + (len(series) - 1) / 2 for g in range(len(columns))]
    ax.set_yticks(centers, [name for name, _, _ in columns], fontsize=11)
    # top to bottom, no empty margins
    ax.set_ylim((len(columns) - 1) * group / bar + len(series) - 0.4, -0.6)
    # room for the value labels and the zero marks
    ax.set_xlim(low - (18 if low < 0 else 3), high + 15)
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_xlabel("score (%; MCC and Pearson x 100)", fontsize=11)
    # The title heads the legend, above the bars: constrained layout makes room for one block there (a suptitle
    # beside an axes legend was drawn over it).
    fig.legend(
        fontsize=10,
        loc="outside upper center",
        ncols=min(len(series), 3),
        frameon=False,
        title="GPT-1 fine-tuning: ours vs the paper",
        title_fontsize=13,
    )
    ax.grid(axis="x", alpha=0.3)
    return fig


def curve_figure(compared: dict):
    """The headline mean difference (with its 95% interval) and each headline task's difference against
    pre-training tokens, from the from-scratch twin at 0 tokens to the final model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [
        p for p in compared["curve"] if p["tokens"] is not None and "difference" in p["headline"]
    ]
    tokens = [0.0] + [p["tokens"] / 1e6 for p in points]
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100, layout="constrained")
    for task, metric in compared["headline"]["tasks"].items():
        values = [0.0] + [p["tasks"].get(task, {}).get("difference", float("nan")) for p in points]
        ax.plot(
            tokens,
            values,
            marker=".",
            linewidth=1,
            alpha=0.6,
            label=f"{REGISTRY[task].title} ({metric})",
        )
    mean = [0.0] + [p["headline"]["difference"] for p in points]
    below = [0.0] + [p["headline"]["difference"] - p["headline"]["low"] for p in points]
    above = [0.0] + [p["headline"]["high"] - p["headline"]["difference"] for p in points]
    ax.errorbar(
        tokens,
        mean,
        yerr=[below, above],
        color="black",
        marker="o",
        linewidth=2,
        capsize=4,
        label="headline mean, 95% interval",
    )
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("pre-training tokens (millions)", fontsize=11)
    ax.set_ylabel(f"{compared['pretrained']} minus {compared['from_scratch']}", fontsize=11)
    ax.set_title("Pre-trained minus from scratch against pre-training tokens", fontsize=13)
    slope = compared.get("trend") or {}
    if "per_doubling" in slope:
        ax.text(
            0.99,
            0.02,
            f"headline mean per doubling of tokens: {slope['per_doubling']:+.1f} "
            f"[{slope['low']:+.1f}, {slope['high']:+.1f}]",
            transform=ax.transAxes,
            ha="right",
            fontsize=9,
        )
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    return fig


def summary(
    runs: list[Run], not_run: dict[str, str] | None = None, comparisons: Sequence[dict] = ()
) -> dict:
    """results.json: what the tables show, the baselines and the comparisons (docs/tracking.md has its shape)."""
    tasks_run = {t for r in runs for t in r.baselines}
    return {
        "runs": {
            r.label: {
                "path": str(r.path),
                "ablation": r.ablation,
                "glue_score": r.glue_score(),
                "tasks": {
                    t: {
                        "metrics": res.get("metrics"),
                        "majority": res.get("majority"),
                        "below_baseline": r.below_baseline(t, "primary"),
                        "eval_split": res.get("eval_split"),
                        "evaluated_on": res.get("evaluated_on"),
                        "eval_on_training_rows": res.get("eval_on_training_rows", False),
                        "wall_seconds": res.get("wall_seconds"),
                        "peak_rss_mb": res.get("peak_rss_mb"),
                    }
                    for t, res in sorted(r.results.items())
                },
                "errors": r.errors,
            }
            for r in runs
        },
        "baselines": {
            t: next(r.baselines[t] for r in runs if t in r.baselines) for t in sorted(tasks_run)
        },
        "comparisons": list(comparisons),
        "paper": metrics.PAPER_RESULTS,
        "paper_ablations": PAPER_ABLATIONS,
        "paper_averages": metrics.PAPER_AVERAGES,
        "not_run": not_run or {},
    }


def build_report(
    results: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    labels: list[str] | None = None,
    *,
    not_run: dict[str, str] | None = None,
    headline: tuple[tuple[str, str], ...] | None = None,
    tasks: Sequence[Sequence[str]] | None = None,
) -> dict[str, Path]:
    """Write results.md, results.png and results.json to `out_dir`; returns their paths.
    `not_run`: tasks left out on purpose (e.g. no files found) and why, listed apart from failures.
    `headline`: the (task, metric) pairs whose mean difference is the comparison's headline (None: every task).
    `tasks`: per results folder, the task folders to read (None: every one found)."""
    runs = read_runs(list(results), labels, tasks)
    score_baselines(runs)
    comparisons = comparison.compare(runs, headline)
    # the curve shows the rest
    shown = [run for run in runs if run.label not in comparison.curve_only(comparisons)]
    out_dir = Path(out_dir)
    files = {
        "markdown": write_text(out_dir / REPORT_MD, render_markdown(shown, not_run, comparisons)),
        "plot": plot(results_figure(shown), out_dir / REPORT_PNG),
        "json": write_json(out_dir / REPORT_JSON, summary(runs, not_run, comparisons)),
    }
    curves = [c for c in comparisons if c["curve"]]
    if curves:  # one: only the full run has fine-tunes from earlier models of its pre-training
        files["curve"] = plot(curve_figure(curves[0]), out_dir / CURVE_PNG)
    for run in runs:
        log.info(
            "%s: %d tasks, %d failed, GLUE average %s",
            run.label,
            len(run.results),
            len(run.errors),
            fmt(run.glue_score()),
        )
    return files


def headline_metrics(results_json: dict) -> dict[str, float]:
    """The report's numbers as MLflow metrics named alike in every run, so the compare view lines up runs and
    ablation deployments: `task/<task>/<metric>` and `glue_score`, prefixed `<variant>/` for an ablation; the
    non-neural baselines as `baseline/task/<task>/<metric>`; each comparison's differences as
    `gain/task/<task>/<metric>` and `gain/headline_mean`, each with `/low` and `/high` (its 95% interval), each
    seed's `gain/headline_mean/seed_<S>`, and its pre-training's `lm/val_loss` beside `lm/bigram_loss` and
    `lm/unigram_loss`, prefixed `<variant>/` when the pre-trained side is an ablation."""
    found: dict[str, float] = {}
    for task, outcome in results_json.get("baselines", {}).items():
        found.update(
            {
                f"baseline/task/{task}/{name}": value
                for name, value in outcome.get("metrics", {}).items()
            }
        )
    for compared in results_json.get("comparisons", []):
        first = compared["runs"]["pretrained"][0]
        prefix = "" if first == "full" else f"{first}/"
        entries = [
            (f"task/{task}/{e['metric']}", e)
            for task, e in compared["tasks"].items()
            if "difference" in e
        ]
        if "difference" in compared["headline"]:
            entries.append(("headline_mean", compared["headline"]))
        for name, entry in entries:
            found.update(
                {
                    f"{prefix}gain/{name}": entry["difference"],
                    f"{prefix}gain/{name}/low": entry["low"],
                    f"{prefix}gain/{name}/high": entry["high"],
                }
            )
        model = (compared.get("pretraining") or {}).get("language_model") or {}
        found.update(
            {
                f"{prefix}lm/{name}": model[name]
                for name in ("val_loss", "bigram_loss", "unigram_loss", "beats_bigram_by")
                if name in model
            }
        )
        for seed in compared.get("per_seed", []):
            if "difference" in seed:
                found[f"{prefix}gain/headline_mean/seed_{seed['seed']}"] = seed["difference"]
        slope = compared.get("trend") or {}
        if "per_doubling" in slope:
            found.update(
                {
                    f"{prefix}gain/headline_mean_per_doubling{end}": slope[key]
                    for end, key in (("", "per_doubling"), ("/low", "low"), ("/high", "high"))
                }
            )
    for variant, result in results_json["runs"].items():
        prefix = "" if variant == "full" else f"{variant}/"
        for task, entry in result.get("tasks", {}).items():
            for name, value in (entry.get("metrics") or {}).items():
                if isinstance(value, (int, float)):
                    found[f"{prefix}task/{task}/{name}"] = value
        if result.get("glue_score") is not None:
            found[f"{prefix}glue_score"] = result["glue_score"]
    return found


def log_to_run(out_dir: str | os.PathLike, run_id: str, tracking_uri: str | None) -> None:
    """A written report on an MLflow run (the pipeline's parent): its files under `report/` and its headline
    metrics. The run's owner ends it."""
    from gpt1.tracking.logger import RunLogger

    out_dir = Path(out_dir)
    parent = RunLogger("report", uri=tracking_uri, run_id=run_id)
    for name in (REPORT_MD, REPORT_PNG, REPORT_JSON, CURVE_PNG):
        if (out_dir / name).is_file():
            parent.log_artifact(out_dir / name, "report")
    report = read_json(out_dir / REPORT_JSON)
    parent.log_metrics(headline_metrics(report))
    for compared in report.get("comparisons", [])[
        :1
    ]:  # the full run's curve: MLflow draws it against updates
        for point in compared.get("curve", []):
            if point["steps"] is not None and "difference" in point["headline"]:
                parent.log_metrics(
                    {
                        f"curve/gain/headline_mean{end}": point["headline"][key]
                        for end, key in (("", "difference"), ("/low", "low"), ("/high", "high"))
                    },
                    step=point["steps"],
                )
    if not parent.flush():
        log.warning(
            "report not (fully) logged to MLflow run %s: tracking server unreachable", run_id
        )
