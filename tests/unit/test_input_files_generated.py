"""Every reader's input replaced by every kind of file a careless or hostile user can put there (issue 35).

One table, READERS, names each reader entry point, how to call it in process and how to make its valid sample
(from gpt1.sample_data's writers). The cases are generated from it: each special or broken kind of file in place
of the input must end within TIMEOUT_S in a user error whose message names the file (never a hang, a traceback
or an exit-0 result), and each valid variant (CRLF, a BOM, no final newline, a symlink to the file) must load
equal to the canonical file.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import random
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import save_file

from gpt1 import tasks
from gpt1.config import IngestConfig, ModelConfig
from gpt1.data.ingest.ingest import ingest
from gpt1.errors import user_message
from gpt1.finetune.predict import read_inputs
from gpt1.io import InputError, parquet_file, read_json, write_json
from gpt1.model.convert import (
    HF_CONFIG,
    HF_WEIGHTS,
    from_hf_state_dict,
    hf_config_dict,
    load_hf_folder,
    to_hf_state_dict,
)
from gpt1.model.transformer import CONFIG_NAME, GPT1, WEIGHTS_NAME, load_weights
from gpt1.sample_data.books import write_books
from gpt1.sample_data.tasks import TaskWriter
from gpt1.tasks import get
from gpt1.tokenizer import bpe
from official_task_files import OFFICIAL, OWNER, task_file

TIMEOUT_S = 5
SEED = 35
BOOK_CHARS = 4000


# ------------------------------------------------------------------------------------------ the readers


@dataclass(frozen=True)
class Reader:
    """`read(path, work)` reads the input at `path` (`work`: a scratch folder) and returns something comparable;
    `input_of(sample)` is the file inside the sample that the cases replace (the sample itself when a file)."""

    read: Callable[[Path, Path], object]
    sample: str  # key of SAMPLES
    text: bool  # text variants apply (CRLF, BOM, no final newline)
    json: bool = False  # its input is JSON: every other JSON shape is refused by name
    # kinds this reader accepts by design, with what it must then equal: "same" (the canonical result) or "any"
    accepts: tuple[tuple[str, str], ...] = ()
    input_name: str | None = None  # the file inside a sample folder that the cases replace


def _ingest(path: Path, work: Path):
    out = work / "corpus"
    cfg = IngestConfig(source=str(path), val_fraction=0.0, min_doc_chars=1)
    ingest(cfg, out, show_progress=False)
    return sorted(pq.read_table(out / "train").column("text").to_pylist())


def _task(task: str, split: str):
    def read(path: Path, work: Path):
        data = tasks.load(task, path, split)
        return [*data.examples], dict(data.report.bad)

    return read


def _tokenizer(path: Path, work: Path):
    return bpe.load(path).sha256


def _weights(path: Path, work: Path):
    return {name: t.tolist() for name, t in load_weights(path).items()}


def _hf_folder(path: Path, work: Path):
    return {name: t.tolist() for name, t in load_hf_folder(path).state_dict().items()}


def _model_folder(path: Path, work: Path):
    return {name: t.tolist() for name, t in GPT1.from_pretrained(path).state_dict().items()}


def _json(path: Path, work: Path):
    return read_json(path)


def _predict_inputs(path: Path, work: Path):
    return read_inputs(get("rte"), path, "test")


def _parquet(path: Path, work: Path):
    return parquet_file(path).read().to_pylist()


READERS: dict[str, Reader] = {
    # a book is text: another encoding with a BOM is one of its valid forms (docs/data.md)
    "book": Reader(_ingest, "book", text=True, accepts=(("utf16", "same"), ("truncated", "any"))),
    "task tsv (RTE)": Reader(
        _task("rte", "dev"), "rte", text=True, accepts=(("truncated", "any"),)
    ),
    "task jsonl (SNLI)": Reader(
        _task("snli", "dev"), "snli", text=True, accepts=(("truncated", "any"),)
    ),
    "task csv (Story Cloze)": Reader(
        _task("storycloze", "test"), "storycloze", text=True, accepts=(("truncated", "any"),)
    ),
    "task article (RACE)": Reader(_task("race", "dev"), "race", text=True, json=True),
    "task hub export (RTE JSON lines)": Reader(
        _task("rte", "dev"), "rte-hub", text=True, accepts=(("truncated", "any"),)
    ),
    "tokenizer": Reader(_tokenizer, "tokenizer", text=True, json=True),
    "weights": Reader(_weights, "weights", text=False),
    "model folder config": Reader(_model_folder, "model", text=True, json=True, input_name=CONFIG_NAME),
    "HF folder": Reader(_hf_folder, "hf", text=False, input_name=HF_WEIGHTS),
    "HF folder config.json": Reader(_hf_folder, "hf", text=True, json=True, input_name=HF_CONFIG),
    "HF folder (pytorch_model.bin)": Reader(
        _hf_folder, "hf-bin", text=False, input_name="pytorch_model.bin"
    ),
    "JSON record": Reader(_json, "json", text=True, json=True),
    "predict input (JSON lines)": Reader(_predict_inputs, "predict", text=True, json=True),
    "corpus Parquet": Reader(_parquet, "parquet", text=False),
}


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Path]:
    """One valid input per sample key, written by the repo's own writers."""
    root = tmp_path_factory.mktemp("samples")
    write_books(root, 0)
    writer = TaskWriter(root, 0)
    for task in ("rte", "snli", "storycloze", "race"):
        getattr(writer, task)()
    book_text = sorted((root / "books").glob("*.txt"))[0].read_text(encoding="utf-8")
    book = root / "book.txt"
    book.write_text(book_text[: book_text.index("\n", BOOK_CHARS) + 1], encoding="utf-8")
    tokenizer_dir = root / "tokenizer"
    bpe.train([book.read_text(encoding="utf-8")], merges=50, show_progress=False).save(
        tokenizer_dir
    )
    torch.manual_seed(0)
    model = GPT1(ModelConfig(vocab_size=40, n_ctx=8, n_layer=1, n_head=2, n_embd=8, d_ff=32))
    weights_dir = model.save_pretrained(root / "weights")
    hf = root / "hf"
    hf.mkdir()
    write_json(hf / HF_CONFIG, {**hf_config_dict(model.config), "model_type": "openai-gpt"})
    save_file({k: v.clone() for k, v in to_hf_state_dict(model).items()}, str(hf / HF_WEIGHTS))
    hf_bin = shutil.copytree(hf, root / "hf-bin")
    (hf_bin / HF_WEIGHTS).unlink()
    torch.save(to_hf_state_dict(model), hf_bin / "pytorch_model.bin")
    # a local hub export of RTE's dev split: the hub's columns, one JSON record per line, in a folder named rte/
    rte = tasks.get("rte")
    export = root / "exports" / "rte" / "validation.jsonl"
    export.parent.mkdir(parents=True)
    rows = [{"sentence1": ex.text_a, "sentence2": ex.text_b, "label": ex.label, "idx": int(ex.id)}
            for ex in tasks.load("rte", root / "tasks" / "RTE", "dev").examples]
    export.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert rte.hf_text == ("sentence1", "sentence2") and len(rows) > 3
    predict = root / "inputs.jsonl"  # raw inputs for `gpt1 predict`: the task's input columns
    predict.write_text("".join(json.dumps({k: r[k] for k in rte.hf_text}) + "\n" for r in rows), encoding="utf-8")
    parquet = root / "part-00000.parquet"
    pq.write_table(pa.table({"text": ["one", "two"]}), parquet)
    tasks_root = root / "tasks"
    return {
        "book": book,
        "rte": tasks_root / "RTE" / "dev.tsv",
        "snli": tasks_root / "snli_1.0" / "snli_1.0_dev.jsonl",
        "storycloze": next((tasks_root / "StoryCloze").glob("*test.csv")),
        "race": tasks_root / "RACE" / "dev" / "high" / "1.txt",
        "rte-hub": export,
        "tokenizer": tokenizer_dir / bpe.TOKENIZER_FILE,
        "weights": weights_dir / WEIGHTS_NAME,
        "model": weights_dir,
        "hf": hf,
        "hf-bin": Path(hf_bin),
        "json": hf / HF_CONFIG,
        "predict": predict,
        "parquet": parquet,
    }


def _copy_sample(reader: Reader, samples: dict[str, Path], work: Path) -> tuple[Path, Path]:
    """A private copy of the reader's sample, laid out as the original (a task file keeps its task folder):
    (what the reader is called on, the file inside it the cases replace)."""
    src = samples[reader.sample]
    if src.is_dir():
        top = shutil.copytree(src, work / src.name)
        return Path(top), Path(top) / (reader.input_name or "")
    parents = {"rte": 1, "snli": 1, "storycloze": 1, "race": 3, "rte-hub": 1}.get(reader.sample, 0)
    keep = src.parents[parents - 1] if parents else src.parent
    rel = src.relative_to(keep.parent)
    if parents:
        shutil.copytree(keep, work / keep.name)
    else:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, work / rel)
    return work / rel, work / rel


# ------------------------------------------------------------------------------------------ the kinds of file


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink_to(target: str) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target)


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


def _bytes_of(make: Callable[[bytes], bytes]) -> Callable[[Path, bytes], None]:
    return lambda path, original: path.write_bytes(make(original))


# Each kind replaces the input: either from nothing (`(path) -> None`) or from the original bytes.
SPECIAL_KINDS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "symlink to /dev/zero": _symlink_to("/dev/zero"),
    "dangling symlink": _symlink_to("nowhere-35"),
    "symlink loop": _loop,
    "directory": lambda path: path.mkdir(),
}


class _RunsCode:
    """What a hostile pickle holds: unpickling it would call `print` (any callable could be there)."""

    def __reduce__(self):
        return print, ("unpickled: code ran",)


def _pickle_that_runs_code() -> bytes:
    buffer = io.BytesIO()
    torch.save({"weight": _RunsCode()}, buffer)
    return buffer.getvalue()


_NOISE = random.Random(SEED).randbytes(4096)
_HOSTILE_PICKLE = _pickle_that_runs_code()
CONTENT_KINDS: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda original: b"",
    "truncated": lambda original: original[: len(original) // 2],
    "random bytes": lambda original: _NOISE,
    "NUL bytes": lambda original: b"\0" * 1024,
    "pickle that runs code": lambda original: _HOSTILE_PICKLE,
    "utf16": lambda original: codecs.BOM_UTF16_LE + original.decode("utf-8").encode("utf-16-le"),
}
# JSON of a shape no reader of JSON takes at its top level (each reads an object, the release's shapes a list)
JSON_SHAPES: dict[str, bytes] = {
    "a JSON array": b'[{"a": 1}, 2]\n',
    "a JSON number": b"3\n",
    "a JSON string": b'"text"\n',
    "JSON null": b"null\n",
}
VARIANTS: dict[str, Callable[[bytes], bytes]] = {
    "CRLF": lambda original: original.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"),
    "BOM": lambda original: codecs.BOM_UTF8 + original.removeprefix(codecs.BOM_UTF8),
    "no final newline": lambda original: original.rstrip(b"\r\n"),
    # a blank line is no row: three at the end of a file (an editor's, a concatenation's) change nothing
    "trailing blank lines": lambda original: original.rstrip(b"\r\n") + b"\n\n\n\n",
}


def _call(
    read: Callable[[Path, Path], object], path: Path, work: Path
) -> tuple[object, BaseException | None]:
    """`read(path, work)` in a thread: (result, error); fails the test when it does not end within TIMEOUT_S."""
    outcome: list = []

    def run():
        try:
            outcome.append((read(path, work), None))
        except BaseException as err:  # noqa: BLE001 - the test judges every exception
            outcome.append((None, err))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    if thread.is_alive():
        if path.is_fifo():  # let the blocked reader go
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"{path}: the reader did not end within {TIMEOUT_S} s (a hang)")
    return outcome[0]


def _canonical(reader: Reader, samples: dict[str, Path], work: Path) -> object:
    called, _ = _copy_sample(reader, samples, work / "canonical")
    result, err = _call(reader.read, called, work / "canonical")
    assert err is None, f"the canonical sample was refused: {err!r}"
    return result


def _assert_refused_naming(err: BaseException | None, result: object, target: Path) -> None:
    assert err is not None, f"{target}: accepted ({str(result)[:200]}), a refusal was due"
    message = user_message(err)
    assert message is not None, f"{target}: not a user error but {type(err).__name__}: {err}"
    assert "\n" not in message.strip(), f"not one line: {message!r}"
    assert target.name in message, f"the message does not name {target.name}: {message}"


ALL_CASES = [
    (reader, kind)
    for reader in READERS
    for kind in (*SPECIAL_KINDS, *CONTENT_KINDS, *(JSON_SHAPES if READERS[reader].json else ()))
    if kind != "utf16" or READERS[reader].text
]
FULL = os.environ.get("GPT1_GENERATED") == "full"


def sample(cases: list) -> list:
    """The unit tier runs every third case of each table (the kinds rotate through the readers, so each reader
    and each kind is tried); GPT1_GENERATED=full runs them all (tests/integration/test_generated_full.py)."""
    return cases if FULL else cases[::3]


CASES = sample(ALL_CASES)


@pytest.mark.parametrize(("reader_name", "kind"), CASES, ids=[f"{r}-{k}" for r, k in CASES])
def test_every_reader_refuses_every_bad_kind_of_file_by_name(reader_name, kind, samples, tmp_path):
    reader = READERS[reader_name]
    accepted = dict(reader.accepts)
    canonical = _canonical(reader, samples, tmp_path) if accepted.get(kind) == "same" else None
    called, target = _copy_sample(reader, samples, tmp_path / "case")
    original = target.read_bytes()
    target.unlink()
    if kind in SPECIAL_KINDS:
        SPECIAL_KINDS[kind](target)
    elif kind in JSON_SHAPES:
        target.write_bytes(JSON_SHAPES[kind])
    else:
        target.write_bytes(CONTENT_KINDS[kind](original))
    result, err = _call(reader.read, called, tmp_path / "case")
    if kind not in accepted:
        _assert_refused_naming(err, result, target)
    elif err is not None:  # a kind a reader may take must still be refused cleanly when it is
        _assert_refused_naming(err, result, target)
    elif accepted[kind] == "same":
        assert result == canonical


TEXT_CASES = sample([
    (reader, variant) for reader in READERS if READERS[reader].text for variant in VARIANTS
])


@pytest.mark.parametrize(
    ("reader_name", "variant"), TEXT_CASES, ids=[f"{r}-{v}" for r, v in TEXT_CASES]
)
def test_valid_text_variants_load_equal_to_the_canonical_file(
    reader_name, variant, samples, tmp_path
):
    reader = READERS[reader_name]
    canonical = _canonical(reader, samples, tmp_path)
    called, target = _copy_sample(reader, samples, tmp_path / "variant")
    target.write_bytes(VARIANTS[variant](target.read_bytes()))
    result, err = _call(reader.read, called, tmp_path / "variant")
    assert err is None, f"a valid {variant} file was refused: {err}"
    assert result == canonical


@pytest.mark.parametrize("reader_name", sample(list(READERS)))
def test_a_symlink_to_the_file_loads_equal_to_it(reader_name, samples, tmp_path):
    reader = READERS[reader_name]
    canonical = _canonical(reader, samples, tmp_path)
    called, target = _copy_sample(reader, samples, tmp_path / "link")
    real = tmp_path / f"elsewhere{target.suffix}"
    target.rename(real)
    target.symlink_to(real)
    result, err = _call(reader.read, called, tmp_path / "link")
    assert err is None, f"a symlink to a valid file was refused: {err}"
    assert result == canonical


@pytest.mark.parametrize(
    "kind", sample([k for k in SPECIAL_KINDS if k != "directory"])
)  # a folder is walked
def test_a_book_folder_reports_what_it_cannot_read_by_name(kind, samples, tmp_path):
    """A source folder goes on past a name it cannot read (docs/data.md) but reports it: never skipped silently."""
    folder = tmp_path / "books"
    folder.mkdir()
    shutil.copy(samples["book"], folder / "good.txt")
    SPECIAL_KINDS[kind](folder / "bad.txt")
    out = tmp_path / "corpus"
    stats = ingest(IngestConfig(source=str(folder), min_doc_chars=1), out, show_progress=False)
    assert stats["rejects"]["unreadable"]["examples"] == ["bad.txt"]
    assert stats["inputs"]["files"] == 2


# ------------------------------------------------------------------------------------------ fields of a file

TOKENIZER_FIELDS: dict[str, tuple[str, Callable[[dict], None]]] = {
    "another model type": ("model.type", lambda spec: spec["model"].update(type="WordPiece")),
    "unknown token not in the vocabulary": (
        "model.unk_token",
        lambda spec: spec["model"].update(unk_token="<absent>"),
    ),
    "an id given twice": (
        "model.vocab",
        lambda spec: spec["model"]["vocab"].update(
            {k: 1 for k, v in spec["model"]["vocab"].items() if v == 2}
        ),
    ),
    "a special's id given to a symbol": (
        "added_tokens",
        lambda spec: spec["added_tokens"][0].update(id=1),
    ),
    "byte-level, not word-level": (
        "model.end_of_word_suffix",
        lambda spec: spec["model"].update(end_of_word_suffix=None),
    ),
    "ids not whole numbers": (
        "model.vocab",
        lambda spec: spec["model"]["vocab"].update({"<unk>": "0"}),
    ),
}


@pytest.mark.parametrize("case", list(TOKENIZER_FIELDS))
def test_a_tokenizer_whose_fields_changed_meaning_is_refused_by_file_and_field(
    case, samples, tmp_path
):
    field, change = TOKENIZER_FIELDS[case]
    spec = json.loads(samples["tokenizer"].read_text(encoding="utf-8"))
    change(spec)
    path = tmp_path / bpe.TOKENIZER_FILE
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(InputError) as refused:
        bpe.load(path)
    assert (refused.value.file, refused.value.field) == (str(path), field)


def _tsv_id(value: str) -> Callable[[list[str], int], None]:
    def edit(lines: list[str], row: int) -> None:
        lines[row] = value.replace("{first}", lines[1].split("\t")[0]) + lines[row][lines[row].index("\t") :]

    return edit


def _json_field(field: str, value: object) -> Callable[[list[str], int], None]:
    def edit(lines: list[str], row: int) -> None:
        first = json.loads(lines[1])[field]
        lines[row] = json.dumps({**json.loads(lines[row]), field: first if value == "{first}" else value})

    return edit


def _csv_id(value: str) -> Callable[[list[str], int], None]:
    def edit(lines: list[str], row: int) -> None:
        lines[row] = value.replace("{first}", lines[1].split(",")[0]) + lines[row][lines[row].index(",") :]

    return edit


# reader -> (task, split, the id field, how to give a line the id of line 2, how to leave a line without an id)
ID_FIELDS = {
    "task tsv (RTE)": ("rte", "dev", "index", _tsv_id("{first}"), _tsv_id("")),
    "task jsonl (SNLI)": ("snli", "dev", "pairID", _json_field("pairID", "{first}"), _json_field("pairID", "")),
    "task csv (Story Cloze)": (
        "storycloze", "test", "InputStoryid", _csv_id("{first}"), _csv_id(" "),
    ),
    "task hub export (RTE JSON lines)": (
        "rte", "dev", "idx", _json_field("idx", "{first}"), _json_field("idx", None),
    ),
}


def _edit_line(reader_name: str, samples, tmp_path: Path, edit: Callable[[list[str], int], None]) -> tuple:
    called, target = _copy_sample(READERS[reader_name], samples, tmp_path)
    lines = target.read_text(encoding="utf-8").split("\n")
    edit(lines, 2)  # line 3
    target.write_text("\n".join(lines), encoding="utf-8")
    return called, target


@pytest.mark.parametrize("reader_name", list(ID_FIELDS))
def test_a_task_file_whose_ids_repeat_is_refused_by_file_line_and_field(
    reader_name, samples, tmp_path
):
    field, repeat = ID_FIELDS[reader_name][2:4]
    called, target = _edit_line(reader_name, samples, tmp_path, repeat)
    with pytest.raises(InputError) as refused:
        READERS[reader_name].read(called, tmp_path)
    assert (refused.value.file, refused.value.line, refused.value.field) == (str(target), 3, field)


@pytest.mark.parametrize("reader_name", list(ID_FIELDS))
def test_a_row_without_its_id_is_a_malformed_row_by_file_line_and_field(reader_name, samples, tmp_path):
    """Not an example keyed by an empty id in a submission file: counted and located like every malformed row."""
    task, split, field, _, blank = ID_FIELDS[reader_name]
    called, target = _edit_line(reader_name, samples, tmp_path, blank)
    data = tasks.load(task, called, split, max_bad_fraction=1.0)
    assert [(b.file, b.line, b.field, b.reason) for b in data.report.bad_rows] == [
        (str(target), 3, field, "missing id")
    ]
    assert all(str(example.id).strip() for example in data.examples)


def test_hf_state_dict_tensors_are_each_required_by_name(samples):
    """Every tensor the exporter writes, left out of an import, is refused naming it before any is read (the tied
    head alone may be absent: it is the token embedding)."""
    full = load_weights(samples["hf"] / HF_WEIGHTS)
    config = read_json(samples["hf"] / HF_CONFIG)
    expected = from_hf_state_dict(full, config)[1]
    for name in full:
        partial = {key: value for key, value in full.items() if key != name}
        if name == "lm_head.weight":
            assert from_hf_state_dict(partial, config)[1].keys() == expected.keys()
            continue
        with pytest.raises(InputError) as refused:
            from_hf_state_dict(partial, config)
        assert refused.value.field == name.removeprefix("transformer."), refused.value


def test_a_predict_input_line_not_utf8_is_named_by_file_and_line(samples, tmp_path):
    lines = samples["predict"].read_bytes().split(b"\n")
    lines[2] = b"\xff" + lines[2]
    path = tmp_path / "inputs.jsonl"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as refused:
        _predict_inputs(path, tmp_path)
    assert (refused.value.file, refused.value.line) == (str(path), 3)


# ------------------------------------------------------------------ the official files, as others may keep them
def _shares_its_header(task: str, source: Path) -> bool:
    """Whether another task's files have this file's header (CoLA's and SST-2's test files): then only a folder
    named after the task tells them apart."""
    from gpt1.tasks.registry import REGISTRY

    first = tuple(source.read_text(encoding="utf-8-sig").split("\n", 1)[0].rstrip("\r").split("\t"))
    return any(
        spec.name != task and spec.columns and first in spec.columns.headers for spec in REGISTRY.values()
    )


# Where the copy goes: a folder of the original's name (only the bytes differ), one named after the task's id in
# capitals (as hub tooling names the GLUE tasks), one named neither.
FOLDERS = {"original folder": lambda task, source: source.parent.name, "task id": lambda task, source: task.upper(),
           "other folder": lambda task, source: "my-copy"}
OFFICIAL_CASES = sample([
    (index, variant, folder)
    for index in range(len(OFFICIAL))
    for variant, folder in (*((v, "original folder") for v in VARIANTS), ("as is", "task id"),
                            ("as is", "other folder"))
])


@pytest.mark.parametrize(
    ("index", "variant", "folder"),
    OFFICIAL_CASES,
    ids=["/".join(OFFICIAL[i][0]) + f"-{v}-{f}" for i, v, f in OFFICIAL_CASES],
)
def test_official_task_files_load_equal_in_every_valid_variant(index, variant, folder, tmp_path):
    """The equivalence oracle over the real files: each official file of each task, in each layout of the shared
    data, rewritten as a valid variant or moved to a folder of another name (`--task` naming the task) parses to
    exactly the examples and counted bad rows of the file as distributed. Moved to a folder named neither after
    the task nor as distributed, a file whose header another task shares is refused by name instead."""
    parts, split = OFFICIAL[index]
    task, source = OWNER[parts[0]], task_file(*parts)
    read = _task(task, split)
    canonical = read(source, tmp_path)
    assert canonical[0], f"{source} holds no examples"
    target = tmp_path / "copy" / FOLDERS[folder](task, source) / source.name
    target.parent.mkdir(parents=True)
    target.write_bytes(VARIANTS[variant](source.read_bytes()) if variant in VARIANTS else source.read_bytes())
    result, err = _call(read, target, tmp_path)
    if folder == "other folder" and _shares_its_header(task, source):
        _assert_refused_naming(err, result, target)
        assert f"in a folder named {get(task).folder}/ or {task}/" in str(err)
        return
    assert err is None, f"a valid {variant} copy of {source} in {target.parent.name}/ was refused: {err}"
    assert result == canonical
