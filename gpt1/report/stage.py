"""Stage `report`: the results table beside the paper's numbers (markdown + PNG + JSON), from task outputs.

    gpt1 report --results DIR... [--labels L...] [--headline TASK[:METRIC]...] --out DIR
                [--tracking-uri URI --run-id PARENT_RUN_ID]

Each results DIR is one run (a configuration or an ablation): a task output folder of `gpt1 finetune`, or a folder
holding such task folders. The key hashes the task outputs' own keys (or their errors), the headline tasks and
the settings of the baselines and of the bootstrap: the fine-tunes' keys hash their data and their train and
evaluation caps, so a changed train file or cap redoes the report and its baselines, which read the rows the
fine-tunes recorded. render.py beside it writes the files.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpt1.config import headline_metric
from gpt1.io import stable_hash
from gpt1.report import baselines, comparison
from gpt1.report.render import build_report, log_to_run, task_dirs
from gpt1.stages.base import Result, StageJob, add_output_args, run_from_args
from gpt1.stages.outputs import ERROR, read_marker


def results_key(path: Path, only: tuple[str, ...] | None = None) -> str | None:
    """A results folder (`only`: those of its task folders) keyed by its task outputs' markers (or errors), not by
    hashing their models' bytes; None while the folder does not exist (a variant none of whose tasks has
    started)."""
    if not path.is_dir():
        return None
    state = []
    for task_dir in task_dirs(path, only):
        marker = read_marker(task_dir)
        error = task_dir / ERROR
        state.append(
            (
                task_dir.relative_to(path).as_posix(),
                marker.get("key") if marker else None,
                error.stat().st_mtime if error.is_file() else None,
            )
        )
    return stable_hash(state)


@dataclass(frozen=True)
class Job(StageJob):
    """The report of `results` (folders of task outputs, one per run), keyed by what they hold when it runs."""

    stage: ClassVar[str] = "report"
    summary: ClassVar[str] = "results table beside the paper's numbers (markdown + PNG)"
    section: ClassVar[str] = "report"
    retries: ClassVar[int] = 1
    logs_itself: ClassVar[bool] = True
    after_failures: ClassVar[bool] = True
    mode: ClassVar[str] = "restart"  # MLflow uploads (and retries) the files from their final place
    results: tuple[Path, ...]
    labels: tuple[str, ...] | None = None
    not_run: tuple[tuple[str, str], ...] = ()  # (task, why) left out on purpose
    headline: tuple[tuple[str, str], ...] | None = (
        None  # (task, metric) of the headline mean; None: every task
    )
    parent_run_id: str | None = None
    tracking_uri: str | None = None
    # per results folder, the task folders it reads (relative); None: every one it holds
    tasks: tuple[tuple[str, ...], ...] | None = None

    def identity(self) -> dict:
        only = self.tasks or [None] * len(self.results)
        return {
            "results": [results_key(path, names) for path, names in zip(self.results, only)],
            "labels": self.labels,
            "not_run": self.not_run,
            "headline": self.headline,
            "baselines": baselines.SETTINGS,
            "bootstrap": comparison.SETTINGS,
        }

    def input_paths(self) -> dict[str, str]:
        return {f"results[{i}]": str(path) for i, path in enumerate(self.results)}

    def check(self, out: Path) -> None:
        missing = [str(path) for path in self.results if not path.is_dir()]
        if len(missing) == len(self.results):
            raise FileNotFoundError(f"no results to report: {', '.join(missing)} do not exist")

    def build(self, out: Path) -> dict:
        ran = [i for i, path in enumerate(self.results) if path.is_dir()]
        files = build_report(
            [self.results[i] for i in ran],
            out,
            [self.labels[i] for i in ran] if self.labels else None,
            not_run=dict(self.not_run),
            headline=self.headline,
            tasks=[self.tasks[i] for i in ran] if self.tasks else None,
        )
        if self.parent_run_id:
            log_to_run(out, self.parent_run_id, self.tracking_uri)
        return {"files": {kind: path.name for kind, path in files.items()}}

    def log_reuse(self, result: Result, parent_run_id: str | None) -> None:
        """Found finished by an earlier run: its files and headline metrics on this run's parent too."""
        if parent_run_id and result.cached:
            log_to_run(result.path, parent_run_id, self.tracking_uri)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        required=True,
        nargs="+",
        type=Path,
        metavar="DIR",
        help="results folders: one per run (a task folder or a folder of task folders)",
    )
    parser.add_argument(
        "--labels",
        "--label",
        nargs="+",
        metavar="LABEL",
        help="a name per results folder, in order (default: folder names)",
    )
    parser.add_argument(
        "--headline",
        nargs="+",
        metavar="TASK[:METRIC]",
        help="the tasks of the headline mean pre-trained minus from-scratch difference, e.g. stsb "
        "sst2 mrpc:accuracy (default: every task; the config's report.headline_tasks)",
    )
    parser.add_argument("--out", required=True, type=Path, help="where results.md/png/json go")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI of --run-id")
    parser.add_argument(
        "--run-id", help="MLflow run (the pipeline's parent run) to log the report to"
    )
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    for path in args.results:
        if not path.is_dir():
            raise FileNotFoundError(f"results folder {path} does not exist")
    if args.labels and len(args.labels) != len(args.results):
        raise ValueError(
            f"--labels: {len(args.labels)} labels for {len(args.results)} results folders"
        )
    headline = tuple(headline_metric(item) for item in args.headline) if args.headline else None
    job = Job(
        tuple(path.absolute() for path in args.results),
        tuple(args.labels) if args.labels else None,
        headline=headline,
        parent_run_id=args.run_id,
        tracking_uri=args.tracking_uri,
    )
    result = run_from_args(job, args)
    markdown = result.path / result.marker["files"]["markdown"]
    print(markdown.read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(result.path / name) for name in result.marker["files"].values()))
    return 0
