"""The twelve fine-tuning tasks of the paper: what each one is, how to load it, and how to write its predictions.

    spec = get("rte")                       # TaskSpec: kind, labels, metrics, transformation, file layout
    dev = load("rte", "glue_data/RTE", "dev")   # TaskData: examples + LoadReport
    enc = spec.encode(dev[0], tokenizer, 512)   # Encoded token ids + classify positions
    evaluate("rte", dev, predictions)       # metrics dict with "primary"

`path` is the task's folder as distributed (GLUE `<TASK>/`, `snli_1.0/`, `SciTailV1.1/`, `RACE/`, the folder
with the Story Cloze csv files) or any folder above it that holds exactly one such layout, a single file, a
`hf:` hub reference, or a local Hugging Face export (see `gpt1.tasks.hub`).

Splits (where the spec is silent):
* GLUE tasks: train, dev, test (test is unlabelled: predictions go to `write_submission`).
* MNLI: dev_matched, dev_mismatched, test_matched, test_mismatched; `dev`/`test` load both halves, each example
  tagged `group` "matched"/"mismatched", so one evaluation yields both accuracies.
* Story Cloze has only two labelled files. As in GPT-1, `train` is the validation file (1,871 stories) and
  `test` the test file; there is no `dev`.
* `eval_splits` is where the paper's number comes from: dev for GLUE (hidden test labels), test for SNLI,
  SciTail, RACE and Story Cloze (public test labels).

Labels: `labels[i]` is the string the files (and the GLUE server) use for class i, in the order of the Hugging
Face datasets' class indices; STS-B is a regression (labels None, score in [0, 5]); multiple choice labels name
the answers (RACE A-D, Story Cloze ending 1/2) and `example.label` is the right answer's index.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from gpt1.config import TASKS
from gpt1.io import write_text
from gpt1.tasks import formats, hub, metrics, transforms
from gpt1.tasks.examples import Example, Excluded, LoadReport, RowError, TaskData
from gpt1.tasks.formats import Columns, Rows

log = logging.getLogger("gpt1.tasks")

GLUE_SPLITS = ("train", "dev", "test")
MNLI_SPLITS = ("train", "dev", "dev_matched", "dev_mismatched", "test", "test_matched", "test_mismatched")
DEFAULT_MAX_BAD_FRACTION = 0.01


@dataclass(frozen=True)
class TaskSpec:
    name: str
    title: str  # as the paper and GLUE write it
    kind: str  # classification | entailment | similarity | multiple_choice
    labels: tuple[str, ...] | None  # None: regression (STS-B)
    format: str  # official file format: glue | snli | scitail | race | storycloze
    folder: str  # folder name as distributed
    hf: str  # hub reference, see gpt1.tasks.hub
    hf_text: tuple[str, ...] = ()  # hub columns of the text fields, in example order
    columns: Columns | None = None  # tsv columns of the official files
    splits: tuple[str, ...] = GLUE_SPLITS
    eval_splits: tuple[str, ...] = ("dev",)
    n_choices: int | None = None
    no_gold: str | None = None  # label of rows without a gold label (excluded, counted)
    submission: str | None = None  # GLUE server file stem; MNLI writes <stem>-m / <stem>-mm

    @property
    def regression(self) -> bool:
        return self.labels is None

    @property
    def metrics(self) -> tuple[str, ...]:
        return metrics.METRICS[self.name]

    @property
    def primary_metric(self) -> str:
        return metrics.PRIMARY[self.name]

    @property
    def transformation(self) -> str:
        return transforms.TEMPLATES[self.kind]

    @property
    def head(self) -> str:
        """The `GPT1ForTask` head: entailment is a classification over one sequence."""
        return {"entailment": "classification"}.get(self.kind, self.kind)

    @property
    def n_outputs(self) -> int:
        if self.kind == "multiple_choice" or self.regression:
            return 1
        return len(self.labels)

    @property
    def hf_id(self) -> str:
        return f"hf:{self.hf}"

    def encode(self, example: Example, tokenizer: transforms.Tokenizer, max_len: int) -> transforms.Encoded:
        return transforms.encode(self.kind, example, tokenizer, max_len)

    def encode_all(self, examples: Sequence[Example], tokenizer: transforms.Tokenizer, max_len: int
                   ) -> list[transforms.Encoded]:
        """Encode a split with a progress bar; logs throughput and how many examples had to be truncated."""
        started = time.perf_counter()
        encoded = [self.encode(ex, tokenizer, max_len)
                   for ex in tqdm(examples, desc=f"encode {self.name}", unit="ex", disable=None, leave=False)]
        seconds = time.perf_counter() - started
        truncated = sum(e.truncated for e in encoded)
        log.info("%s: encoded %d examples in %.1fs (%.0f/s), %d truncated to %d tokens", self.name, len(encoded),
                 seconds, len(encoded) / max(seconds, 1e-9), truncated, max_len)
        return encoded

    def load(self, path: str | Path, split: str, max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION) -> TaskData:
        return load(self.name, path, split, max_bad_fraction)

    def parse_label(self, raw, field: str | None = None):
        """A label as written in a file or a hub column -> class index / score; raises RowError or Excluded."""
        if raw is None:
            raise RowError("missing label", field)
        if isinstance(raw, (int, float)) and raw == -1:  # hub convention for "no label"
            if self.no_gold is not None:
                raise Excluded("no gold label")
            return None
        if self.regression:
            try:
                score = float(raw)
            except (TypeError, ValueError):
                raise RowError("bad score", field, repr(raw)) from None
            if not (math.isfinite(score) and 0 <= score <= 5):
                raise RowError("score outside [0, 5]", field, repr(raw))
            return score
        if isinstance(raw, int):  # hub class index
            if 0 <= raw < len(self.labels):
                return raw
            raise RowError("unknown label", field, repr(raw))
        text = str(raw).strip()
        if text == self.no_gold:
            raise Excluded("no gold label")
        if text not in self.labels:
            raise RowError("unknown label", field, repr(text))
        return self.labels.index(text)

    def format_prediction(self, prediction) -> str:
        """A prediction as the GLUE server expects it: the label string, or the score with 3 decimals."""
        if self.regression:
            return f"{float(prediction):.3f}"
        if isinstance(prediction, str) and prediction in self.labels:
            return prediction
        return self.labels[int(prediction)]

    def group_of_split(self, split: str) -> str | None:
        if self.name == "mnli":
            for group in ("mismatched", "matched"):
                if split.endswith(f"_{group}"):
                    return group
        return None

    def file_splits(self, split: str) -> list[tuple[str, str | None]]:
        """(file split, example group) pairs that make up `split` (MNLI dev/test: both halves)."""
        if self.name == "mnli" and split in ("dev", "test"):
            return [(f"{split}_matched", "matched"), (f"{split}_mismatched", "mismatched")]
        return [(split, self.group_of_split(split))]

    def file_names(self, split: str) -> tuple[str, ...]:
        """Official file names of a split, in order of preference."""
        if self.format == "snli":
            return f"snli_1.0_{split}.jsonl", f"snli_1.0_{split}.txt", f"{split}.tsv"
        if self.format == "scitail":
            return (f"scitail_1.0_{split}.tsv",)
        return (f"{split}.tsv",)


_NLI = ("entailment", "neutral", "contradiction")
_BINARY = ("0", "1")
_PAIR = ("sentence1", "sentence2")

REGISTRY: dict[str, TaskSpec] = {spec.name: spec for spec in (
    TaskSpec("cola", "CoLA", "classification", _BINARY, "glue", "CoLA", "glue/cola", ("sentence",),
             Columns(("sentence",), "label", "index", headerless=("source", "label", "mark", "sentence")),
             submission="CoLA"),
    TaskSpec("sst2", "SST-2", "classification", _BINARY, "glue", "SST-2", "glue/sst2", ("sentence",),
             Columns(("sentence",), "label", "index"), submission="SST-2"),
    TaskSpec("mrpc", "MRPC", "similarity", _BINARY, "glue", "MRPC", "glue/mrpc", _PAIR,
             Columns(("#1 String", "#2 String"), "Quality", "index"), submission="MRPC"),
    TaskSpec("stsb", "STS-B", "similarity", None, "glue", "STS-B", "glue/stsb", _PAIR,
             Columns(_PAIR, "score", "index",
                     headerless=("genre", "filename", "year", "old_index", "score", *_PAIR), widths=(9,)),
             submission="STS-B"),
    TaskSpec("qqp", "QQP", "similarity", _BINARY, "glue", "QQP", "glue/qqp", ("question1", "question2"),
             Columns(("question1", "question2"), "is_duplicate", "id"), submission="QQP"),
    TaskSpec("mnli", "MNLI", "entailment", _NLI, "glue", "MNLI", "glue/mnli", ("premise", "hypothesis"),
             Columns(_PAIR, "gold_label", "index"), splits=MNLI_SPLITS, no_gold="-", submission="MNLI"),
    TaskSpec("qnli", "QNLI", "entailment", ("entailment", "not_entailment"), "glue", "QNLI", "glue/qnli",
             ("question", "sentence"), Columns(("question", "sentence"), "label", "index"), submission="QNLI"),
    TaskSpec("rte", "RTE", "entailment", ("entailment", "not_entailment"), "glue", "RTE", "glue/rte", _PAIR,
             Columns(_PAIR, "label", "index"), submission="RTE"),
    TaskSpec("snli", "SNLI", "entailment", _NLI, "snli", "snli_1.0", "snli", ("premise", "hypothesis"),
             Columns(_PAIR, "gold_label", "pairID", widths=(11, 15), from_end="gold_label"),
             eval_splits=("test",), no_gold="-"),
    TaskSpec("scitail", "SciTail", "entailment", ("entails", "neutral"), "scitail", "SciTailV1.1", "scitail",
             ("premise", "hypothesis"),
             Columns(("premise", "hypothesis"), "label", headerless=("premise", "hypothesis", "label")),
             eval_splits=("test",)),
    TaskSpec("race", "RACE", "multiple_choice", ("A", "B", "C", "D"), "race", "RACE", "race", n_choices=4,
             eval_splits=("test",)),
    TaskSpec("storycloze", "Story Cloze", "multiple_choice", ("1", "2"), "storycloze", "StoryCloze",
             "story_cloze", n_choices=2, splits=("train", "test"), eval_splits=("test",)),
)}

_SUBMISSION_NAMES = {"snli": "SNLI", "scitail": "SciTail", "race": "RACE", "storycloze": "StoryCloze"}


def get(task: str) -> TaskSpec:
    try:
        return REGISTRY[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}") from None


def load(task: str, path: str | Path, split: str, max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION) -> TaskData:
    """Read one split into examples; malformed rows are counted in `.report` and over `max_bad_fraction` of the
    rows they raise InputError at the first one (file, line, field)."""
    spec = get(task)
    if split not in spec.splits:
        hint = " (Story Cloze: train = the validation csv, test = the test csv)" if task == "storycloze" else ""
        raise ValueError(f"{task}: unknown split {split!r}; use one of {', '.join(spec.splits)}{hint}")
    report = LoadReport(task, split, path=str(path))
    examples: list[Example] = []
    started = time.perf_counter()
    rows = tqdm(_rows(spec, path, split), desc=f"load {task}/{split}", unit="row", disable=None, leave=False)
    for file, line, item in rows:
        if file not in report.sources:
            report.sources.append(file)
        if isinstance(item, RowError):
            report.add_bad(file, line, item)
        elif isinstance(item, Excluded):
            report.add_excluded(item.reason)
        else:
            examples.append(item)
    report.examples, report.seconds = len(examples), time.perf_counter() - started
    (log.warning if report.bad else log.info)(report.summary())
    report.check(max_bad_fraction)
    return TaskData(task, split, examples, report)


def _rows(spec: TaskSpec, path: str | Path, split: str) -> Rows:
    if isinstance(path, str) and path.startswith("hf:"):
        return hub.read_hub(spec, path, split)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{spec.name}: {path} does not exist")
    if hub.is_saved_dataset(path):
        return hub.read_saved(spec, path, split)
    if path.is_file():
        group = spec.group_of_split(split) or _group_of_file(spec, path)
        return _read_file(spec, path, group)
    return _read_folder(spec, path, split)


def _group_of_file(spec: TaskSpec, path: Path) -> str | None:
    if spec.name == "mnli":
        return next((g for g in ("mismatched", "matched") if g in path.name), None)
    return None


def _read_file(spec: TaskSpec, path: Path, group: str | None) -> Rows:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return hub.read_records(spec, path, group)
    if suffix in (".json", ".jsonl"):
        if spec.format == "snli" and formats.looks_like_snli_jsonl(path):
            return formats.read_snli_jsonl(spec, path, group)
        return hub.read_records(spec, path, group)
    if spec.format == "race":
        return formats.read_race(spec, [path])
    if spec.format == "storycloze":
        return formats.read_story_cloze(spec, path)
    return formats.read_tsv(spec, path, group)


def _read_folder(spec: TaskSpec, root: Path, split: str) -> Rows:
    """Resolve every file first (so a missing or ambiguous file fails before anything is read), then read."""
    parts: list[Rows] = []
    missing: list[str] = []
    for file_split, group in spec.file_splits(split):
        files, described = _official_files(spec, root, file_split)
        parts += [_read_file(spec, path, group) for path in files]
        missing += [] if files else [described]
    if missing and not parts:
        records = hub.record_files(root, spec, split)
        if records:
            return itertools.chain.from_iterable(hub.read_records(spec, f, group) for f, group in records)
    if missing:
        raise FileNotFoundError(f"{spec.name}/{split}: no {'; no '.join(missing)} in {root} "
                                f"(nor up to {formats.SEARCH_DEPTH} folders below)")
    return itertools.chain.from_iterable(parts)


def _official_files(spec: TaskSpec, root: Path, split: str) -> tuple[list[Path], str]:
    """The official files of one file split under `root` (empty when absent) and how they are named."""
    if spec.format == "race":
        return formats.race_files(root, split), f"{split}/{{high,middle}}/*.txt"
    if spec.format == "storycloze":
        found = formats.story_cloze_file(root, split)
        return [found] if found else [], "*val.csv" if split == "train" else "*test.csv"
    names = spec.file_names(split)
    found = formats.find_file(root, names)
    return [found] if found else [], " or ".join(names)


def evaluate(task: str, examples: Sequence[Example], predictions: Sequence) -> dict:
    """`metrics.compute` with the labels and groups (RACE level, MNLI matched/mismatched) taken from examples."""
    return metrics.compute(task, [e.label for e in examples], predictions,
                           extra={"groups": [e.group for e in examples]})


def write_submission(task: str, examples: Sequence[Example], predictions: Sequence, path: str | Path
                     ) -> list[Path]:
    """Write `<path>/<Task>.tsv` (`index<TAB>prediction`, GLUE server format; MNLI: MNLI-m.tsv and MNLI-mm.tsv by
    example group). Non-GLUE tasks get the same format under SNLI.tsv, SciTail.tsv, RACE.tsv, StoryCloze.tsv."""
    spec = get(task)
    if len(examples) != len(predictions):
        raise ValueError(f"{task}: {len(examples)} examples but {len(predictions)} predictions")
    files: dict[str, list[str]] = {}
    for example, prediction in zip(examples, predictions):
        if task == "mnli":
            if example.group not in ("matched", "mismatched"):
                raise ValueError("mnli: examples must come from test_matched/test_mismatched (or test) to tell "
                                 "MNLI-m from MNLI-mm")
            name = f"{spec.submission}-{'m' if example.group == 'matched' else 'mm'}"
        else:
            name = spec.submission or _SUBMISSION_NAMES[task]
        files.setdefault(name, []).append(f"{example.id}\t{spec.format_prediction(prediction)}\n")
    written = []
    for name, lines in files.items():
        written.append(write_text(Path(path) / f"{name}.tsv", "index\tprediction\n" + "".join(lines)))
    return written
