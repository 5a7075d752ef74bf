"""What a stage writes is what its readers read: every kind of output folder (tokenizer, pre-trained model,
fine-tuned model), each of its recorded files tampered in each way, is refused naming the file; a model folder
copied out of its stage output is held to its own record the same way, its config as much as its weights; an
untouched folder is accepted and hashed at most once; a folder written before the record existed, or by another
tool, still loads, validated field by field (weights of another float dtype cast with a warning, integer weights
refused).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gpt1.config import ModelConfig
from gpt1.finetune.predict import HEAD_NAME, load_task_model, save_task_model
from gpt1.io import InputError, read_json, write_json
from gpt1.model.files import CONFIG_NAME, TRAINING_NAME, WEIGHTS_NAME
from gpt1.model.transformer import GPT1, GPT1ForTask
from gpt1.stages import integrity
from gpt1.stages.base import Ref, input_key
from gpt1.stages.outputs import DONE, mark_done
from gpt1.tokenizer import bpe

TINY = dict(n_ctx=16, n_layer=1, n_head=2, n_embd=8, d_ff=16)


@pytest.fixture(scope="module")
def tokenizer():
    text = "the cat sat on the mat . a dog ran in the park . " * 20
    return bpe.train([text], merges=20, show_progress=False)


def _model(tokenizer) -> GPT1:
    torch.manual_seed(0)
    return GPT1(ModelConfig(vocab_size=tokenizer.vocab_size, **TINY))


def write_tokenizer(out: Path, tokenizer) -> str:
    tokenizer.save(out)
    return "."


def write_pretraining(out: Path, tokenizer) -> str:
    final = out / "final"
    _model(tokenizer).save_pretrained(final)
    tokenizer.save(final)
    files = integrity.folder_record(final)  # as gpt1.pretrain.worker writes it, last
    write_json(
        final / TRAINING_NAME,
        {"steps": 1, "weights_sha256": files[WEIGHTS_NAME], integrity.FOLDER_FIELD: files},
    )
    return "final"


def write_finetune(out: Path, tokenizer) -> str:
    info = {
        "task": "sst2",
        "kind": "single",
        "head": "classification",
        "n_outputs": 2,
        "labels": ["0", "1"],
        "tokenizer_sha256": tokenizer.sha256,
        "clf_pdrop": 0.0,
    }
    save_task_model(
        GPT1ForTask(_model(tokenizer), "classification", 2, 0.0), tokenizer, info, out / "model"
    )
    return "model"


# stage name, what it writes (returns the folder its readers read, relative to the output), and those readers
KINDS: dict[str, tuple[str, Callable, list[Callable[[Path], object]]]] = {
    "tokenizer": ("train-tokenizer", write_tokenizer, [Ref.to]),
    "pretrained model": ("pretrain", write_pretraining, [Ref.to, GPT1.from_pretrained]),
    "fine-tuned model": ("finetune", write_finetune, [Ref.to, load_task_model]),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory, tokenizer) -> dict[str, tuple[Path, str]]:
    """Each kind's output, written and marked once: kind -> (output folder, the folder its readers read)."""
    done = {}
    for kind, (stage, write, _) in KINDS.items():
        out = tmp_path_factory.mktemp(kind.replace(" ", "-")) / "out"
        out.mkdir()
        read = write(out, tokenizer)
        mark_done(out, stage, f"key-of-{stage}")
        done[kind] = (out, read)
    return done


def read_files(out: Path, read: str) -> list[str]:
    """The recorded files of output `out` under the folder its readers read."""
    files = integrity.recorded(read_json(out / DONE)) or {}
    return [name for name in files if read == "." or name.startswith(read + "/")]


# -- the tamperings: each changes one file in place -----------------------------------------------------------------
def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def restore_mtime(change: Callable[[Path], None]) -> Callable[[Path], None]:
    """`change`, with the file's mtime put back as it was (ctime and inode still tell)."""

    def changed(path: Path) -> None:
        st = path.stat()
        change(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    return changed


def other_dtype(path: Path) -> None:
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(str(path)).items()}, str(path))


def edit_json(path: Path) -> None:
    """The edit a hand would make: a head count that still fits the weights, the label list, else a new field."""
    data = json.loads(path.read_text())
    if "n_head" in data:
        data["n_head"] = 4
    elif "labels" in data:
        data["labels"] = data["labels"][::-1]
    else:
        data["edited"] = True
    path.write_text(json.dumps(data))


def tamperings(name: str) -> dict[str, Callable[[Path], None]]:
    found = {"flip a byte": restore_mtime(flip_byte), "truncate": truncate, "delete": Path.unlink}
    if name.endswith(".safetensors"):
        found["re-save as bfloat16"] = other_dtype
    if name.endswith(".json"):
        found["edit a field"] = edit_json
    return found


def names(said: str, folder: Path, file: Path) -> bool:
    """Whether an error names `file`: its path, or the folder read and its name (a missing file)."""
    return str(file) in said or (str(folder) in said and file.name in said)


def test_every_recorded_file_tampered_any_way_is_refused_naming_it(written, tmp_path):
    cases = 0
    for kind, (out, read) in written.items():
        readers = KINDS[kind][2]
        recorded = read_files(out, read)
        assert recorded, kind
        for name in [*recorded, f"{read}/planted.json"]:
            for how, tamper in (
                tamperings(name).items() if name in recorded else [("add", Path.touch)]
            ):
                for reader in readers:
                    copy = tmp_path / f"case-{cases}"
                    shutil.copytree(out, copy)
                    tamper(copy / name)
                    with pytest.raises((InputError, FileNotFoundError)) as err:
                        reader(copy / read)
                    said = str(err.value)
                    assert names(said, copy / read, copy / name), (kind, name, how, reader, said)
                    if isinstance(err.value, InputError):  # one line, saying how to fix it
                        assert "\n" not in str(err.value)
                    cases += 1
    assert cases > 40


def test_an_output_is_hashed_at_most_once_then_read_without_hashing(written, monkeypatch, tmp_path):
    """Checked as it was marked (a record's sha256 beside weights: hashed on the first read only), and a copy
    (new inodes) hashed once."""
    hashed: list[str] = []
    real = integrity.sha256_file
    monkeypatch.setattr(
        integrity, "sha256_file", lambda path: hashed.append(str(path)) or real(path)
    )
    for kind, (out, read) in written.items():
        copy = tmp_path / kind
        shutil.copytree(out, copy)
        for folder in (out, copy):
            for reader in KINDS[kind][2]:
                reader(folder / read)
            assert len(hashed) == len(set(hashed)), (kind, hashed)  # no file twice
            if folder == copy:
                assert {str(copy / name) for name in read_files(out, read)} <= set(hashed), kind
            hashed.clear()
            for reader in KINDS[kind][2]:
                reader(folder / read)
            assert hashed == [], kind


def test_an_output_marked_before_the_record_existed_keeps_its_key_and_still_loads(
    written, tmp_path
):
    for kind, (out, read) in written.items():
        old = tmp_path / kind
        shutil.copytree(out, old)
        marker = read_json(old / DONE)
        write_json(old / DONE, {k: v for k, v in marker.items() if k != integrity.FIELD})
        assert input_key(old) == marker["key"] == input_key(out)
        assert Ref.to(old / read).key == Ref.to(out / read).key
        for reader in KINDS[kind][2]:
            reader(old / read)


def test_a_folder_without_a_record_is_validated_field_by_field(tmp_path, tokenizer, caplog):
    plain = tmp_path / "plain"
    _model(tokenizer).save_pretrained(plain)
    weights = plain / WEIGHTS_NAME
    other_dtype(weights)  # no training.json: nothing records the bytes
    with caplog.at_level(logging.WARNING, logger="gpt1.model.transformer"):
        GPT1.from_pretrained(plain)
    assert "bfloat16" in caplog.text and str(weights) in caplog.text
    save_file(
        {k: (v.float() * 100).to(torch.int32) for k, v in load_file(str(weights)).items()},
        str(weights),
    )
    with pytest.raises(InputError, match="int32 values, not floating-point") as err:
        GPT1.from_pretrained(plain)
    assert str(weights) in str(err.value)

    # a task model copied out of its output (an MLflow artifact): no marker
    model = tmp_path / "task-model"
    write_finetune(model, tokenizer)
    edit_json(model / "model" / "task.json")
    with pytest.raises(InputError, match=r"\[labels\].*not the task's label list"):
        load_task_model(model / "model")


# What each reader of a model folder reads of it: between them, every file the folder's own record lists.
MODEL_READERS: dict[str, dict[Callable[[Path], object], set[str]]] = {
    "pretrained model": {
        GPT1.from_pretrained: {CONFIG_NAME, WEIGHTS_NAME},
        bpe.load: {bpe.TOKENIZER_FILE},
    },
    "fine-tuned model": {load_task_model: {CONFIG_NAME, WEIGHTS_NAME, HEAD_NAME, bpe.TOKENIZER_FILE}},
}


def own_record(folder: Path) -> tuple[str, dict]:
    """(the name, the content) of a model folder's own record."""
    name = next(n for n in integrity.FOLDER_RECORDS if (folder / n).is_file())
    return name, read_json(folder / name)


def test_a_model_folder_out_of_its_stage_output_is_held_to_its_own_record(written, tmp_path):
    """Copied alone (an MLflow artifact, a `--checkpoint` elsewhere), a model folder has no `.done` above it: its
    record lists every file in it, and each file, tampered any way, is refused by the reader that reads it, naming
    it. The config counts as much as the weights: a head count edited with the shapes intact loads as another
    function."""
    cases = 0
    for kind, readers in MODEL_READERS.items():
        out, read = written[kind]
        name, record = own_record(out / read)
        files = record[integrity.FOLDER_FIELD]
        beside = {p.name for p in (out / read).iterdir() if p.is_file() and p.name != name}
        assert set(files) == beside == set().union(*readers.values()), kind
        for reader, reads in readers.items():
            for file in sorted(reads):
                for how, tamper in tamperings(file).items():
                    copy = shutil.copytree(out / read, tmp_path / f"case-{cases}")
                    tamper(copy / file)
                    with pytest.raises((InputError, FileNotFoundError)) as err:
                        reader(copy)
                    assert names(str(err.value), copy, copy / file), (kind, file, how, err.value)
                    cases += 1
    assert cases > 20


def test_a_file_a_reader_reads_that_the_record_does_not_list_is_refused(written, tmp_path):
    """A pre-training without a tokenizer records none; one added later is not the model's."""
    out, read = written["pretrained model"]
    copy = shutil.copytree(out / read, tmp_path / "model")
    name, record = own_record(copy)
    files = record[integrity.FOLDER_FIELD]
    del files[bpe.TOKENIZER_FILE]
    write_json(copy / name, record)
    GPT1.from_pretrained(copy)  # the model itself is as recorded
    with pytest.raises(InputError, match=f"not one of the files {name} records") as err:
        bpe.load(copy)
    assert str(copy / bpe.TOKENIZER_FILE) in str(err.value)


def test_a_record_written_before_it_listed_every_file_still_checks_the_weights(written, tmp_path):
    out, read = written["pretrained model"]
    copy = shutil.copytree(out / read, tmp_path / "model")
    name, record = own_record(copy)
    del record[integrity.FOLDER_FIELD]
    write_json(copy / name, record)
    edit_json(copy / CONFIG_NAME)  # nothing recorded it then: read field by field
    assert GPT1.from_pretrained(copy).config.n_head == 4
    flip_byte(copy / WEIGHTS_NAME)
    with pytest.raises(InputError, match=f"changed since it was written.*{name} records"):
        GPT1.from_pretrained(copy)
