"""Documents -> one token stream, in bounded memory: how `gpt1 tokenize` feeds the tokenizer.

HF tokenizers holds about 100 bytes per character it is encoding, so each encode call gets at most
`encode_chars` characters: several short documents, or pieces of a longer one (an eighth of that
each, so that a call holds several, which HF tokenizers encodes in parallel). A long document is cut right
after line breaks (at a blank line, between paragraphs, when one is in reach; a single line longer than a
piece stays whole) and its pieces are encoded apart. Joining their ids with the ids of one line break
gives exactly the ids of the whole document, because the GPT-1 tokenizer turns every line-break run into one "\n"
word and encodes word by word (`_piece_ids` checks this on the tokenizer at hand and otherwise encodes documents
whole, as it does in spaCy `exact` mode). ftfy is the one step with state across lines: after the first line
holding a "<" it leaves HTML entities as written, while a piece would start afresh; so a piece that follows such a
line is encoded behind one more such line (MARKUP_LINE), whose ids are then dropped. Memory per process is then
bounded by `encode_chars` plus the text of the document being read and one shard being packed; it does not grow
with the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

ENCODE_CHARS = 1 << 20  # characters per encode_batch call
MARKUP_LINE = "<\n"  # put before a piece that follows a "<" line: ftfy then leaves its HTML entities alone too


def _piece_ids(tokenizer) -> tuple[list[int], list[int]] | None:
    """(ids of one line-break run between two words, ids MARKUP_LINE adds before a text), or None when this
    tokenizer does not encode word by word across line breaks (spaCy `exact` mode is not checked, so never cut):
    then documents stay whole."""
    if getattr(tokenizer, "exact", False):
        return None
    word, joined, markup, marked = tokenizer.encode_batch(
        ["a", "a\n\na", MARKUP_LINE, MARKUP_LINE + "a"]
    )
    n = len(word)
    if not n or len(joined) < 2 * n or joined[:n] != word or joined[len(joined) - n :] != word:
        return None
    line_break = joined[n : len(joined) - n]
    if not markup or marked != markup + line_break + word:
        return None
    return line_break, markup


def document_pieces(text: str, max_chars: int) -> Iterator[tuple[str, bool]]:
    """`text` cut right after line breaks into pieces of at most `max_chars` characters (a single longer line stays
    whole): after a blank line in the second half of the window if there is one, else after the last line break in
    it. Each piece comes with whether a line holding "<" came before it (see the module docstring)."""
    start, end = 0, len(text)
    first_markup = text.find("<")
    while end - start > max_chars:
        limit = start + max_chars
        blank = text.rfind("\n\n", start + max_chars // 2, limit)
        cut = blank + 2 if blank >= 0 else text.rfind("\n", start, limit) + 1
        if cut <= start:  # no line break in reach: the whole line
            cut = text.find("\n", limit) + 1 or end
        yield text[start:cut], 0 <= first_markup < start
        start = cut
    if start < end:
        yield text[start:], 0 <= first_markup < start


class StreamEncoder:
    """Documents -> one token stream (boundary id before each non-empty document), `encode_chars` characters per
    encode_batch call; `counts` tallies documents, empty documents and tokens, and `lengths` holds (document
    number, its tokens with its boundary) of each non-empty document, in stream order."""

    def __init__(self, tokenizer, dtype: np.dtype, encode_chars: int = ENCODE_CHARS):
        self.tokenizer, self.dtype, self.encode_chars = tokenizer, dtype, encode_chars
        self.boundary = [tokenizer.boundary_id]
        pieces = _piece_ids(tokenizer)
        self.cuts = pieces is not None  # else documents stay whole and the two id lists go unused
        self.line_break, self.markup = pieces or ([], [])
        self.counts = {"documents": 0, "empty_documents": 0, "tokens": 0}
        self.lengths: list[list[int]] = []
        self._open = -1  # number of the document whose tokens the stream is in (-1: none yet)

    def encode(self, texts: Iterable[str]) -> Iterator[np.ndarray]:
        """The stream, one array per encode_batch call."""
        # (document number, text or piece, after a "<" line)
        batch: list[tuple[int, str, bool]] = []
        chars = 0
        for number, text in enumerate(texts, start=self.counts["documents"]):
            whole = not self.cuts or len(text) <= self.encode_chars
            # pieces of 1/8 of a call, so that a call holds several: HF tokenizers encodes a batch's texts in parallel
            pieces = (
                [(text, False)] if whole else document_pieces(text, max(1, self.encode_chars // 8))
            )
            for piece, after_markup in pieces:
                if batch and chars + len(piece) > self.encode_chars:
                    yield self._encode(batch)
                    batch, chars = [], 0
                batch.append((number, MARKUP_LINE + piece if after_markup else piece, after_markup))
                chars += len(piece)
            self.counts["documents"] += 1
            self.counts["empty_documents"] += 1  # until a piece of it gives tokens (in _encode)
        if batch:
            yield self._encode(batch)

    def _encode(self, batch: list[tuple[int, str, bool]]) -> np.ndarray:
        parts: list[list[int]] = []
        for (number, _, after_markup), ids in zip(
            batch, self.tokenizer.encode_batch([p for _, p, _ in batch])
        ):
            if (
                after_markup
            ):  # drop what MARKUP_LINE added: its ids, then a line break if the piece has words
                if ids[: len(self.markup)] != self.markup:
                    raise RuntimeError("the tokenizer encoded a marked piece unlike its probe")
                ids = (
                    ids[len(self.markup) + len(self.line_break) :]
                    if len(ids) > len(self.markup)
                    else []
                )
            if not ids:
                continue
            if number != self._open:  # the document's first tokens
                self._open = number
                self.counts["empty_documents"] -= 1
                parts += [self.boundary, ids]
                self.lengths.append([number, len(self.boundary) + len(ids)])
            else:
                parts += [self.line_break, ids]
                self.lengths[-1][1] += len(self.line_break) + len(ids)
        stream, pos = np.empty(sum(map(len, parts)), self.dtype), 0
        for ids in parts:
            stream[pos : pos + len(ids)] = ids
            pos += len(ids)
        self.counts["tokens"] += len(stream)
        return stream
