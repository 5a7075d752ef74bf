"""Long documents are encoded in pieces: on 120 random documents of tricky text, cut every 3, 30 and 200 characters,
the pieces give the ids of the whole document, with the tests' small tokenizer and, when shared, the original GPT-1
vocabulary. The tokenize stage in-process: tests/unit/test_shards.py."""

from __future__ import annotations

import random

import numpy as np

from conftest import SHARED_DATA
from corpora import LINE_BREAKS, docs, tokenizer, tricky_text  # noqa: F401 (docs, tokenizer: fixtures)
from gpt1.data.tokenize import StreamEncoder, document_pieces
from gpt1.tokenizer import bpe


def encode_in_pieces(tokenizer, text: str, encode_chars: int) -> list[int]:
    stream = list(StreamEncoder(tokenizer, np.dtype(np.uint32), encode_chars).encode([text]))
    return np.concatenate(stream).tolist() if stream else []


def tokenizers_to_check(tokenizer) -> list:
    """The test's small tokenizer (mostly <unk> on TRICKY) and, when shared, the original GPT-1 vocabulary."""
    vocab = SHARED_DATA / "openai-gpt1"
    if not vocab.exists():
        return [tokenizer]
    return [tokenizer, bpe.from_openai(vocab / "encoder_bpe_40000.json", vocab / "vocab_40000.bpe")]


def test_a_document_encoded_in_pieces_gives_the_ids_of_the_whole(tokenizer):
    checked = 0
    for tok in tokenizers_to_check(tokenizer):
        for seed in range(120):
            rng = random.Random(seed)
            text = rng.choice(["", *LINE_BREAKS]) + tricky_text(rng, lines=rng.randint(1, 30), words=rng.randint(1, 14))
            ids = tok.encode(text)
            whole = [tok.boundary_id, *ids] if ids else []
            for encode_chars in (3, 30, 200):
                assert encode_in_pieces(tok, text, encode_chars) == whole, (seed, encode_chars, text)
                checked += len(list(document_pieces(text, encode_chars))) > 1
    assert checked > 300  # most cases were really cut
