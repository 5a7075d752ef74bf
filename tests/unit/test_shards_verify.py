"""Shard integrity: checksums verified before training and re-checked cheaply by the reader; token ids checked
against the manifest's vocabulary, naming shard and row."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
from fs_faults import read_only
from corpora import make_docs, write_corpus

from gpt1.tokenizer import bpe
from gpt1.data.tokenize import BlockReader, load_manifest, shard_schema, tokenize_corpus, verify_shards
from gpt1.io import InputError, read_json, sha256_file, write_json


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tokenizer and a corpus; each test tokenizes its own copy of the shards."""
    root = tmp_path_factory.mktemp("verify")
    docs = {"train": [make_docs(40, seed=11)], "val": [make_docs(8, seed=12)]}
    corpus = write_corpus(root / "corpus", docs)
    tok = bpe.train(docs["train"][0], merges=150, show_progress=False)
    return corpus, tok


@pytest.fixture
def shards(tmp_path, built):
    corpus, tok = built
    manifest = tokenize_corpus(corpus, tok, tmp_path / "shards", n_ctx=15, shard_rows=8, show_progress=False)
    assert len(manifest["splits"]["train"]["shards"]) >= 4
    return tmp_path / "shards"


def tamper_same_size(path, keep_times: bool = True) -> None:
    """Flip one byte in the middle of a token buffer; with `keep_times`, put the mtime back as a careful
    tamperer would (the kernel still moves ctime)."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    if keep_times:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size


def test_verify_checks_every_shard_and_records_them(shards):
    manifest = load_manifest(shards)
    result = verify_shards(shards)
    files = [s["file"] for split in manifest["splits"].values() for s in split["shards"]]
    assert result["shards"] == len(files) and result["checked_bytes"] == result["bytes"] > 0
    record = read_json(shards / ".verified.json")
    assert record["manifest_sha256"] == sha256_file(shards / "manifest.json")
    assert sorted(record["shards"]) == sorted(files)
    again = verify_shards(shards)  # nothing changed: nothing re-read
    assert again["checked_bytes"] == 0 and again["shards"] == len(files)
    assert verify_shards(shards, full=True)["checked_bytes"] == result["bytes"]


def test_a_tampered_shard_of_the_same_size_is_refused_naming_it(shards):
    shard = shards / load_manifest(shards)["splits"]["train"]["shards"][2]["file"]
    tamper_same_size(shard)
    BlockReader(shards, "train")  # unverified shards: the reader checks sizes and structure only (as before)
    with pytest.raises(InputError, match=rf"{shard}: shard sha256 does not match the manifest"):
        verify_shards(shards)
    assert not (shards / ".verified.json").exists()


def test_a_shard_changed_after_verification_is_refused_by_the_reader(shards):
    verify_shards(shards)
    train = load_manifest(shards)["splits"]["train"]["shards"]
    rewritten, tampered = shards / train[0]["file"], shards / train[3]["file"]
    rewritten.write_bytes(rewritten.read_bytes())  # same bytes, new identity: hashed again, accepted
    assert len(BlockReader(shards, "train")) == load_manifest(shards)["splits"]["train"]["rows"]
    tamper_same_size(tampered)
    with pytest.raises(InputError, match=rf"{tampered}: shard sha256 does not match"):
        BlockReader(shards, "train")
    BlockReader(shards, "val")  # the other split's shards are untouched
    with pytest.raises(InputError, match=rf"{tampered}: shard sha256"):
        verify_shards(shards)  # only the changed shards are re-read, and the tampered one fails


def with_token(shards, entry: dict, row: int, column: int, token: int) -> None:
    """Rewrite a shard with one token replaced, and its manifest entry to match (a consistent but wrong output,
    e.g. shards of a larger vocabulary under this manifest)."""
    manifest = load_manifest(shards)
    path = shards / entry["file"]
    blocks = pa.ipc.open_file(pa.memory_map(str(path))).read_all().column(0).combine_chunks()
    tokens = blocks.flatten().to_numpy().copy().reshape(len(blocks), -1)
    tokens[row, column] = token
    schema = shard_schema(manifest["n_ctx"], np.dtype(manifest["dtype"]))
    array = pa.FixedSizeListArray.from_arrays(pa.array(tokens.reshape(-1)), tokens.shape[1])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch([array], schema=schema))
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            if shard["file"] == entry["file"]:
                shard.update(bytes=path.stat().st_size, sha256=sha256_file(path))
    write_json(shards / "manifest.json", manifest)


def test_a_token_id_outside_the_vocabulary_names_shard_and_row(shards):
    manifest = load_manifest(shards)
    entry, vocab = manifest["splits"]["train"]["shards"][1], manifest["vocab_size"]
    with_token(shards, entry, row=5, column=3, token=vocab)
    message = rf"{shards / entry['file']}: row 5 holds token id {vocab}, outside the vocabulary"
    with pytest.raises(InputError, match=message):
        verify_shards(shards)
    reader = BlockReader(shards, "train", shuffle=False)  # unverified: found in the batch that holds it
    reader[entry["rows"] - 1]  # blocks without the bad id are served
    with pytest.raises(InputError, match=message):
        reader[manifest["splits"]["train"]["shards"][0]["rows"] + 5]
    with pytest.raises(InputError, match=message):
        for _ in reader.global_batches(8):
            pass


def test_verify_on_a_read_only_copy_checks_but_cannot_record(shards, caplog):
    with read_only(shards):
        with caplog.at_level("WARNING", logger="gpt1.data.tokenize"):
            assert verify_shards(shards)["checked_bytes"] > 0
    assert "cannot record the verification" in caplog.text and not (shards / ".verified.json").exists()


def test_a_record_of_another_manifest_is_ignored(shards):
    verify_shards(shards)
    record = read_json(shards / ".verified.json")
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["note"] = "edited"
    write_json(shards / "manifest.json", manifest)
    assert verify_shards(shards)["checked_bytes"] > 0  # the record no longer vouches for anything
    assert read_json(shards / ".verified.json")["manifest_sha256"] != record["manifest_sha256"]
