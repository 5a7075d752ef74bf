"""What a task is: every fact the pipeline needs about one of the paper's tasks, in one keyword-only record.

A `TaskSpec` holds what the task is (kind, labels), where its data is and how its files look (format, folder, file
names, columns, splits and example groups, hub source), how it is scored (metrics, groups, GLUE membership), what
the paper reports for it (Tables 2-5) and how the report and the zero-shot probes show it. Code outside
`gpt1/tasks/` reads these fields and never names a task; `gpt1.tasks.registry` holds the twelve specs.

Adding a task: one `TaskSpec` in the registry plus, when its files are in a format not yet read, a reader in
`gpt1.tasks.formats` (and a writer in `gpt1.sample_data.tasks` for it to appear in the offline sample data).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from gpt1.tasks import transforms
from gpt1.tasks.examples import Example, Excluded, Label, RowError

log = logging.getLogger("gpt1.tasks")

KINDS = tuple(transforms.TEMPLATES)
# Readers in gpt1.tasks.formats: "split_files" = one file per split, found by `file_names` and read as a tsv or as
# JSON lines by its content; "race" = a folder of JSON articles per split and level; "storycloze" = csv files
# recognised by the split word in their names.
FORMATS = ("split_files", "race", "storycloze")


@dataclass(frozen=True, kw_only=True)
class Columns:
    """The task's tab-separated files: where each field is, by header name, and how to tell them from another
    task's files. `headers` are the headers of the task's official headed files (train, dev, test layouts); a
    file whose first line is none of them and not a headerless row is another task's. Headerless files are
    recognised by their field count (`headerless` names the fields; `widths` are other accepted widths, with
    extra fields at the end) and a valid label on the first row."""

    text: tuple[str, ...]
    label: str
    id: str | None = None
    headers: tuple[tuple[str, ...], ...] = ()
    headerless: tuple[str, ...] | None = None
    widths: tuple[int, ...] = ()
    from_end: str | None = (
        None  # a column read from the row's last field when the width differs (SNLI tsv)
    )


@dataclass(frozen=True, kw_only=True)
class Records:
    """The task's official JSON-lines files (SNLI, MultiNLI, SciTail's snli/predictor formats). `keys` are all keys
    such records have; `required` the ones that tell this task's records from another task's."""

    text: tuple[str, ...] = ("sentence1", "sentence2")
    label: str = "gold_label"
    id: str | None = None
    keys: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()


@dataclass(frozen=True, kw_only=True)
class PaperColumn:
    """One column of the paper's results tables: its header and the `metrics.compute` key it shows."""

    header: str
    metric: str


@dataclass(frozen=True, kw_only=True)
class Probe:
    """A zero-shot probe during pre-training (paper Fig. 2 right): the heuristic (see `gpt1.pretrain.probes`) and the
    splits it reads (the acceptability probe fits its threshold on the first and scores the second)."""

    heuristic: str
    splits: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Every fact about one task, by field (the module docstring groups them); the specs are compared, not hashed
    (their dict fields)."""

    # -- what the task is
    name: str  # the pipeline's id: CLI --task, config finetune.tasks, folder and metric names
    title: str  # as the paper and GLUE write it
    kind: str  # one of KINDS: selects the input transformation and the head
    # label strings in class-index order; None: a regression (score in [0, 5])
    labels: tuple[str, ...] | None
    # other spellings some file variant uses
    label_aliases: dict[str, str] = field(default_factory=dict)
    n_choices: int | None = None  # answers per multiple-choice example
    no_gold: str | None = (
        None  # label of rows without a gold label (excluded and counted, not an error)
    )

    # -- its files as distributed
    format: str  # one of FORMATS: which reader in gpt1.tasks.formats
    folder: str  # folder name as distributed (also the folder name in the sample data)
    # a split's file names, `{split}` filled in, in order of preference
    file_names: tuple[str, ...] = ()
    folder_depth: int = (
        0  # folders from the distributed folder down to the files (SciTailV1.1/tsv_format/: 1)
    )
    columns: Columns | None = None
    records: Records | None = None
    splits: tuple[str, ...] = ("train", "dev", "test")
    splits_note: str = ""  # shown when an unknown split is asked for
    # held-out splits ship one file per group, `<split>_<group>` (MNLI)
    file_groups: tuple[str, ...] = ()
    eval_splits: tuple[str, ...] = ("dev",)  # where the paper's number comes from
    submission: str = ""  # predictions file stem (the GLUE server's name for GLUE tasks)
    # group -> file stem (MNLI-m / MNLI-mm)
    submission_groups: dict[str, str] = field(default_factory=dict)

    # -- the Hugging Face hub (gpt1.tasks.hub)
    hf: str  # hub reference without `hf:` (e.g. glue/sst2)
    hf_revision: str | None = (
        None  # pinned dataset revision (commit or tag); None: the hub's default branch
    )
    hf_manual: str = (
        ""  # the hub copy needs files fetched by hand (how to get them); empty: it downloads itself
    )
    # text columns in example order (also the raw input fields of `gpt1 predict`)
    hf_text: tuple[str, ...] = ()
    # every column of the hub dataset; another column means another dataset
    hf_columns: tuple[str, ...] = ()
    hf_label: str = "label"
    hf_label_names: bool = False  # the label column holds label strings rather than class indices
    # our split word -> hub's
    hf_splits: dict[str, str] = field(default_factory=lambda: {"dev": "validation"})

    # -- scoring and the paper
    metrics: tuple[str, ...]  # `metrics.compute` names; the first is the primary metric
    # sub-populations scored separately (accuracy_<group>): MNLI halves, RACE levels
    groups: tuple[str, ...] = ()
    primary_is_group_mean: bool = (
        False  # primary = mean of the groups' accuracies when all are present (MNLI)
    )
    glue: bool = False  # one of the 8 GLUE tasks of the paper's GLUE average (Table 5 "Avg. Score")
    # the paper's numbers (Tables 2-4): compute keys + primary
    paper: dict[str, float] = field(default_factory=dict)
    # Table 5: ablation -> primary metric
    paper_ablations: dict[str, float] = field(default_factory=dict)

    # -- how the report and the probes show it
    table: int | None = (
        None  # the paper's table that reports the task (2, 3 or 4); None: not in the paper
    )
    table_order: int = 0  # its place among that table's tasks
    table_columns: tuple[PaperColumn, ...] = ()  # () : one column, the title and the primary metric
    ablation_column: str | None = None  # its Table 5 column header (GLUE tasks)
    probe: Probe | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} not in {KINDS}")
        if self.format not in FORMATS:
            problems.append(f"format {self.format!r} not in {FORMATS}")
        if self.kind == "multiple_choice" and not self.n_choices:
            problems.append("multiple choice needs n_choices")
        if not set(self.eval_splits) <= set(self.splits):
            problems.append(f"eval_splits {self.eval_splits} not in splits {self.splits}")
        if self.glue and (self.ablation_column is None or not self.paper_ablations):
            problems.append("a GLUE task needs its Table 5 column and ablation numbers")
        if self.columns and not all(set(self.columns.text) <= set(h) for h in self.columns.headers):
            problems.append("every one of columns.headers must hold the text columns")
        if problems:
            raise ValueError(f"TaskSpec {self.name}: " + "; ".join(problems))

    @property
    def regression(self) -> bool:
        return self.labels is None

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    @property
    def report_columns(self) -> tuple[PaperColumn, ...]:
        return self.table_columns or (PaperColumn(header=self.title, metric=self.primary_metric),)

    @property
    def transformation(self) -> str:
        return transforms.TEMPLATES[self.kind]

    @property
    def head(self) -> str:
        """The `GPT1ForTask` head: entailment is a classification over one sequence."""
        return {"entailment": "classification"}.get(self.kind, self.kind)

    @property
    def n_outputs(self) -> int:
        if self.kind == "multiple_choice" or self.labels is None:  # None: a regression
            return 1
        return len(self.labels)

    def files_in(self, root: str) -> str:
        """Where the task's files are in `root`, a folder of task folders as distributed, or `hf`: its hub id."""
        return self.hf_id if root == "hf" else str(Path(root) / self.folder)

    @property
    def hf_id(self) -> str:
        """The hub reference `gpt1.tasks.load` takes, with the pinned revision when there is one."""
        return f"hf:{self.hf}" + (f"@{self.hf_revision}" if self.hf_revision else "")

    def encode(
        self, example: Example, tokenizer: transforms.Tokenizer, max_len: int
    ) -> transforms.Encoded:
        return transforms.encode(self.kind, example, tokenizer, max_len)

    def encode_all(
        self, examples: Sequence[Example], tokenizer: transforms.Tokenizer, max_len: int
    ) -> list[transforms.Encoded]:
        """Encode a split with a progress bar; logs throughput and how many examples had to be truncated."""
        started = time.perf_counter()
        encoded = [
            self.encode(ex, tokenizer, max_len)
            for ex in tqdm(
                examples, desc=f"encode {self.name}", unit="ex", disable=None, leave=False
            )
        ]
        seconds = time.perf_counter() - started
        truncated = sum(e.truncated for e in encoded)
        log.info(
            "%s: encoded %d examples in %.1fs (%.0f/s), %d truncated to %d tokens",
            self.name,
            len(encoded),
            seconds,
            len(encoded) / max(seconds, 1e-9),
            truncated,
            max_len,
        )
        return encoded

    def parse_label(self, raw, field: str | None = None) -> Label:
        """A label as written in a file or a hub column -> class index / score; raises RowError or Excluded."""
        if raw is None:
            raise RowError("missing label", field)
        if isinstance(raw, (int, float)) and raw == -1:  # hub convention for "no label"
            if self.no_gold is not None:
                raise Excluded("no gold label")
            return None
        labels = self.labels
        if labels is None:  # a regression
            try:
                score = float(raw)
            except (TypeError, ValueError):
                raise RowError("bad score", field, repr(raw)) from None
            if not (math.isfinite(score) and 0 <= score <= 5):
                raise RowError("score outside [0, 5]", field, repr(raw))
            return score
        if isinstance(raw, int):  # hub class index
            if 0 <= raw < len(labels):
                return raw
            raise RowError("unknown label", field, repr(raw))
        text = str(raw).strip()
        if text == self.no_gold:
            raise Excluded("no gold label")
        text = self.label_aliases.get(text, text)
        if text not in labels:
            raise RowError("unknown label", field, repr(text))
        return labels.index(text)

    def format_prediction(self, prediction) -> str:
        """A prediction as the GLUE server expects it: the label string, or the score with 3 decimals."""
        if self.labels is None:  # a regression
            return f"{float(prediction):.3f}"
        if isinstance(prediction, str) and prediction in self.labels:
            return prediction
        return self.labels[int(prediction)]

    def labelled_split(self, split: str) -> bool:
        """Whether the split's files must carry labels: train and dev always; test files may not (GLUE)."""
        return not split.startswith("test")

    def group_of_split(self, split: str) -> str | None:
        return next((g for g in self.file_groups if split.endswith(f"_{g}")), None)

    def group_of_file(self, name: str) -> str | None:
        """The group a file name says it holds (`dev_mismatched.tsv`): the longest group name it contains."""
        return next((g for g in sorted(self.file_groups, key=len, reverse=True) if g in name), None)

    def file_splits(self, split: str) -> list[tuple[str, str | None]]:
        """(file split, example group) pairs that make up `split` (MNLI dev/test: one file per group)."""
        parts: list[tuple[str, str | None]] = [
            (f"{split}_{g}", g) for g in self.file_groups if f"{split}_{g}" in self.splits
        ]
        return parts or [(split, self.group_of_split(split))]

    def split_file_names(self, split: str) -> tuple[str, ...]:
        """Official file names of one file split, in order of preference."""
        return tuple(pattern.format(split=split) for pattern in self.file_names)

    def hub_split(self, split: str) -> str:
        """Our file split name -> the hub's (dev -> validation, dev_matched -> validation_matched)."""
        word, sep, rest = split.partition("_")
        return self.hf_splits.get(word, word) + sep + rest

    def submission_file(self, group: str | None) -> str:
        if not self.submission_groups:
            return self.submission
        if group not in self.submission_groups:
            raise ValueError(
                f"{self.name}: predictions need examples of the groups {list(self.submission_groups)} "
                f"(one submission file each), got group {group!r}"
            )
        return self.submission_groups[group]
