"""Text cleaning for ingestion, as pure functions: bytes -> text, Gutenberg boilerplate out, ftfy, whitespace,
hard-wrapped lines joined.

`clean(text)` is the whole recipe for one document; the sample generator and the tests reuse the pieces.

Design choices:
- Decoding: a UTF-8 or UTF-16 byte order mark decides; otherwise UTF-8, then cp1252 (what non-UTF-8 Gutenberg
  and Windows files use). Latin-1 is never guessed: it would "decode" any binary file. NUL bytes mean binary.
- Gutenberg boilerplate is removed only from texts that carry a START or END marker; texts without markers
  (already-stripped books, dataset rows) are left exactly as they are. Between the markers, short paragraphs that
  name Project Gutenberg (editor's notes, "End of the Project Gutenberg EBook of ...") and a leading
  "Produced by ..." credit are dropped too; the body is otherwise untouched.
- ftfy with its defaults (as the original GPT-1 code did, so curly quotes become straight ones). `ftfy.fix_text`
  costs ~0.1 ms per line, ~40 s for the 28 MB of shared books, so `fix_text` applies the same fixes per document
  and runs the per-line ones (mojibake, HTML entities) only on lines that can need them: identical output on
  every shared book, ~10x faster. One deliberate difference: HTML entities are left alone only on lines that
  contain "<" (ftfy's "auto"), where ftfy stops unescaping for the rest of the text after the first such line.
  (`bpe.fix_text` is the other ftfy pass: byte-exact, as parity with the original encoder needs, and
  fast only on ASCII lines; ingestion cleans whole books once, so it takes this faster one.)
- Whitespace: every run of spaces/tabs/NBSPs becomes one space, lines are stripped (indentation is not kept), and
  blank-line runs become a single blank line, so paragraph breaks survive as "\n\n".
- Hard-wrapped prose is unwrapped (`unwrap_paragraphs`, on by default): Gutenberg wraps prose at 60-75 columns,
  and each of those line breaks would become a "\n" token mid-sentence. A paragraph (text between blank lines) is
  joined into one line when it reads as wrapped prose; verse, plays' verse speeches, lists, tables of contents and
  headings keep their line breaks. A line break shows wrapping when
    - the next line starts with a lowercase letter: the sentence goes on (verse lines, headings, names and list
      entries start with a capital, a digit or punctuation), or
    - the next line's first word would not have fit on this line within the paragraph's width (its longest line),
      as in a greedy wrap; counted only for widths from MIN_WRAP_WIDTH to MAX_WRAP_WIDTH: verse lines are shorter,
      and a longer line was not wrapped at all (a table row, a long entry in a table of contents), or
    - this line ends in a compound's hyphen ("brother-" / "in-law");
  a line that opens a list entry ("1. ", "2) ", "(a) ", "- ", "* ") never shows wrapping. Leading lines shorter than
  half the width whose break does not continue in lowercase are headings or speaker names ("CHAPTER I", "JACK.",
  "First Citizen:") and keep their breaks; the rest is joined when at least half of its breaks show wrapping and
  one of them is a lowercase continuation, or when all of them show wrapping (short paragraphs, lines that happen
  to start with names); otherwise the paragraph stays as it is. On the 40 shared books: 68,668 of 76,968
  multi-line paragraphs joined, 325,200 of 354,789 line breaks: 93.9-100% of the breaks of each prose book, 54.5%
  in The Importance of Being Earnest (speaker names keep their own lines), 4.6% in Romeo and Juliet and 8.3% in
  tinyshakespeare (their prose speeches). What stays is verse, songs, letters' addresses and signatures, tables of
  contents, chapter titles and speaker names.
  The decision reads only the paragraph's own lines, never a document-wide wrap width (which would change once the
  text is unwrapped), so `clean` is idempotent: a joined paragraph is one line after its headings, a kept one is
  judged the same again. (ftfy repairs one line at a time, so a joined line whose break cut a mojibake sequence
  gets ftfy again: pg4300's "bonne Ã" / "tout faire" becomes "bonne à tout faire" in the first pass, not the
  second.)
- A line ending in a hyphen or dash attached to a word ("well-", "said--", "life—") joins the next without a space.
  The shared books break lines inside hyphenated compounds only ("brother-in-" / "law", "Skin-" / "the-Goat", all
  18 cases), never inside a plain word, so the hyphen is kept ("well-known", never "wellknown"), and Gutenberg's
  "--" dashes are unspaced. A dash after a space ("mobility -") joins with a space. (The GPT-1 standardisation puts
  spaces around every dash run anyway: the tokens are the same either way.)
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

import ftfy
from ftfy import chardata, fixes


class UndecodableError(ValueError):
    """Bytes that are not text we can read; `reason` is the stats key ("binary" or "undecodable")."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode(data: bytes) -> tuple[str, str]:
    """(text, encoding used): UTF-16 if its BOM says so, else UTF-8 (BOM optional), else cp1252."""
    if data.startswith(_UTF16_BOMS):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError as err:
            raise UndecodableError(
                "undecodable", f"invalid UTF-16 after its byte order mark ({err.reason})"
            ) from err
    if b"\0" in data:
        raise UndecodableError("binary", f"binary: NUL byte at offset {data.index(0)}")
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError as utf8_err:
        try:
            return data.decode("cp1252"), "cp1252"
        except UnicodeDecodeError as err:
            raise UndecodableError(
                "undecodable",
                f"neither UTF-8 (bad byte at offset {utf8_err.start}) nor cp1252 "
                f"(byte 0x{data[err.start]:02x} at offset {err.start} is undefined)",
            ) from err


@dataclass
class Boilerplate:
    """What `strip_gutenberg` removed from one text."""

    header: bool = False  # everything up to and including the "*** START OF ... ***" marker
    footer: bool = False  # the "*** END OF ... ***" marker (or "End of the Project Gutenberg ...") and the licence
    notes: int = (
        0  # paragraphs between the markers: credits, editor's notes naming Project Gutenberg
    )
    chars: int = 0  # characters removed in total


_START = re.compile(r"^[ \t]*\*+[ \t]*START OF\b[^\n]*?PROJECT GUTENBERG[^\n]*", re.I | re.M)
_END = re.compile(
    r"^[ \t]*(?:\*+[ \t]*END OF\b[^\n]*?PROJECT GUTENBERG|END OF (?:THE |THIS )?PROJECT GUTENBERG)",
    re.I | re.M,
)
# a long title can wrap the START marker onto a second line
_MARKER_CLOSE = re.compile(r"\*\*\*[ \t]*$", re.M)
_PARAGRAPH_BREAK = re.compile(r"(\n[ \t]*\n)")
_NAMES_GUTENBERG = re.compile(r"project\s+gutenberg", re.I)
_CREDIT = re.compile(
    r"^\s*(?:produced by|e-?text prepared by|this e-?(?:text|book) was (?:produced|prepared) by)",
    re.I,
)
_MAX_NOTE_CHARS = (
    2000  # a paragraph this long that names Project Gutenberg is body text, not a note
)


def strip_gutenberg(text: str) -> tuple[str, Boilerplate]:
    """Remove the Project Gutenberg header, licence footer and notes; texts without markers come back unchanged.

    Expects "\\n" line ends. The marker wording varies (THE/THIS, EBOOK/EBook, a title over two lines) and
    either marker may be missing (a footer but no header, as in pg105).
    """
    header = _START.search(text)
    start = header.end() if header else 0
    if header and not header.group(0).rstrip().endswith("***"):
        close = _MARKER_CLOSE.search(text, start, start + 300)
        start = close.end() if close else start
    footer = _END.search(text, start)
    if not header and not footer:
        return text, Boilerplate()
    end = footer.start() if footer else len(text)

    # Paragraphs and the blank lines between them alternate, so dropping a paragraph keeps the layout.
    pieces = _PARAGRAPH_BREAK.split(text[start:end])
    notes, seen_text = 0, False
    for i in range(0, len(pieces), 2):
        paragraph = pieces[i]
        is_credit = header is not None and not seen_text and _CREDIT.match(paragraph)
        is_note = len(paragraph) <= _MAX_NOTE_CHARS and _NAMES_GUTENBERG.search(paragraph)
        seen_text = seen_text or bool(paragraph.strip())
        if is_credit or is_note:
            pieces[i] = ""
            notes += 1
    body = "".join(pieces)
    return body, Boilerplate(
        header=header is not None,
        footer=footer is not None,
        notes=notes,
        chars=len(text) - len(body),
    )


# ftfy's mojibake detector only fires on sequences with a non-ASCII character other than these common ones
# (quotes, dashes, ellipsis, NBSP...): lines without such a character cannot need repair (checked exhaustively in
# tests/unit/test_ingest.py), and most lines of English books have none.
_COMMON = r"\u00a0\u00ad\u00b4\u00b7\u2013-\u2015\u2018\u2019\u201c\u201d\u2026"
_MOJIBAKE_CLUE = re.compile(rf"[^\x00-\x7f{_COMMON}]")
# the same or "&" (0x26), in one character class
_LINE_FIX_CLUE = re.compile(rf"[^\x00-\x25\x27-\x7f{_COMMON}]")


def _fix_line(line: str) -> str:
    """ftfy's per-segment steps: HTML entities (unless the line has "<", ftfy's "auto"), then mojibake."""
    if "&" in line and "<" not in line:
        line = fixes.unescape_html(line)
    return ftfy.fix_encoding(line) if _MOJIBAKE_CLUE.search(line) else line


def _fix_lines(text: str) -> str:
    """`_fix_line` on every line that has a clue for it; the others cannot change."""
    starts = sorted({text.rfind("\n", 0, m.start()) + 1 for m in _LINE_FIX_CLUE.finditer(text)})
    pieces, pos = [], 0
    for start in starts:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        pieces += [text[pos:start], _fix_line(text[start:end])]
        pos = end
    return "".join(pieces) + text[pos:] if pieces else text


def _translator(table: Mapping[int, str | None]):
    """`str.translate(table)` as a regex substitution: translate visits every character of non-ASCII text, while
    scanning for a character class is nearly free, and these characters are rare."""
    chars = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(table)) + "]")
    return lambda text: chars.sub(lambda m: table[ord(m.group())] or "", text)


# ftfy.fix_and_explain's character-level fixers, in its order; the three translate-based ones made fast.
_CHARACTER_FIXERS = (
    fixes.fix_c1_controls,
    _translator(
        {**chardata.LIGATURES, **chardata.WIDTH_MAP}
    ),  # fix_latin_ligatures, fix_character_width
    fixes.uncurl_quotes,
    fixes.fix_line_breaks,
    fixes.fix_surrogates,
    fixes.remove_terminal_escapes,
    _translator(chardata.CONTROL_CHARS),  # remove_control_chars
    lambda text: unicodedata.normalize("NFC", text),
)


def fix_text(text: str) -> str:
    """ftfy.fix_text with its default settings (see the module docstring for the one difference), faster."""
    while True:  # as ftfy does: apply every fix until the text stops changing
        fixed = _fix_lines(text)
        for fixer in _CHARACTER_FIXERS:
            fixed = fixer(fixed)
        if fixed == text:
            return fixed
        text = fixed


def normalize_whitespace(text: str) -> str:
    """One space for any run of horizontal whitespace, stripped lines, at most one blank line in a row."""
    lines = [" ".join(line.split()) for line in text.split("\n")]
    kept = [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]
    return "\n".join(kept).strip()


@dataclass
class Unwrapped:
    """What `unwrap_paragraphs` did to one text."""

    paragraphs: int = 0  # paragraphs whose wrapped lines were joined
    lines_joined: int = 0  # line breaks removed
    paragraphs_kept: int = (
        0  # paragraphs of several lines left as they were (verse, lists, headings)
    )


MIN_WRAP_WIDTH = (
    55  # the narrowest prose wrap in the shared books is ~60 columns; verse lines rarely reach 55
)
MAX_WRAP_WIDTH = (
    100  # the widest wraps at ~75; the few longer lines (up to 230) are tables and contents entries
)
_LINE_STARTS = re.compile(r"\n(.)")  # the first character of every line but the first
# not "A. ": initials open many prose lines
_LIST_ENTRY = re.compile(r"\d+[.)] |\(\w{1,4}\) |[-*\u2022] ")
_DASHES = r"\-\u2010\u2013\u2014"  # hyphen, Unicode hyphen, en and em dash, as regex class members
# "well-", "said--", "life—" at a line end
_TIGHT_BREAK = re.compile(rf"([^\s{_DASHES}][{_DASHES}]+)\n")
# ftfy repairs one line at a time, so mojibake cut by a line break ("bonne Ã" / "tout" in pg4300) is only seen once
# the lines are joined. Searched for in the text and in the text reversed (a line's last character then follows its
# line break): a pattern that starts with "\n" is found faster than one that starts with a character class.
_MOJIBAKE_AFTER_BREAK = re.compile(rf"\n{_MOJIBAKE_CLUE.pattern}")


def _fits_on(line: str, following: str, width: int) -> bool:
    """Whether `following`'s first word would have fit at the end of `line` within `width` columns."""
    space = following.find(" ")
    return len(line) + 1 + (len(following) if space < 0 else space) <= width


def _prose_start(paragraph: str) -> int | None:
    """Where the wrapped prose of a paragraph of several lines starts (after its heading lines), or None if it is
    not wrapped prose. Lines are stripped and not empty; the rule is the module docstring's."""
    starts = _LINE_STARTS.findall(paragraph)
    if len(starts) < paragraph.count(
        "\n"
    ):  # an empty line: not `normalize_whitespace` output, left alone
        return None
    continued = sum(map(str.islower, starts))
    if starts[0].islower() and 2 * continued >= len(
        starts
    ):  # most prose: decided without splitting the lines
        return 0
    lines = paragraph.split("\n")
    width = max(map(len, lines))
    start, last = 0, len(lines) - 1
    while start < last and 2 * len(lines[start]) < width and not starts[start].islower():
        start += 1
    breaks = last - start
    if not breaks:
        return None
    continued = sum(map(str.islower, starts[start:]))
    wrapped = 0
    for i in range(start, last):
        line, following = lines[i], lines[i + 1]
        if following[0].islower() or _LIST_ENTRY.match(following):
            continue
        if (MIN_WRAP_WIDTH <= width <= MAX_WRAP_WIDTH and not _fits_on(line, following, width)) or (
            line.endswith("-") and line[-2:-1].isalpha()
        ):  # a compound carried over: "brother-" / "in-law"
            wrapped += 1
    shows_wrapping = continued + wrapped
    return (
        start if (continued and 2 * shows_wrapping >= breaks) or shows_wrapping == breaks else None
    )


def _joined(wrapped: str) -> str:
    """The lines of `wrapped` as one line: a space at each break, none after a hyphen or dash attached to a word."""
    line, ascii_only = wrapped, wrapped.isascii()
    other_dash_break = not ascii_only and (
        "\u2014\n" in wrapped or "\u2013\n" in wrapped or "\u2010\n" in wrapped
    )
    if "-\n" in wrapped or other_dash_break:
        line = _TIGHT_BREAK.sub(r"\1", line)  # only then: the regex scans ~20x slower than `in`
    line = line.replace("\n", " ")
    if not ascii_only and (
        _MOJIBAKE_AFTER_BREAK.search(wrapped) or _MOJIBAKE_AFTER_BREAK.search(wrapped[::-1])
    ):
        line = " ".join(fix_text(line).split())
    return line


def unwrap_paragraphs(text: str) -> tuple[str, Unwrapped]:
    """Join the lines of hard-wrapped prose paragraphs into one line each; expects `fix_text` and
    `normalize_whitespace` output."""
    done = Unwrapped()
    paragraphs = text.split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        if "\n" not in paragraph:
            continue
        start = _prose_start(paragraph)
        if start is None:
            done.paragraphs_kept += 1
            continue
        if start:  # heading lines keep their breaks
            *headings, wrapped = paragraph.split("\n", start)
            paragraphs[i] = "\n".join(headings) + "\n" + _joined(wrapped)
        else:
            paragraphs[i] = _joined(paragraph)
        done.paragraphs += 1
        done.lines_joined += paragraph.count("\n") - start
    return "\n\n".join(paragraphs), done


def clean(text: str, unwrap_lines: bool = True) -> tuple[str, Boilerplate, Unwrapped]:
    """One document, start to finish: line ends, Gutenberg boilerplate, ftfy, whitespace, then (if `unwrap_lines`)
    hard-wrapped prose joined into paragraphs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text, removed = strip_gutenberg(text)
    text = normalize_whitespace(fix_text(text))
    text, unwrapped = unwrap_paragraphs(text) if unwrap_lines else (text, Unwrapped())
    return text, removed, unwrapped
