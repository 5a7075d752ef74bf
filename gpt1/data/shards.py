"""Pipeline stage 3: tokenize an ingested corpus into Arrow shards of packed blocks, and read them for training.

Output layout (the contract every later stage reads):

    OUT/manifest.json                    written last: its presence means the shards are complete
    OUT/train/shard-00000.arrow ...      Arrow IPC *file* format (memory-mappable), one record batch, one column
    OUT/val/shard-00000.arrow ...        `tokens`: fixed_size_list<uint16|uint32>[n_ctx + 1], `shard_rows` blocks

Packing. Each split is one token stream: its documents in stored order, each preceded by `tokenizer.boundary_id`
(`_start_`). The stream is cut into non-overlapping windows of n_ctx + 1 tokens (inputs plus the shifted
targets), so a block may span a document boundary but never the train/val split; the split's last partial block
is dropped and counted (`dropped_tail_tokens`). Documents that encode to no tokens get no boundary either and are
counted (`empty_documents`). Token ids are stored as uint16 when vocab_size <= 65,536, else uint32.

How the work is cut (and why the bytes never depend on --workers). `plan_partitions` splits every split's
documents into partitions: contiguous row ranges of one Parquet part holding about `partition_bytes` of text,
decided from the text lengths alone. `tokenize_partition` encodes one partition into a raw token file plus a
small JSON sidecar (its token and document counts), both renamed into place when complete. The packer
concatenates partition streams in plan order, so shard k always holds stream tokens
[k * shard_rows * (n_ctx+1), ...) whoever tokenized which partition, in whatever order. Shards are written to a
temporary name and renamed; the manifest comes last, then the partition files (OUT/.work/) are removed.
Temporary disk use is therefore about the size of the output.

Resuming. A re-run (same inputs and settings; the worker count does not matter) keeps every finished partition
(sidecar present, token file complete) and every shard already under its final name, tokenizes only the missing
partitions and writes only the missing shards, and produces the same manifest as an uninterrupted run. If OUT
holds the output of *different* inputs it refuses to touch it.

Scaling out. A partition is the unit of parallel work. `tokenize_corpus(workers=N)` runs partitions in N
processes (spawn; RAYON_NUM_THREADS = cores // N in each) while the parent packs shards as soon as their
partitions are done. In Prefect the same three steps are tasks; with a DaskTaskRunner/RayTaskRunner the
partitions spread over every machine that sees the corpus and OUT at the same paths (`Plan` is a picklable
dataclass; `tokenize_partition` is idempotent, so task retries are safe):

    plan = prepare.submit(corpus, tok_dir, out, n_ctx=..., shard_rows=...).result()  # prepare_tokenization
    wait(encode.map(unmapped(plan), plan.pending(), unmapped(tok_dir)))              # tokenize_partition
    manifest = tokenize_corpus(corpus, tok_dir, out, n_ctx=..., shard_rows=...)      # finds all done: packs

Memory per process is bounded by ENCODE_BATCH_CHARS or the longest document (HF tokenizers holds ~100 bytes
per character it is encoding), plus one shard being packed; it does not grow with the corpus.

Reading. `BlockReader` memory-maps the shards of one split and serves blocks in a deterministic shuffled order
per (seed, epoch) that does not depend on the number of ranks: global step i consumes blocks
perm[i*G : (i+1)*G] (G = global batch) and rank r takes the r-th contiguous 1/world_size slice of it, split into
micro-batches. `state_dict()` records (epoch, position in global samples), so training resumes at the exact next
sample, even on a different number of ranks with the same global batch. The shuffle is a sort by a splitmix64
hash of (seed, epoch, block index): stable across numpy/torch versions, unlike their RNG streams.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from gpt1.data.corpus import SPLITS, split_files
from gpt1.io import InputError, atomic_path, read_json, sha256_file, sha256_tree, stable_hash, write_json

log = logging.getLogger(__name__)

FORMAT = "gpt1-shards/1"
MANIFEST = "manifest.json"
WORK_DIR = ".work"
PARTITION_BYTES = 1 << 20  # text per partition: many units keep processes balanced (~1-10 s of work each)
# Text per encode_batch call. HF tokenizers holds ~100 bytes per character being encoded, so a call's memory is
# bounded by max(this, the largest document), whatever the corpus size.
ENCODE_BATCH_CHARS = 1 << 20


try:  # glibc: hand freed memory back to the OS (see _release_freed_memory)
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None


def _release_freed_memory() -> None:
    """glibc keeps the tokenizer's freed buffers in its per-thread arenas, so without this the peak RSS creeps up
    with the amount of text encoded (~10% over four passes of the same books); with it the peak stays flat."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def shard_name(split: str, index: int) -> str:
    return f"{split}/shard-{index:05d}.arrow"


def shard_schema(n_ctx: int, dtype: np.dtype) -> pa.Schema:
    return pa.schema([pa.field("tokens", pa.list_(pa.from_numpy_dtype(dtype), n_ctx + 1), nullable=False)])


# ------------------------------------------------------------------------------------------------- planning


@dataclasses.dataclass(frozen=True)
class Partition:
    """Rows [start, stop) of one Parquet part of one split: the unit of parallel tokenization."""

    split: str
    index: int  # position in the split's stream
    file: str  # relative to the corpus directory
    start: int
    stop: int
    text_bytes: int

    @property
    def name(self) -> str:
        return f"{self.split}-{self.index:05d}"


def plan_partitions(corpus_dir: str | Path, partition_bytes: int = PARTITION_BYTES) -> list[Partition]:
    """Cut each Parquet part of each split into partitions: one document plus the following ones that fit in
    `partition_bytes` of text (documents are never split, so a long one may make a partition longer).

    Reads only the text lengths, and rejects a document without text (naming file and row) before any work.
    """
    corpus_dir = Path(corpus_dir)
    partitions: list[Partition] = []
    for split in SPLITS:
        index = 0
        for path in split_files(corpus_dir, split):
            lengths = _text_lengths(path)
            if not len(lengths):
                continue
            ends = np.cumsum(lengths)
            # Cut before the document that crosses each multiple of partition_bytes (vectorised: no per-row loop).
            cuts = np.searchsorted(ends, np.arange(partition_bytes, ends[-1], partition_bytes), side="right")
            bounds = [0, *sorted(set(cuts.tolist()) - {0, len(lengths)}), len(lengths)]
            for start, stop in zip(bounds, bounds[1:]):
                nbytes = int(ends[stop - 1] - (ends[start - 1] if start else 0))
                partitions.append(Partition(split, index, path.relative_to(corpus_dir).as_posix(), start, stop, nbytes))
                index += 1
    return partitions


def _text_lengths(path: Path) -> np.ndarray:
    parquet = pq.ParquetFile(path)
    chunks, row = [], 0
    # One row group at a time, one thread: iter_batches' read-ahead and decoder threads make memory grow with the
    # file (measured: +100 MB over 24 row groups of 1.8 MB, against +25 MB like this).
    for group in range(parquet.num_row_groups):
        text = parquet.read_row_group(group, columns=["text"], use_threads=False).column(0)
        if text.null_count:
            bad = row + int(np.flatnonzero(text.is_null().to_numpy())[0])
            raise InputError(f"document in row {bad} has no text", file=path, line=bad, field="text")
        chunks.append(pc.binary_length(text).to_numpy().astype(np.int64))
        row += len(text)
    return np.concatenate(chunks) if chunks else np.zeros(0, np.int64)


@dataclasses.dataclass
class Plan:
    """Everything that defines the output, plus the partition list; saved as OUT/.work/plan.json."""

    corpus_dir: str
    out_dir: str
    n_ctx: int
    shard_rows: int
    vocab_size: int
    boundary_id: int
    dtype: str
    tokenizer_sha256: str
    corpus_sha256: str
    partition_bytes: int
    partitions: list[Partition]

    @property
    def key(self) -> str:
        """Hash of what determines the output bytes (not the partitioning, not the worker count)."""
        return stable_hash({"format": FORMAT, "n_ctx": self.n_ctx, "shard_rows": self.shard_rows,
                            "tokenizer": self.tokenizer_sha256, "corpus": self.corpus_sha256})

    @property
    def work(self) -> Path:
        return Path(self.out_dir) / WORK_DIR

    def tokens_path(self, part: Partition) -> Path:
        return self.work / f"{part.name}.tokens"

    def sidecar_path(self, part: Partition) -> Path:
        return self.work / f"{part.name}.json"

    def sidecar(self, part: Partition) -> dict | None:
        """The finished partition's counts, or None if it still has to be (re)done."""
        path = self.sidecar_path(part)
        if not path.exists():
            return None
        counts = read_json(path)
        tokens = self.tokens_path(part)
        if not tokens.exists() or tokens.stat().st_size != counts["tokens"] * np.dtype(self.dtype).itemsize:
            return None
        return counts

    def pending(self) -> list[Partition]:
        return [p for p in self.partitions if self.sidecar(p) is None]

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "key": self.key}

    @classmethod
    def from_json(cls, obj: dict) -> "Plan":
        fields = {f.name for f in dataclasses.fields(cls)}
        plan = cls(**{k: v for k, v in obj.items() if k in fields})
        plan.partitions = [Partition(**p) for p in obj["partitions"]]
        return plan


def _load_tokenizer(tokenizer):
    if isinstance(tokenizer, (str, os.PathLike)):
        from gpt1 import tokenizer as tokenizer_lib  # the reader side never needs the tokenizer

        return tokenizer_lib.load(tokenizer)
    return tokenizer


def prepare_tokenization(corpus_dir: str | Path, tokenizer, out_dir: str | Path, *, n_ctx: int, shard_rows: int,
                         partition_bytes: int = PARTITION_BYTES) -> Plan:
    """Validate inputs and OUT, plan the partitions (or reuse the unfinished run's plan) and save the plan.

    When OUT already holds the finished output of these inputs (its manifest.json), the plan has no partitions.
    """
    if n_ctx <= 0 or shard_rows <= 0 or partition_bytes <= 0:
        raise ValueError(f"n_ctx, shard_rows and partition_bytes must be positive, got {n_ctx}, {shard_rows}, "
                         f"{partition_bytes}")
    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir).resolve()
    tokenizer = _load_tokenizer(tokenizer)
    if not 0 <= tokenizer.boundary_id < tokenizer.vocab_size:
        raise ValueError(f"tokenizer boundary_id {tokenizer.boundary_id} outside its vocab ({tokenizer.vocab_size})")
    for split in SPLITS:
        split_files(corpus_dir, split)  # a clear error if this is not an ingested corpus
    plan = Plan(str(corpus_dir), str(out_dir), n_ctx, shard_rows, tokenizer.vocab_size, tokenizer.boundary_id,
                token_dtype(tokenizer.vocab_size).name, tokenizer.sha256,
                sha256_tree(corpus_dir, "*/part-*.parquet"), partition_bytes, [])

    manifest = _read_manifest_if_any(out_dir)
    plan_path = plan.work / "plan.json"
    previous = Plan.from_json(read_json(plan_path)) if plan_path.exists() else None
    existing = {"tokenized output": manifest and manifest["key"], "unfinished tokenization": previous and previous.key}
    for what, key in existing.items():
        if key is not None and key != plan.key:
            raise ValueError(f"{out_dir} already holds a {what} of different inputs or settings (corpus, tokenizer, "
                             f"n_ctx or shard_rows changed); use another --out or delete it")
    if manifest is None and previous is None and any(any((out_dir / s).glob("shard-*.arrow")) for s in SPLITS):
        raise ValueError(f"{out_dir} holds shards but no manifest.json or plan; use another --out or delete it")

    if manifest is not None:
        if _shards_complete(out_dir, manifest):
            shutil.rmtree(plan.work, ignore_errors=True)  # left if a run was killed right after its manifest
            return plan
        (out_dir / MANIFEST).unlink()  # a shard went missing since: rebuild it below
    _remove_temporaries(out_dir)
    if previous is not None and previous.partition_bytes == partition_bytes:
        plan.partitions = previous.partitions
    else:
        shutil.rmtree(plan.work, ignore_errors=True)  # partition files of another partitioning: a cache, not output
        plan.partitions = plan_partitions(corpus_dir, partition_bytes)
        write_json(plan_path, plan.to_json())
    return plan


def _read_manifest_if_any(out_dir: Path) -> dict | None:
    path = out_dir / MANIFEST
    return read_json(path) if path.exists() else None


def _remove_temporaries(out_dir: Path) -> None:
    """Half-written files a killed run left behind (atomic_path names them `.NAME.tmp-PID`)."""
    for folder in (out_dir / WORK_DIR, *(out_dir / s for s in SPLITS)):
        for tmp in folder.glob(".*.tmp-*"):
            tmp.unlink()


# ----------------------------------------------------------------------------------------------- tokenizing


def tokenize_partition(plan: Plan, part: Partition, tokenizer) -> dict:
    """Encode one partition to OUT/.work/NAME.tokens (raw ids, boundary before each document) + NAME.json counts.

    Pure function of (plan, partition, tokenizer): safe to run on any machine that sees the corpus and OUT at the
    planned paths, any number of times (the last finished run wins; all write the same bytes).
    """
    tokenizer = _load_tokenizer(tokenizer)
    if tokenizer.sha256 != plan.tokenizer_sha256:
        raise ValueError(f"tokenizer sha256 {tokenizer.sha256[:12]} is not the planned {plan.tokenizer_sha256[:12]}")
    dtype = np.dtype(plan.dtype)
    counts = {"documents": 0, "empty_documents": 0, "tokens": 0}
    with atomic_path(plan.tokens_path(part)) as tmp, open(tmp, "wb") as out:
        for texts in _partition_text_batches(Path(plan.corpus_dir) / part.file, part.start, part.stop):
            encoded = tokenizer.encode_batch(texts)
            stream = _with_boundaries(encoded, plan.boundary_id, dtype)
            out.write(stream.tobytes())
            counts["documents"] += len(texts)
            counts["empty_documents"] += sum(1 for ids in encoded if not ids)
            counts["tokens"] += len(stream)
            del encoded, texts
            _release_freed_memory()
    write_json(plan.sidecar_path(part), counts)
    return counts


def _partition_text_batches(path: Path, start: int, stop: int) -> Iterator[list[str]]:
    """Texts of rows [start, stop) in encode_batch groups of at most ENCODE_BATCH_CHARS (or one longer text)."""
    parquet = pq.ParquetFile(path)
    groups, first_row, row = [], None, 0
    for i in range(parquet.num_row_groups):  # read only the row groups that overlap the range
        rows = parquet.metadata.row_group(i).num_rows
        if row < stop and row + rows > start:
            groups.append(i)
            first_row = row if first_row is None else first_row
        row += rows
    row = first_row or 0
    batch, batch_chars = [], 0
    for record_batch in parquet.iter_batches(batch_size=1024, row_groups=groups, columns=["text"], use_threads=False):
        lo, hi = max(start - row, 0), min(stop - row, len(record_batch))
        row += len(record_batch)
        if lo >= hi:
            continue
        for text in record_batch.column(0).slice(lo, hi - lo).to_pylist():
            if batch and batch_chars + len(text) > ENCODE_BATCH_CHARS:
                yield batch
                batch, batch_chars = [], 0
            batch.append(text)
            batch_chars += len(text)
        if row >= stop:
            break
    if batch:
        yield batch


def _with_boundaries(encoded: list[list[int]], boundary_id: int, dtype: np.dtype) -> np.ndarray:
    kept = [ids for ids in encoded if ids]
    stream = np.empty(sum(len(ids) + 1 for ids in kept), dtype=dtype)
    pos = 0
    for ids in kept:
        stream[pos] = boundary_id
        stream[pos + 1:pos + 1 + len(ids)] = ids
        pos += len(ids) + 1
    return stream


# -------------------------------------------------------------------------------------------------- packing


class ShardPacker:
    """Cuts one split's stream (partition files in plan order) into shards as soon as their tokens are known."""

    def __init__(self, plan: Plan, split: str):
        self.plan, self.split = plan, split
        self.block = plan.n_ctx + 1
        self.shard_tokens = plan.shard_rows * self.block
        self.schema = shard_schema(plan.n_ctx, np.dtype(plan.dtype))
        self.parts: list[tuple[Path, int, int]] = []  # (token file, first stream token, tokens)
        self.stream_tokens = 0
        self.documents = self.empty_documents = 0
        self.next_shard = 0
        self.written = self.kept = 0

    def add(self, part: Partition, counts: dict) -> None:
        """Append the next partition (in plan order) and write every shard it completes."""
        self.parts.append((self.plan.tokens_path(part), self.stream_tokens, counts["tokens"]))
        self.stream_tokens += counts["tokens"]
        self.documents += counts["documents"]
        self.empty_documents += counts["empty_documents"]
        while (self.next_shard + 1) * self.shard_tokens <= self.stream_tokens:
            self._write(self.next_shard, self.plan.shard_rows)

    def close(self) -> dict:
        """Write the last (partial) shard and return this split's manifest entry."""
        rows = self.stream_tokens // self.block
        while self.next_shard * self.plan.shard_rows < rows:
            self._write(self.next_shard, min(self.plan.shard_rows, rows - self.next_shard * self.plan.shard_rows))
        shards = []
        for i in range(self.next_shard):
            path = Path(self.plan.out_dir) / shard_name(self.split, i)
            shard_rows = min(self.plan.shard_rows, rows - i * self.plan.shard_rows)
            shards.append({"file": shard_name(self.split, i), "rows": shard_rows, "tokens": shard_rows * self.block,
                           "bytes": path.stat().st_size, "sha256": sha256_file(path)})
        return {"documents": self.documents, "empty_documents": self.empty_documents,
                "stream_tokens": self.stream_tokens, "rows": rows, "tokens": rows * self.block,
                "dropped_tail_tokens": self.stream_tokens - rows * self.block, "shards": shards}

    def _write(self, index: int, rows: int) -> None:
        self.next_shard = index + 1
        path = Path(self.plan.out_dir) / shard_name(self.split, index)
        if path.exists():  # finished by an earlier (killed) run: renamed into place, hence complete
            self.kept += 1
            return
        start = index * self.shard_tokens
        tokens = self._read_stream(start, start + rows * self.block)
        blocks = pa.FixedSizeListArray.from_arrays(pa.array(tokens), self.block)
        with atomic_path(path) as tmp:
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, self.schema) as writer:
                writer.write_batch(pa.record_batch([blocks], schema=self.schema))
        self.written += 1

    def _read_stream(self, start: int, stop: int) -> np.ndarray:
        """Stream tokens [start, stop), read from the partition files straight into one array."""
        tokens = np.empty(stop - start, dtype=self.plan.dtype)
        for path, first, size in self.parts:
            lo, hi = max(start, first), min(stop, first + size)
            if lo < hi:
                with open(path, "rb") as fh:
                    fh.seek((lo - first) * tokens.itemsize)
                    fh.readinto(memoryview(tokens[lo - start:hi - start]).cast("B"))
        return tokens


# ------------------------------------------------------------------------------------------------- the stage

_worker_tokenizer = None


def _init_worker(tokenizer, threads: int) -> None:
    # HF tokenizers sizes its thread pool on first use: give each process its share of the cores.
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    global _worker_tokenizer
    _worker_tokenizer = tokenizer


def _tokenize_in_worker(args: tuple[Plan, Partition]) -> dict:
    return tokenize_partition(*args, _worker_tokenizer)


def tokenize_corpus(corpus_dir: str | Path, tokenizer_dir_or_obj, out_dir: str | Path, *, n_ctx: int,
                    shard_rows: int, workers: int = 1, show_progress: bool = True,
                    partition_bytes: int = PARTITION_BYTES) -> dict:
    """Tokenize and pack a corpus into OUT (see the module docstring); returns the manifest.

    `workers` processes tokenize partitions in parallel; it changes speed, never the output bytes. An
    interrupted run resumes where it stopped; a finished one returns its manifest without redoing anything.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    tokenizer = _load_tokenizer(tokenizer_dir_or_obj)
    plan = prepare_tokenization(corpus_dir, tokenizer, out_dir, n_ctx=n_ctx, shard_rows=shard_rows,
                                partition_bytes=partition_bytes)
    out_dir = Path(plan.out_dir)
    if (out_dir / MANIFEST).exists():  # checked by prepare_tokenization: these inputs, all shards present
        log.info("%s is up to date (key %s)", out_dir, plan.key)
        return read_json(out_dir / MANIFEST)

    pending = plan.pending()
    total_bytes = sum(p.text_bytes for p in plan.partitions)
    new_bytes = sum(p.text_bytes for p in pending)
    if len(pending) < len(plan.partitions):
        log.info("resuming: %d of %d partitions already tokenized", len(plan.partitions) - len(pending),
                 len(plan.partitions))
    started, new_tokens = time.perf_counter(), 0
    bar = tqdm(total=total_bytes, initial=total_bytes - new_bytes, unit="B", unit_scale=True, desc="tokenize",
               disable=not show_progress)
    packers = {split: ShardPacker(plan, split) for split in SPLITS}
    with _run_partitions(plan, pending, tokenizer, workers) as results:
        todo = set(pending)
        for part in plan.partitions:
            if part in todo:
                counts = next(results)
                new_tokens += counts["tokens"]
                bar.update(part.text_bytes)
                bar.set_postfix(tokens_per_s=f"{new_tokens / (time.perf_counter() - started):,.0f}")
            else:
                counts = plan.sidecar(part)
            packers[part.split].add(part, counts)
    splits = {split: packer.close() for split, packer in packers.items()}
    bar.close()
    elapsed = max(time.perf_counter() - started, 1e-9)
    log.info("tokenized %.1f MB of text into %s tokens in %.1fs (%.0f tokens/s, %.2f MB/s); shards written %d, "
             "kept from an earlier run %d", new_bytes / 1e6, f"{new_tokens:,}", elapsed, new_tokens / elapsed,
             new_bytes / 1e6 / elapsed, sum(p.written for p in packers.values()),
             sum(p.kept for p in packers.values()))

    for split, entry in splits.items():
        if not entry["rows"]:
            log.warning("the %s split has no complete block of %d tokens", split, plan.n_ctx + 1)
    manifest = _manifest(plan, splits)
    write_json(out_dir / MANIFEST, manifest)
    shutil.rmtree(plan.work)
    return manifest


@contextlib.contextmanager
def _run_partitions(plan: Plan, pending: list[Partition], tokenizer, workers: int) -> Iterator[Iterator[dict]]:
    """Counts of the pending partitions, in plan order: computed in this process or in a pool of `workers`."""
    if workers == 1 or len(pending) <= 1:
        yield (tokenize_partition(plan, p, tokenizer) for p in pending)
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = min(workers, len(pending))
    # spawn, not fork: forking a process whose tokenizer has already started its thread pool can deadlock.
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes, _init_worker, (tokenizer, max(1, cores // processes))) as pool:
        yield pool.imap(_tokenize_in_worker, [(plan, p) for p in pending])


def _manifest(plan: Plan, splits: dict[str, dict]) -> dict:
    return {
        "format": FORMAT,
        "key": plan.key,
        "n_ctx": plan.n_ctx,
        "block_tokens": plan.n_ctx + 1,
        "dtype": plan.dtype,
        "vocab_size": plan.vocab_size,
        "boundary_id": plan.boundary_id,
        "tokenizer_sha256": plan.tokenizer_sha256,
        "corpus_sha256": plan.corpus_sha256,
        "config": {"n_ctx": plan.n_ctx, "shard_rows": plan.shard_rows},
        "splits": splits,
        "totals": {k: sum(s[k] for s in splits.values())
                   for k in ("documents", "empty_documents", "rows", "tokens", "dropped_tail_tokens")}
                  | {"shards": sum(len(s["shards"]) for s in splits.values())},
    }


def _shards_complete(out_dir: Path, manifest: dict) -> bool:
    return all((out_dir / s["file"]).exists() and (out_dir / s["file"]).stat().st_size == s["bytes"]
               for split in manifest["splits"].values() for s in split["shards"])


# --------------------------------------------------------------------------------------------------- reading


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mixer (Steele et al.): equal inputs give equal outputs on every platform and version."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def shuffled_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The global block order of one epoch: a permutation of range(n) determined by (seed, epoch) only."""
    mask = (1 << 64) - 1  # any Python int seed/epoch, negative ones included
    salt = _splitmix64(_splitmix64(np.array([seed & mask], np.uint64)) ^ np.uint64(epoch & mask))
    return np.argsort(_splitmix64(np.arange(n, dtype=np.uint64) + salt), kind="stable")


class BlockReader:
    """Random access to one split's packed blocks, in a shuffled global order shared by all ranks.

        reader = BlockReader("shards", "train", seed=0, rank=r, world_size=W)
        for step in reader.global_batches(64, micro_batch=8):   # LongTensor (accum, 8, n_ctx+1), this rank's part
            for micro in step: ...                               # accum = 64 / (W * 8) micro-batches
        ckpt["data"] = reader.state_dict()                       # resume: reader.load_state_dict(ckpt["data"])

    Each call to `global_batches`/`batches`/`iter` continues the current epoch from its position; when the epoch
    is exhausted the reader moves to the next one (incomplete final global batches are skipped, so every step
    has the same size). `shuffle=False` keeps stored order (e.g. a fixed validation subset).
    """

    def __init__(self, shards_dir: str | Path, split: str, seed: int = 0, rank: int = 0, world_size: int = 1, *,
                 shuffle: bool = True, verify_checksums: bool = False):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.dir, self.split, self.seed, self.rank, self.world_size = Path(shards_dir), split, seed, rank, world_size
        self.shuffle = shuffle
        self.manifest = load_manifest(self.dir)
        if split not in self.manifest["splits"]:
            raise ValueError(f"{self.dir / MANIFEST}: no split {split!r} (has {sorted(self.manifest['splits'])})")
        self.n_ctx, self.vocab_size = self.manifest["n_ctx"], self.manifest["vocab_size"]
        self._blocks = [self._open(entry, verify_checksums) for entry in self.manifest["splits"][split]["shards"]]
        self._starts = np.cumsum([0] + [len(b) for b in self._blocks])
        self.epoch, self.position = 0, 0
        self._order_cache: tuple[int, np.ndarray] | None = None

    def _open(self, entry: dict, verify_checksums: bool) -> np.ndarray:
        """Memory-map one shard and check it against the manifest; returns a zero-copy (rows, n_ctx+1) view."""
        path = self.dir / entry["file"]
        if not path.exists():
            raise FileNotFoundError(f"{path}: shard listed in {self.dir / MANIFEST} is missing; re-run `gpt1 tokenize`")
        if path.stat().st_size != entry["bytes"]:
            raise InputError(f"shard is {path.stat().st_size} bytes, manifest says {entry['bytes']} (truncated or "
                             "overwritten); re-run `gpt1 tokenize`", file=path)
        if verify_checksums and sha256_file(path) != entry["sha256"]:
            raise InputError("shard sha256 does not match the manifest (corrupted); re-run `gpt1 tokenize`", file=path)
        expected = shard_schema(self.n_ctx, np.dtype(self.manifest["dtype"]))
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        except (pa.ArrowInvalid, OSError) as err:
            raise InputError(f"not a readable Arrow shard ({err}); re-run `gpt1 tokenize`", file=path) from None
        if not table.schema.equals(expected) or table.num_rows != entry["rows"] or table.column(0).num_chunks > 1:
            raise InputError(f"shard holds {table.num_rows} rows of {table.schema.types}, manifest says "
                             f"{entry['rows']} rows of {expected.types}", file=path)
        if table.num_rows == 0:
            return np.zeros((0, self.n_ctx + 1), np.dtype(self.manifest["dtype"]))
        blocks = table.column(0).chunk(0)
        return blocks.flatten().to_numpy(zero_copy_only=True).reshape(len(blocks), self.n_ctx + 1)

    def __len__(self) -> int:
        """Blocks in this split (all ranks together)."""
        return int(self._starts[-1])

    def __getitem__(self, index: int):
        """Block `index` in stored order, as a LongTensor (n_ctx + 1,)."""
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} out of range for {len(self)} blocks")
        return self._gather(np.array([index]))[0]

    def _gather(self, indices: np.ndarray):
        import torch  # imported here so tokenizer worker processes (this module) never load torch

        shard = np.searchsorted(self._starts, indices, side="right") - 1
        out = np.empty((len(indices), self.n_ctx + 1), dtype=np.int64)
        for j, (s, row) in enumerate(zip(shard, indices - self._starts[shard])):
            out[j] = self._blocks[s][row]
        return torch.from_numpy(out)

    def order(self, epoch: int) -> np.ndarray:
        """The global block order of `epoch` (identical on every rank and for every world size)."""
        if not self.shuffle:
            return np.arange(len(self))
        if self._order_cache is None or self._order_cache[0] != epoch:
            self._order_cache = (epoch, shuffled_order(len(self), self.seed, epoch))
        return self._order_cache[1]

    def steps_per_epoch(self, global_batch: int) -> int:
        return len(self) // global_batch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning."""
        self.epoch, self.position = epoch, 0

    def global_batches(self, global_batch: int, micro_batch: int | None = None) -> Iterator[Any]:
        """Per optimizer step: this rank's share of the global batch, as LongTensor (accum, micro, n_ctx + 1).

        Step i covers blocks order[i*G:(i+1)*G] of the epoch; rank r takes its contiguous slice of G/world_size
        blocks, split into micro-batches of `micro_batch` (default: the whole slice, accum = 1).
        """
        if global_batch % self.world_size:
            raise ValueError(f"global batch {global_batch} is not divisible by world_size {self.world_size}")
        share = global_batch // self.world_size
        micro_batch = micro_batch or share
        if share % micro_batch:
            raise ValueError(f"per-rank batch {share} (global {global_batch} / {self.world_size} ranks) is not "
                             f"divisible by micro_batch {micro_batch}")
        if len(self) < global_batch:
            raise ValueError(f"{self.split} split has {len(self)} blocks, fewer than one global batch of "
                             f"{global_batch}")
        order = self.order(self.epoch)
        while self.position + global_batch <= len(self):
            mine = order[self.position + self.rank * share:self.position + (self.rank + 1) * share]
            self.position += global_batch  # before yielding: a checkpoint taken after this step resumes after it
            yield self._gather(mine).view(share // micro_batch, micro_batch, self.n_ctx + 1)
        self.set_epoch(self.epoch + 1)

    def batches(self, batch_size: int) -> Iterator[Any]:
        """This rank's batches of `batch_size` blocks (global batch = batch_size * world_size), LongTensor (B, T)."""
        for step in self.global_batches(batch_size * self.world_size):
            yield step[0]

    def __iter__(self) -> Iterator[Any]:
        """This rank's blocks one at a time (global batch = world_size), LongTensor (n_ctx + 1,)."""
        for batch in self.batches(1):
            yield batch[0]

    def state_dict(self) -> dict:
        return {"split": self.split, "seed": self.seed, "shuffle": self.shuffle, "blocks": len(self),
                "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly after the last batch handed out when `state` was taken."""
        mine = self.state_dict()
        for key in ("split", "seed", "shuffle", "blocks"):
            if state[key] != mine[key]:
                raise ValueError(f"reader state was saved with {key}={state[key]!r}, this reader has {mine[key]!r}")
        if not 0 <= state["position"] <= len(self):
            raise ValueError(f"reader state position {state['position']} outside [0, {len(self)}]")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def load_manifest(shards_dir: str | Path) -> dict:
    path = Path(shards_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: {shards_dir} is not a finished `gpt1 tokenize` output")
    try:
        manifest = read_json(path)
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON ({err})", file=path, line=err.lineno) from None
    for field in ("format", "n_ctx", "dtype", "vocab_size", "splits"):
        if field not in manifest:
            raise InputError("missing field", file=path, field=field)
    if manifest["format"] != FORMAT:
        raise InputError(f"format {manifest['format']!r}, this reader reads {FORMAT!r}", file=path, field="format")
    return manifest


