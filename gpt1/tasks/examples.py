"""What a loaded task split is: labelled examples plus a report of every row that did not become one.

Three example shapes cover the twelve tasks:

* `TextExample`   one text (CoLA, SST-2);
* `PairExample`   two texts in the dataset's own column order (`text_a` = premise / question / first sentence,
                  `text_b` = hypothesis / answer sentence / second sentence): MNLI, SNLI, SciTail, QNLI, RTE,
                  MRPC, QQP, STS-B;
* `ChoiceExample` a context, an optional question and K candidate answers (RACE: K=4, Story Cloze: K=2).

`label` is the index into the task's label list (`TaskSpec.labels`), the float score for STS-B, the index of the
right answer for multiple choice, and None on unlabelled test splits. `id` is the original index/id from the file
(the GLUE `index`/`id` column, SNLI `pairID`, Story Cloze `InputStoryid`, RACE `<article id>#<question number>`),
or the 0-based data row number when the file has none; submission files are keyed by it. `group` is the
sub-population the paper reports separately: "matched"/"mismatched" for MNLI dev/test, "middle"/"high" for RACE.

Rows that cannot become an example are never dropped silently: malformed rows are `bad` (counted by reason, each
kept with file, line and field, and limited by `max_bad_fraction`), rows removed by the task's definition (SNLI's
gold label `-`: no annotator consensus) are `excluded` (counted by reason, not an error).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from gpt1.io import InputError

log = logging.getLogger("gpt1.tasks")

Label = int | float | None


@dataclass(frozen=True, slots=True)
class TextExample:
    id: str
    text: str
    label: Label = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class PairExample:
    id: str
    text_a: str
    text_b: str
    label: Label = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class ChoiceExample:
    id: str
    context: str
    question: str
    options: tuple[str, ...]
    label: Label = None
    group: str | None = None

    @property
    def level(self) -> str | None:
        """RACE difficulty level ("middle" or "high")."""
        return self.group


Example = TextExample | PairExample | ChoiceExample


def content(example: Example) -> tuple:
    """An example without its id and group: two rows with equal content are the same example."""
    return tuple(
        getattr(example, name) for name in example.__slots__ if name not in ("id", "group")
    )


class RowError(Exception):
    """A malformed row: `reason` is the category it is counted under, `detail` the offending value."""

    def __init__(self, reason: str, field: str | None = None, detail: str = ""):
        super().__init__(reason)
        self.reason, self.field, self.detail = reason, field, detail


class Excluded(Exception):
    """A well-formed row the task definition leaves out (e.g. SNLI gold label '-')."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class BadRow:
    file: str
    line: int
    reason: str
    field: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" + (f" [{self.field}]" if self.field else "")
        return f"{where}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class LoadReport:
    """Counts for one `load()` call: examples made, malformed rows by reason (with locations), exclusions."""

    task: str
    split: str
    path: str = ""  # what was asked for; `sources` are the files actually read
    sources: list[str] = field(default_factory=list)
    examples: int = 0
    bad: Counter = field(default_factory=Counter)
    excluded: Counter = field(default_factory=Counter)
    bad_rows: list[BadRow] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        """Data rows seen (header lines not included)."""
        return self.examples + sum(self.bad.values()) + sum(self.excluded.values())

    @property
    def bad_fraction(self) -> float:
        return sum(self.bad.values()) / self.rows if self.rows else 0.0

    def add_bad(self, file: str, line: int, err: RowError) -> None:
        self.bad[err.reason] += 1
        self.bad_rows.append(BadRow(str(file), line, err.reason, err.field, err.detail[:200]))

    def add_excluded(self, reason: str) -> None:
        self.excluded[reason] += 1

    def check(self, max_bad_fraction: float) -> None:
        """Raise `InputError` at the first malformed row when too many rows are malformed, or nothing loaded."""
        if self.bad_fraction > max_bad_fraction:
            first = self.bad_rows[0]
            raise InputError(
                f"{self.task}/{self.split}: {sum(self.bad.values())} of {self.rows} rows malformed "
                f"({self.bad_fraction:.2%} > max_bad_fraction {max_bad_fraction:.2%}); by reason "
                f"{dict(self.bad)}; first: {first.reason}"
                + (f" ({first.detail})" if first.detail else ""),
                file=first.file,
                line=first.line,
                field=first.field,
            )
        if not self.examples:
            raise InputError(
                f"{self.task}/{self.split}: no examples"
                + (f" (excluded: {dict(self.excluded)})" if self.excluded else ""),
                file=", ".join(self.sources) or self.path,
            )

    def summary(self) -> str:
        rate = self.rows / max(self.seconds, 1e-9)
        text = (
            f"{self.task}/{self.split}: {self.examples} examples from {self.rows} rows in {self.seconds:.2f}s "
            f"({rate:,.0f} rows/s)"
        )
        if self.excluded:
            text += f"; excluded {dict(self.excluded)}"
        if self.bad:
            text += f"; malformed {dict(self.bad)}, first at {self.bad_rows[0]}"
        return text

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "split": self.split,
            "path": self.path,
            "sources": self.sources,
            "rows": self.rows,
            "examples": self.examples,
            "bad": dict(self.bad),
            "excluded": dict(self.excluded),
            "bad_rows": [str(b) for b in self.bad_rows[:100]],
            "seconds": round(self.seconds, 3),
        }


class TaskData(Sequence):
    """The examples of one task split, with the `LoadReport` that produced them."""

    def __init__(self, task: str, split: str, examples: list[Example], report: LoadReport):
        self.task, self.split, self.examples, self.report = task, split, examples, report

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index):
        return self.examples[index]

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    @property
    def labelled(self) -> bool:
        return all(ex.label is not None for ex in self.examples)

    def __repr__(self) -> str:
        return f"TaskData({self.task!r}, {self.split!r}, n={len(self)})"
