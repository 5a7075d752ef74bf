"""Load a task split, score predictions against it, write its predictions in the GLUE server format.

    dev = load("rte", "glue_data/RTE", "dev")   # TaskData: examples + LoadReport
    evaluate("rte", dev, predictions)           # metrics dict with "primary"
    write_submission("rte", test, predictions, "out/submission")

`path` is the task's folder as distributed (GLUE `<TASK>/`, `snli_1.0/`, `multinli_1.0/`, `SciTailV1.1/`, `RACE/`,
the folder with the Story Cloze csv files) or a folder up to three levels above it (see `gpt1.tasks.formats`), a
single file, a `hf:` hub reference, or a local Hugging Face export (see `gpt1.tasks.hub`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from gpt1.io import InputError, write_text
from gpt1.tasks import formats, hub, metrics
from gpt1.tasks.examples import Example, Excluded, LoadReport, RowError, TaskData
from gpt1.tasks.formats import Rows
from gpt1.tasks.registry import get
from gpt1.tasks.spec import TaskSpec

log = logging.getLogger("gpt1.tasks")

DEFAULT_MAX_BAD_FRACTION = 0.01


def load(
    task: str, path: str | Path, split: str, max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION
) -> TaskData:
    """Read one split into examples; malformed rows are counted in `.report` and over `max_bad_fraction` of the
    rows they raise InputError at the first one (file, line, field). A file of the split without a single row (e.g.
    a header-only MNLI dev_matched.tsv beside a full dev_mismatched.tsv) raises InputError naming it: a split is
    read whole or not at all."""
    spec = get(task)
    if split not in spec.splits:
        hint = f" ({spec.splits_note})" if spec.splits_note else ""
        raise ValueError(
            f"{task}: unknown split {split!r}; use one of {', '.join(spec.splits)}{hint}"
        )
    report = LoadReport(task, split, path=str(path))
    examples: list[Example] = []
    rows_per_file: Counter = Counter()
    started = time.perf_counter()
    rows = tqdm(
        _rows(spec, path, split, report.sources),
        desc=f"load {task}/{split}",
        unit="row",
        disable=None,
        leave=False,
    )
    for file, line, item in rows:
        if file not in report.sources:
            report.sources.append(file)
        rows_per_file[file] += 1
        if isinstance(item, RowError):
            report.add_bad(file, line, item)
        elif isinstance(item, Excluded):
            report.add_excluded(item.reason)
        else:
            examples.append(item)
    report.examples, report.seconds = len(examples), time.perf_counter() - started
    (log.warning if report.bad else log.info)(report.summary())
    report.check(max_bad_fraction)
    empty = [file for file in report.sources if not rows_per_file[file]]
    if empty:
        raise InputError(
            f"{task}/{split}: no rows in this file (one of {len(report.sources)} the split is read "
            "from): a split is scored on all its files or not at all",
            file=empty[0],
        )
    return TaskData(task, split, examples, report)


def peek(task: str, path: str | Path, split: str, rows: int = 20) -> int:
    """Find the files of one split and read its first `rows` rows, raising what `load` would raise about them
    (missing, ambiguous or another task's file): a quick check of full-size data before a run. Returns the rows
    read."""
    spec = get(task)
    if split not in spec.splits:
        raise ValueError(f"{task}: unknown split {split!r}; use one of {', '.join(spec.splits)}")
    return sum(1 for _ in itertools.islice(_rows(spec, path, split, []), rows))


def _rows(spec: TaskSpec, path: str | Path, split: str, read_files: list[str]) -> Rows:
    """The split's rows; the local files it reads are appended to `read_files` before any row is read."""
    if isinstance(path, str) and path.startswith("hf:"):
        return hub.read_hub(spec, path, split)
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(f"{spec.name}: {path} does not exist")
    if hub.is_saved_dataset(path):
        return hub.read_saved(spec, path, split)
    if not path.is_dir():  # a file, or what is refused as one (a FIFO, a dangling symlink)
        read_files.append(str(path))
        return _read_file(
            spec, path, split, spec.group_of_split(split) or spec.group_of_file(path.name)
        )
    return _read_folder(spec, path, split, read_files)


def _read_file(spec: TaskSpec, path: Path, split: str, group: str | None) -> Rows:
    """One file of `split`, read by what it is: Parquet or JSON records, official JSON lines, or the task's format."""
    formats.check_task_file(path)
    formats.check_folder(spec, path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return hub.read_records(spec, path, group)
    if spec.format == "race":
        return formats.read_race(spec, [path])
    if spec.format == "storycloze":
        return formats.read_story_cloze(spec, path)
    if suffix in (".json", ".jsonl") or formats.first_text(path).startswith("{"):
        if formats.looks_like_records(spec, path):
            return formats.read_records(spec, path, group)
        return hub.read_records(spec, path, group)
    return formats.read_tsv(spec, path, split, group)


def _read_folder(spec: TaskSpec, root: Path, split: str, read_files: list[str]) -> Rows:
    """Resolve every file first (so a missing or ambiguous file fails before anything is read), then read."""
    found: dict[str, list[Path]] = {}
    missing: dict[str, str] = {}
    for file_split, _ in spec.file_splits(split):
        files, described = _official_files(spec, root, file_split)
        if files:
            found[file_split] = files
        else:
            missing[file_split] = described
    if missing and not found:
        records = hub.record_files(root, spec, split)
        if records:
            read_files.extend(str(f) for f, _ in records)
            return itertools.chain.from_iterable(
                hub.read_records(spec, f, group) for f, group in records
            )
        raise FileNotFoundError(
            f"{spec.name}/{split}: no {'; no '.join(missing.values())} in {root} (the "
            f"{spec.folder}/ folder may be up to {formats.SEARCH_DEPTH} folders below it)"
        )
    if missing:  # e.g. an MNLI folder with dev_matched but no dev_mismatched
        have = ", ".join(f"{s} ({found[s][0]})" for s in found)
        raise FileNotFoundError(
            f"{spec.name}/{split} is {' + '.join(s for s, _ in spec.file_splits(split))}: found {have} but no "
            f"{'; no '.join(f'{s} ({described})' for s, described in missing.items())} in {root}; add the missing "
            f"file, or load {' or '.join(found)} alone"
        )
    read_files.extend(
        str(path) for file_split, _ in spec.file_splits(split) for path in found[file_split]
    )
    return itertools.chain.from_iterable(
        [
            _read_file(spec, path, file_split, group)  # checked before any is read
            for file_split, group in spec.file_splits(split)
            for path in found[file_split]
        ]
    )


def _official_files(spec: TaskSpec, root: Path, split: str) -> tuple[list[Path], str]:
    """The official files of one file split under `root` (empty when absent) and how they are named."""
    if spec.format == "race":
        return formats.race_files(spec, root, split), f"{split}/{{{','.join(spec.groups)}}}/*.txt"
    if spec.format == "storycloze":
        found = formats.story_cloze_file(root, split)
        return [found] if found else [], "*val.csv" if split == "train" else "*test.csv"
    names = spec.split_file_names(split)
    found = formats.find_file(root, names, formats.SEARCH_DEPTH + spec.folder_depth)
    return [found] if found else [], " or ".join(names)


def evaluate(task: str, examples: Sequence[Example], predictions: Sequence) -> dict:
    """`metrics.compute` with the labels and groups (RACE level, MNLI matched/mismatched) taken from examples."""
    return metrics.compute(
        task,
        [e.label for e in examples],
        predictions,
        extra={"groups": [e.group for e in examples]},
    )


def write_submission(
    task: str,
    examples: Sequence[Example],
    predictions: Sequence,
    path: str | Path,
    suffix: str = "",
) -> list[Path]:
    """Write `<path>/<submission><suffix>.tsv` (`index<TAB>prediction`, GLUE server format; MNLI: MNLI-m.tsv and
    MNLI-mm.tsv by example group). Non-GLUE tasks get the same format under SNLI.tsv, SciTail.tsv, RACE.tsv,
    StoryCloze.tsv."""
    spec = get(task)
    if len(examples) != len(predictions):
        raise ValueError(f"{task}: {len(examples)} examples but {len(predictions)} predictions")
    files: dict[str, list[str]] = {}
    for example, prediction in zip(examples, predictions):
        name = spec.submission_file(example.group)
        files.setdefault(name, []).append(f"{example.id}\t{spec.format_prediction(prediction)}\n")
    written = []
    for name, lines in files.items():
        written.append(
            write_text(Path(path) / f"{name}{suffix}.tsv", "index\tprediction\n" + "".join(lines))
        )
    return written
