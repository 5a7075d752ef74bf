"""Reading tokenized shards for training: the manifest, integrity checks, and `BlockReader`.

Integrity. `verify_shards(dir)` checks every shard the manifest lists: present, its size and sha256 as recorded,
a readable Arrow file of the recorded rows, and every token id inside the vocabulary (manifest vocab_size), naming
the shard (and row) that fails. Call it once per run before training starts. On success it records, in
OUT/.verified.json keyed by the manifest's own sha256, each shard file's identity (size, mtime, ctime, inode):
- a later `verify_shards` re-reads only the shards whose identity changed (`full=True` re-reads all);
- `BlockReader` checks every shard's size when it opens it, and, when this manifest was verified, its identity
  too: a shard rewritten since (even to the same size, even with its mtime put back: the kernel sets ctime) is
  hashed again and refused if it no longer matches, without re-reading the unchanged ones;
- every batch `BlockReader` hands out is checked against vocab_size (a max over the batch), naming shard and row.
Without a verification (e.g. a read-only folder where the record cannot be written), the reader checks sizes and
Arrow structure only; `verify_checksums=True` makes it hash every shard it opens.

Reading. `BlockReader` memory-maps the shards of one split and serves blocks in a deterministic shuffled order
per (seed, epoch) that does not depend on the number of ranks: global step i consumes blocks
perm[i*G : (i+1)*G] (G = global batch) and rank r takes the r-th contiguous 1/world_size slice of it, split into
micro-batches. `state_dict()` records (epoch, position in global samples), so training resumes at the exact next
sample, even on a different number of ranks with the same global batch. The shuffle is a sort by a splitmix64
hash of (seed, epoch, block index): stable across numpy/torch versions, unlike their RNG streams.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gpt1.data.tokenize.layout import FORMAT, MANIFEST, VERIFIED, shard_schema
from gpt1.io import InputError, read_json, sha256_file, write_json

log = logging.getLogger(__name__)


def load_manifest(shards_dir: str | Path) -> dict:
    path = Path(shards_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: {shards_dir} is not a finished `gpt1 tokenize` output"
        )
    manifest = read_json(path)
    if not isinstance(manifest, dict):
        raise InputError(f"expected a JSON object, got {type(manifest).__name__}", file=path)
    for field in ("format", "n_ctx", "dtype", "vocab_size", "splits"):
        if field not in manifest:
            raise InputError("missing field", file=path, field=field)
    if manifest["format"] != FORMAT:
        raise InputError(
            f"format {manifest['format']!r}, this reader reads {FORMAT!r}",
            file=path,
            field="format",
        )
    return manifest


# ------------------------------------------------------------------------------------------------- integrity


def _identity(path: Path) -> list[int]:
    """What changes whenever a file is rewritten or replaced: size, mtime, ctime (not settable by users), inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _verified_identities(shards_dir: Path) -> dict[str, list[int]]:
    """Shard file -> identity when `verify_shards` last checked this very manifest; empty if it never did."""
    try:
        record = read_json(shards_dir / VERIFIED)
        if record["manifest_sha256"] == sha256_file(shards_dir / MANIFEST):
            return record["shards"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent, unreadable or of another manifest: nothing is known to be verified
    return {}


def _load_shard(shards_dir: Path, manifest: dict, entry: dict, *, hash_it: bool) -> np.ndarray:
    """Memory-map one shard after checking it against its manifest entry; a zero-copy (rows, n_ctx+1) view."""
    path = shards_dir / entry["file"]
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: shard listed in {shards_dir / MANIFEST} is missing; re-run `gpt1 tokenize`"
        )
    if path.stat().st_size != entry["bytes"]:
        raise InputError(
            f"shard is {path.stat().st_size} bytes, manifest says {entry['bytes']} (truncated or "
            "overwritten); re-run `gpt1 tokenize`",
            file=path,
        )
    if hash_it and sha256_file(path) != entry["sha256"]:
        raise InputError(
            "shard sha256 does not match the manifest (corrupted or modified); re-run `gpt1 tokenize`",
            file=path,
        )
    n_ctx, dtype = manifest["n_ctx"], np.dtype(manifest["dtype"])
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(
            f"not a readable Arrow shard ({err}); re-run `gpt1 tokenize`", file=path
        ) from None
    expected = shard_schema(n_ctx, dtype)
    if (
        not table.schema.equals(expected)
        or table.num_rows != entry["rows"]
        or table.column(0).num_chunks > 1
    ):
        raise InputError(
            f"shard holds {table.num_rows} rows of {table.schema.types}, manifest says "
            f"{entry['rows']} rows of {expected.types}",
            file=path,
        )
    if table.num_rows == 0:
        return np.zeros((0, n_ctx + 1), dtype)
    blocks = table.column(0).chunk(0)
    return blocks.flatten().to_numpy(zero_copy_only=True).reshape(len(blocks), n_ctx + 1)


def _check_token_ids(
    blocks: np.ndarray, vocab_size: int, path: Path, rows: np.ndarray | None = None
) -> None:
    """Refuse ids >= vocab_size, naming the first bad row (`rows`: the shard rows `blocks` holds, if a subset)."""
    if not blocks.size or blocks.max() < vocab_size:
        return
    bad = int(np.flatnonzero((blocks >= vocab_size).any(axis=1))[0])
    token = int(blocks[bad][blocks[bad] >= vocab_size][0])
    row = bad if rows is None else int(rows[bad])
    raise InputError(
        f"row {row} holds token id {token}, outside the vocabulary (manifest vocab_size {vocab_size}); "
        "the shard does not belong to this manifest or was modified",
        file=path,
    )


def verify_shards(shards_dir: str | Path, *, full: bool = False) -> dict:
    """Check every shard of the manifest (see the module docstring) and record the result; returns counts.

    Raises FileNotFoundError / InputError naming the first shard that fails (and the row, for a token id outside
    the vocabulary). `full`: re-read every shard, not only those changed since the last verification.
    """
    shards_dir = Path(shards_dir)
    manifest = load_manifest(shards_dir)
    started = time.perf_counter()
    verified = {} if full else _verified_identities(shards_dir)
    identities, checked_bytes, total_bytes = {}, 0, 0
    for split in manifest["splits"].values():
        for entry in split["shards"]:
            path = shards_dir / entry["file"]
            total_bytes += entry["bytes"]
            unchanged = path.exists() and verified.get(entry["file"]) == _identity(path)
            blocks = _load_shard(shards_dir, manifest, entry, hash_it=not unchanged)
            if not unchanged:
                _check_token_ids(blocks, manifest["vocab_size"], path)
                checked_bytes += entry["bytes"]
            identities[entry["file"]] = _identity(path)
    seconds = time.perf_counter() - started
    try:
        write_json(
            shards_dir / VERIFIED,
            {"manifest_sha256": sha256_file(shards_dir / MANIFEST), "shards": identities},
        )
    except (
        OSError
    ) as err:  # a read-only copy still trains; its readers then check sizes and structure only
        log.warning(
            "%s: cannot record the verification (%s); readers will not know these shards were checked",
            shards_dir,
            err,
        )
    log.info(
        "%s: %d shards verified (%.1f MB read and hashed in %.2fs, %.1f MB unchanged since verified)",
        shards_dir,
        len(identities),
        checked_bytes / 1e6,
        seconds,
        (total_bytes - checked_bytes) / 1e6,
    )
    return {
        "shards": len(identities),
        "bytes": total_bytes,
        "checked_bytes": checked_bytes,
        "seconds": round(seconds, 3),
    }


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

    def __init__(
        self,
        shards_dir: str | Path,
        split: str,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        *,
        shuffle: bool = True,
        verify_checksums: bool = False,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.dir, self.split, self.seed, self.rank, self.world_size = (
            Path(shards_dir),
            split,
            seed,
            rank,
            world_size,
        )
        self.shuffle = shuffle
        self.manifest = load_manifest(self.dir)
        if split not in self.manifest["splits"]:
            raise ValueError(
                f"{self.dir / MANIFEST}: no split {split!r} (has {sorted(self.manifest['splits'])})"
            )
        self.n_ctx, self.vocab_size = self.manifest["n_ctx"], self.manifest["vocab_size"]
        entries = self.manifest["splits"][split]["shards"]
        self._paths = [self.dir / entry["file"] for entry in entries]
        verified = _verified_identities(self.dir)
        self._blocks = []
        for entry, path in zip(entries, self._paths):
            # A shard changed since `verify_shards` checked this manifest is checked again, in full.
            changed = (
                bool(verified) and path.exists() and verified.get(entry["file"]) != _identity(path)
            )
            blocks = _load_shard(
                self.dir, self.manifest, entry, hash_it=verify_checksums or changed
            )
            if changed:
                _check_token_ids(blocks, self.vocab_size, path)
            self._blocks.append(blocks)
        self._starts = np.cumsum([0] + [len(b) for b in self._blocks])
        self.epoch, self.position = 0, 0
        self._order_cache: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        """Blocks in this split (all ranks together)."""
        return int(self._starts[-1])

    def shards(self) -> list[np.ndarray]:
        """The split's shards as (rows, n_ctx+1) arrays in stored order: memory maps, no copy."""
        return list(self._blocks)

    def __getitem__(self, index: int):
        """Block `index` in stored order, as a LongTensor (n_ctx + 1,)."""
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} out of range for {len(self)} blocks")
        return self._gather(np.array([index]))[0]

    def _gather(self, indices: np.ndarray):
        import torch  # imported here so tokenizer worker processes (the writer) never load torch

        shard = np.searchsorted(self._starts, indices, side="right") - 1
        rows = indices - self._starts[shard]
        out = np.empty((len(indices), self.n_ctx + 1), dtype=np.int64)
        for j, (s, row) in enumerate(zip(shard, rows)):
            out[j] = self._blocks[s][row]
        if (
            out.size and out.max() >= self.vocab_size
        ):  # one max per batch: a bad id never reaches the embedding
            bad = int(np.flatnonzero((out >= self.vocab_size).any(axis=1))[0])
            _check_token_ids(
                out[bad : bad + 1], self.vocab_size, self._paths[shard[bad]], rows[bad : bad + 1]
            )
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
            raise ValueError(
                f"global batch {global_batch} is not divisible by world_size {self.world_size}"
            )
        share = global_batch // self.world_size
        micro_batch = micro_batch or share
        if share % micro_batch:
            raise ValueError(
                f"per-rank batch {share} (global {global_batch} / {self.world_size} ranks) is not "
                f"divisible by micro_batch {micro_batch}"
            )
        if len(self) < global_batch:
            raise ValueError(
                f"{self.split} split has {len(self)} blocks, fewer than one global batch of "
                f"{global_batch}"
            )
        order = self.order(self.epoch)
        while self.position + global_batch <= len(self):
            mine = order[
                self.position + self.rank * share : self.position + (self.rank + 1) * share
            ]
            self.position += (
                global_batch  # before yielding: a checkpoint taken after this step resumes after it
            )
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
        return {
            "split": self.split,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "blocks": len(self),
            "epoch": self.epoch,
            "position": self.position,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly after the last batch handed out when `state` was taken."""
        mine = self.state_dict()
        for key in ("split", "seed", "shuffle", "blocks"):
            if state[key] != mine[key]:
                raise ValueError(
                    f"reader state was saved with {key}={state[key]!r}, this reader has {mine[key]!r}"
                )
        if not 0 <= state["position"] <= len(self):
            raise ValueError(f"reader state position {state['position']} outside [0, {len(self)}]")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
