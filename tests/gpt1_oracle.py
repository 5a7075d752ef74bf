"""The original GPT-1 text encoder, transcribed as a slow pure-Python reference for tests and the parity benchmark.

This is `TextEncoder.encode` from openai/finetune-transformer-lm (text_utils.py): ftfy.fix_text, the original
`text_standardize`, spaCy's English tokenizer, lower-case, per-word BPE over the ranked merges with `</w>` on the
last symbol, and `encoder.get(symbol, 0)` for unknown symbols. One adaptation: `spacy.blank("en")` replaces
`spacy.load("en")` (the same rule-based English tokenizer, without a model download). It is written independently of
`gpt1/tokenizer.py` on purpose: a shared helper would hide the bugs it is meant to catch.

Also here: `book_paragraphs`, how tests and benchmarks read the shared Gutenberg books (UTF-8 with the BOM kept,
cp1252 when the bytes are not UTF-8, CRLF kept, split on blank lines).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import ftfy
import spacy

# The original's pattern was a non-raw string, so its `\\+` reached `re` as `\+` (a literal plus): backslashes are
# never split off. Written here as the pattern `re` actually received.
_PUNCTUATION_RUNS = r'(-+|~+|!+|"+|;+|\?+|\++|,+|\)+|\(+|\+|\/+|\*+|\[+|\]+|}+|{+|\|+|_+)'


def text_standardize(text: str) -> str:
    text = text.replace("—", "-")
    text = text.replace("–", "-")
    text = text.replace("―", "-")
    text = text.replace("…", "...")
    text = text.replace("´", "'")
    text = re.sub(_PUNCTUATION_RUNS, r" \1 ", text)
    text = re.sub(r"\s*\n\s*", " \n ", text)
    text = re.sub(r"[^\S\n]+", " ", text)
    return text.strip()


def _pairs(word: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(zip(word, word[1:]))


class OracleEncoder:
    """`TextEncoder` of the original release: `encode(text) -> ids`, `words(text)` = the lower-cased spaCy tokens."""

    def __init__(self, encoder_json: str | Path, vocab_bpe: str | Path):
        self.nlp = spacy.blank("en")
        self.encoder = json.loads(Path(encoder_json).read_text(encoding="utf-8"))
        merges = Path(vocab_bpe).read_text(encoding="utf-8").split("\n")[1:-1]
        self.bpe_ranks = {tuple(merge.split()): rank for rank, merge in enumerate(merges)}
        self.cache: dict[str, str] = {}

    def bpe(self, token: str) -> str:
        if token in self.cache:
            return self.cache[token]
        word = tuple(token[:-1]) + (token[-1] + "</w>",)
        pairs = _pairs(word)
        if not pairs:
            return token + "</w>"
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            merged: list[str] = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    merged.extend(word[i:])
                    break
                merged.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
            if len(word) == 1:
                break
            pairs = _pairs(word)
        joined = " ".join(word)
        if joined == "\n  </w>":  # spaCy's "\n " whitespace token, as the original special-cased it
            joined = "\n</w>"
        self.cache[token] = joined
        return joined

    def words(self, text: str) -> list[str]:
        return [token.text.lower() for token in self.nlp(text_standardize(ftfy.fix_text(text)))]

    def encode(self, text: str) -> list[int]:
        return [self.encoder.get(symbol, 0) for word in self.words(text) for symbol in self.bpe(word).split(" ")]


def book_paragraphs(path: str | Path) -> list[str]:
    """The non-blank paragraphs of a shared book, decoded the way its bytes demand and otherwise untouched."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("cp1252")
    return [p for p in re.split(r"\r?\n[ \t]*\r?\n", text) if p.strip()]
