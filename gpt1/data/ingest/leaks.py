"""The leak check: no sentence of a task's dev or test files reaches pre-training.

    index = LeakIndex.from_texts(dev_and_test_texts)       # every sentence of >= MIN_WORDS words they hold
    text, removed = index.remove(book_text)                  # the book without those sentences; how many went

Two sentences are the same when their words are: lower-cased, with every run of whitespace and punctuation
collapsed to one space (`normalize`), so "It's a charming, funny film." in a book matches SST-2's
"it 's a charming , funny film ." Sentences are cut the same way on both sides (`sentences`): after `.`, `!` or
`?` (and any closing quotes or brackets) followed by whitespace, and at every line break. Short sentences ("he
said no .") are common to any two texts and prove nothing, so only sentences of at least MIN_WORDS words are
compared. Removing a sentence takes the whitespace after it too, so the text around it reads on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MIN_WORDS = 8

# letters and digits of any script; punctuation and "_" separate words
_WORD = re.compile(r"[^\W_]+")
# A sentence ends after .!? plus closing quotes/brackets, where whitespace follows; a line break always ends one.
_SENTENCE_END = re.compile(r"""(?<=[.!?])(?P<close>["'\u2019\u201d)\]]*)[ \t]+|[ \t]*\n+[ \t]*""")


def normalize(sentence: str) -> str:
    """The sentence's words, lower-cased, one space apart: what two sentences are compared by."""
    return " ".join(_WORD.findall(sentence.lower()))


def sentences(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence of `text` (closing quotes and brackets included, the whitespace after not)."""
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start() + len(match.group("close") or "")
        if end > start:
            yield start, end
        start = match.end()
    if start < len(text):
        yield start, len(text)


def _key(sentence: str) -> str | None:
    words = normalize(sentence)
    return words if words.count(" ") + 1 >= MIN_WORDS else None


@dataclass
class LeakIndex:
    """The normalized sentences (of at least MIN_WORDS words) of the texts that pre-training must not see."""

    keys: set[str] = field(default_factory=set)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> LeakIndex:
        index = cls()
        for text in texts:
            index.add(text)
        return index

    def add(self, text: str) -> None:
        for start, end in sentences(text):
            key = _key(text[start:end])
            if key is not None:
                self.keys.add(key)

    def __len__(self) -> int:
        return len(self.keys)

    def remove(self, text: str) -> tuple[str, int]:
        """`text` without its sentences found in the index (each with the whitespace that followed it), and how
        many were removed."""
        if not self.keys:
            return text, 0
        kept, last, removed = [], 0, 0
        for start, end in sentences(text):
            key = _key(text[start:end])
            if key is not None and key in self.keys:
                kept.append(text[last:start])
                last = _gap_end(text, end)
                removed += 1
        if not removed:
            return text, 0
        kept.append(text[last:])
        return "".join(kept), removed


def _gap_end(text: str, end: int) -> int:
    """Where the spaces after a removed sentence stop (a line break is kept: it separates what surrounds it)."""
    while end < len(text) and text[end] in " \t":
        end += 1
    return end
