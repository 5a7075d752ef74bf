"""The paper's input transformations (section 3.3, Figure 1): task examples -> token sequences for the model.

    classification   _start_ text _classify_
    entailment       _start_ premise _delimiter_ hypothesis _classify_
    similarity       _start_ A _delimiter_ B _classify_  and  _start_ B _delimiter_ A _classify_   (two sequences)
    multiple choice  _start_ context question _delimiter_ answer_k _classify_                   (one per answer)

The prediction is read at `_classify_`, the last real token of each sequence (`classify_pos`).

Truncation (the spec is silent; this keeps what decides the answer): every sequence fits `max_len` including its
special tokens, which are never dropped. Parts are cut from their end, in this order: the premise before the
hypothesis; for similarity the longer of the two sentences, one token at a time (both orderings then hold the
same tokens); for multiple choice the context (RACE: the article), then the question, and the answer only if it
alone is too long. The context is cut once for the longest answer, so all candidates share the same context.

`collate` pads a batch to the longest sequence (right padding with `pad_id`, 0 by default, plus a boolean mask of
real tokens) as numpy arrays shaped for `GPT1ForTask`: (B, T) for one sequence per example, (B, 2, T) for
similarity, (B, K, T) for multiple choice; `classify_pos` is (B,) / (B, 2) / (B, K).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpt1.tasks.examples import ChoiceExample, Example, PairExample, TextExample

KINDS = ("classification", "entailment", "similarity", "multiple_choice")
TEMPLATES = {
    "classification": "_start_ text _classify_",
    "entailment": "_start_ premise _delimiter_ hypothesis _classify_",
    "similarity": "_start_ A _delimiter_ B _classify_ + _start_ B _delimiter_ A _classify_",
    "multiple_choice": "_start_ context question _delimiter_ answer_k _classify_ (one per answer)",
}


class Tokenizer(Protocol):
    start_id: int
    delimiter_id: int
    classify_id: int

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Encoded:
    """Token ids of one example: one sequence (`single`) or a stack of them, with each `_classify_` index."""

    input_ids: list[list[int]]
    classify_pos: list[int]
    single: bool
    truncated: bool = False


def encode(kind: str, example: Example, tokenizer: Tokenizer, max_len: int) -> Encoded:
    if kind == "classification" and isinstance(example, TextExample):
        return encode_text(tokenizer, example.text, max_len)
    if kind == "entailment" and isinstance(example, PairExample):
        return encode_entailment(tokenizer, example.text_a, example.text_b, max_len)
    if kind == "similarity" and isinstance(example, PairExample):
        return encode_similarity(tokenizer, example.text_a, example.text_b, max_len)
    if kind == "multiple_choice" and isinstance(example, ChoiceExample):
        return encode_choices(
            tokenizer, example.context, example.question, example.options, max_len
        )
    raise TypeError(f"cannot encode {type(example).__name__} with the {kind!r} transformation")


def encode_text(tok: Tokenizer, text: str, max_len: int) -> Encoded:
    (text_ids,), truncated = _fit([_ids(tok, text)], _budget(max_len, 2), order=(0,))
    return _single([tok.start_id, *text_ids, tok.classify_id], truncated)


def encode_entailment(tok: Tokenizer, premise: str, hypothesis: str, max_len: int) -> Encoded:
    (p, h), truncated = _fit(
        [_ids(tok, premise), _ids(tok, hypothesis)], _budget(max_len, 3), order=(0, 1)
    )
    return _single([tok.start_id, *p, tok.delimiter_id, *h, tok.classify_id], truncated)


def encode_similarity(tok: Tokenizer, text_a: str, text_b: str, max_len: int) -> Encoded:
    a, b = _ids(tok, text_a), _ids(tok, text_b)
    budget = _budget(max_len, 3)
    truncated = len(a) + len(b) > budget
    while len(a) + len(b) > budget:
        if len(a) >= len(b):
            a = a[:-1]
        else:
            b = b[:-1]
    sequences = [
        [tok.start_id, *x, tok.delimiter_id, *y, tok.classify_id] for x, y in ((a, b), (b, a))
    ]
    return Encoded(sequences, [len(s) - 1 for s in sequences], single=False, truncated=truncated)


def encode_choices(
    tok: Tokenizer, context: str, question: str, options: Sequence[str], max_len: int
) -> Encoded:
    budget = _budget(max_len, 3)
    answers = [_ids(tok, option) for option in options]
    longest = min(max(map(len, answers)), budget)
    (c, q), truncated = _fit(
        [_ids(tok, context), _ids(tok, question)], budget - longest, order=(0, 1)
    )
    room = budget - len(c) - len(q)
    truncated = truncated or longest < max(map(len, answers))
    sequences = [
        [tok.start_id, *c, *q, tok.delimiter_id, *a[:room], tok.classify_id] for a in answers
    ]
    return Encoded(sequences, [len(s) - 1 for s in sequences], single=False, truncated=truncated)


def collate(
    batch: Sequence[Encoded], pad_id: int = 0, length: int | None = None
) -> dict[str, np.ndarray]:
    """Right-pad a batch to its longest sequence (or `length`): input_ids, mask (real tokens) and classify_pos."""
    if not batch:
        raise ValueError("collate: empty batch")
    single, n = batch[0].single, len(batch[0].input_ids)
    if any(e.single != single or len(e.input_ids) != n for e in batch):
        raise ValueError("collate: examples of one batch must have the same number of sequences")
    longest = max(len(s) for e in batch for s in e.input_ids)
    if length is not None and longest > length:
        raise ValueError(f"collate: a sequence has {longest} tokens > length {length}")
    input_ids = np.full((len(batch), n, length or longest), pad_id, dtype=np.int64)
    mask = np.zeros(input_ids.shape, dtype=bool)
    for i, example in enumerate(batch):
        for j, sequence in enumerate(example.input_ids):
            input_ids[i, j, : len(sequence)] = sequence
            mask[i, j, : len(sequence)] = True
    classify_pos = np.array([e.classify_pos for e in batch], dtype=np.int64)
    if single:
        input_ids, mask, classify_pos = input_ids[:, 0], mask[:, 0], classify_pos[:, 0]
    return {"input_ids": input_ids, "mask": mask, "classify_pos": classify_pos}


def _ids(tok: Tokenizer, text: str) -> list[int]:
    return list(tok.encode(text)) if text else []


def _budget(max_len: int, n_special: int) -> int:
    if max_len < n_special:
        raise ValueError(f"max_len {max_len} cannot hold the {n_special} special tokens")
    return max_len - n_special


def _fit(parts: list[list[int]], budget: int, order: Sequence[int]) -> tuple[list[list[int]], bool]:
    """Cut parts from their end, in `order`, until their total length is at most `budget`."""
    excess = sum(map(len, parts)) - budget
    truncated = excess > 0
    for i in order:
        if excess <= 0:
            break
        cut = min(excess, len(parts[i]))
        parts[i] = parts[i][: len(parts[i]) - cut]
        excess -= cut
    return parts, truncated


def _single(sequence: list[int], truncated: bool) -> Encoded:
    return Encoded([sequence], [len(sequence) - 1], single=True, truncated=truncated)
