"""Arrow shards: packing, manifest, determinism, crash/resume, and the training reader. Long documents encoded in
pieces, on many random documents: tests/integration/test_document_pieces.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tokenizers import Tokenizer

from gpt1.tokenizer import bpe
from gpt1.cli import main as cli
from gpt1.data.ingest import corpus
from corpora import (corpus_dir, docs, make_docs, shard_bytes, tokenizer, tricky_text,  # noqa: F401 (fixtures)
                     write_corpus)
from fs_faults import read_only

from gpt1.data.tokenize import (BlockReader, StreamEncoder, document_pieces, load_manifest, plan_partitions,
                                prepare_tokenization, token_dtype, tokenize_corpus, tokenize_partition)
from gpt1.data.tokenize import ENCODE_CHARS
from gpt1.io import InputError, sha256_file, sha256_tree
from gpt1.tokenizer.bpe import GPT1Tokenizer


def widened(tokenizer: GPT1Tokenizer, extra: int) -> GPT1Tokenizer:
    """The same tokenizer with `extra` unused symbols before the 3 specials (e.g. to pass 65,536 ids)."""
    spec = json.loads(tokenizer.to_json())
    vocab = spec["model"]["vocab"]
    vocab.update({f"<unused{i}>": len(vocab) for i in range(extra)})
    for offset, added in enumerate(spec["added_tokens"]):
        added["id"] = len(vocab) + offset
    return GPT1Tokenizer(Tokenizer.from_str(json.dumps(spec)))


def golden_docs() -> dict[str, list[list[str]]]:
    """The corpus whose shard bytes are pinned in test_output_bytes_are_unchanged: short documents plus long
    tricky ones."""
    train = make_docs(30, seed=3)
    train.insert(5, tricky_text(random.Random(7), lines=600))
    train.insert(17, "\n\n" + tricky_text(random.Random(9), lines=200) + "\n\n")
    return {"train": [train[:20], train[20:]], "val": [make_docs(5, seed=4) + [tricky_text(random.Random(8), 80)]]}


def expected_stream(tokenizer, docs: list[str]) -> np.ndarray:
    """Independent packing oracle: each non-empty document's ids preceded by the boundary token."""
    stream: list[int] = []
    for doc in docs:
        ids = tokenizer.encode(doc)
        if ids:
            stream += [tokenizer.boundary_id, *ids]
    return np.array(stream, dtype=np.int64)


def read_split(out: Path, manifest: dict, split: str) -> np.ndarray:
    """All blocks of a split straight from the Arrow files, (rows, n_ctx + 1)."""
    blocks = [pa.ipc.open_file(pa.memory_map(str(out / s["file"]))).read_all().column("tokens").combine_chunks()
              for s in manifest["splits"][split]["shards"]]
    flat = np.concatenate([b.flatten().to_numpy() for b in blocks]) if blocks else np.zeros(0, np.int64)
    return flat.reshape(-1, manifest["n_ctx"] + 1)


# ------------------------------------------------------------------------------------------------- writing


def test_blocks_reconstruct_the_token_stream_per_split(tmp_path, corpus_dir, docs, tokenizer):
    n_ctx, shard_rows = 15, 4
    manifest = tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=n_ctx, shard_rows=shard_rows,
                               show_progress=False, partition_bytes=700)
    block = n_ctx + 1
    for split, parts in docs.items():
        stream = expected_stream(tokenizer, [d for p in parts for d in p])
        entry = manifest["splits"][split]
        rows = len(stream) // block
        blocks = read_split(tmp_path, manifest, split)
        assert blocks.shape == (rows, block) and blocks.dtype == np.uint16
        np.testing.assert_array_equal(blocks.reshape(-1), stream[:rows * block])  # split-local, in order
        assert entry["rows"] == rows and entry["tokens"] == rows * block
        assert entry["dropped_tail_tokens"] == len(stream) - rows * block
        assert entry["stream_tokens"] == len(stream)
        assert [s["rows"] for s in entry["shards"]] == [min(shard_rows, rows - i) for i in range(0, rows, shard_rows)]
        for shard in entry["shards"]:
            path = tmp_path / shard["file"]
            assert shard["sha256"] == sha256_file(path) and shard["bytes"] == path.stat().st_size
            assert shard["tokens"] == shard["rows"] * block
    train = manifest["splits"]["train"]
    assert train["documents"] == 40 and train["empty_documents"] == 1
    assert manifest["totals"]["rows"] == sum(s["rows"] for s in manifest["splits"].values())
    assert manifest["totals"]["shards"] == sum(len(s["shards"]) for s in manifest["splits"].values())
    assert manifest["n_ctx"] == n_ctx and manifest["dtype"] == "uint16"
    assert manifest["vocab_size"] == tokenizer.vocab_size and manifest["tokenizer_sha256"] == tokenizer.sha256
    assert manifest["corpus_sha256"] == sha256_tree(corpus_dir, "*/part-*.parquet")
    assert manifest["config"] == {"n_ctx": n_ctx, "shard_rows": shard_rows, "align_documents": False}
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    assert not (tmp_path / ".work").exists()


def test_partitions_cover_every_document_once_in_order(corpus_dir, docs):
    partitions = plan_partitions(corpus_dir, partition_bytes=700)
    for split, parts in docs.items():
        mine = [p for p in partitions if p.split == split]
        assert [p.index for p in mine] == list(range(len(mine)))
        for i, texts in enumerate(parts):
            ranges = [(p.start, p.stop, p.text_bytes) for p in mine if p.file == f"{split}/part-{i:05d}.parquet"]
            assert [r[0] for r in ranges] == [0] + [r[1] for r in ranges[:-1]] and ranges[-1][1] == len(texts)
            for start, stop, nbytes in ranges:
                sizes = [len(t.encode()) for t in texts[start:stop]]
                assert nbytes == sum(sizes) and sum(sizes[1:]) <= 700  # a first document + at most 700 bytes
    assert len([p for p in partitions if p.split == "train"]) > 10


def test_each_document_starts_with_the_boundary_token(tmp_path, corpus_dir, docs, tokenizer):
    stream_len = len(expected_stream(tokenizer, docs["val"][0]))
    manifest = tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=stream_len - 1, shard_rows=1,
                               show_progress=False)
    val = read_split(tmp_path, manifest, "val").reshape(-1)  # the 6 val documents make exactly one block
    assert len(val) == stream_len
    starts = np.flatnonzero(val == tokenizer.boundary_id)
    lengths = [len(tokenizer.encode(d)) for d in docs["val"][0]]
    assert starts.tolist() == (np.cumsum([0] + lengths[:-1]) + np.arange(6)).tolist()


def test_uint32_when_vocab_exceeds_65536(tmp_path, corpus_dir, docs, tokenizer):
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32
    big = widened(tokenizer, 65536)
    assert big.boundary_id > 65535
    manifest = tokenize_corpus(corpus_dir, big, tmp_path, n_ctx=31, shard_rows=8, show_progress=False)
    blocks = read_split(tmp_path, manifest, "train")
    assert manifest["dtype"] == "uint32" and blocks.dtype == np.uint32
    stream = expected_stream(big, [d for p in docs["train"] for d in p])
    np.testing.assert_array_equal(blocks.reshape(-1), stream[:blocks.size])
    assert int(BlockReader(tmp_path, "train", shuffle=False)[0][0]) == big.boundary_id


def test_rerun_is_a_no_op_and_other_inputs_are_refused(tmp_path, corpus_dir, tokenizer):
    first = tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=15, shard_rows=4, show_progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.arrow")}
    assert tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=15, shard_rows=4, show_progress=False) == first
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.arrow")} == stamps
    with pytest.raises(ValueError, match="different inputs or settings"):
        tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=16, shard_rows=4, show_progress=False)
    lost = tmp_path / first["splits"]["train"]["shards"][2]["file"]
    lost.unlink()  # a shard deleted after the run: the next run rebuilds exactly that one
    assert tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=15, shard_rows=4, show_progress=False) == first
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.arrow") if p != lost} == \
        {p: t for p, t in stamps.items() if p != lost}


def test_partitions_tokenized_elsewhere_are_reused(tmp_path, corpus_dir, tokenizer, caplog):
    settings = {"n_ctx": 15, "shard_rows": 4, "partition_bytes": 700}
    plan = prepare_tokenization(corpus_dir, tokenizer, tmp_path / "out", **settings)
    for part in plan.partitions[::2]:  # as other workers (e.g. Prefect tasks) would
        tokenize_partition(plan, part, tokenizer)
    first = plan.tokens_path(plan.partitions[0])
    first.write_bytes(first.read_bytes()[:-2])  # a token file that does not match its sidecar is redone
    assert plan.pending() == [plan.partitions[0], *plan.partitions[1::2]]
    with caplog.at_level("INFO", logger="gpt1.data.tokenize"):
        manifest = tokenize_corpus(corpus_dir, tokenizer, tmp_path / "out", show_progress=False, **settings)
    done = len(plan.partitions[::2]) - 1
    assert f"resuming: {done} of {len(plan.partitions)} partitions already tokenized" in caplog.text
    assert manifest == tokenize_corpus(corpus_dir, tokenizer, tmp_path / "ref", show_progress=False, **settings)
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "ref")


def test_tokenizer_given_by_path_is_loaded_once(tmp_path, corpus_dir, tokenizer, monkeypatch):
    tokenizer.save(tmp_path / "tok")
    loads = []
    real_load = bpe.load
    monkeypatch.setattr(bpe, "load", lambda path: loads.append(path) or real_load(path))
    manifest = tokenize_corpus(corpus_dir, tmp_path / "tok", tmp_path / "out", n_ctx=15, shard_rows=4,
                               show_progress=False, partition_bytes=700)
    assert len(loads) == 1 and manifest["tokenizer_sha256"] == tokenizer.sha256


def test_document_without_text_is_reported_with_file_and_row(tmp_path, tokenizer):
    root = write_corpus(tmp_path / "corpus", {"train": [["one two", "three"]], "val": [["four"]]})
    table = pq.read_table(root / "train" / "part-00000.parquet")
    texts = pa.array(["one two", None], type=pa.large_string())
    pq.write_table(table.set_column(2, corpus.SCHEMA.field("text"), texts), root / "train" / "part-00000.parquet")
    with pytest.raises(InputError, match=r"part-00000.parquet:1 \[text\]: document in row 1 has no text"):
        tokenize_corpus(root, tokenizer, tmp_path / "out", n_ctx=3, shard_rows=2, show_progress=False)
    assert not (tmp_path / "out" / "train").exists()  # rejected before any work


def test_cli_tokenize_writes_shards_and_reports_bad_input(tmp_path, corpus_dir, tokenizer, capsys):
    tokenizer.save(tmp_path / "tok")
    args = ["tokenize", "--corpus", str(corpus_dir), "--tokenizer", str(tmp_path / "tok"),
            "--out", str(tmp_path / "out"), "--preset", "smoke", "--shard-rows", "4", "--workers", "1", "--no-progress"]
    assert cli(args) == 0
    manifest = load_manifest(tmp_path / "out")
    assert manifest["n_ctx"] == 128 and manifest["config"]["shard_rows"] == 4  # n_ctx from the preset
    assert manifest["tokenizer_sha256"] == tokenizer.sha256
    assert f"{manifest['totals']['rows']} blocks of 129 tokens" in capsys.readouterr().out
    assert cli([*args[:2], str(tmp_path / "nowhere"), *args[3:]]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------- long documents, unchanged bytes, bad settings

# sha256_tree of the output for golden_docs() (n_ctx 31, shard_rows 8, partition_bytes 2000, the tokenizer trained
# below) when every document is encoded whole: splitting long documents must not change a byte. Tokenizer
# training and the Arrow/Parquet bytes are deterministic under the pinned versions.
GOLDEN_CORPUS_SHA256 = "8dc2182a41fc6cc9950f8aaea59468525142fcd85b043749fafadc21859fa945"
GOLDEN_OUTPUT_SHA256 = "5ebd10921a6e9b69c9fad5a8e748d19c6eb8d9b72b3fc3bbc07631ff118c2ed0"


@pytest.mark.parametrize("encode_chars", [ENCODE_CHARS, 50])
def test_output_bytes_are_those_of_the_unsplit_writer(tmp_path, encode_chars):
    docs = golden_docs()
    root = write_corpus(tmp_path / "corpus", docs, row_group_size=7)
    assert sha256_tree(root, "*/part-*.parquet") == GOLDEN_CORPUS_SHA256
    tok = bpe.train([d for p in docs["train"] for d in p], merges=200, show_progress=False)
    longest, encode_batch = [0], tok.encode_batch
    tok.encode_batch = lambda texts: longest.append(max(map(len, texts))) or encode_batch(texts)
    tokenize_corpus(root, tok, tmp_path / "out", n_ctx=31, shard_rows=8, show_progress=False, partition_bytes=2000,
                    encode_chars=encode_chars)
    assert sha256_tree(tmp_path / "out") == GOLDEN_OUTPUT_SHA256
    longest_document = max(len(d) for parts in docs.values() for p in parts for d in p)
    assert max(longest) == longest_document if encode_chars == ENCODE_CHARS else max(longest) < longest_document / 4


def test_pieces_end_after_a_line_break_and_keep_to_the_limit():
    rng = random.Random(5)
    for _ in range(200):
        text = tricky_text(rng, lines=rng.randint(1, 60))
        for limit in (10, 80):
            pieces, after_markup = zip(*document_pieces(text, limit))
            assert "".join(pieces) == text
            assert all(p.endswith("\n") for p in pieces[:-1])
            assert all(len(p) <= limit or "\n" not in p.rstrip("\n") for p in pieces)  # or a single long line
            before = [sum(map(len, pieces[:i])) for i in range(len(pieces))]
            assert list(after_markup) == [0 <= text.find("<") < start for start in before]
    prose = "\n\n".join(" ".join(["word"] * 8) for _ in range(50))
    assert all(p.endswith("\n\n") for p, _ in list(document_pieces(prose, 200))[:-1])  # paragraphs preferred


def test_documents_stay_whole_when_the_tokenizer_is_not_word_by_word(tokenizer):
    class Counting:  # one id per text: joining pieces could never give the whole document's ids
        boundary_id, exact = 0, False
        seen: list[str] = []

        def encode_batch(self, texts):
            self.seen += texts
            return [[len(t) % 7 + 1] for t in texts]

    counting = Counting()
    text = "one two\n\nthree\n" * 50
    stream = list(StreamEncoder(counting, np.dtype(np.uint16), 20).encode(["short", text]))
    assert np.concatenate(stream).tolist() == [0, 6, 0, len(text) % 7 + 1]
    assert text in counting.seen


def test_zero_train_blocks_is_an_error_and_leaves_out_usable(tmp_path, tokenizer, capsys):
    root = write_corpus(tmp_path / "corpus", {"train": [["one two three", "four"]], "val": [["five six"]]})
    tokenizer.save(tmp_path / "tok")
    args = ["tokenize", "--corpus", str(root), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "out"),
            "--ctx", "512", "--workers", "1", "--no-progress"]
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert "no complete block of n_ctx + 1 = 513 tokens in the train split" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "manifest.json").exists() and not list((tmp_path / "out").rglob("*.arrow"))
    assert not (tmp_path / "out" / ".work").exists()
    args[args.index("--ctx") + 1] = "3"  # the same folder takes a run with other settings
    assert cli(args) == 0
    assert load_manifest(tmp_path / "out")["splits"]["train"]["rows"] > 0


@pytest.mark.parametrize("option", ["--ctx", "--shard-rows", "--workers"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_cli_refuses_counts_that_are_not_positive(tmp_path, corpus_dir, tokenizer, capsys, option, value):
    tokenizer.save(tmp_path / "tok")
    assert cli(["tokenize", "--corpus", str(corpus_dir), "--tokenizer", str(tmp_path / "tok"),
                "--out", str(tmp_path / "out"), option, value]) == 2
    assert f"argument {option}: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unwritable_output_folder_is_refused_before_any_work(tmp_path, corpus_dir, tokenizer, capsys):
    tokenizer.save(tmp_path / "tok")
    (tmp_path / "locked").mkdir()
    with read_only(tmp_path / "locked"):
        code = cli(["tokenize", "--corpus", str(corpus_dir), "--tokenizer", str(tmp_path / "tok"),
                    "--out", str(tmp_path / "locked" / "out"), "--ctx", "7", "--no-progress"])
        err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "cannot write" in err and str(tmp_path / "locked") in err


# ------------------------------------------------------------------------------------------------- reading


@pytest.fixture(scope="module")
def shards(tmp_path_factory, corpus_dir, tokenizer) -> Path:
    out = tmp_path_factory.mktemp("shards")
    manifest = tokenize_corpus(corpus_dir, tokenizer, out, n_ctx=7, shard_rows=9, show_progress=False)
    assert manifest["splits"]["train"]["rows"] >= 60 and len(manifest["splits"]["train"]["shards"]) >= 5
    return out


def steps(reader: BlockReader, n: int, global_batch: int, micro: int | None = None) -> list[torch.Tensor]:
    out = []
    while len(out) < n:
        for step in reader.global_batches(global_batch, micro):
            out.append(step)
            if len(out) == n:
                break
    return out


def test_reader_serves_stored_blocks_as_long_tensors(shards):
    manifest = load_manifest(shards)
    reader = BlockReader(shards, "train", shuffle=False)
    stored = read_split(shards, manifest, "train")
    assert len(reader) == len(stored) == manifest["splits"]["train"]["rows"]
    assert reader[0].dtype == torch.long and reader[0].shape == (8,)
    assert torch.equal(torch.stack([reader[i] for i in range(len(reader))]), torch.from_numpy(stored.astype(np.int64)))
    assert torch.equal(torch.stack(list(reader)), torch.from_numpy(stored.astype(np.int64)))


def test_shuffle_is_deterministic_per_seed_and_epoch(shards):
    n = len(BlockReader(shards, "train"))
    one_epoch = steps(BlockReader(shards, "train", seed=3), n // 4, 4)
    again = steps(BlockReader(shards, "train", seed=3), n // 4, 4)
    assert all(torch.equal(a, b) for a, b in zip(one_epoch, again))
    other_seed = steps(BlockReader(shards, "train", seed=4), n // 4, 4)
    assert not all(torch.equal(a, b) for a, b in zip(one_epoch, other_seed))
    reader = BlockReader(shards, "train", seed=3)
    epochs = [reader.order(e) for e in range(3)]
    assert all(sorted(o.tolist()) == list(range(n)) for o in epochs)
    assert epochs[0].tolist() != epochs[1].tolist() != epochs[2].tolist()
    assert epochs[0].tolist() != list(range(n))


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_are_disjoint_and_together_give_the_global_order(shards, world_size):
    global_batch, micro = 6, 6 // world_size
    single = steps(BlockReader(shards, "train", seed=1), 8, global_batch)
    ranks = [steps(BlockReader(shards, "train", seed=1, rank=r, world_size=world_size), 8, global_batch, micro)
             for r in range(world_size)]
    seen = []
    for i, whole in enumerate(single):
        parts = [ranks[r][i].reshape(-1, 8) for r in range(world_size)]
        assert ranks[0][i].shape == (1, micro, 8)
        assert torch.equal(torch.cat(parts), whole.reshape(-1, 8))  # union in rank order == the global batch
        seen += [tuple(row.tolist()) for part in parts for row in part]
    blocks = BlockReader(shards, "train", shuffle=False)
    assert len(set(seen)) == len(seen) == 8 * global_batch or len({tuple(b.tolist()) for b in blocks}) < len(blocks)


def test_micro_batches_split_the_rank_share(shards):
    whole = steps(BlockReader(shards, "train", seed=2, rank=1, world_size=2), 3, 8)
    split = steps(BlockReader(shards, "train", seed=2, rank=1, world_size=2), 3, 8, micro=2)
    assert split[0].shape == (2, 2, 8)
    assert all(torch.equal(a.reshape(-1, 8), b.reshape(-1, 8)) for a, b in zip(whole, split))
    with pytest.raises(ValueError, match="not divisible by micro_batch"):
        next(BlockReader(shards, "train", world_size=2).global_batches(8, micro_batch=3))


def test_state_dict_resumes_at_the_next_sample_across_epochs_and_world_sizes(shards):
    reader = BlockReader(shards, "train", seed=5)
    per_epoch = reader.steps_per_epoch(6)
    reference = steps(BlockReader(shards, "train", seed=5), per_epoch + 4, 6)
    first = steps(reader, per_epoch - 1, 6)  # stop one step before the end of epoch 0
    state = json.loads(json.dumps(reader.state_dict()))  # checkpoints store it as JSON
    resumed = BlockReader(shards, "train", seed=5)
    resumed.load_state_dict(state)
    rest = steps(resumed, 5, 6)
    assert all(torch.equal(a, b) for a, b in zip(first + rest, reference))
    assert resumed.epoch == 1
    # the same checkpoint resumed on 2 ranks continues with the same global batches
    ranks = [BlockReader(shards, "train", seed=5, rank=r, world_size=2) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    halves = [steps(r, 5, 6) for r in ranks]
    assert all(torch.equal(torch.cat([halves[0][i], halves[1][i]], 1), rest[i]) for i in range(5))
    with pytest.raises(ValueError, match="seed"):
        BlockReader(shards, "train", seed=6).load_state_dict(state)


def test_missing_or_corrupt_shards_are_reported(tmp_path, corpus_dir, tokenizer):
    with pytest.raises(FileNotFoundError, match="manifest.json not found"):
        BlockReader(tmp_path, "train")
    manifest = tokenize_corpus(corpus_dir, tokenizer, tmp_path, n_ctx=7, shard_rows=9, show_progress=False)
    shard = tmp_path / manifest["splits"]["train"]["shards"][1]["file"]
    data = shard.read_bytes()

    shard.write_bytes(data[:-100])
    with pytest.raises(InputError, match=rf"{shard.name}.*truncated"):
        BlockReader(tmp_path, "train")
    shard.write_bytes(data[:-64] + b"\0" * 64)  # the IPC footer (schema, batch index) is at the end
    with pytest.raises(InputError, match=rf"{shard.name}.*not a readable Arrow shard"):
        BlockReader(tmp_path, "train")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(flipped))
    BlockReader(tmp_path, "train")  # structure intact: only the checksum can tell
    with pytest.raises(InputError, match=rf"{shard.name}.*sha256"):
        BlockReader(tmp_path, "train", verify_checksums=True)
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{shard.name}.*missing"):
        BlockReader(tmp_path, "train")
    with pytest.raises(ValueError, match="no split 'test'"):
        BlockReader(tmp_path, "test")
