"""Arrow shards of packed token blocks: the writer (write.py, run by `gpt1 tokenize`, feeding the tokenizer through
encode.py) and the training reader (read.py); the on-disk contract between them is layout.py."""

from gpt1.data.tokenize.encode import ENCODE_CHARS, StreamEncoder, document_pieces
from gpt1.data.tokenize.layout import FORMAT, MANIFEST, shard_name, shard_schema, token_dtype
from gpt1.data.tokenize.read import BlockReader, load_manifest, shuffled_order, verify_shards
from gpt1.data.tokenize.write import (
    Partition,
    Plan,
    plan_partitions,
    prepare_tokenization,
    tokenize_corpus,
    tokenize_partition,
)

__all__ = [
    "ENCODE_CHARS",
    "FORMAT",
    "MANIFEST",
    "BlockReader",
    "Partition",
    "Plan",
    "StreamEncoder",
    "document_pieces",
    "load_manifest",
    "plan_partitions",
    "prepare_tokenization",
    "shard_name",
    "shard_schema",
    "shuffled_order",
    "token_dtype",
    "tokenize_corpus",
    "tokenize_partition",
    "verify_shards",
]
