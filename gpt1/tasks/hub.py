"""Hugging Face `datasets` sources for the twelve tasks: hub ids and local exports, read into the same examples.

A `hf:` reference is `hf:<name>[:<config>][@<revision>]` where name is

* `glue/<config>` (e.g. `hf:glue/sst2`, `hf:glue/mnli`): the GLUE repo `nyu-mll/glue` with that config;
* a short alias `snli`, `scitail`, `race`, `story_cloze` (the canonical repos below, with the task's config:
  SciTail `tsv_format`, RACE `all`, Story Cloze `2016`);
* any `owner/repo` (or `owner/repo/config`) holding the task in the same schema.

Local exports (no network): a folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`, a `.parquet`
file, a `.json`/`.jsonl` file of records (`Dataset.to_json`), or a folder of such files named after the split
(`train-00000-of-00001.parquet`, `validation.jsonl`, as in a hub snapshot).

Split names: train -> `train`, dev -> `validation` (MNLI: dev_matched -> `validation_matched`, dev_mismatched ->
`validation_mismatched`, dev -> both), test -> `test` (MNLI likewise). Story Cloze: train -> `validation`, test ->
`test` (GPT-1 trains on the labelled validation stories and reports the test set).
Labels: GLUE and SNLI store the class index in `label` (-1 = none: an unlabelled GLUE test row, or an SNLI pair
without gold label, which is excluded); SciTail and RACE store the label string/letter; Story Cloze the 1-based
ending number.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpt1.io import InputError, parquet_file
from gpt1.tasks.examples import ChoiceExample, Excluded, RowError
from gpt1.tasks.formats import (
    Rows,
    UniqueIds,
    ambiguous,
    files_near,
    name_key,
    not_this_task,
    text_or_pair,
)
from gpt1.tasks.registry import REGISTRY
from gpt1.tasks.spec import TaskSpec

REPOS = {
    "glue": "nyu-mll/glue",
    "snli": "stanfordnlp/snli",
    "scitail": "allenai/scitail",
    "race": "ehovy/race",
    "story_cloze": "LSDSem/story_cloze",
}
DEFAULT_CONFIGS = {
    "allenai/scitail": "tsv_format",
    "ehovy/race": "all",
    "LSDSem/story_cloze": "2016",
}
RECORD_SUFFIXES = (".parquet", ".jsonl", ".json")


def parse_ref(ref: str) -> tuple[str, str | None, str | None]:
    """`glue/sst2@v1` -> ("nyu-mll/glue", "sst2", "v1"); `race` -> ("ehovy/race", "all", None)."""
    ref, _, revision = ref.removeprefix("hf:").partition("@")
    ref, _, config = ref.partition(":")
    parts = [p for p in ref.split("/") if p]
    if len(parts) == 3 and not config:
        repo, config = "/".join(parts[:2]), parts[2]
    elif len(parts) == 2 and parts[0] in REPOS and not config:
        repo, config = REPOS[parts[0]], parts[1]
    elif len(parts) == 1 and parts[0] in REPOS:
        repo = REPOS[parts[0]]
    elif len(parts) in (1, 2):
        repo = "/".join(parts)
    else:
        raise ValueError(
            f"bad Hugging Face reference 'hf:{ref}': expected hf:<name>[:<config>][@<revision>]"
        )
    return repo, config or DEFAULT_CONFIGS.get(repo), revision or None


def hf_splits(spec: TaskSpec, split: str) -> list[tuple[str, str | None]]:
    """(hub split name, example group) pairs making up one of our splits."""
    return [(spec.hub_split(name), group) for name, group in spec.file_splits(split)]


def read_hub(spec: TaskSpec, ref: str, split: str) -> Rows:
    import datasets

    repo, config, revision = parse_ref(ref)
    for hf_split, group in hf_splits(spec, split):
        dataset = datasets.load_dataset(repo, config, split=hf_split, revision=revision)
        yield from read_rows(
            spec,
            _dataset_rows(dataset),
            f"hf:{repo}{':' + config if config else ''}[{hf_split}]",
            group,
        )


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and (
        (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()
    )


def read_saved(spec: TaskSpec, path: Path, split: str) -> Rows:
    """A `save_to_disk` folder: a DatasetDict (the split is picked by name) or a single Dataset (used whole)."""
    import datasets

    check_export_name(spec, path)
    saved = datasets.load_from_disk(str(path))
    if not isinstance(saved, datasets.DatasetDict):
        yield from read_rows(spec, _dataset_rows(saved), str(path), spec.group_of_split(split))
        return
    for hf_split, group in hf_splits(spec, split):
        name = next((n for n in (hf_split, split) if n in saved), None)
        if name is None:
            raise FileNotFoundError(
                f"{path}: no split {hf_split!r} for {spec.name}/{split}; has {list(saved)}"
            )
        yield from read_rows(spec, _dataset_rows(saved[name]), f"{path}[{name}]", group)


def _dataset_rows(dataset) -> Iterable[dict]:
    """Rows of a `datasets.Dataset` as dicts, read as Arrow batches (row-by-row access is ~10x slower)."""
    for batch in dataset.with_format("arrow").iter(batch_size=4096):
        yield from batch.to_pylist()


def record_files(root: Path, spec: TaskSpec, split: str) -> list[tuple[Path, str | None]]:
    """Parquet/JSON files named after the split's hub names in `root` or the one sub-folder holding them."""
    out = []
    for hf_split, group in hf_splits(spec, split):
        pattern = re.compile(
            rf"^{hf_split}([-._].*)?({'|'.join(map(re.escape, RECORD_SUFFIXES))})$"
        )
        files = files_near(root, pattern.match)
        if len({f.parent for f in files}) > 1:
            raise ambiguous(root, f"{hf_split} records", sorted({f.parent for f in files}))
        out += [(f, group) for f in files]
    return out


def read_records(spec: TaskSpec, path: Path, group: str | None) -> Rows:
    """A Parquet file, a JSON-lines file or a JSON array of records in the hub schema."""
    check_export_name(spec, path)
    if path.suffix == ".parquet":
        rows: Iterable = parquet_file(path).read().to_pylist()
    else:
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as err:
            raise InputError(f"not UTF-8 text (byte {err.start})", file=path) from None
        if text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as err:
                raise InputError(
                    f"not valid JSON: {err.msg} (column {err.colno})", file=path, line=err.lineno
                ) from None
        else:
            rows = (_json_line(line) for line in text.split("\n") if line.strip())
    yield from read_rows(spec, rows, str(path), group)


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        return RowError("invalid JSON", detail=err.msg)


# The column an export's example ids come from, where the export carries them (GLUE's `idx`); RACE numbers each
# article's questions itself, and a row without the column is numbered by its position: unique by construction.
ID_COLUMNS = {"storycloze": "story_id"}


def read_rows(spec: TaskSpec, rows: Iterable, source: str, group: str | None) -> Rows:
    """Hub-schema rows (dicts) to examples; the row number (1-based) stands in for the line. An id repeated within
    the source is refused by row and column (predictions and submissions are keyed on it)."""
    questions_seen: Counter = Counter()  # RACE: one row per question, numbered within its article
    ids = UniqueIds(source, ID_COLUMNS.get(spec.name, "idx"))
    for number, row in enumerate(rows, start=1):
        if isinstance(row, RowError):
            yield source, number, row
            continue
        if number == 1:
            _check_columns(spec, row, source)
        if not isinstance(row, dict):
            yield source, number, RowError("not a record (JSON object)", detail=repr(row)[:50])
            continue
        try:
            example = _example(spec, row, number - 1, group, questions_seen)
            if spec.format != "race" and ids.field in row:
                ids.check(row[ids.field], number)
            yield source, number, example
        except (RowError, Excluded) as item:
            yield source, number, item
        except KeyError as err:
            yield source, number, RowError("missing column", field=str(err.args[0]))


def _label_kind(spec: TaskSpec) -> str:
    return (
        "label names" if spec.hf_label_names else "scores" if spec.regression else "class indices"
    )


def check_export_name(spec: TaskSpec, path: Path) -> None:
    """Two pairs of tasks have the same hub schema (CoLA and SST-2: sentence, label, idx; MRPC and RTE: sentence1,
    sentence2, label, idx), so a local export of one reads as the other: for those, the export's file or one of
    its three nearest folders must be named after the task (`sst2/`, `glue_sst2.parquet`, `SST-2/`)."""
    schema = (frozenset(spec.hf_columns), _label_kind(spec))
    sharing = [
        s
        for s in REGISTRY.values()
        if s is not spec and (frozenset(s.hf_columns), _label_kind(s)) == schema
    ]
    if not sharing:
        return
    names = {
        spec.name,
        name_key(spec.folder),
        (parse_ref(spec.hf)[1] or "").lower(),
    }
    for part in (path.stem, *(p.name for p in path.parents[:3])):
        lower = part.lower()
        if names & {name_key(part), *re.split(r"[^a-z0-9]+", lower)}:
            return
    raise InputError(
        f"{spec.title} ({spec.name}) or {' or '.join(s.title for s in sharing)}? Their hub exports have "
        f"the same columns {list(spec.hf_columns)}: name the export's file or folder after the task "
        f"(e.g. {spec.name}/)",
        file=path,
    )


def _check_columns(spec: TaskSpec, row, source: str) -> None:
    """The first record must have the task's hub columns (the label may be absent) and no other: an export of
    another dataset is refused before any row is read."""
    expected = f"the hub columns {list(spec.hf_columns)}"
    if not isinstance(row, dict):
        raise not_this_task(
            spec, source, f"its records are {type(row).__name__}, not objects", expected
        )
    missing = [c for c in spec.hf_columns if c not in row and c != spec.hf_label]
    foreign = sorted(c for c in row if c not in spec.hf_columns)
    if missing or foreign:
        what = "; ".join(
            part
            for part in (
                f"no column {missing}" if missing else "",
                f"columns {foreign} the hub's {spec.title} has not" if foreign else "",
            )
            if part
        )
        raise not_this_task(
            spec, source, f"its records have {what}", expected, field=(missing or foreign)[0]
        )
    label = row.get(spec.hf_label)
    if label is None or label == -1:
        return
    # The label's type tells exports with the same columns apart (SNLI vs SciTail, STS-B vs MRPC or RTE).
    wanted = (
        (str, "label names")
        if spec.hf_label_names
        else (float, "scores")
        if spec.regression
        else (int, "class indices")
    )
    if not isinstance(label, wanted[0]) or isinstance(label, bool):
        raise not_this_task(
            spec,
            source,
            f"its {spec.hf_label!r} is {type(label).__name__} {label!r}",
            f"{wanted[1]} in {spec.hf_label!r}",
            field=spec.hf_label,
        )


def _example(spec: TaskSpec, row: dict, index: int, group: str | None, questions_seen: Counter):
    if spec.format == "race":
        article_id = str(row["example_id"])
        level = group or next((lv for lv in spec.groups if article_id.startswith(lv)), None)
        q = questions_seen[article_id]
        questions_seen[article_id] += 1
        answer = row.get(spec.hf_label)
        label = spec.parse_label(answer, spec.hf_label) if answer not in (None, "") else None
        options = row["options"]
        if not isinstance(options, list) or len(options) != spec.n_choices:
            raise RowError(
                f"expected {spec.n_choices} options", field="options", detail=repr(options)[:80]
            )
        return ChoiceExample(
            f"{article_id}#{q}",
            _str(row, "article"),
            _str(row, "question"),
            tuple(str(o).strip() for o in options),
            label,
            level,
        )
    if spec.format == "storycloze":
        story = " ".join(_str(row, f"input_sentence_{i}") for i in range(1, 5))
        answer = row.get(spec.hf_label)
        label = spec.parse_label(str(answer), spec.hf_label) if answer not in (None, -1) else None
        return ChoiceExample(
            str(row["story_id"]),
            story,
            "",
            (_str(row, "sentence_quiz1"), _str(row, "sentence_quiz2")),
            label,
            group,
        )
    texts = tuple(_str(row, name) for name in spec.hf_text)
    label = spec.parse_label(row[spec.hf_label], spec.hf_label) if spec.hf_label in row else None
    return text_or_pair(str(row.get("idx", index)), texts, label, group)


def _str(row: dict, key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise RowError("missing text", field=key, detail=repr(value)[:50])
    return value.strip()
