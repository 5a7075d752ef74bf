"""Corpus ingestion (gpt1/data/ingest.py, gpt1/data/clean.py): the shared books in one pass, then small cases."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import textwrap

import ftfy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_path
from ftfy.badness import is_bad

from gpt1.cli import main as cli_main
from gpt1.config import load_config
from gpt1.data.ingest import clean as C
from gpt1.data.ingest import ingest as I
from gpt1.data.ingest.corpus import iter_texts, split_files
from corpora import book, rows, write
from gpt1.config import IngestConfig
from gpt1.io import InputError, OutputError, read_json
from gpt1 import recipe
from gpt1.data.ingest import stage as ingest_stage
from gpt1.stages.outputs import DONE


def stage(src, out, **settings):
    """The ingest stage (what `gpt1 ingest` and the pipeline run) with these data settings."""
    return ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(**settings)).run(out, wait=False)

CP1252_BOOKS = {"pg2641.txt", "pg64317.txt", "pg84.txt"}  # per ../shared/data/README.md
PLAYS_IN_VERSE = {"tinyshakespeare.txt", "pg1513.txt"}  # their line breaks are the text
SPEAKER_LINES = {"pg844.txt"}  # a play in prose whose speaker names have lines of their own
BOILERPLATE = ("project gutenberg", "*** start", "*** end", "full license", "gutenberg-tm", "www.gutenberg.org")


# -- the shared books, one pass ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def books_corpus(tmp_path_factory):
    books = shared_path("books")
    out = tmp_path_factory.mktemp("books") / "corpus"
    stats = I.ingest(str(books), out, show_progress=False)
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
def test_duplicates_are_dropped_after_cleaning(tmp_path):
    src = write(tmp_path / "src", {"a.txt": book(1), "b.txt": book(1), "c.txt": book(2),
                                   "d.txt": b"\xef\xbb\xbf" + book(1).replace("\n", "\r\n").encode()})
    stats = I.ingest(str(src), tmp_path / "out", show_progress=False)
    assert stats["duplicates"]["count"] == 2 and stats["duplicates"]["examples"] == ["b.txt", "d.txt"]
    assert sorted(r["source"] for r in rows(tmp_path / "out")) == ["a.txt", "c.txt"]
    stats = I.ingest(str(src / "[bc].txt"), tmp_path / "glob", show_progress=False)  # a glob picks files
    assert stats["duplicates"]["count"] == 0 and sum(stats["documents"].values()) == 2


def test_unusable_files_are_rejected_and_the_run_continues(tmp_path):
    src = write(tmp_path / "src", {"good.txt": book(1), "bin.txt": b"PK\x03\x04\x00\x00binary",
                                   "bad.txt": b"\x81\x81\x81", "blank.txt": " \n\r\n\t", "short.txt": "Hi."})
    stats = I.ingest(str(src), tmp_path / "out", min_doc_chars=10, show_progress=False)
    assert {r: t["examples"] for r, t in stats["rejects"].items()} == {
        "binary": ["bin.txt"], "undecodable": ["bad.txt"], "empty": ["blank.txt"], "too_short": ["short.txt"]}
    assert [r["source"] for r in rows(tmp_path / "out")] == ["good.txt"]


def test_a_source_without_documents_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no input files"):
        stage(write(tmp_path / "empty", {}), tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        stage(tmp_path / "missing" / "*.txt", tmp_path / "out")
    with pytest.raises(InputError, match="no documents.*binary: 1"):
        stage(write(tmp_path / "bin", {"x.txt": b"\x00\x01"}), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_jsonl_rows_with_malformed_lines_counted(tmp_path):
    lines = [json.dumps({"text": f"row {i} " * 5, "id": i}) for i in range(200)]
    lines[50] = '{"text": "unterminated'
    lines[120] = json.dumps({"body": "no text field"})
    lines[150] = json.dumps({"text": None})
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    with pytest.raises(InputError, match=r"rows.jsonl:51.*3 of 200 rows are malformed"):
        I.ingest(str(path), tmp_path / "bad", show_progress=False)
    lines[150] = json.dumps({"text": "fine now"})
    path.write_text("\n".join(lines) + "\n")
    stats = I.ingest(str(path), tmp_path / "out", show_progress=False)
    assert stats["malformed_rows"]["count"] == 2 and stats["inputs"]["rows"] == 200
    assert [(e["line"], e["error"][:12]) for e in stats["malformed_rows"]["examples"]] == [
        (51, "invalid JSON"), (121, "no 'text' fi")]
    assert sum(stats["documents"].values()) == 198
    assert {r["source"] for r in rows(tmp_path / "out")} >= {f"{path}:1", f"{path}:200"}


def test_missing_text_column_is_a_clear_error(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(InputError, match=r"a.jsonl:1 \[text\].*no 'text' field \(fields: body\)"):
        I.ingest(str(tmp_path / "a.jsonl"), tmp_path / "out", show_progress=False)
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"b.parquet \[text\].*columns: body"):
        I.ingest(str(tmp_path / "b.parquet"), tmp_path / "out", show_progress=False)
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "c.parquet")
    with pytest.raises(InputError, match="holds int64, not text"):
        I.ingest(str(tmp_path / "c.parquet"), tmp_path / "out", show_progress=False)


def test_parquet_rows_with_a_named_column_and_grouping(tmp_path):
    texts = [f"sentence {i} ." for i in range(150)]
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"body": texts[:4] + [None] + texts[4:]}), path, row_group_size=64)
    stats = I.ingest(str(path), tmp_path / "out", text_column="body", rows_per_doc=4, val_fraction=0,
                     show_progress=False)
    got = rows(tmp_path / "out")
    # grouped rows keep one per line, though these lowercase lines would read as wrapped prose
    assert len(got) == 38 and [r["text"] for r in got[:2]] == ["\n".join(texts[0:4]), "\n".join(texts[4:8])]
    assert stats["unwrapped"] == {"paragraphs": 0, "lines_joined": 0, "paragraphs_kept": 0}
    assert got[1]["source"] == f"{path}:6-9" and got[-1]["source"] == f"{path}:150-151"  # row 5 was null
    assert stats["malformed_rows"]["examples"] == [{"file": str(path), "line": 5, "error": "'body' is null"}]


def test_hf_source_on_local_folders(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hub_like"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(7)))
    stats = I.ingest(f"hf:{folder}:train", tmp_path / "a", rows_per_doc=3, val_fraction=0, show_progress=False)
    assert [r["source"] for r in rows(tmp_path / "a")] == [f"{folder}:train:{s}" for s in ("1-3", "4-6", "7")]
    assert stats["inputs"]["rows"] == 7 and stats["settings"]["rows_per_doc"] == 3
    with pytest.raises(InputError, match=r"\[body\].*no column 'body' \(columns: text\)"):
        I.ingest(f"hf:{folder}", tmp_path / "b", text_column="body", show_progress=False)

    saved = tmp_path / "saved"
    texts = [f"row {i}" for i in range(120)]
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"text": texts + [None]})}).save_to_disk(
        str(saved))
    stats = I.ingest(f"hf:{saved}:validation", tmp_path / "c", val_fraction=0, show_progress=False)
    assert [r["text"] for r in rows(tmp_path / "c")] == texts
    assert stats["malformed_rows"]["count"] == 1
    assert stats["source_hash"] == I.HFSource(f"hf:{saved}:validation").fingerprint()
    assert stats["source_hash"] != I.HFSource(f"hf:{saved}:train").fingerprint()  # same files, other split
    with pytest.raises(ValueError, match="no split 'train'"):
        I.ingest(f"hf:{saved}", tmp_path / "d", show_progress=False)


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


def _assignment(corpus):
    return {r["source"]: split for split in ("train", "val") for r in rows(corpus, split)}


def test_split_is_deterministic_and_stable_when_documents_are_added(tmp_path):
    src = write(tmp_path / "src", {f"{i:02d}.txt": book(i) for i in range(40)})
    first = I.ingest(str(src), tmp_path / "a", val_fraction=0.3, split_seed=7, show_progress=False)
    again = I.ingest(str(src), tmp_path / "b", val_fraction=0.3, split_seed=7, show_progress=False)
    assert _assignment(tmp_path / "a") == _assignment(tmp_path / "b")
    assert first["content_hash"] == again["content_hash"]
    assert 0 < first["documents"]["val"] < 40

    write(src, {f"{i:02d}.txt": book(i) for i in range(40, 50)})
    I.ingest(str(src), tmp_path / "c", val_fraction=0.3, split_seed=7, show_progress=False)
    grown = _assignment(tmp_path / "c")
    assert {name: grown[name] for name in _assignment(tmp_path / "a")} == _assignment(tmp_path / "a")

    I.ingest(str(src), tmp_path / "d", val_fraction=0.3, split_seed=8, show_progress=False)
    assert _assignment(tmp_path / "d") != grown


def test_val_floor_and_part_size(tmp_path):
    src = write(tmp_path / "src", {f"{i:02d}.txt": book(i) for i in range(25)})
    stats = I.ingest(str(src), tmp_path / "out", val_fraction=1e-9, rows_per_part=10, show_progress=False)
    assert stats["documents"] == {"train": 24, "val": 1} and stats["val_floor_applied"]
    assert [p["rows"] for p in stats["parts"]["train"]] == [10, 10, 4]
    assert [p.name for p in split_files(tmp_path / "out", "train")] == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert not list((tmp_path / "out").rglob(".*"))  # no temporary files left behind
    one = I.ingest(str(src / "00.txt"), tmp_path / "one", show_progress=False)
    assert one["documents"] == {"train": 1, "val": 0}


def test_crash_leaves_no_corpus_and_keeps_the_previous_one(tmp_path, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(5)})
    out = tmp_path / "out"
    calls = itertools.count()

    def crash_on_third(text, **options):
        if next(calls) == 2:
            raise RuntimeError("simulated crash")
        return C.clean(text, **options)

    monkeypatch.setattr(I, "clean", crash_on_third)
    with pytest.raises(RuntimeError, match="simulated"):
        stage(src, out)
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == ["src"]

    monkeypatch.setattr(I, "clean", C.clean)
    before = read_json(stage(src, out).path / "stats.json")
    calls = itertools.count()
    monkeypatch.setattr(I, "clean", crash_on_third)
    with pytest.raises(RuntimeError):
        ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(split_seed=1)).run(
            out, wait=False, force=True)  # new settings over the old corpus: a rebuild, which crashes
    assert read_json(out / "stats.json") == before and len(rows(out)) == 5  # the previous corpus, whole
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["out", "src"]


def test_rerun_skips_a_finished_corpus_and_rebuilds_on_change(tmp_path, monkeypatch):
    src = write(tmp_path / "src", {f"{i}.txt": book(i) for i in range(5)})
    out = tmp_path / "corpus"
    first = stage(src, out)

    def must_not_run(text, **options):
        raise AssertionError("a finished corpus was rebuilt")

    monkeypatch.setattr(I, "clean", must_not_run)
    assert stage(src, out).cached
    monkeypatch.setattr(I, "clean", C.clean)
    with pytest.raises(OutputError, match="other inputs or settings"):
        stage(src, out, min_doc_chars=2)  # another corpus in this folder: replaced only on request
    changed = ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(min_doc_chars=2))
    assert changed.run(out, wait=False, force=True).key != first.key
    (src / "0.txt").write_text(book(99))  # the source changed: its key, hence the stage's
    assert ingest_stage.source_key(str(src)) != changed.source_key
    edited = ingest_stage.Job(str(src), ingest_stage.source_key(str(src)), IngestConfig(min_doc_chars=2))
    assert not edited.run(out, wait=False, force=True).cached
    assert any("number 99" in r["text"] for r in rows(out))
    with pytest.raises(ValueError, match="inside the source folder"):
        stage(src, src / "corpus")  # its own parquet parts would become input


def test_refuses_to_replace_a_folder_that_is_not_a_corpus(tmp_path):
    src = write(tmp_path / "src", {"a.txt": book(1)})
    write(tmp_path / "out", {"notes.md": "mine"})
    with pytest.raises(OutputError, match="not a `ingest` output"):
        stage(src, tmp_path / "out")
    assert (tmp_path / "out" / "notes.md").read_text() == "mine"
    with pytest.raises(ValueError, match="not empty"):  # the build function itself writes only into an empty folder
        I.ingest(str(src), tmp_path / "out", show_progress=False)


def test_unwrap_lines_setting_in_the_stage_cli_stats_and_pipeline_keys(tmp_path, capsys):
    wrapped = textwrap.fill(STORY, 70)
    src = write(tmp_path / "src", {"a.txt": f"CHAPTER I\n\n{wrapped}\n\n{VERSE}\n",
                                   "b.jsonl": json.dumps({"text": textwrap.fill(NAMES, 66)}) + "\n"})
    breaks = wrapped.count("\n") + textwrap.fill(NAMES, 66).count("\n")
    assert cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "on"), "--no-progress"]) == 0
    assert (f"hard-wrapped lines joined: {breaks} line breaks in 2 paragraphs; 1 multi-line paragraphs kept"
            in capsys.readouterr().out)
    on = read_json(tmp_path / "on" / "stats.json")
    assert on["settings"]["unwrap_lines"] and on["unwrapped"] == {"paragraphs": 2, "lines_joined": breaks,
                                                                 "paragraphs_kept": 1}
    assert sorted(r["text"] for r in rows(tmp_path / "on")) == sorted([f"CHAPTER I\n\n{STORY}\n\n{VERSE}", NAMES])

    assert cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "off"), "--no-unwrap-lines",
                     "--no-progress"]) == 0
    assert "hard-wrapped" not in capsys.readouterr().out
    off = read_json(tmp_path / "off" / "stats.json")
    assert read_json(tmp_path / "off" / DONE)["key"] != read_json(tmp_path / "on" / DONE)["key"]
    assert off["unwrapped"] == {"paragraphs": 0, "lines_joined": 0, "paragraphs_kept": 0}
    assert sorted(r["text"] for r in rows(tmp_path / "off")) == sorted([f"CHAPTER I\n\n{wrapped}\n\n{VERSE}",
                                                                        textwrap.fill(NAMES, 66)])
    # in the pipeline the setting is part of the ingest key, so changing it re-runs ingestion and what follows
    plans = [recipe.plan(load_config("smoke", [f"ingest.unwrap_lines={value}"]), tmp_path / "work")
             for value in ("true", "false")]
    assert plans[0].ref("sample-data").key == plans[1].ref("sample-data").key
    assert all(plans[0].ref(s).key != plans[1].ref(s).key for s in ("ingest", "tokenize"))


def test_cli_ingest_prints_a_summary(tmp_path, capsys):
    src = write(tmp_path / "src", {"a.txt": book(1), "b.txt": book(2), "c.txt": book(1), "x.txt": b"\x00"})
    code = cli_main(["ingest", "--source", str(src), "--out", str(tmp_path / "out"), "--val-fraction", "0.5",
                     "--seed", "3", "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0
    assert re.search(r"documents: \d train \+ \d val", printed) and "1 duplicates" in printed
    assert "rejected (binary): 1, e.g. x.txt" in printed
    assert read_json(tmp_path / "out" / "stats.json")["settings"]["split_seed"] == 3
    assert cli_main(["ingest", "--source", str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")]) == 2
    assert "no input files" in capsys.readouterr().err
