"""Long texts cut into documents of bounded size at paragraph boundaries (`ingest.max_doc_chars`).

Fine-tuning always starts a sequence with `_start_` at position 0. A book is one stream of a few hundred thousand
tokens, so as one document it puts `_start_` at a block's first position about once per book; as documents of a
block or two, most blocks can start with one (tokenize's `align_documents`). Paragraphs are kept whole where they
fit: a document is the longest run of whole paragraphs within the bound; a longer paragraph is cut between
sentences, and a longer sentence between words.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpt1.data.ingest.leaks import sentences

PARAGRAPH = "\n\n"  # what cleaning leaves between paragraphs


def cut_documents(text: str, max_chars: int) -> Iterator[str]:
    """`text` as consecutive documents of at most `max_chars` characters each (whitespace between them dropped)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if len(text) <= max_chars:
        yield text
        return
    current = ""
    for piece, joiner in _pieces(text, max_chars):
        if current and len(current) + len(joiner) + len(piece) > max_chars:
            yield current
            current = ""
        current = f"{current}{joiner}{piece}" if current else piece
    if current:
        yield current


def _pieces(text: str, max_chars: int) -> Iterator[tuple[str, str]]:
    """(piece, what joins it to the piece before): paragraphs, or the sentences and words of one too long."""
    for paragraph in text.split(PARAGRAPH):
        if not paragraph.strip():
            continue
        if len(paragraph) <= max_chars:
            yield paragraph, PARAGRAPH
            continue
        for i, (start, end) in enumerate(sentences(paragraph)):
            joiner = PARAGRAPH if i == 0 else " "
            sentence = paragraph[start:end]
            if len(sentence) <= max_chars:
                yield sentence, joiner
                continue
            for j, words in enumerate(_word_runs(sentence, max_chars)):
                yield words, joiner if j == 0 else " "


def _word_runs(sentence: str, max_chars: int) -> Iterator[str]:
    """A sentence longer than `max_chars` as runs of whole words (a single longer word is cut)."""
    run = ""
    for word in sentence.split():
        while len(word) > max_chars:
            if run:
                yield run
                run = ""
            yield word[:max_chars]
            word = word[max_chars:]
        if run and len(run) + 1 + len(word) > max_chars:
            yield run
            run = ""
        run = f"{run} {word}" if run else word
    if run:
        yield run
