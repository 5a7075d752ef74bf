"""Stage `report`: the results table beside the paper's numbers (markdown + PNG + JSON), from task outputs.

    gpt1 report --results DIR... [--labels L...] --out DIR [--tracking-uri URI --run-id PARENT_RUN_ID]

Each results DIR is one run (a configuration or an ablation): a task output folder of `gpt1 finetune`, or a folder
holding such task folders. The key hashes the task outputs' own keys (or their errors), so the report is redone
exactly when a result changed; gpt1.report renders it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpt1.io import stable_hash
from gpt1.report.render import build_report, task_dirs
from gpt1.stages.base import Ref, StageJob, add_output_args, run_from_args
from gpt1.stages.outputs import ERROR, read_marker

COMMAND, SUMMARY = "report", "results table beside the paper's numbers (markdown + PNG)"


def results_ref(path: str | Path) -> Ref:
    """A results folder keyed by its task outputs' markers (or errors), not by hashing their models' bytes."""
    path = Path(path).absolute()
    if not path.is_dir():
        raise FileNotFoundError(f"results folder {path} does not exist")
    state = []
    for task_dir in task_dirs(path):
        marker = read_marker(task_dir)
        error = task_dir / ERROR
        state.append((task_dir.name, marker.get("key") if marker else None,
                      error.stat().st_mtime if error.is_file() else None))
    return Ref(path, stable_hash(state))


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "report"
    mode: ClassVar[str] = "restart"  # MLflow uploads (and retries) the files from their final place
    results: tuple[Ref, ...]
    labels: tuple[str, ...] | None = None
    not_run: tuple[tuple[str, str], ...] = ()  # (task, why) left out on purpose
    parent_run_id: str | None = None
    tracking_uri: str | None = None

    def identity(self) -> dict:
        return {"results": [r.key for r in self.results], "labels": self.labels, "not_run": self.not_run}

    def input_paths(self) -> dict[str, str]:
        return {f"results[{i}]": str(r.path) for i, r in enumerate(self.results)}

    def build(self, out: Path) -> dict:
        files = build_report([r.path for r in self.results], out, list(self.labels) if self.labels else None,
                             tracking_uri=self.tracking_uri, run_id=self.parent_run_id, not_run=dict(self.not_run))
        return {"files": {kind: path.name for kind, path in files.items()}}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True, nargs="+", type=Path, metavar="DIR",
                        help="results folders: one per run (a task folder or a folder of task folders)")
    parser.add_argument("--labels", "--label", nargs="+", metavar="LABEL",
                        help="a name per results folder, in order (default: folder names)")
    parser.add_argument("--out", required=True, type=Path, help="where results.md/png/json go")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI of --run-id")
    parser.add_argument("--run-id", help="MLflow run (the pipeline's parent run) to log the report to")
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    job = Job(tuple(results_ref(p) for p in args.results), tuple(args.labels) if args.labels else None,
              parent_run_id=args.run_id, tracking_uri=args.tracking_uri)
    result = run_from_args(job, args)
    markdown = result.path / result.marker["files"]["markdown"]
    print(markdown.read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(result.path / name) for name in result.marker["files"].values()))
    return 0
