"""Corpus ingestion (gpt1/data/ingest.py, gpt1/data/clean.py): cleaning, hub specs, and what an ingestion refuses
before writing anything. The shared books in one pass: tests/integration/test_ingest_books.py; small sources ingested:
tests/integration/test_ingest_runs.py."""

from __future__ import annotations

import itertools
import json
import textwrap

import ftfy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ftfy.badness import is_bad

from gpt1.data.ingest import clean as C
from gpt1.data.ingest import ingest as I
from corpora import book, write
from gpt1.config import IngestConfig
from gpt1.io import InputError, OutputError
from gpt1.data.ingest import stage as ingest_stage


def stage(src, out, **settings):
    """The ingest stage (what `gpt1 ingest` and the pipeline run) with these data settings."""
    return ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(**settings)).run(out, wait=False)


# -- clean.py ---------------------------------------------------------------------------------------------------
def test_decode_bom_utf8_cp1252_utf16_and_rejects():
    assert C.decode(b"\xef\xbb\xbfCaf\xc3\xa9") == ("Café", "utf-8")
    assert C.decode(b"\x93Hi\x94 \x96 there") == ("\u201cHi\u201d \u2013 there", "cp1252")
    assert C.decode(b"\xff\xfe" + "hé".encode("utf-16-le")) == ("hé", "utf-16")
    with pytest.raises(C.UndecodableError) as err:
        C.decode(b"text\x00\x01\x02")
    assert err.value.reason == "binary"
    with pytest.raises(C.UndecodableError) as err:
        C.decode(b"\x81\x81 not utf-8, 0x81 undefined in cp1252")
    assert err.value.reason == "undecodable"


def test_strip_gutenberg_marker_variants():
    licence = "*** START: FULL LICENSE ***\nTHE FULL PROJECT GUTENBERG LICENSE\nterms..."
    header = "The Project Gutenberg EBook of X\n\nTitle: X\n\n"
    variants = {
        "this/EBOOK": "*** START OF THIS PROJECT GUTENBERG EBOOK X ***",
        "the/EBook": "***START OF THE PROJECT GUTENBERG EBook X***",
        "wrapped title": "*** START OF THE PROJECT GUTENBERG EBOOK A VERY\n    LONG TITLE ***",
    }
    for label, start in variants.items():
        text = (f"{header}{start}\n\nProduced by Someone\n\nCHAPTER 1\n\nBody text.\n\n"
                f"End of the Project Gutenberg EBook of X\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\n{licence}")
        body, removed = C.strip_gutenberg(text)
        assert body.strip() == "CHAPTER 1\n\nBody text.", label
        assert (removed.header, removed.footer, removed.notes) == (True, True, 1), label
    footer_only = "Chapter 1\n\nProduced by chance, the body.\n\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\nlicence"
    body, removed = C.strip_gutenberg(footer_only)
    assert body.strip() == "Chapter 1\n\nProduced by chance, the body." and not removed.header and removed.footer
    plain = "No markers here.\n\nA book about Project Gutenberg would stay whole."
    assert C.strip_gutenberg(plain) == (plain, C.Boilerplate())


@pytest.mark.parametrize("text", [
    "â€œquotedâ€\x9d and cafÃ© and Ã  la",  # UTF-8 read as cp1252/latin-1
    "Fish &amp; chips &mdash; &lt;b&gt;",  # HTML entities
    "ＬＯＵＤ ﬂubber \x07bell\x1b[31mred\x1b[0m",  # width, ligature, control char, terminal escape
    "curly ‘single’ and “double”\r\nline\u2028sep\x85end",  # quotes and line breaks
    "e\u0301 composed, \ufeffBOM inside, Ω Greek, \x80\x93c1",  # NFC, BOM, C1 controls
])
def test_fix_text_matches_ftfy(text):
    assert C.fix_text(text) == ftfy.fix_text(text)


def test_html_entities_kept_only_on_lines_with_markup():
    text = "&lt;b&gt; &amp;\n<b>keeps &amp;</b>\nnext &amp; line"
    assert C.fix_text(text) == "<b> &\n<b>keeps &amp;</b>\nnext & line"


def test_mojibake_prefilter_never_hides_a_bad_line():
    """Lines without a _MOJIBAKE_CLUE character are never passed to ftfy's repair; show ftfy's detector cannot
    fire on them: every string of up to 3 characters over one representative of each ASCII class the detector
    distinguishes plus all the exempted common characters (checked to length 4 when written)."""
    alphabet = "aZ .1#\n\u00a0\u00ad\u00b4\u00b7\u2013\u2014\u2015\u2018\u2019\u201c\u201d\u2026"
    assert not C._MOJIBAKE_CLUE.search(alphabet)
    for n in (1, 2, 3):
        assert not any(is_bad("".join(s)) for s in itertools.product(alphabet, repeat=n))
    assert C._MOJIBAKE_CLUE.search("cafÃ©")  # while a real clue is found


def test_normalize_whitespace_keeps_paragraphs():
    text = "\n\n  Title \t here\u00a0now  \n\n\n\n  first line\nsecond   line \n \n\nlast\n\n"
    assert C.normalize_whitespace(text) == "Title here now\n\nfirst line\nsecond line\n\nlast"


# -- clean.py: unwrapping --------------------------------------------------------------------------------------
STORY = ("The rain had not stopped for three days, and the river at the bottom of the garden had risen until it "
         "lapped at the lowest step of the boathouse. Nobody in the house said so, but everyone had begun to watch "
         "it: the cook from her window, Mr. Hale from the library, and the children from the landing, where they "
         "pressed their faces to the glass until their mother called them down to supper.")
NAMES = ("Anne Elliot, Walter Elliot, Mary Musgrove, Charles Musgrove, Louisa Musgrove, Henrietta Musgrove, "
         "Frederick Wentworth, Harriet Harville, Thomas Harville, James Benwick, Sophia Croft, Admiral Croft, "
         "Lady Russell, Penelope Clay and William Elliot were all at Lyme.")  # every wrapped line opens on a name
VERSE = "The river rose along the lane,\nAnd still the sky was grey;\nThe children watched the falling rain\nAnd wept."
KEPT = {
    "verse": VERSE,
    "verse, one long line": "So the river rose and rose again, and none of us could say,\nWhy it came,\nOr when.",
    "verse, a line in lowercase": VERSE.replace("\nAnd still", "\nand still"),
    "dialogue": "First Citizen:\nBefore we go a step, hear what I say.\nThe river will not wait for us.",
    "list": ("1. The river: it rose by a foot on the first day and by two on the second, or so we thought.\n"
             "2. The garden: under water.\n3. The boathouse: its lowest step, then its door."),
    "bullets": "- a lantern for the boathouse\n- two ropes\n- the long boat hook",
    "contents": "CONTENTS\nI. The River Rises\nII. The Boathouse\nIII. Supper on the Landing",
    "contents, one entry longer than any wrap": ("CONTENTS\nI. The River Rises\nII. The Boathouse, the Boat Hook, the "
                                                  "Long Rope, the Lantern, the Cook, the Gardener and Everyone Else\n"
                                                  "III. Supper"),
    "headings": "CHAPTER I\nTHE RIVER",
    "signature": "Yours, as ever,\nM. Hale",
}


def test_wrapped_prose_becomes_one_line_per_paragraph():
    wrapped = (textwrap.fill(STORY, 70) + "\n\n  " + textwrap.fill(STORY, 62, initial_indent="    ") + "\n\n"
               + textwrap.fill(NAMES, 66)).replace("\n", "\r\n")
    assert all(line[0].isupper() for line in textwrap.wrap(NAMES, 66))  # joined because its lines are full
    text, _, done = C.clean(wrapped)
    assert text == f"{STORY}\n\n{STORY}\n\n{NAMES}"
    assert (done.paragraphs, done.paragraphs_kept) == (3, 0)
    assert done.lines_joined == wrapped.count("\n") - 4  # all but the two blank lines' breaks
    short = '"I have never seen it so high," said the old gardener, turning to Mr.\nHale.'  # a full line, a name
    assert C.clean(short)[0] == short.replace("\n", " ")
    assert C.clean(wrapped, unwrap_lines=False)[0] == "\n".join(
        line.strip() for line in wrapped.replace("\r\n", "\n").split("\n"))


@pytest.mark.parametrize("label", KEPT)
def test_verse_dialogue_lists_and_headings_keep_their_lines(label):
    text, _, done = C.clean(KEPT[label])
    assert text == KEPT[label] and (done.paragraphs, done.paragraphs_kept) == (0, 1)


def test_speaker_names_and_headings_keep_their_line_before_wrapped_prose():
    for heading in ("JACK.", "First Citizen:", "CHAPTER I\nThe River"):
        text, _, done = C.clean(f"{heading}\n{textwrap.fill(STORY, 70)}\n\n{VERSE}")
        assert text == f"{heading}\n{STORY}\n\n{VERSE}"
        assert (done.paragraphs, done.paragraphs_kept, done.lines_joined) == (1, 1, 5)


def test_hyphens_and_dashes_at_line_ends():
    wrapped = ("It was a well-\nknown house by the river, and he said--\nand then he stopped, for the whole life—\n"
               "the whole of it -\nwas there, from Newhaven-\nDieppe and back.")
    assert C.clean(wrapped)[0] == ("It was a well-known house by the river, and he said--and then he stopped, for "
                                   "the whole life—the whole of it - was there, from Newhaven-Dieppe and back.")


def test_mojibake_cut_by_a_wrap_is_repaired_once_joined():
    wrapped = "Licentious men. The froeken, bonne Ã\ntout faire, who rubs the chest of the old man\nevery morning."
    assert C.clean(wrapped)[0] == ("Licentious men. The froeken, bonne à tout faire, who rubs the chest of the old "
                                   "man every morning.")


@pytest.mark.parametrize("text", [
    textwrap.fill(STORY, 70) + "\n\n" + VERSE + "\n\nJACK.\n" + textwrap.fill(STORY, 64),
    "\n\n".join(KEPT.values()),
    "bonne Ã\ntout faire, who rubs the chest\nof the old man.\n\nCHAPTER I\nthe river",
])
def test_cleaning_cleaned_text_changes_nothing(text):
    once, _, _ = C.clean(text)
    twice, _, done = C.clean(once)
    assert twice == once and done.paragraphs == 0


# -- small sources ----------------------------------------------------------------------------------------------
def test_missing_text_column_is_a_clear_error(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(InputError, match=r"a.jsonl:1 \[text\].*no 'text' field \(fields: body\)"):
        I.ingest(IngestConfig(source=str(tmp_path / "a.jsonl")), tmp_path / "out", show_progress=False)
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"b.parquet \[text\].*columns: body"):
        I.ingest(IngestConfig(source=str(tmp_path / "b.parquet")), tmp_path / "out", show_progress=False)
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "c.parquet")
    with pytest.raises(InputError, match="holds int64, not text"):
        I.ingest(IngestConfig(source=str(tmp_path / "c.parquet")), tmp_path / "out", show_progress=False)


def test_hf_spec_parsing():
    spec = I.HFSource("hf:bookcorpus/bookcorpus@abc123:train")
    assert (spec.id, spec.revision, spec.split) == ("bookcorpus/bookcorpus", "abc123", "train")
    assert spec.rows_per_doc == I.BOOKCORPUS_ROWS_PER_DOC and I.HFSource("hf:wikitext").rows_per_doc == 1
    assert spec.fingerprint() != I.HFSource("hf:bookcorpus/bookcorpus@other:train").fingerprint()
    for bad in ("hf:", "hf:a:b:c"):
        with pytest.raises(ValueError, match="expected hf:"):
            I.HFSource(bad)
    with pytest.raises(FileNotFoundError):
        I.HFSource("hf:/no/such/folder")


def test_refuses_to_replace_a_folder_that_is_not_a_corpus(tmp_path):
    src = write(tmp_path / "src", {"a.txt": book(1)})
    write(tmp_path / "out", {"notes.md": "mine"})
    with pytest.raises(OutputError, match="not a `ingest` output"):
        stage(src, tmp_path / "out")
    assert (tmp_path / "out" / "notes.md").read_text() == "mine"
    with pytest.raises(ValueError, match="not empty"):  # the build function itself writes only into an empty folder
        I.ingest(IngestConfig(source=str(src)), tmp_path / "out", show_progress=False)
