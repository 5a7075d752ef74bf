"""The tasks' own text as pre-training text, and the tasks' held-out text as what pre-training must not see.

    for record in train_records("sst2", "glue/SST-2", report): ...      # one record per train row, labels left out
    index = held_out_index([("sst2", "glue/SST-2")], stats)              # their dev and test sentences (leaks.py)

Unlabelled in-domain text is the cheapest pre-training a small model can get (task-adaptive pre-training,
Gururangan et al. 2020), and the paper's auxiliary LM objective trains on exactly this text. Each train row becomes
one document, its text fields in the dataset's order one per line (a pair's two sentences, a story and its
ending); the label is never written. A multiple-choice row's context (a RACE article is shared by its questions)
is a document of its own, so repeated contexts are dropped as duplicates. Rows the task's reader cannot parse are
counted in the stats, as the fine-tune's reader counts them.

Every split but train (dev, test, MNLI's matched and mismatched halves) is held out: its sentences go into the
leak check's index. A split whose files are not there is named in the stats, not an error (GLUE folders often
ship without test files).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from gpt1 import tasks
from gpt1.data.ingest.corpus import TASK_SOURCE_PREFIX
from gpt1.data.ingest.leaks import LeakIndex
from gpt1.data.ingest.sources import Record, Report
from gpt1.tasks import ChoiceExample, PairExample, TextExample

log = logging.getLogger(__name__)

TRAIN = "train"


def texts(example) -> list[str]:
    """An example's text fields as documents: one per example, a multiple-choice context on its own."""
    if isinstance(example, TextExample):
        return [example.text]
    if isinstance(example, PairExample):
        return [f"{example.text_a}\n{example.text_b}"]
    if isinstance(example, ChoiceExample):
        return [
            example.context,
            "\n".join(part for part in (example.question, *example.options) if part),
        ]
    raise TypeError(f"not a task example: {type(example).__name__}")


def train_records(task: str, where: str, report: Report) -> Iterator[Record]:
    """The unlabelled text of a task's train split as records (`source` = task:<task>:<row id>)."""
    data = tasks.load(task, where, TRAIN)
    report.files += len(data.report.sources)
    report.rows += data.report.rows
    for bad in data.report.bad_rows:
        report.malformed_row(
            bad.file, bad.line, f"{bad.reason}" + (f" [{bad.field}]" if bad.field else "")
        )
    for example in data:
        for i, text in enumerate(texts(example)):
            # one field per line: those breaks are field boundaries, not hard wraps to join
            yield Record(
                f"{TASK_SOURCE_PREFIX}{task}:{example.id}" + (f"#{i}" if i else ""),
                text,
                grouped_rows=True,
            )


def held_out_splits(task: str) -> tuple[str, ...]:
    return tuple(split for split in tasks.get(task).splits if split != TRAIN)


def held_out_index(sources: Sequence[tuple[str, str]], stats: dict) -> LeakIndex:
    """The leak check's index of every held-out split of each (task, where); `stats` gets, per task, the rows
    read per split and the splits not found."""
    index = LeakIndex()
    for task, where in sources:
        entry = stats.setdefault(task, {"rows": {}, "not_found": []})
        for split in held_out_splits(task):
            try:
                data = tasks.load(task, where, split)
            except FileNotFoundError:
                entry["not_found"].append(split)
                log.info("%s/%s: no files at %s, nothing to check against", task, split, where)
                continue
            entry["rows"][split] = len(data)
            for example in data:
                for text in texts(example):
                    index.add(text)
    return index
