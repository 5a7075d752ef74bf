"""Readers for the twelve tasks' official distribution files, exactly as they are published.

Every reader yields `(file, line, item)` where `item` is an example, a `RowError` (malformed row, counted and
located) or an `Excluded` (a row the task definition leaves out). `registry.load` collects them.

Formats and their quirks (see shared/data/README.md section 2):

* GLUE tsv (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, and the old GLUE SNLI tsv): split on TAB only, no
  quoting (raw, unbalanced `"` are text); only `\\n` ends a line (other Unicode line breaks are text); a trailing
  `\\r` is dropped; the last line may lack its newline; a UTF-8 BOM may precede the header (MRPC). Columns are found
  by header name, so MNLI's 12-column train layout, 16-column dev layout, 10-column test layout and the k-shot
  dev_matched in train layout all read the same way. Files without a header (CoLA train/dev and
  `original/*`, SciTail `tsv_format`, STS-B `original/sts-*.tsv`) are recognised by their field count. Row width
  must equal the header's, except the SNLI tsv (11 or 15 fields whatever the header says: the annotator labels
  vary; `gold_label` is always the last field) and STS-B `original/` (7 or 9 fields: extra source columns at the
  end). Text fields are stripped (SST-2 has a trailing space before every TAB).
* SNLI 1.0 `.jsonl` (one JSON object per line) and `.txt` (the same with a 14-column header, gold label first).
  Gold label `-` (no annotator consensus) is excluded and counted, as in GPT-1 and most SNLI work.
* RACE: `RACE/{train,dev,test}/{high,middle}/<n>.txt`, each one JSON article with parallel lists `questions`,
  `options` (4 each) and `answers` (A-D); every question is one example; the level comes from the folder.
* Story Cloze: RFC-4180 csv with a header (`InputStoryid, InputSentence1-4, RandomFifthSentenceQuiz1/2,
  AnswerRightEnding`); files are recognised by the last split word in their name (`..._val.csv`, `..._test.csv`),
  whatever the rest of the name is.

Folders are searched for the split's file name at the top level first, then up to three levels down (so the
shared samples' `Deltaus_sBiMPM/snli_1.0/`, `mt-dnn_sample/tsv_format/` and `RACE/RACE/` layouts are found); a
name found in more than one folder is an error asking for the exact folder.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from gpt1.io import InputError
from gpt1.tasks.examples import ChoiceExample, Example, Excluded, PairExample, RowError, TextExample

if TYPE_CHECKING:
    from gpt1.tasks.registry import TaskSpec

Item = Example | RowError | Excluded
Rows = Iterator[tuple[str, int, Item]]

SEARCH_DEPTH = 3
RACE_LEVELS = ("middle", "high")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Columns:
    """Where a task's fields are in its tsv files (by header name; `headerless` names files without a header)."""

    text: tuple[str, ...]
    label: str | None
    id: str | None = None
    headerless: tuple[str, ...] | None = None
    widths: tuple[int, ...] = ()  # other accepted row widths besides the header's
    from_end: str | None = None  # a column read from the row's last field when the width differs


def text_or_pair(id: str, texts: tuple[str, ...], label, group: str | None) -> Example:
    if len(texts) == 1:
        return TextExample(id, texts[0], label, group)
    return PairExample(id, texts[0], texts[1], label, group)


# ---------------------------------------------------------------------------------------------------------------
# Line-oriented files


def _lines(path: Path) -> Iterator[tuple[int, str | RowError]]:
    """(line number, text) for each `\\n`-terminated line; undecodable lines come back as a RowError."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            raw = raw.rstrip(b"\n").removesuffix(b"\r")
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield number, RowError("not UTF-8", detail=f"byte {err.start}")


def read_tsv(spec: "TaskSpec", path: Path, group: str | None = None) -> Rows:
    cols: Columns = spec.columns
    file = str(path)
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        return
    if isinstance(first[1], RowError):
        raise InputError("first line is not UTF-8", file=file, line=1)
    first_fields = first[1].split("\t")
    if all(name in first_fields for name in cols.text):
        header, data = first_fields, lines
    elif cols.headerless and len(first_fields) in (len(cols.headerless), *cols.widths):
        header, data = list(cols.headerless), itertools.chain([first], lines)
    else:
        expected = f"a header with columns {list(cols.text)}"
        if cols.headerless:
            expected += f" or {len(cols.headerless)} tab-separated fields ({', '.join(cols.headerless)})"
        raise InputError(f"unrecognised {spec.name} tsv: expected {expected}, got {len(first_fields)} fields "
                         f"{first_fields[:6]}", file=file, line=1, field="header")
    index = {name: i for i, name in enumerate(header)}
    width = len(header)
    tail = cols.from_end if index.get(cols.from_end) == width - 1 else None
    has_label = cols.label in index
    has_id = cols.id in index
    used = [*cols.text, *([cols.label] if has_label else []), *([cols.id] if has_id else [])]
    needed = 1 + max(index[name] for name in used if name != tail)  # fields a row of another width must have

    def get(fields: list[str], name: str) -> str:
        if name == tail and len(fields) != width:
            return fields[-1]
        return fields[index[name]]

    for row, (number, line) in enumerate(data):
        if isinstance(line, RowError):
            yield file, number, line
            continue
        if not line:
            yield file, number, RowError("empty line")
            continue
        fields = line.split("\t")
        if len(fields) != width and (len(fields) not in cols.widths or len(fields) < needed):
            yield file, number, RowError(f"expected {width} fields", detail=f"got {len(fields)}")
            continue
        try:
            texts = tuple(get(fields, name).strip() for name in cols.text)
            label = spec.parse_label(get(fields, cols.label), cols.label) if has_label else None
            yield file, number, text_or_pair(get(fields, cols.id) if has_id else str(row), texts, label, group)
        except (RowError, Excluded) as item:
            yield file, number, item


def read_snli_jsonl(spec: "TaskSpec", path: Path, group: str | None = None) -> Rows:
    file = str(path)
    for row, (number, line) in enumerate(_lines(path)):
        if isinstance(line, RowError):
            yield file, number, line
            continue
        try:
            record = _json_record(line)
            texts = tuple(_text(record, key) for key in ("sentence1", "sentence2"))
            label = spec.parse_label(record.get("gold_label"), "gold_label")
            yield file, number, text_or_pair(str(record.get("pairID", row)), texts, label, group)
        except (RowError, Excluded) as item:
            yield file, number, item


def _json_record(line: str) -> dict:
    if not line.strip():
        raise RowError("empty line")
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


def looks_like_snli_jsonl(path: Path) -> bool:
    """An official SNLI/SciTail-snli_format jsonl (vs. a Hugging Face JSON export with premise/hypothesis)."""
    with open(path, "rb") as fh:
        head = fh.readline().removeprefix(_BOM)
    try:
        return "gold_label" in json.loads(head)
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError):
        return False


# ---------------------------------------------------------------------------------------------------------------
# RACE


def read_race(spec: "TaskSpec", files: list[Path]) -> Rows:
    for path in files:
        file = str(path)
        try:
            article = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as err:
            yield file, 1, RowError("not UTF-8", detail=f"byte {err.start}")
            continue
        except json.JSONDecodeError as err:
            yield file, err.lineno, RowError("invalid JSON", detail=err.msg)
            continue
        level = path.parent.name if path.parent.name in RACE_LEVELS else None
        yield from race_article(spec, article, file, level)


def race_article(spec: "TaskSpec", article, file: str, level: str | None) -> Rows:
    """One RACE article (a dict with article/questions/options/answers/id): one example per question."""
    if not isinstance(article, dict) or not isinstance(article.get("article"), str):
        yield file, 1, RowError("not a RACE article", field="article")
        return
    questions, options = article.get("questions"), article.get("options")
    answers = article.get("answers")  # absent on an unlabelled test set
    if not isinstance(questions, list) or not isinstance(options, list) or len(questions) != len(options) \
            or (answers is not None and (not isinstance(answers, list) or len(answers) != len(questions))):
        yield file, 1, RowError("questions/options/answers differ", field="questions")
        return
    article_id = str(article.get("id") or Path(file).name)
    if level is None:
        level = next((lv for lv in RACE_LEVELS if article_id.startswith(lv)), None)
    for q, (question, opts) in enumerate(zip(questions, options)):
        try:
            if not isinstance(question, str):
                raise RowError("missing text", field=f"questions[{q}]")
            if not isinstance(opts, list) or len(opts) != spec.n_choices or not all(isinstance(o, str) for o in opts):
                raise RowError(f"expected {spec.n_choices} options", field=f"options[{q}]", detail=repr(opts)[:80])
            label = spec.parse_label(answers[q], f"answers[{q}]") if answers is not None else None
            yield file, 1, ChoiceExample(f"{article_id}#{q}", article["article"].strip(), question.strip(),
                                         tuple(o.strip() for o in opts), label, level)
        except (RowError, Excluded) as item:
            yield file, 1, item


def race_files(root: Path, split: str) -> list[Path]:
    """Article files of one split: `root` may be the RACE root, a folder holding `RACE/`, a split or level folder."""
    if root.is_file():
        return [root]
    if root.name in RACE_LEVELS:
        return _numbered(root.glob("*.txt"))
    if not any((root / level).is_dir() for level in RACE_LEVELS):
        split_dirs = _find(root, lambda d, names, files: d.name == split and any(lv in names for lv in RACE_LEVELS))
        if not split_dirs:
            return []
        if len(split_dirs) > 1:
            raise ambiguous(root, f"RACE {split}/", split_dirs)
        root = split_dirs[0]
    return [path for level in RACE_LEVELS for path in _numbered((root / level).glob("*.txt"))]


def _numbered(paths) -> list[Path]:
    return sorted(paths, key=lambda p: (int(p.stem), "") if p.stem.isdigit() else (1 << 62, p.stem))


# ---------------------------------------------------------------------------------------------------------------
# Story Cloze

STORY_COLUMNS = ("InputStoryid", "InputSentence1", "InputSentence2", "InputSentence3", "InputSentence4",
                 "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2")
STORY_ANSWER = "AnswerRightEnding"


def read_story_cloze(spec: "TaskSpec", path: Path) -> Rows:
    file = str(path)
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return
        missing = [c for c in STORY_COLUMNS if c not in header]
        if missing:
            raise InputError(f"not a Story Cloze csv: missing columns {missing}", file=file, line=1, field="header")
        index = {name: i for i, name in enumerate(header)}
        line = reader.line_num + 1
        for fields in reader:
            number, line = line, reader.line_num + 1  # a quoted field may span lines: report where the row starts
            try:
                if len(fields) != len(header):
                    raise RowError(f"expected {len(header)} fields", detail=f"got {len(fields)}")
                story = " ".join(fields[index[f"InputSentence{i}"]].strip() for i in range(1, 5))
                endings = tuple(fields[index[f"RandomFifthSentenceQuiz{i}"]].strip() for i in (1, 2))
                label = spec.parse_label(fields[index[STORY_ANSWER]], STORY_ANSWER) if STORY_ANSWER in index \
                    else None
                yield file, number, ChoiceExample(fields[index["InputStoryid"]], story, "", endings, label)
            except (RowError, Excluded) as item:
                yield file, number, item


def story_cloze_file(root: Path, split: str) -> Path | None:
    """The csv whose name ends with the split word: 'val' (our train split) or 'test'."""
    wanted = {"train": "val", "test": "test"}[split]
    matches = [p for p in files_near(root, lambda name: name.lower().endswith(".csv"))
               if _split_word(p.stem) == wanted]
    if len(matches) > 1:
        raise ambiguous(root, f"Story Cloze {wanted} csv", matches)
    return matches[0] if matches else None


def _split_word(stem: str) -> str | None:
    words = [w for w in re.findall(r"[a-z]+", stem.lower()) if w in ("val", "validation", "dev", "test")]
    if not words:
        return None
    return "test" if words[-1] == "test" else "val"


# ---------------------------------------------------------------------------------------------------------------
# Finding files in a folder


def find_file(root: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` in `root`, else the one folder up to SEARCH_DEPTH below holding any of them."""
    for name in names:
        if (root / name).is_file():
            return root / name
    dirs = _find(root, lambda d, subdirs, files: any(name in files for name in names))
    if len(dirs) > 1:
        raise ambiguous(root, " or ".join(names), dirs)
    if dirs:
        return next(dirs[0] / name for name in names if (dirs[0] / name).is_file())
    return None


def files_near(root: Path, match) -> list[Path]:
    """Files matching `match(name)` in `root`, else in the nearest sub-folders that have any."""
    found = sorted(p for p in root.iterdir() if p.is_file() and match(p.name))
    if found:
        return found
    return [d / f for d in _find(root, lambda d, subdirs, files: any(match(f) for f in files))
            for f in sorted(os.listdir(d)) if match(f) and (d / f).is_file()]


def _find(root: Path, wanted) -> list[Path]:
    """Folders under `root` (depth 1..SEARCH_DEPTH, hidden ones skipped) for which wanted(dir, subdirs, files)."""
    hits = []
    base = len(root.parts)
    for dirpath, subdirs, files in os.walk(root):
        here = Path(dirpath)
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        depth = len(here.parts) - base
        if depth >= SEARCH_DEPTH:
            subdirs[:] = []
        if depth and wanted(here, subdirs, files):
            hits.append(here)
    return hits


def ambiguous(root: Path, what: str, found: list[Path]) -> InputError:
    shown = ", ".join(str(p) for p in found[:5])
    return InputError(f"{what} found in {len(found)} places ({shown}); pass the one you mean", file=root)
