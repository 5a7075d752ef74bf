"""Corpus ingestion of the shared books (../shared/data/books) in one pass: decoding with its cp1252 fallbacks, counts
and layout, the Gutenberg boilerplate gone and the first and last body lines kept, prose unwrapped while plays in
verse keep their lines, cleaning idempotent. Cleaning on small texts: tests/unit/test_ingest.py."""

from __future__ import annotations

import hashlib
import re

import ftfy
import pytest
from conftest import shared_path
from corpora import rows

from gpt1.config import IngestConfig
from gpt1.data.ingest import clean as C
from gpt1.data.ingest import ingest as I
from gpt1.data.ingest.corpus import iter_texts
from gpt1.io import read_json

CP1252_BOOKS = {"pg2641.txt", "pg64317.txt", "pg84.txt"}  # per ../shared/data/README.md
PLAYS_IN_VERSE = {"tinyshakespeare.txt", "pg1513.txt"}  # their line breaks are the text
SPEAKER_LINES = {"pg844.txt"}  # a play in prose whose speaker names have lines of their own
BOILERPLATE = ("project gutenberg", "*** start", "*** end", "full license", "gutenberg-tm", "www.gutenberg.org")


@pytest.fixture(scope="module")
def books_corpus(tmp_path_factory):
    books = shared_path("books")
    out = tmp_path_factory.mktemp("books") / "corpus"
    stats = I.ingest(IngestConfig(source=str(books)), out, show_progress=False)
    docs = {r["source"]: r for r in rows(out)}
    return books, out, stats, docs


def _body_lines(raw: str) -> tuple[str, str]:
    """First and last body lines of a Gutenberg file with markers, by a rule independent of clean.py: after the
    START line (skipping a "Produced by" credit paragraph), before the first "End of ... Project Gutenberg" line."""
    lines = raw.replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if "START OF" in line.upper() and "GUTENBERG" in line.upper()), -1)
    end = next(i for i, line in enumerate(lines) if i > start and "end of" in line.lower()
               and "project gutenberg" in line.lower())
    paragraphs = [p for p in "\n".join(lines[start + 1:end]).split("\n\n") if p.strip()]
    if start >= 0 and paragraphs[0].strip().startswith("Produced by"):
        paragraphs = paragraphs[1:]
    first = next(line for line in paragraphs[0].split("\n") if line.strip())
    last = [line for line in paragraphs[-1].split("\n") if line.strip()][-1]
    return first, last


def _normalized(line: str) -> str:
    return " ".join(ftfy.fix_text(line).split())


def test_books_all_decode_with_cp1252_fallbacks_reported(books_corpus):
    books, out, stats, docs = books_corpus
    names = sorted(p.name for p in books.glob("*.txt"))
    assert sorted(docs) == names and len(names) == 40
    assert stats["rejects"] == {} and stats["duplicates"]["count"] == 0
    assert set(stats["decode_fallbacks"]["cp1252"]["examples"]) == CP1252_BOOKS
    assert stats["decode_fallbacks"]["cp1252"]["count"] == 3
    # every cp1252 book decoded its curly quotes (0x93/0x94), which ftfy then straightened
    for name in CP1252_BOOKS:
        assert '"' in docs[name]["text"] and "\ufffd" not in docs[name]["text"]


def test_books_counts_and_layout_agree(books_corpus):
    _, out, stats, docs = books_corpus
    assert stats["documents"]["train"] + stats["documents"]["val"] == len(docs) == 40
    assert stats["documents"]["val"] >= 1  # 1% of 40 rounds to none: the floor gives val one book
    for split in ("train", "val"):
        split_rows = rows(out, split)
        assert len(split_rows) == stats["documents"][split] == sum(p["rows"] for p in stats["parts"][split])
        assert sum(len(r["text"]) for r in split_rows) == stats["characters"][split]
    for r in docs.values():
        assert r["id"] == hashlib.sha256(r["text"].encode()).hexdigest()
    assert list(iter_texts(out, "val")) == [r["text"] for r in rows(out, "val")]
    # the README: 25 header+licence books and pg105 (footer only) carry markers, the 14 stripped ones do not
    assert stats["boilerplate_removed"]["header"] == 25 and stats["boilerplate_removed"]["footer"] == 26
    assert read_json(out / "stats.json") == stats


def test_books_lose_all_gutenberg_boilerplate(books_corpus):
    _, _, _, docs = books_corpus
    for name, r in docs.items():
        text = r["text"].lower()
        found = [marker for marker in BOILERPLATE if marker in text]
        assert not found, f"{name}: {found}"


def test_books_keep_first_and_last_body_lines(books_corpus):
    books, _, _, docs = books_corpus
    stripped = 0
    for path in sorted(books.glob("*.txt")):
        raw, _ = C.decode(path.read_bytes())
        text = docs[path.name]["text"]
        if "project gutenberg" in raw.lower():
            first, last = _body_lines(raw)
        else:  # a stripped book must come through whole
            stripped += 1
            kept = [line for line in raw.replace("\r\n", "\n").split("\n") if line.strip()]
            first, last = kept[0], kept[-1]
        assert text.startswith(_normalized(first)), (path.name, first, text[:80])
        assert text.endswith(_normalized(last)), (path.name, last, text[-80:])
    assert stripped == 14
    assert docs["pg2701.txt"]["text"].startswith("ETYMOLOGY.")
    assert docs["pg730.txt"]["text"].startswith("CHAPTER I\n")
    emma = docs["158-0.txt"]["text"]
    chapter_1 = emma.index("CHAPTER I\n")
    assert emma.index("Emma Woodhouse, handsome, clever, and rich") > chapter_1
    assert emma.index("CHAPTER II\n") > chapter_1 and emma.startswith("EMMA")


def line_breaks(text: str) -> int:
    """Line breaks inside paragraphs."""
    return sum(paragraph.count("\n") for paragraph in text.split("\n\n"))


def cut_sentences(text: str) -> int:
    """Paragraphs with a line break in mid-sentence: a line followed by one that starts in lowercase."""
    return sum(bool(re.search(r"\n[a-z]", paragraph)) for paragraph in text.split("\n\n"))


@pytest.fixture(scope="module")
def books_not_unwrapped(books_corpus):
    """Every shared book cleaned with `unwrap_lines=False`, by name."""
    books = books_corpus[0]
    return {path.name: C.clean(C.decode(path.read_bytes())[0], unwrap_lines=False)[0]
            for path in sorted(books.glob("*.txt"))}


def test_books_prose_is_unwrapped_and_plays_in_verse_keep_their_lines(books_corpus, books_not_unwrapped):
    _, _, stats, docs = books_corpus
    for name, plain in books_not_unwrapped.items():
        text = docs[name]["text"]
        kept = line_breaks(text) / line_breaks(plain)
        if name in PLAYS_IN_VERSE:  # only their prose speeches join (measured: 91.7% and 95.4% kept)
            assert kept > 0.9, (name, kept)
        elif name not in SPEAKER_LINES:  # measured: at most 6.1% kept (Alice's poems), most books under 1%
            assert kept < 0.1, (name, kept)
            # measured: at most 4 of 924 paragraphs (pg20203's tables and lists), 14 in all 37 of these books
            assert cut_sentences(text) <= 0.01 * text.count("\n\n"), name
        assert text.count("\n\n") == plain.count("\n\n")  # paragraph breaks all stay
    earnest = docs["pg844.txt"]["text"]  # speaker names stay on their own line, the speech is joined
    assert "\n\nJACK.\nMy dear fellow, there is nothing improbable about my explanation at all. In fact" in earnest
    joined = {name: C.unwrap_paragraphs(plain) for name, plain in books_not_unwrapped.items()}
    assert all(text == docs[name]["text"] for name, (text, _) in joined.items())
    assert stats["unwrapped"] == {
        "paragraphs": sum(done.paragraphs for _, done in joined.values()),
        "lines_joined": sum(line_breaks(plain) - line_breaks(docs[name]["text"])
                            for name, plain in books_not_unwrapped.items()),
        "paragraphs_kept": sum(done.paragraphs_kept for _, done in joined.values()),
    }
    # measured: 68,668 of 76,968 paragraphs of several lines joined, 325,200 of 354,789 line breaks
    assert stats["unwrapped"]["lines_joined"] > 0.9 * sum(map(line_breaks, books_not_unwrapped.values()))


def test_books_cleaning_is_idempotent(books_corpus):
    _, _, _, docs = books_corpus
    for name, doc in docs.items():  # unwrapping every book; the whole of `clean` (~0.3 s a book) on a few
        assert C.unwrap_paragraphs(doc["text"])[0] == doc["text"], name
    for name in ("pg4300.txt", "pg1513.txt", "tinyshakespeare.txt", "pg20203.txt", "2591-0.txt"):
        text, _, done = C.clean(docs[name]["text"])
        assert text == docs[name]["text"] and done.paragraphs == 0, name
    assert "The froeken, bonne à tout faire, who rubs" in docs["pg4300.txt"]["text"]  # mojibake cut by a wrap
