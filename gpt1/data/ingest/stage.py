"""Stage `ingest`: clean, deduplicate and split a corpus into Parquet documents + stats.json.

    gpt1 ingest --source SRC --out DIR [--text-column C] [--val-fraction F] ...

SRC is a directory or glob of .txt/.jsonl/.parquet files, one such file, or `hf:<id>[@revision][:split]` (a hub
dataset or a local `datasets` folder). The key hashes the source's content (local files by their bytes, hub data by
id, revision and split: pin a revision to make it stable) and the data settings below; gpt1.data.ingest does the
work.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from gpt1.config import IngestConfig
from gpt1.data.ingest import ingest
from gpt1.io import positive_int, stable_hash
from gpt1.stages.base import (
    Ref,
    StageJob,
    add_output_args,
    data_key,
    input_key,
    keyed_settings,
    run_from_args,
)
from gpt1.stages.outputs import read_marker
from gpt1.tasks import TASKS
from gpt1.tasks import get as get_task
from gpt1.tracking.runs import hub_dataset_source


def source_key(spec: str) -> str:
    """The content key of a corpus source: a stage's output (the sample books) by its marker, else its data."""
    path = Path(spec)
    if (
        not spec.startswith("hf:")
        and path.exists()
        and any(read_marker(p) for p in path.parents[:3])
    ):
        return input_key(path)
    return stable_hash(["source", ingest.open_source(spec).fingerprint()])


@dataclass(frozen=True)
class TaskFiles:
    """One task's files as the ingest reads them: its train text (`ingest.task_text`), its held-out splits (the
    leak check)."""

    task: str
    where: str  # a folder, a file or hf:<id>, as `gpt1.tasks.load` takes it
    key: str  # their content key


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "ingest"
    summary: ClassVar[str] = "clean, dedup and split a corpus into Parquet documents + stats.json"
    section: ClassVar[str] = "ingest"
    retries: ClassVar[int] = 2
    source: str
    source_key: str
    cfg: IngestConfig
    tasks: tuple[TaskFiles, ...] = ()  # the run's tasks: read when task_text or leak_check is on
    # None: a bar when stderr is a terminal
    progress: bool | None = field(default=None, compare=False)

    @classmethod
    def of(cls, cfg: IngestConfig, books: Ref | None, tasks: list[TaskFiles]) -> Job:
        """The configured source, or `books` (the sample books, for `ingest.source: sample`), with the files of
        the run's tasks when their text is mixed in or checked against."""
        source, key = (
            (str(books.path), books.key)
            if books is not None
            else (cfg.source, source_key(cfg.source))
        )
        return cls(source, key, cfg, tuple(tasks) if cfg.task_text or cfg.leak_check else ())

    def identity(self) -> dict:
        # the source by its content (source_key), not by where it is
        identity = {
            "source": self.source_key,
            "format": ingest.FORMAT_VERSION,
            **keyed_settings(self.cfg, exclude={"source"}),
        }
        # the tasks' files, read only by these two settings
        if self.cfg.task_text or self.cfg.leak_check:
            identity["tasks"] = [(t.task, t.key) for t in self.tasks]
        return identity

    def input_paths(self) -> dict[str, str]:
        return {
            "source": self.source,
            **{f"tasks.{t.task}": t.where for t in self.tasks if not t.where.startswith("hf:")},
        }

    def lineage_inputs(self) -> dict[str, tuple[str, Any]]:
        """The source as an `mlflow.data` source: hub id, split and revision for hub data, else its path; and the
        train files of each task whose text is mixed in (`task_text.<task>`)."""
        inputs = {"source": (self.source_key, _dataset_source(self.source))}
        if self.cfg.task_text:
            inputs |= {f"task_text.{t.task}": (t.key, _dataset_source(t.where)) for t in self.tasks}
        return inputs

    def output_profile(self, result) -> dict[str, Any]:
        """The corpus's documents and characters by origin (the source, the tasks' train text) and what the leak
        check removed."""
        stats = result.marker["stats"]
        profile = {
            f"{origin}_{what}": n
            for origin, counts in stats.get("origins", {}).items()
            for what, n in counts.items()
        }
        if stats.get("leak_check"):
            profile |= {
                f"leak_check_removed_{origin}": n
                for origin, n in stats["leak_check"]["sentences_removed"].items()
            }
        return {"documents": sum(stats["documents"].values()), **profile}

    def check(self, out: Path) -> None:
        source = Path(self.source)
        if (
            not self.source.startswith("hf:")
            and source.is_dir()
            and out.resolve().is_relative_to(source.resolve())
        ):
            raise ValueError(
                f"--out {out} is inside the source folder {source}: the corpus would become part of "
                "its own source; write it elsewhere"
            )

    def build(self, out: Path) -> dict:
        stats = ingest.ingest(
            self.cfg.model_copy(update={"source": self.source}),  # the sample books: their folder
            out,
            task_files=[(t.task, t.where) for t in self.tasks],
            show_progress=sys.stderr.isatty() if self.progress is None else self.progress,
        )
        return {"stats": stats}


def _dataset_source(where: str) -> Any:
    if not where.startswith("hf:"):
        return where
    hub = ingest.HFSource(where)
    return (
        str(hub.folder.resolve())
        if hub.local
        else hub_dataset_source(hub.id, split=hub.split, revision=hub.revision)
    )


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    defaults = IngestConfig()
    parser.add_argument(
        "--source",
        required=True,
        help="directory or glob of .txt/.jsonl/.parquet, a file, or hf:<id>[@revision][:split]",
    )
    parser.add_argument("--out", required=True, type=Path, help="corpus directory to write")
    parser.add_argument(
        "--text-column", default=defaults.text_column, help="text field of jsonl/parquet/hf rows"
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=defaults.val_fraction,
        help="share of documents held out for validation",
    )
    parser.add_argument(
        "--seed", type=int, default=defaults.split_seed, help="train/val split seed"
    )
    parser.add_argument(
        "--min-doc-chars",
        type=int,
        default=defaults.min_doc_chars,
        help="reject documents shorter than this after cleaning",
    )
    parser.add_argument(
        "--rows-per-doc",
        type=positive_int,
        default=None,
        help=f"rows joined per document for row sources (default: {ingest.BOOKCORPUS_ROWS_PER_DOC} "
        "for hub BooksCorpus, else 1)",
    )
    parser.add_argument(
        "--unwrap-lines",
        action=argparse.BooleanOptionalAction,
        default=defaults.unwrap_lines,
        help="join the lines of hard-wrapped prose paragraphs (verse, lists and headings keep theirs)",
    )
    parser.add_argument(
        "--max-documents",
        type=positive_int,
        default=defaults.max_documents,
        help="subset: keep the first N documents in source order, read no further",
    )
    parser.add_argument(
        "--max-chars",
        type=positive_int,
        default=defaults.max_chars,
        help="subset: keep whole documents in source order up to this many characters",
    )
    parser.add_argument(
        "--max-doc-chars",
        type=positive_int,
        default=defaults.max_doc_chars,
        help="cut each record (a book) into documents of at most this many characters at paragraph "
        "boundaries, after the train/val split",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=[],
        choices=TASKS,
        metavar="TASK",
        help="the tasks of --task-text and --leak-check, read from --task-data",
    )
    parser.add_argument(
        "--task-data",
        default="hf",
        metavar="DIR|hf",
        help="where the tasks' files are: a folder of task folders as distributed (GLUE's SST-2/, "
        "...), or hf for their hub datasets (default)",
    )
    parser.add_argument(
        "--task-text",
        action="store_true",
        help="add the unlabelled text of the tasks' train rows, one document per row",
    )
    parser.add_argument(
        "--leak-check",
        action="store_true",
        help="remove every sentence of 8 or more words that a dev or test file of the tasks holds",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)"
    )
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    if (args.task_text or args.leak_check) and not args.tasks:
        raise ValueError("--task-text and --leak-check need --tasks (and --task-data)")
    cfg = IngestConfig(
        text_column=args.text_column,
        val_fraction=args.val_fraction,
        split_seed=args.seed,
        min_doc_chars=args.min_doc_chars,
        rows_per_doc=args.rows_per_doc,
        unwrap_lines=args.unwrap_lines,
        max_documents=args.max_documents,
        max_chars=args.max_chars,
        max_doc_chars=args.max_doc_chars,
        task_text=args.task_text,
        leak_check=args.leak_check,
    )
    tasks: tuple[TaskFiles, ...] = ()
    if cfg.task_text or cfg.leak_check:
        tasks = tuple(
            TaskFiles(task, where, data_key(where))
            for task in args.tasks
            for where in [get_task(task).files_in(args.task_data)]
        )
    job = Job(
        args.source,
        source_key(args.source),
        cfg,
        tasks,
        progress=False if args.no_progress else None,
    )
    result = run_from_args(job, args)
    print(ingest.summary(result.marker["stats"], result.path))
    return 0
