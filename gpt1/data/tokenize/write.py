"""Pipeline stage 3: tokenize an ingested corpus into Arrow shards of packed blocks (layout: layout.py).

Packing. Each split is one token stream: its documents in stored order, each preceded by `tokenizer.boundary_id`
(`_start_`). The stream is cut into non-overlapping windows of n_ctx + 1 tokens (inputs plus the shifted
targets), so a block may span a document boundary but never the train/val split; the split's last partial block
is dropped and counted (`dropped_tail_tokens`). Documents that encode to no tokens get no boundary either and are
counted (`empty_documents`). A run whose train split makes no complete block is an error (nothing is written).

Aligned documents (`align_documents`). Fine-tuning puts `_start_` at position 0, which a plain stream puts there
only by chance. Aligned, a block starts at a document's `_start_` wherever it can: documents are laid into blocks
in order, whole while they fit; a document that does not fit in what is left of a block closes that block with its
last tokens and starts the next block with its beginning (a longer one fills whole blocks from there). Every block
then starts with `_start_` but the continuation blocks of documents longer than a block, and only a document's
last tokens (those closing the block before) are read after another document instead of after its own start, as
every block boundary of a plain stream is. Each partition's last partial block goes to the end of the split's
stream, so partitions stay independent. No token is dropped for it, and the share of blocks that start with
`_start_` is in the manifest (`blocks_starting_a_document`). The tokens of each origin (the corpus source, the
tasks' train text: gpt1.data.ingest.corpus) are counted too.

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

Memory: documents are encoded `encode_chars` characters at a time, a long one in pieces with the ids of the whole
(encode.py); memory per process does not grow with the corpus.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from gpt1.data.ingest.corpus import ORIGINS, SPLITS, STATS_FILE, origin_of, split_files
from gpt1.data.tokenize.encode import ENCODE_CHARS, StreamEncoder
from gpt1.data.tokenize.layout import FORMAT, MANIFEST, shard_name, shard_schema, token_dtype
from gpt1.io import (
    InputError,
    OutputError,
    atomic_path,
    check_writable,
    parquet_file,
    read_json,
    sha256_file,
    sha256_tree,
    stable_hash,
    write_error,
    write_json,
)

log = logging.getLogger(__name__)

WORK_DIR = ".work"
# text per partition: many units keep processes balanced (~1-10 s of work each)
PARTITION_BYTES = 1 << 20


_malloc_trim: Callable[[int], int] | None
try:  # glibc: hand freed memory back to the OS (see _release_freed_memory)
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None


def _release_freed_memory() -> None:
    """glibc keeps the tokenizer's freed buffers in its per-thread arenas, so without this the peak RSS creeps up
    with the amount of text encoded (~10% over four passes of the same books); with it the peak stays flat."""
    if _malloc_trim is not None:
        _malloc_trim(0)


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


def plan_partitions(
    corpus_dir: str | Path, partition_bytes: int = PARTITION_BYTES
) -> list[Partition]:
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
            cuts = np.searchsorted(
                ends, np.arange(partition_bytes, ends[-1], partition_bytes), side="right"
            )
            bounds = [0, *sorted(set(cuts.tolist()) - {0, len(lengths)}), len(lengths)]
            for start, stop in zip(bounds, bounds[1:]):
                nbytes = int(ends[stop - 1] - (ends[start - 1] if start else 0))
                partitions.append(
                    Partition(
                        split, index, path.relative_to(corpus_dir).as_posix(), start, stop, nbytes
                    )
                )
                index += 1
    return partitions


def _text_lengths(path: Path) -> np.ndarray:
    parquet = parquet_file(path)
    chunks, row = [], 0
    # One row group at a time, one thread: iter_batches' read-ahead and decoder threads make memory grow with the
    # file; read this way it stays flat.
    for group in range(parquet.num_row_groups):
        text = parquet.read_row_group(group, columns=["text"], use_threads=False).column(0)
        if text.null_count:
            bad = row + int(np.flatnonzero(text.is_null().to_numpy())[0])
            raise InputError(
                f"document in row {bad} has no text", file=path, line=bad, field="text"
            )
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
    encode_chars: int = ENCODE_CHARS  # memory, not bytes: not part of the key
    align_documents: bool = False

    @property
    def key(self) -> str:
        """Hash of what determines the output bytes (not the partitioning, not the worker count)."""
        settings = {
            "format": FORMAT,
            "n_ctx": self.n_ctx,
            "shard_rows": self.shard_rows,
            "tokenizer": self.tokenizer_sha256,
            "corpus": self.corpus_sha256,
        }
        if self.align_documents:  # only when on: shards packed as a plain stream keep their key
            settings["align_documents"] = True
        return stable_hash(settings)

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
        if (
            not tokens.exists()
            or tokens.stat().st_size != counts["tokens"] * np.dtype(self.dtype).itemsize
        ):
            return None
        return counts

    def pending(self) -> list[Partition]:
        return [p for p in self.partitions if self.sidecar(p) is None]

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "key": self.key}

    @classmethod
    def from_json(cls, obj: dict) -> Plan:
        fields = {f.name for f in dataclasses.fields(cls)}
        plan = cls(**{k: v for k, v in obj.items() if k in fields})
        plan.partitions = [Partition(**p) for p in obj["partitions"]]
        return plan


def _load_tokenizer(tokenizer):
    if isinstance(tokenizer, (str, os.PathLike)):
        from gpt1.tokenizer import bpe  # the reader side never needs the tokenizer

        return bpe.load(tokenizer)
    return tokenizer


def prepare_tokenization(
    corpus_dir: str | Path,
    tokenizer,
    out_dir: str | Path,
    *,
    n_ctx: int,
    shard_rows: int,
    partition_bytes: int = PARTITION_BYTES,
    encode_chars: int = ENCODE_CHARS,
    align_documents: bool = False,
) -> Plan:
    """Validate inputs and OUT, plan the partitions (or reuse the unfinished run's plan) and save the plan.

    When OUT already holds the finished output of these inputs (its manifest.json), the plan has no partitions.
    """
    if min(n_ctx, shard_rows, partition_bytes, encode_chars) <= 0:
        raise ValueError(
            f"n_ctx, shard_rows, partition_bytes and encode_chars must be positive, got {n_ctx}, "
            f"{shard_rows}, {partition_bytes}, {encode_chars}"
        )
    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir).resolve()
    tokenizer = _load_tokenizer(tokenizer)
    if not 0 <= tokenizer.boundary_id < tokenizer.vocab_size:
        raise ValueError(
            f"tokenizer boundary_id {tokenizer.boundary_id} outside its vocab ({tokenizer.vocab_size})"
        )
    for split in SPLITS:
        split_files(corpus_dir, split)  # a clear error if this is not an ingested corpus
    plan = Plan(
        str(corpus_dir),
        str(out_dir),
        n_ctx,
        shard_rows,
        tokenizer.vocab_size,
        tokenizer.boundary_id,
        token_dtype(tokenizer.vocab_size).name,
        tokenizer.sha256,
        sha256_tree(corpus_dir, "*/part-*.parquet"),
        partition_bytes,
        [],
        encode_chars,
        align_documents,
    )

    manifest = _read_manifest_if_any(out_dir)
    plan_path = plan.work / "plan.json"
    previous = Plan.from_json(read_json(plan_path)) if plan_path.exists() else None
    existing = {
        "tokenized output": manifest and manifest["key"],
        "unfinished tokenization": previous and previous.key,
    }
    for what, key in existing.items():
        if key is not None and key != plan.key:
            raise ValueError(
                f"{out_dir} already holds a {what} of different inputs or settings (corpus, tokenizer, "
                f"n_ctx, shard_rows or align_documents changed); use another --out or delete it"
            )
    if (
        manifest is None
        and previous is None
        and any(any((out_dir / s).glob("shard-*.arrow")) for s in SPLITS)
    ):
        raise ValueError(
            f"{out_dir} holds shards but no manifest.json or plan; use another --out or delete it"
        )

    if manifest is not None and _shards_complete(out_dir, manifest):
        # left if a run was killed right after its manifest
        shutil.rmtree(plan.work, ignore_errors=True)
        return plan
    check_writable(out_dir)
    if manifest is not None:
        (out_dir / MANIFEST).unlink()  # a shard went missing since: rebuild it below
    _remove_temporaries(out_dir)
    if previous is not None and previous.partition_bytes == partition_bytes:
        plan.partitions = previous.partitions
    else:
        # partition files of another partitioning: a cache, not output
        shutil.rmtree(plan.work, ignore_errors=True)
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
    """Encode one partition to OUT/.work/NAME.tokens (raw ids, boundary before each document; aligned: in block
    order, the complete blocks first) + NAME.json counts.

    Pure function of (plan, partition, tokenizer): safe to run on any machine that sees the corpus and OUT at the
    planned paths, any number of times (the last finished run wins; all write the same bytes).
    """
    tokenizer = _load_tokenizer(tokenizer)
    if tokenizer.sha256 != plan.tokenizer_sha256:
        raise ValueError(
            f"tokenizer sha256 {tokenizer.sha256[:12]} is not the planned {plan.tokenizer_sha256[:12]}"
        )
    encoder = StreamEncoder(tokenizer, np.dtype(plan.dtype), plan.encode_chars)
    path = Path(plan.corpus_dir) / part.file
    counts: dict = {}
    with atomic_path(plan.tokens_path(part)) as tmp, open(tmp, "wb") as out:
        streams = encoder.encode(_partition_column(path, part.start, part.stop, "text"))
        if (
            plan.align_documents
        ):  # the partition's stream at once: its documents are laid into blocks
            stream = np.concatenate([np.zeros(0, plan.dtype), *streams])
            block = plan.n_ctx + 1
            out.write(stream[_block_order([n for _, n in encoder.lengths], block)].tobytes())
            counts["aligned_tokens"] = len(stream) // block * block
        else:
            for stream in streams:
                out.write(stream.tobytes())
                del stream
                _release_freed_memory()
    sources = list(_partition_column(path, part.start, part.stop, "source"))
    origins = {origin: 0 for origin in ORIGINS}
    for number, tokens in encoder.lengths:
        origins[origin_of(sources[number])] += tokens
    counts = {**encoder.counts, **counts, "origin_tokens": origins}
    write_json(plan.sidecar_path(part), counts)
    return counts


def _block_order(lengths: list[int], block: int) -> np.ndarray:
    """The stream positions of documents of these lengths (in tokens, one after another) in aligned block order
    (see the module docstring): a block starts with a document's first token wherever it can."""
    ranges, gap, start = [], block, 0  # gap: tokens left in the block being filled
    for length in lengths:
        end = start + length
        if length > gap and gap < block:  # it does not fit: its last tokens close this block
            ranges.append((end - gap, end))
            end -= gap
            gap = block
        ranges.append((start, end))
        gap = (gap - (end - start)) % block or block
        start += length
    return np.concatenate([np.arange(0, 0)] + [np.arange(a, b) for a, b in ranges])


def _partition_column(path: Path, start: int, stop: int, column: str) -> Iterator[str]:
    """One column of rows [start, stop) of one Parquet part, in order, reading only the row groups that hold
    them."""
    parquet = parquet_file(path)
    groups, first_row, row = [], None, 0
    for i in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(i).num_rows
        if row < stop and row + rows > start:
            groups.append(i)
            first_row = row if first_row is None else first_row
        row += rows
    row = first_row or 0
    for record_batch in parquet.iter_batches(
        batch_size=1024, row_groups=groups, columns=[column], use_threads=False
    ):
        lo, hi = max(start - row, 0), min(stop - row, len(record_batch))
        row += len(record_batch)
        if lo < hi:
            yield from record_batch.column(0).slice(lo, hi - lo).to_pylist()
        if row >= stop:
            break


# -------------------------------------------------------------------------------------------------- packing


class ShardPacker:
    """Cuts one split's stream into shards as soon as their tokens are known. The stream is the partition files
    in plan order; aligned, each file's whole-block part in plan order, then each file's rest."""

    def __init__(self, plan: Plan, split: str):
        self.plan, self.split = plan, split
        self.block = plan.n_ctx + 1
        self.shard_tokens = plan.shard_rows * self.block
        self.schema = shard_schema(plan.n_ctx, np.dtype(plan.dtype))
        # (token file, its first token, first stream token, size)
        self.segments: list[tuple[Path, int, int, int]] = []
        # aligned: (token file, first token, size) of each file's rest
        self.rests: list[tuple[Path, int, int]] = []
        self.stream_tokens = 0
        self.documents = self.empty_documents = 0
        self.origin_tokens = {origin: 0 for origin in ORIGINS}
        self.next_shard = 0
        self.written = self.kept = 0
        self.starting_blocks = 0  # blocks whose first token is the document boundary

    def add(self, part: Partition, counts: dict) -> None:
        """Append the next partition (in plan order) and write every shard it completes."""
        path, tokens = self.plan.tokens_path(part), counts["tokens"]
        aligned = counts.get("aligned_tokens", tokens)
        self._append(path, 0, aligned)
        if aligned < tokens:
            self.rests.append((path, aligned, tokens - aligned))
        self.documents += counts["documents"]
        self.empty_documents += counts["empty_documents"]
        for origin, n in counts.get("origin_tokens", {}).items():
            self.origin_tokens[origin] += n
        self._write_complete()

    def _append(self, path: Path, offset: int, size: int) -> None:
        if size:
            self.segments.append((path, offset, self.stream_tokens, size))
            self.stream_tokens += size

    def _write_complete(self) -> None:
        while (self.next_shard + 1) * self.shard_tokens <= self.stream_tokens:
            self._write(self.next_shard, self.plan.shard_rows)

    def close(self) -> dict:
        """Write the last shards (the documents' rests, aligned; the last partial shard) and return this split's
        manifest entry."""
        for path, offset, size in self.rests:
            self._append(path, offset, size)
        self._write_complete()
        rows = self.stream_tokens // self.block
        while self.next_shard * self.plan.shard_rows < rows:
            self._write(
                self.next_shard,
                min(self.plan.shard_rows, rows - self.next_shard * self.plan.shard_rows),
            )
        shards = []
        for i in range(self.next_shard):
            path = Path(self.plan.out_dir) / shard_name(self.split, i)
            shard_rows = min(self.plan.shard_rows, rows - i * self.plan.shard_rows)
            shards.append(
                {
                    "file": shard_name(self.split, i),
                    "rows": shard_rows,
                    "tokens": shard_rows * self.block,
                    "bytes": path.stat().st_size,
                    "sha256": sha256_file(path),
                }
            )
        return {
            "documents": self.documents,
            "empty_documents": self.empty_documents,
            "stream_tokens": self.stream_tokens,
            "rows": rows,
            "tokens": rows * self.block,
            "dropped_tail_tokens": self.stream_tokens - rows * self.block,
            "shards": shards,
            "origin_tokens": self.origin_tokens,
            "blocks_starting_a_document": self.starting_blocks,
        }

    def _write(self, index: int, rows: int) -> None:
        self.next_shard = index + 1
        path = Path(self.plan.out_dir) / shard_name(self.split, index)
        if path.exists():  # finished by an earlier (killed) run: renamed into place, hence complete
            self.kept += 1
            with pa.memory_map(str(path)) as source:
                blocks = pa.ipc.open_file(source).get_batch(0).column(0)
                self._count_starts(blocks.flatten().to_numpy().reshape(-1, self.block))
            return
        start = index * self.shard_tokens
        tokens = self._read_stream(start, start + rows * self.block)
        self._count_starts(tokens.reshape(-1, self.block))
        blocks = pa.FixedSizeListArray.from_arrays(pa.array(tokens), self.block)
        with atomic_path(path) as tmp:
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, self.schema) as writer:
                writer.write_batch(pa.record_batch([blocks], schema=self.schema))
        self.written += 1

    def _count_starts(self, blocks: np.ndarray) -> None:
        self.starting_blocks += int((blocks[:, 0] == self.plan.boundary_id).sum())

    def _read_stream(self, start: int, stop: int) -> np.ndarray:
        """Stream tokens [start, stop), read from the partition files straight into one array."""
        tokens = np.empty(stop - start, dtype=self.plan.dtype)
        for path, offset, first, size in self.segments:
            lo, hi = max(start, first), min(stop, first + size)
            if lo < hi:
                with open(path, "rb") as fh:
                    fh.seek((offset + lo - first) * tokens.itemsize)
                    fh.readinto(tokens[lo - start : hi - start].data.cast("B"))
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


def tokenize_corpus(
    corpus_dir: str | Path,
    tokenizer_dir_or_obj,
    out_dir: str | Path,
    *,
    n_ctx: int,
    shard_rows: int,
    workers: int = 1,
    show_progress: bool = True,
    partition_bytes: int = PARTITION_BYTES,
    encode_chars: int = ENCODE_CHARS,
    align_documents: bool = False,
) -> dict:
    """Tokenize and pack a corpus into OUT (see the module docstring); returns the manifest.

    `workers` processes tokenize partitions in parallel; it changes speed, never the output bytes, and neither
    does `encode_chars` (memory). An interrupted run resumes where it stopped; a finished one returns its manifest
    without redoing anything. A failed write (disk full) raises OutputError; what was finished is kept for the
    re-run.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    tokenizer = _load_tokenizer(tokenizer_dir_or_obj)
    plan = prepare_tokenization(
        corpus_dir,
        tokenizer,
        out_dir,
        n_ctx=n_ctx,
        shard_rows=shard_rows,
        partition_bytes=partition_bytes,
        encode_chars=encode_chars,
        align_documents=align_documents,
    )
    out_dir = Path(plan.out_dir)
    if (
        out_dir / MANIFEST
    ).exists():  # checked by prepare_tokenization: these inputs, all shards present
        log.info("%s is up to date (key %s)", out_dir, plan.key)
        return read_json(out_dir / MANIFEST)
    try:
        return _tokenize(plan, tokenizer, workers, show_progress)
    except (
        OSError
    ) as err:  # ENOSPC, EDQUOT, EIO, ...: nothing half-written stays under a final name
        failed = write_error(err.filename or out_dir, err)
        raise OutputError(
            f"{failed}; the partitions and shards finished so far are kept: re-run the same command "
            "to resume"
        ) from None


def _tokenize(plan: Plan, tokenizer, workers: int, show_progress: bool) -> dict:
    out_dir = Path(plan.out_dir)
    pending = plan.pending()
    total_bytes = sum(p.text_bytes for p in plan.partitions)
    new_bytes = sum(p.text_bytes for p in pending)
    if len(pending) < len(plan.partitions):
        log.info(
            "resuming: %d of %d partitions already tokenized",
            len(plan.partitions) - len(pending),
            len(plan.partitions),
        )
    started, new_tokens = time.perf_counter(), 0
    bar = tqdm(
        total=total_bytes,
        initial=total_bytes - new_bytes,
        unit="B",
        unit_scale=True,
        desc="tokenize",
        disable=not show_progress,
    )
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
                sidecar = plan.sidecar(part)
                assert sidecar is not None  # plan.pending() above left out just those with one
                counts = sidecar
            packers[part.split].add(part, counts)
    splits = {split: packer.close() for split, packer in packers.items()}
    bar.close()
    elapsed = max(time.perf_counter() - started, 1e-9)
    log.info(
        "tokenized %.1f MB of text into %s tokens in %.1fs (%.0f tokens/s, %.2f MB/s); shards written %d, "
        "kept from an earlier run %d",
        new_bytes / 1e6,
        f"{new_tokens:,}",
        elapsed,
        new_tokens / elapsed,
        new_bytes / 1e6 / elapsed,
        sum(p.written for p in packers.values()),
        sum(p.kept for p in packers.values()),
    )

    if not splits["train"]["rows"]:
        _remove_output(plan, splits)
        raise ValueError(
            f"{plan.corpus_dir}: no complete block of n_ctx + 1 = {plan.n_ctx + 1} tokens in the "
            f"train split (its {splits['train']['documents']:,} documents make "
            f"{splits['train']['stream_tokens']:,} tokens); nothing written: use a smaller --ctx or a "
            "larger corpus"
        )
    if not splits["val"]["rows"]:
        log.warning("the val split has no complete block of %d tokens", plan.n_ctx + 1)
    manifest = _manifest(plan, splits)
    write_json(out_dir / MANIFEST, manifest)
    shutil.rmtree(plan.work)
    return manifest


def write_random_shards(
    out_dir: str | Path,
    *,
    vocab_size: int,
    n_ctx: int,
    rows: dict[str, int],
    shard_rows: int = 8192,
    seed: int = 0,
) -> dict:
    """Shards of uniformly random token ids, with their manifest, exactly as `tokenize_corpus` lays them out: for
    measuring training speed at a vocabulary no tokenizer at hand has (the GPT-1 shape's 40,481). `rows`: blocks
    per split, e.g. {"train": 4096, "val": 64}. There is no tokenizer; the manifest's corpus hash names the seed."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab_size)
    block = n_ctx + 1
    parts = [Partition(split, 0, "", 0, count, 0) for split, count in rows.items()]
    plan = Plan(
        corpus_dir="",
        out_dir=str(out_dir),
        n_ctx=n_ctx,
        shard_rows=shard_rows,
        vocab_size=vocab_size,
        boundary_id=-1,
        dtype=dtype.name,
        tokenizer_sha256="",
        partition_bytes=0,
        partitions=parts,
        corpus_sha256=stable_hash({"random_tokens": seed, "rows": rows, "vocab_size": vocab_size}),
    )
    plan.work.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    splits = {}
    for part in parts:
        rng.integers(0, vocab_size, part.stop * block).astype(dtype).tofile(plan.tokens_path(part))
        packer = ShardPacker(plan, part.split)
        packer.add(part, {"tokens": part.stop * block, "documents": 0, "empty_documents": 0})
        splits[part.split] = packer.close()
    manifest = _manifest(plan, splits)
    write_json(out_dir / MANIFEST, manifest)
    shutil.rmtree(plan.work)
    return manifest


@contextlib.contextmanager
def _run_partitions(
    plan: Plan, pending: list[Partition], tokenizer, workers: int
) -> Iterator[Iterator[dict]]:
    """Counts of the pending partitions, in plan order: computed in this process or in a pool of `workers`."""
    if workers == 1 or len(pending) <= 1:
        yield (tokenize_partition(plan, p, tokenizer) for p in pending)
        return
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    processes = min(workers, len(pending))
    # spawn, not fork: forking a process whose tokenizer has already started its thread pool can deadlock.
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes, _init_worker, (tokenizer, max(1, cores // processes))) as pool:
        yield pool.imap(_tokenize_in_worker, [(plan, p) for p in pending])


def _remove_output(plan: Plan, splits: dict[str, dict]) -> None:
    """Delete an unusable run's shards and partition files, so that another --ctx can use OUT."""
    for entry in splits.values():
        for shard in entry["shards"]:
            (Path(plan.out_dir) / shard["file"]).unlink()
    shutil.rmtree(plan.work)


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
        "config": {
            "n_ctx": plan.n_ctx,
            "shard_rows": plan.shard_rows,
            "align_documents": plan.align_documents,
        },
        "splits": splits,
        "totals": {
            k: sum(s.get(k, 0) for s in splits.values())
            for k in (
                "documents",
                "empty_documents",
                "rows",
                "tokens",
                "dropped_tail_tokens",
                "blocks_starting_a_document",
            )
        }
        | {"shards": sum(len(s["shards"]) for s in splits.values())},
        "composition": composition(plan, splits),
    }


def composition(plan: Plan, splits: dict[str, dict]) -> dict:
    """What pre-training reads, by origin: the train tokens of the corpus source and of the tasks' train text,
    the share of train blocks that start a document, and what the ingest's leak check removed."""
    train = splits["train"]
    stats_path = Path(plan.corpus_dir) / STATS_FILE
    stats = read_json(stats_path) if plan.corpus_dir and stats_path.is_file() else {}
    leak = stats.get("leak_check") or None
    return {
        "train_tokens": dict(train.get("origin_tokens") or {}),
        "blocks_starting_a_document": round(
            train.get("blocks_starting_a_document", 0) / max(train["rows"], 1), 4
        ),
        "task_text_tasks": (stats.get("settings") or {}).get("task_text", []),
        "leak_check": None
        if leak is None
        else {
            "sentences_removed": leak["sentences_removed"],
            "sentences_indexed": leak["sentences_indexed"],
            "tasks": sorted(leak["held_out"]),
        },
    }


def _shards_complete(out_dir: Path, manifest: dict) -> bool:
    return all(
        (out_dir / s["file"]).exists() and (out_dir / s["file"]).stat().st_size == s["bytes"]
        for split in manifest["splits"].values()
        for s in split["shards"]
    )
