"""Task files: for each registered task, its official files damaged the ways real files are (empty, missing,
binary, unknown labels, a header without rows, one malformed or non-UTF-8 row, CRLF, a BOM, a cut last line), given
where a folder is expected, or standing in for the training rows; and every task's loader handed each other task's
training file.

Refusals go through `gpt1 finetune` (in this process) where the run is what a user would start, and through
`gpt1.tasks.load` where the question is what one file loads as (counts of examples and malformed rows).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import random
from pathlib import Path

from gpt1 import tasks
from gpt1.io import read_json
from gpt1.tasks import REGISTRY, TaskSpec
from tests.battery.core import Case, api, cli

CATEGORY = "task files"
WRONG_TASK = "wrong-task files"
# One case per kind of damage is in the CI subset, each on a different task.
FAST = {("sst2", "train-garbage"), ("mnli", "eval-header-only"), ("rte", "single-file"),
        ("storycloze", "eval-copy-of-train"), ("race", "one-malformed-row"), ("snli", "train-unknown-labels"),
        ("cola", "crlf")}


@functools.lru_cache(maxsize=None)
def sources(tasks_root: Path, task: str, split: str) -> tuple[str, ...]:
    """The files `split` of the sample task is read from, relative to the task's folder."""
    spec = REGISTRY[task]
    folder = tasks_root / spec.folder
    data = tasks.load(task, folder, split)
    return tuple(str(Path(s).relative_to(folder)) for s in data.report.sources)


@functools.lru_cache(maxsize=None)
def loaded(tasks_root: Path, task: str, split: str) -> tuple[int, tuple]:
    """(examples, content of each) of an undamaged sample split."""
    data = tasks.load(task, tasks_root / REGISTRY[task].folder, split)
    return len(data), tuple(tasks.content(ex) for ex in data)


def headline(spec: TaskSpec) -> str:
    return spec.eval_splits[0]


# -- damage, by file format -----------------------------------------------------------------------------------------
def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8-sig").split("\n")  # MRPC's files start with a BOM


def _has_header(spec: TaskSpec, first: str) -> bool:
    return spec.columns is None or spec.columns.headerless is None or \
        any(tuple(first.split("\t")) == h for h in spec.columns.headers)


def unknown_labels(spec: TaskSpec, path: Path) -> str:
    """Every row's label replaced by one the task does not have; returns the label field's name."""
    if spec.format == "race":
        article = read_json(path)
        article["answers"] = ["Z"] * len(article["answers"])
        path.write_text(json.dumps(article), encoding="utf-8")
        return "answers"
    if spec.format == "storycloze":
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
        at = rows[0].index("AnswerRightEnding")
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([rows[0]] + [r[:at] + ["9"] + r[at + 1:] for r in rows[1:]])
        path.write_text(buffer.getvalue(), encoding="utf-8")
        return "AnswerRightEnding"
    lines = _lines(path)
    if path.suffix == ".jsonl":
        key = spec.records.label
        out = [json.dumps({**json.loads(line), key: "bogus"}) if line.strip() else line for line in lines]
        path.write_text("\n".join(out), encoding="utf-8")
        return key
    cols = spec.columns
    header = lines[0].split("\t") if _has_header(spec, lines[0]) else list(cols.headerless)
    at = header.index(cols.label)
    start = 1 if _has_header(spec, lines[0]) else 0
    for i in range(start, len(lines)):
        fields = lines[i].split("\t")
        if len(fields) > at:
            fields[at] = "bogus"
            lines[i] = "\t".join(fields)
    path.write_text("\n".join(lines), encoding="utf-8")
    return cols.label


def header_only(spec: TaskSpec, path: Path) -> None:
    """The file with its header (if it has one) and no rows; a RACE article with no questions."""
    if spec.format == "race":
        article = read_json(path)
        article.update(questions=[], options=[], answers=[])
        path.write_text(json.dumps(article), encoding="utf-8")
        return
    first = _lines(path)[0]
    keep = path.suffix != ".jsonl" and (spec.format == "storycloze" or _has_header(spec, first))
    path.write_text(first + "\n" if keep else "", encoding="utf-8")


def malformed_row(spec: TaskSpec, path: Path) -> None:
    """One malformed row added (a new article file for RACE)."""
    if spec.format == "race":
        (path.parent / "9999.txt").write_text('{"article": "cut here', encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    row = "{not json" if path.suffix == ".jsonl" else "a row with one field"
    path.write_text(text.rstrip("\n") + "\n" + row + "\n", encoding="utf-8")


def non_utf8_row(spec: TaskSpec, path: Path) -> None:
    """One row's first text byte replaced by 0xFF (a new article file for RACE)."""
    if spec.format == "race":
        (path.parent / "9998.txt").write_bytes(b'{"article": "\xff"}')
        return
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"\xff" + lines[2]
    path.write_bytes(b"\n".join(lines))


def with_bom(path: Path) -> None:
    """The file starting with a UTF-8 byte order mark (MRPC's files have one already)."""
    data = path.read_bytes()
    if not data.startswith(b"\xef\xbb\xbf"):
        path.write_bytes(b"\xef\xbb\xbf" + data)


def cut_last_line(path: Path) -> None:
    """The file cut in the middle of its last row (no final newline)."""
    data = path.read_bytes().rstrip(b"\n")
    last = data.rfind(b"\n")
    path.write_bytes(data[: last + 1 + (len(data) - last - 1) // 2])


# -- cases ----------------------------------------------------------------------------------------------------------
def task_cases(task: str) -> list[Case]:
    spec = REGISTRY[task]
    eval_split = headline(spec)

    def folder(fx, work: Path) -> Path:
        return fx.copy(fx.tasks / spec.folder, work)

    def train_files(fx) -> tuple[str, ...]:
        return sources(fx.tasks, task, "train")

    def finetune():
        return lambda fx, work: fx.finetune_argv(task, work / spec.folder, work / "out")

    def finetune_file(relative: str, *extra: str):
        return lambda fx, work: fx.finetune_argv(task, work / spec.folder / relative, work / "out", extra=list(extra))

    cases: list[Case] = []

    def add(name: str, case_kind, *args, **kwargs) -> None:
        cases.append(case_kind(CATEGORY, f"{task}/{name}", *args, fast=(task, name) in FAST, **kwargs))

    # Refused through `gpt1 finetune`, naming the damaged file.
    def damaged(name: str, split: str, damage, *cause):
        def prepare(fx, work: Path) -> None:
            root = folder(fx, work)
            for relative in sources(fx.tasks, task, split):
                damage(root / relative)
        add(name, _named_refusal, split, cause, finetune(), prepare)

    damaged("train-empty", "train", lambda p: p.write_bytes(b""))
    damaged("train-garbage", "train", lambda p: p.write_bytes(random.Random(0).randbytes(3000)))
    damaged("train-unknown-labels", "train", lambda p: unknown_labels(spec, p), ("label", "answer"))
    damaged("eval-header-only", eval_split, lambda p: header_only(spec, p), ("no examples", "no labelled"))

    def delete_train(fx, work: Path) -> None:
        root = folder(fx, work)
        for relative in train_files(fx):
            (root / relative).unlink()
    pattern = {"race": "train/", "storycloze": "val.csv"}.get(spec.format) or spec.split_file_names("train")[0]
    add("train-missing", cli, finetune(), prepare=delete_train, refuse=[pattern, ("no ", "not found", "missing")])

    def delete_held_out(fx, work: Path) -> None:
        root = folder(fx, work)
        for split in ("dev", "test"):
            if split in spec.splits:
                for relative in sources(fx.tasks, task, split):
                    (root / relative).unlink()
    add("eval-missing", cli, finetune(), prepare=delete_held_out, refuse=["evaluation split"])

    def copy_train_over_eval(fx, work: Path) -> None:
        root = folder(fx, work)
        train, held = train_files(fx), sources(fx.tasks, task, eval_split)
        for i, relative in enumerate(held):
            (root / relative).write_bytes((root / train[i % len(train)]).read_bytes())
    add("eval-copy-of-train", _named_refusal, eval_split, (("training", "another task", "not a"),), finetune(),
        copy_train_over_eval)

    first_train = lambda fx: train_files(fx)[0]  # noqa: E731
    add("single-file", cli, lambda fx, work: finetune_file(first_train(fx))(fx, work),
        prepare=lambda fx, work: folder(fx, work), refuse=["training", "--allow-eval-on-train"])
    add("single-file-allowed", cli,
        lambda fx, work: finetune_file(first_train(fx), "--allow-eval-on-train")(fx, work),
        prepare=lambda fx, work: folder(fx, work), check=_labelled_as_training_rows)

    # What one damaged file loads as, through gpt1.tasks.load.
    def load_after(damage, split: str = "train"):
        def call(fx, work: Path):
            root = folder(fx, work)
            damage(root / sources(fx.tasks, task, split)[0])
            return tasks.load(task, root, split)
        return call

    def counts(bad: int, missing: int = 0):
        def check(fx, work: Path, outcome) -> str | None:
            n, _ = loaded(fx.tasks, task, "train")
            data = outcome.value
            got_bad = sum(data.report.bad.values())
            if (len(data), got_bad) != (n - missing, bad):
                return f"{len(data)} examples and {got_bad} malformed rows, expected {n - missing} and {bad}"
            return None
        return check

    def same_examples(fx, work: Path, outcome) -> str | None:
        _, expected = loaded(fx.tasks, task, "train")
        got = tuple(tasks.content(ex) for ex in outcome.value)
        return None if got == expected else f"{len(got)} examples differ from the undamaged file's {len(expected)}"

    def cut_ok(fx, work: Path, outcome) -> str | None:
        n, _ = loaded(fx.tasks, task, "train")
        data, bad = outcome.value, sum(outcome.value.report.bad.values())
        if (len(data), bad) in ((n, 0), (n - 1, 1)):
            return None
        return f"{len(data)} examples, {bad} malformed, from {n}: a cut row must be one example or one counted row"

    add("one-malformed-row", api, load_after(lambda p: malformed_row(spec, p)), check=counts(bad=1))
    add("non-utf8-row", api, load_after(lambda p: non_utf8_row(spec, p)),
        check=counts(bad=1, missing=0 if spec.format == "race" else 1))
    add("crlf", api, load_after(lambda p: p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))), check=same_examples)
    add("bom", api, load_after(with_bom), check=same_examples)
    if spec.format != "race":  # an article is one JSON object: a cut one is the bad-row case above
        add("cut-last-line", api, load_after(cut_last_line), check=cut_ok)

    def many_malformed(path: Path) -> None:
        lines = path.read_bytes().split(b"\n")
        for i in range(2, len(lines), 10):
            lines[i] = b"x"
        path.write_bytes(b"\n".join(lines))
    if spec.format != "race":
        add("too-many-malformed", api, load_after(many_malformed),
            refuse=[(f"{spec.folder}/",), "malformed", "max_bad_fraction"])
    add("unknown-split", api, lambda fx, work: tasks.load(task, fx.tasks / spec.folder, "validation"),
        refuse=["validation", "train"])
    return cases


def _named_refusal(category: str, name: str, split: str, cause: tuple, argv, prepare, fast: bool = False) -> Case:
    """A `gpt1 finetune` refusal that must name one of `split`'s files (as found in the sample data) and `cause`."""
    task = name.split("/")[0]
    case = cli(category, name, argv, prepare=prepare, refuse=[], fast=fast)
    act = case.act

    def naming_act(fx, work: Path):
        names = tuple(Path(s).name for s in sources(fx.tasks, task, split))
        case.refuse = [names, *cause]
        return act(fx, work)

    case.act = naming_act
    return case


def _labelled_as_training_rows(fx, work: Path, outcome) -> str | None:
    metrics = read_json(work / "out" / "metrics.json")
    rows = metrics.get("evaluated_on") or {}
    if not metrics.get("eval_on_training_rows") or not rows.get("on_training_rows"):
        return "scored on training rows without saying so in metrics.json"
    if rows.get("rows", 0) <= 0 or "TRAINING ROWS" not in outcome.stdout:
        return f"metrics.json/summary do not say which rows were scored: {rows}, {outcome.stdout.strip()!r}"
    return None


def wrong_task_cases() -> list[Case]:
    """Every task's loader given each other task's training file (as a single file and under its own name)."""
    cases = []
    for task in REGISTRY:
        for other in REGISTRY:
            if other == task:
                continue

            def call(fx, work: Path, task=task, other=other):
                return tasks.load(task, fx.tasks / REGISTRY[other].folder / sources(fx.tasks, other, "train")[0],
                                  "train")
            cases.append(api(WRONG_TASK, f"{task}<-{other}", call, refuse=[(REGISTRY[other].folder,)],
                             fast=(task, other) in {("cola", "sst2"), ("mrpc", "rte"), ("snli", "scitail")}))
    return cases


def cases() -> list[Case]:
    return [case for task in REGISTRY for case in task_cases(task)] + wrong_task_cases()
