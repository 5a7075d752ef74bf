"""Readers for the tasks' official distribution files, exactly as they are published.

Every reader yields `(file, line, item)` where `item` is an example, a `RowError` (malformed row, counted and
located) or an `Excluded` (a row the task definition leaves out). `gpt1.tasks.loading.load` collects them. A file
of another task is refused by its shape before any row is read (InputError naming the file and what was expected).

Formats and their quirks (see shared/data/README.md section 2):

* Tab-separated files (GLUE, the old GLUE SNLI tsv, SNLI and MultiNLI `.txt`, SciTail tsv_format/dgem_format):
  split on TAB only, no quoting (raw, unbalanced `"` are text); only `\\n` ends a line (other Unicode line breaks
  are text); a trailing `\\r` is dropped; the last line may lack its newline; a UTF-8 BOM may precede the header
  (MRPC). Columns are found by header name, so MNLI's 12-column train layout, 16-column dev layout, 10-column test
  layout and the k-shot dev_matched in train layout all read the same way. A header is this task's when it is
  one of its official headers (`Columns.headers`) and, for train and dev, has the label column; a header two
  tasks share (CoLA's and SST-2's test.tsv: `index<TAB>sentence`) is read only from the task's folder as
  distributed (`CoLA/`), which tells them apart. Any file in another task's distributed folder is refused.
  Files without a header (CoLA train/dev and `original/*`, SciTail, STS-B `original/sts-*.tsv`) are recognised
  by their field count and a valid label on the first row. Row width must equal the header's, except the SNLI
  tsv (11 or 15 fields whatever the header says: the annotator labels vary; `gold_label` is always the last
  field), MultiNLI's train `.txt` (11 of its 15 columns), STS-B `original/` and SciTail's dgem_format (extra
  columns at the end). Text fields are stripped (SST-2 has a trailing space before every TAB).
* JSON lines of NLI records (SNLI and MultiNLI `.jsonl`, SciTail's snli_format `.txt` and predictor_format
  `.jsonl`): `sentence1`, `sentence2`, `gold_label`; the first record's keys must be the task's (`Records`). Gold
  label `-` (no annotator consensus) is excluded and counted, as in GPT-1 and most NLI work.
* RACE: `RACE/{train,dev,test}/{middle,high}/<n>.txt`, each one JSON article with parallel lists `questions`,
  `options` (4 each) and `answers` (A-D); every question is one example; the level comes from the folder.
* Story Cloze: RFC-4180 csv with a header (`InputStoryid, InputSentence1-4, RandomFifthSentenceQuiz1/2,
  AnswerRightEnding`), one story per line as in the official files (a quoted field cannot span lines, so a
  stray quote spoils one row, counted and located, never the rest of the file); files are recognised by the
  last split word in their name (`..._val.csv`, `..._test.csv`), whatever the rest of the name is.

Finding files: the task's folder as distributed (`spec.folder`: `RTE/`, `snli_1.0/`, `SciTailV1.1/`, `RACE/`, ...)
may be the path given or up to SEARCH_DEPTH folders below it (so the shared samples' `Deltaus_sBiMPM/snli_1.0/`,
`mt-dnn_sample/tsv_format/` and `RACE/RACE/` layouts are found); the split's files sit `spec.folder_depth` folders
below that (SciTail's `tsv_format/`, RACE's `dev/high/`). File names are tried in the spec's order of preference; a
name found in more than one folder is an error asking for the exact folder.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from gpt1.io import InputError, check_input_file
from gpt1.tasks.examples import (
    ChoiceExample,
    Example,
    Excluded,
    Label,
    PairExample,
    RowError,
    TextExample,
)
from gpt1.tasks.registry import REGISTRY
from gpt1.tasks.spec import Columns, Records, TaskSpec

Item = Example | RowError | Excluded
Rows = Iterator[tuple[str, int, Item]]
Lines = Iterator[tuple[int, str | RowError]]
# _find's test of a folder: (folder, its sub-folders, its files) -> wanted
FolderTest = Callable[[Path, list[str], list[str]], bool]

SEARCH_DEPTH = 3
_BOM = b"\xef\xbb\xbf"
# Read line by line (RACE articles whole, and they are small); the largest official file (SNLI train) is far below.
MAX_TASK_FILE_BYTES = 4 << 30


def text_or_pair(id: str, texts: tuple[str, ...], label: Label, group: str | None) -> Example:
    if len(texts) == 1:
        return TextExample(id, texts[0], label, group)
    return PairExample(id, texts[0], texts[1], label, group)


def check_task_file(path: Path) -> Path:
    """`path` when it is a regular task file of a sane size; InputError naming it (a FIFO, a device, a dangling
    symlink, a folder) before any reader opens it."""
    return check_input_file(path, what="task file", max_bytes=MAX_TASK_FILE_BYTES)


class UniqueIds:
    """Every example's id, present and unique in its file: predictions and submissions are keyed on it. A row
    without one is malformed (counted and located), one seen before refuses the file."""

    def __init__(self, file: str, field: str):
        self.file, self.field = file, field
        self.lines: dict[str, int] = {}

    def check(self, value: object, line: int) -> str:
        """`value` (the id field as read: text, a number, or None when absent) as the example's id."""
        example_id = "" if value is None else str(value)
        if not example_id.strip():
            raise RowError("missing id", field=self.field, detail=repr(value))
        first = self.lines.setdefault(example_id, line)
        if first != line:
            raise InputError(
                f"id {example_id!r} repeats (first on line {first}): ids must be unique",
                file=self.file,
                line=line,
                field=self.field,
            )
        return example_id


def not_this_task(
    spec: TaskSpec, file: str, what: str, expected: str, line: int = 1, field: str | None = None
) -> InputError:
    return InputError(
        f"not a file of {spec.title} ({spec.name}): {what}; expected {expected}",
        file=file,
        line=line,
        field=field,
    )


def name_key(name: str) -> str:
    """A folder or file name as compared with a task's names: lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def in_own_folder(spec: TaskSpec, path: Path) -> bool:
    """Whether the file sits in the task's folder: its folder as distributed (`CoLA/test.tsv`,
    `RACE/dev/high/1.txt`) or one named after the task's id (`sst2/test.tsv`, as the hub names the GLUE tasks),
    compared without case or punctuation."""
    own = {name_key(spec.folder), name_key(spec.name)}
    return any(name_key(p.name) in own for p in path.parents[: spec.folder_depth + 1])


def check_folder(spec: TaskSpec, path: Path) -> None:
    """Refuse a file that sits in another task's folder as distributed (`SST-2/test.tsv` for CoLA)."""
    if in_own_folder(spec, path):
        return
    owner = next((s for s in REGISTRY.values() if s is not spec and in_own_folder(s, path)), None)
    if owner is not None:
        raise InputError(
            f"not a file of {spec.title} ({spec.name}): it is in {owner.folder}/, the folder of "
            f"{owner.title} ({owner.name}) as distributed; {spec.title}'s is {spec.folder}/",
            file=path,
        )


# ---------------------------------------------------------------------------------------------------------------
# Line-oriented files


def _lines(path: Path) -> Lines:
    """(line number, text) for each `\\n`-terminated line that is not blank (whitespace only: no row, so never
    a malformed one); undecodable lines come back as a RowError."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if not raw.strip():
                continue
            raw = raw.rstrip(b"\n").removesuffix(b"\r")
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield number, RowError("not UTF-8", detail=f"byte {err.start}")


def first_text(path: Path) -> str:
    """The start of a file (BOM removed), to tell JSON lines from a tsv."""
    with open(path, "rb") as fh:
        return fh.read(64).removeprefix(_BOM).decode("utf-8", errors="replace").lstrip()


def read_tsv(spec: TaskSpec, path: Path, split: str, group: str | None = None) -> Rows:
    cols = spec.columns
    if cols is None:
        raise ValueError(f"{spec.name}: no tab-separated layout (TaskSpec.columns) to read {path}")
    file = str(path)
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        return
    if isinstance(first[1], RowError):
        raise InputError("first line is not UTF-8", file=file, line=1)
    first_fields = first[1].split("\t")
    header, headed = _tsv_layout(spec, cols, file, split, first_fields)
    data: Lines = lines if headed else itertools.chain([first], lines)
    index = {name: i for i, name in enumerate(header)}
    width = len(header)
    tail = (
        cols.from_end
        if cols.from_end is not None and index.get(cols.from_end) == width - 1
        else None
    )
    has_label = cols.label in index
    id_col = cols.id if cols.id is not None and cols.id in index else None
    used = [*cols.text, *([cols.label] if has_label else []), *([id_col] if id_col else [])]
    # fields a row of another width must have
    needed = 1 + max(index[name] for name in used if name != tail)

    def get(fields: list[str], name: str) -> str:
        if name == tail and len(fields) != width:
            return fields[-1]
        return fields[index[name]]

    ids = UniqueIds(file, id_col) if id_col else None
    for row, (number, line) in enumerate(data):
        if isinstance(line, RowError):
            yield file, number, line
            continue
        fields = line.split("\t")
        if len(fields) != width and (len(fields) not in cols.widths or len(fields) < needed):
            yield file, number, RowError(f"expected {width} fields", detail=f"got {len(fields)}")
            continue
        try:
            texts = tuple(get(fields, name).strip() for name in cols.text)
            label = spec.parse_label(get(fields, cols.label), cols.label) if has_label else None
            example_id = ids.check(get(fields, ids.field), number) if ids else str(row)
            yield file, number, text_or_pair(example_id, texts, label, group)
        except (RowError, Excluded) as item:
            yield file, number, item


def _tsv_layout(
    spec: TaskSpec, cols: Columns, file: str, split: str, fields: list[str]
) -> tuple[list[str], bool]:
    """The header of a tsv whose first line is `fields`, and whether that line is the header (False: a headerless
    file of this task, whose header is `cols.headerless`); refuses the file when its first line fits none of the
    task's layouts."""
    layouts = []
    headers = [h for h in cols.headers if cols.label in h or not spec.labelled_split(split)]
    if headers:
        layouts.append(
            "a header "
            + " or ".join(
                "\t".join(h) if len(h) < 8 else f"of {len(h)} columns {h[0]}..{h[-1]}"
                for h in headers
            )
        )
    if cols.headerless:
        layouts.append(
            f"{' or '.join(map(str, (len(cols.headerless), *cols.widths)))} tab-separated fields "
            f"({', '.join(cols.headerless)}) with a {spec.title} label"
        )
    expected = " or ".join(layouts)
    if tuple(fields) in cols.headers:
        if spec.labelled_split(split) and cols.label not in fields:
            raise not_this_task(
                spec,
                file,
                f"its header has no label column {cols.label!r} for the {split} split "
                "(a test file?)",
                expected,
                field="header",
            )
        sharing = [
            s.title
            for s in REGISTRY.values()
            if s is not spec and s.columns and tuple(fields) in s.columns.headers
        ]
        if sharing and not in_own_folder(spec, Path(file)):
            raise InputError(
                f"{spec.title} ({spec.name}) or {' or '.join(sharing)}? Their files share this header "
                f"{fields}: only their folder tells them apart; put the file in a folder named "
                f"{spec.folder}/ or {spec.name}/",
                file=file,
                line=1,
                field="header",
            )
        return fields, True
    if cols.headerless and len(fields) in (len(cols.headerless), *cols.widths):
        label_at = cols.headerless.index(cols.label)
        try:
            spec.parse_label(fields[label_at], cols.label)
            return list(cols.headerless), False
        except Excluded:
            return list(cols.headerless), False
        except RowError as err:
            raise not_this_task(
                spec,
                file,
                f"line 1 is neither a header nor a data row ({err} {fields[label_at][:40]!r})",
                expected,
                field=cols.label,
            ) from None
    raise not_this_task(
        spec,
        file,
        f"line 1 has {len(fields)} fields {[f[:30] for f in fields[:6]]}",
        expected,
        field="header",
    )


# ---------------------------------------------------------------------------------------------------------------
# JSON lines of NLI records


def looks_like_records(spec: TaskSpec, path: Path) -> bool:
    """An official NLI jsonl (a record with the task's label key) rather than a Hugging Face export."""
    if spec.records is None:
        return False
    with open(path, "rb") as fh:
        head = fh.readline().removeprefix(_BOM)
    try:
        record = json.loads(head)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(record, dict) and spec.records.label in record


def read_records(spec: TaskSpec, path: Path, group: str | None = None) -> Rows:
    records = spec.records
    if records is None:
        raise ValueError(f"{spec.name}: no JSON-lines layout (TaskSpec.records) to read {path}")
    file = str(path)
    ids = UniqueIds(file, records.id) if records.id else None
    for row, (number, line) in enumerate(_lines(path)):
        if isinstance(line, RowError):
            yield file, number, line
            continue
        try:
            record = _json_record(line)
            if row == 0:
                _check_record_keys(spec, records, file, record)
            texts = tuple(_text(record, key) for key in records.text)
            label = spec.parse_label(record.get(records.label), records.label)
            example_id = ids.check(record.get(records.id), number) if ids else str(row)
            yield file, number, text_or_pair(example_id, texts, label, group)
        except (RowError, Excluded) as item:
            yield file, number, item


def _check_record_keys(spec: TaskSpec, records: Records, file: str, record: dict) -> None:
    foreign = sorted(set(record) - records.keys)
    missing = sorted(records.required - set(record))
    if foreign or missing:
        what = ", ".join(
            part
            for part in (
                f"keys {foreign} it should not have" if foreign else "",
                f"no {missing}" if missing else "",
            )
            if part
        )
        raise not_this_task(
            spec,
            file,
            f"its first record has {what}",
            f"records with {sorted(records.required)} among {sorted(records.keys)}",
        )


def _json_record(line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise RowError("invalid JSON", detail=err.msg) from None
    if not isinstance(record, dict):
        raise RowError("invalid JSON", detail="not an object")
    return record


def _text(record: dict, key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise RowError("missing text", field=key, detail=repr(value)[:50])
    return value.strip()


# ---------------------------------------------------------------------------------------------------------------
# RACE


def read_race(spec: TaskSpec, files: list[Path]) -> Rows:
    for path in files:
        file = str(path)
        try:
            article = json.loads(path.read_bytes().decode("utf-8-sig"))
        except UnicodeDecodeError as err:
            yield file, 1, RowError("not UTF-8", detail=f"byte {err.start}")
            continue
        except json.JSONDecodeError as err:
            yield (
                file,
                err.lineno,
                RowError("not a RACE article", detail=f"invalid JSON: {err.msg}"),
            )
            continue
        level = path.parent.name if path.parent.name in spec.groups else None
        yield from race_article(spec, article, file, level)


def race_article(spec: TaskSpec, article: object, file: str, level: str | None) -> Rows:
    """One RACE article (a dict with article/questions/options/answers/id): one example per question."""
    if not isinstance(article, dict) or not isinstance(article.get("article"), str):
        yield file, 1, RowError("not a RACE article", field="article")
        return
    questions, options = article.get("questions"), article.get("options")
    answers = article.get("answers")  # absent on an unlabelled test set
    if (
        not isinstance(questions, list)
        or not isinstance(options, list)
        or len(questions) != len(options)
        or (
            answers is not None
            and (not isinstance(answers, list) or len(answers) != len(questions))
        )
    ):
        yield file, 1, RowError("questions/options/answers differ", field="questions")
        return
    article_id = str(article.get("id") or Path(file).name)
    if level is None:
        level = next((lv for lv in spec.groups if article_id.startswith(lv)), None)
    for q, (question, opts) in enumerate(zip(questions, options)):
        try:
            if not isinstance(question, str):
                raise RowError("missing text", field=f"questions[{q}]")
            if (
                not isinstance(opts, list)
                or len(opts) != spec.n_choices
                or not all(isinstance(o, str) for o in opts)
            ):
                raise RowError(
                    f"expected {spec.n_choices} options",
                    field=f"options[{q}]",
                    detail=repr(opts)[:80],
                )
            label = spec.parse_label(answers[q], f"answers[{q}]") if answers is not None else None
            yield (
                file,
                1,
                ChoiceExample(
                    f"{article_id}#{q}",
                    article["article"].strip(),
                    question.strip(),
                    tuple(o.strip() for o in opts),
                    label,
                    level,
                ),
            )
        except (RowError, Excluded) as item:
            yield file, 1, item


def race_files(spec: TaskSpec, root: Path, split: str) -> list[Path]:
    """Article files of one split: `root` is the RACE folder, a folder up to SEARCH_DEPTH above it, a split folder
    or a level folder."""
    levels = spec.groups
    if root.is_file():
        return [root]
    if root.name in levels:
        return _numbered(root.glob("*.txt"))
    if not any((root / level).is_dir() for level in levels):
        # the split folder is one above the files
        split_dirs = _find(
            root,
            lambda d, names, files: d.name == split and any(lv in names for lv in levels),
            SEARCH_DEPTH + spec.folder_depth - 1,
        )
        if not split_dirs:
            return []
        if len(split_dirs) > 1:
            raise ambiguous(root, f"RACE {split}/", split_dirs)
        root = split_dirs[0]
    return [path for level in levels for path in _numbered((root / level).glob("*.txt"))]


def _numbered(paths: Iterable[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: (int(p.stem), "") if p.stem.isdigit() else (1 << 62, p.stem))


# ---------------------------------------------------------------------------------------------------------------
# Story Cloze

STORY_COLUMNS = (
    "InputStoryid",
    "InputSentence1",
    "InputSentence2",
    "InputSentence3",
    "InputSentence4",
    "RandomFifthSentenceQuiz1",
    "RandomFifthSentenceQuiz2",
)
STORY_ANSWER = "AnswerRightEnding"


def read_story_cloze(spec: TaskSpec, path: Path) -> Rows:
    """One story per line, each line parsed as one csv record (strict quoting), so that an unclosed quote spoils
    its own row only: `csv.reader` over the whole file would read on to the next quote, swallowing the rows
    between into one field."""
    file = str(path)
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        return
    header = _csv_fields(first[1]) if isinstance(first[1], str) else None
    if not isinstance(header, list):
        raise InputError(
            "not a Story Cloze csv: unreadable header", file=file, line=1, field="header"
        )
    missing = [c for c in STORY_COLUMNS if c not in header]
    if missing:
        raise not_this_task(
            spec,
            file,
            f"its header lacks {missing}",
            f"a csv header with {list(STORY_COLUMNS)} (+ {STORY_ANSWER})",
            field="header",
        )
    index = {name: i for i, name in enumerate(header)}
    ids = UniqueIds(file, "InputStoryid")
    for number, line in lines:
        try:
            if isinstance(line, RowError):
                raise line
            fields = _csv_fields(line)
            if isinstance(fields, RowError):
                raise fields
            if len(fields) != len(header):
                raise RowError(f"expected {len(header)} fields", detail=f"got {len(fields)}")
            story = " ".join(fields[index[f"InputSentence{i}"]].strip() for i in range(1, 5))
            endings = tuple(fields[index[f"RandomFifthSentenceQuiz{i}"]].strip() for i in (1, 2))
            label = (
                spec.parse_label(fields[index[STORY_ANSWER]], STORY_ANSWER)
                if STORY_ANSWER in index
                else None
            )
            yield (
                file,
                number,
                ChoiceExample(
                    ids.check(fields[index["InputStoryid"]], number), story, "", endings, label
                ),
            )
        except (RowError, Excluded) as item:
            yield file, number, item


def _csv_fields(line: str) -> list[str] | RowError:
    try:
        return next(csv.reader([line], strict=True))
    except csv.Error as err:
        reason = "unclosed quote" if "unexpected end of data" in str(err) else "bad quoting"
        return RowError(reason, detail=str(err))


def story_cloze_file(root: Path, split: str) -> Path | None:
    """The csv whose name ends with the split word: 'val' (our train split) or 'test'."""
    wanted = {"train": "val", "test": "test"}[split]
    matches = [
        p
        for p in files_near(root, lambda name: name.lower().endswith(".csv"))
        if _split_word(p.stem) == wanted
    ]
    if len(matches) > 1:
        raise ambiguous(root, f"Story Cloze {wanted} csv", matches)
    return matches[0] if matches else None


def _split_word(stem: str) -> str | None:
    words = [
        w for w in re.findall(r"[a-z]+", stem.lower()) if w in ("val", "validation", "dev", "test")
    ]
    if not words:
        return None
    return "test" if words[-1] == "test" else "val"


# ---------------------------------------------------------------------------------------------------------------
# Finding files in a folder


def find_file(root: Path, names: tuple[str, ...], depth: int = SEARCH_DEPTH) -> Path | None:
    """The first of `names` (in order of preference) in `root`, else in the one folder up to `depth` below
    holding it."""
    for name in names:
        # lexists: a FIFO or a dangling symlink under the name is found, and refused by name when read
        if os.path.lexists(root / name) and not (root / name).is_dir():
            return root / name
    for name in names:
        dirs = _find(root, _holding(name), depth)
        if len(dirs) > 1:
            raise ambiguous(root, name, dirs)
        if dirs:
            return dirs[0] / name
    return None


def _holding(name: str) -> FolderTest:
    """A `_find` test for folders that hold a file `name` (bound here, not by a loop's lambda)."""
    return lambda d, subdirs, files: name in files


def files_near(root: Path, match: Callable[[str], object]) -> list[Path]:
    """Files matching `match(name)` in `root`, else in the nearest sub-folders that have any."""
    found = sorted(p for p in root.iterdir() if not p.is_dir() and match(p.name))
    if found:
        return found
    return [
        d / f
        for d in _find(root, lambda d, subdirs, files: any(match(f) for f in files))
        for f in sorted(os.listdir(d))
        if match(f) and not (d / f).is_dir()
    ]


def _find(root: Path, wanted: FolderTest, depth: int = SEARCH_DEPTH) -> list[Path]:
    """Folders 1..depth levels under `root` (hidden ones skipped) for which wanted(dir, subdirs, files)."""
    hits = []
    base = len(root.parts)
    for dirpath, subdirs, files in os.walk(root):
        here = Path(dirpath)
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        level = len(here.parts) - base
        if level and wanted(
            here, list(subdirs), files
        ):  # before pruning: `wanted` may look at the sub-folders
            hits.append(here)
        if level >= depth:
            subdirs[:] = []
    return hits


def ambiguous(root: Path, what: str, found: list[Path]) -> InputError:
    shown = ", ".join(str(p) for p in found[:5])
    return InputError(
        f"{what} found in {len(found)} places ({shown}); pass the one you mean", file=root
    )
