"""The tokenized-shards layout: what `gpt1 tokenize` writes (write.py) and pre-training reads (read.py).

    OUT/manifest.json                    written last: its presence means the shards are complete
    OUT/train/shard-00000.arrow ...      Arrow IPC *file* format (memory-mappable), one record batch, one column
    OUT/val/shard-00000.arrow ...        `tokens`: fixed_size_list<uint16|uint32>[n_ctx + 1], `shard_rows` blocks
    OUT/.verified.json                   written by `verify_shards`: which shard files it checked, keyed by the
                                         manifest (see read.py)

The manifest lists, per split, its document/token counts and its shards (file, rows, tokens, bytes, sha256), plus
n_ctx, dtype, vocab_size, boundary_id and the tokenizer's and corpus's sha256. Token ids are stored as uint16 when
vocab_size <= 65,536, else uint32.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

FORMAT = "gpt1-shards/1"
MANIFEST = "manifest.json"
VERIFIED = ".verified.json"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def shard_name(split: str, index: int) -> str:
    return f"{split}/shard-{index:05d}.arrow"


def shard_schema(n_ctx: int, dtype: np.dtype) -> pa.Schema:
    return pa.schema(
        [pa.field("tokens", pa.list_(pa.from_numpy_dtype(dtype), n_ctx + 1), nullable=False)]
    )
