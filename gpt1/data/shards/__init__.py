"""Arrow shards of packed token blocks: the writer (`gpt1 tokenize`, write.py) and the training reader (read.py);
the on-disk contract between them is layout.py."""

from gpt1.data.shards.layout import FORMAT, MANIFEST, shard_name, shard_schema, token_dtype
from gpt1.data.shards.read import BlockReader, load_manifest, shuffled_order, verify_shards
from gpt1.data.shards.write import (Partition, Plan, StreamEncoder, add_tokenize_args, document_pieces, plan_partitions,
                                    prepare_tokenization, run_tokenize, tokenize_corpus, tokenize_partition)

__all__ = ["FORMAT", "MANIFEST", "BlockReader", "Partition", "Plan", "StreamEncoder", "add_tokenize_args",
           "document_pieces", "load_manifest", "plan_partitions", "prepare_tokenization", "run_tokenize",
           "shard_name", "shard_schema", "shuffled_order", "token_dtype", "tokenize_corpus", "tokenize_partition",
           "verify_shards"]
