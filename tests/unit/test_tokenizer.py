"""GPT-1 BPE tokenizer: training, the original vocabulary, exact and fast parity with the original encoder, CLI. The CLI
on a corpus a real ingestion wrote: tests/integration/test_tokenizer_cli.py."""

from __future__ import annotations

import difflib
import json
import random
import re

import ftfy
import pytest
from transformers import PreTrainedTokenizerFast

from gpt1.tokenizer import bpe
from gpt1.cli import main as cli
from gpt1.config import SPECIAL_TOKENS
from gpt1.io import InputError, sha256_file
from gpt1.tokenizer.bpe import END_OF_WORD, GPT1Tokenizer, fix_text, standardize

from conftest import shared_path
from gpt1_oracle import OracleEncoder, book_paragraphs

CORPUS = [
    "The lowest towers were lower than the newest ones, and the newer towers were the lowest.",
    "\u201cDon't go,\u201d said Mr. Brown \u2014 he wasn't sure\u2026 It's late; they're tired.",
    "Newer, newest, lower, lowest: the words repeat so that pairs repeat.",
    "She said: 'I'll see the towers at 3:30 p.m. tomorrow.'\n\nThen she left.",
] * 3

HAND_PICKED = [
    "\u201cDon't do it,\u201d said Mr. Smith \u2014 it's 3:30 p.m.\u2026 and I can't stay.",
    "I'm sure they're right; we'll see, won't we? You'd better go. Who's there?",
    "'Tis the season... 'em and 'bout: rock'n'roll o'clock ma'am y'all gonna cannot.",
    "J. M. Barrie wrote Peter Pan (1904) -- see pp. 12-14, U.S.A., e.g. and i.e. too.",
    "CHAPTER II.\r\n\r\nThe   end. The start! $5, 10%, #1, \u00a3100, 20km & 3kg;",
    "x=y, a/b, a\\b. 2^3 1.5 ...and... e.g. Ph.D. www.example.org. 'em 'tis days' ol' talkin'.",
    "Caf\u00e9 na\u00efve \u00e9l\u00e8ve \u2019quoted\u2019 \u2018single\u2019 \u00b4acute\u00b4",
    "\u2013 en dash \u2015 bar \u2122 trade mark \u00a9 copyright.",
    "_start_ _delimiter_ _classify_ are text here, as are <unk> and </w>.",
    "Snowman \u2603, emoji \U0001F600 and CJK \u4e2d\u6587 are not in the vocabulary.",
    "Tabs\tand\u00a0non-breaking\u2009spaces,\nnew lines\n\n\nand  doubled   spaces.",
    "&amp; &lt;b&gt; HTML entities and mojibake: \u00e2\u20ac\u0153quoted\u00e2\u20ac\ufffd",
    "",
]


@pytest.fixture(scope="module")
def trained() -> GPT1Tokenizer:
    return bpe.train(CORPUS, merges=40, min_frequency=2, show_progress=False)


def tokens(tokenizer: GPT1Tokenizer, text: str) -> list[str]:
    return [tokenizer._tokenizer.id_to_token(i) for i in tokenizer.encode(text)]


# ---------------------------------------------------------------------------------------------- training


def test_training_learns_exactly_the_requested_merges_with_specials_last(trained):
    spec = json.loads(trained.to_json())
    vocab = spec["model"]["vocab"]
    assert trained.num_merges == 40
    assert vocab[bpe.UNK] == 0
    base = [s for s in vocab if len(s.removesuffix(END_OF_WORD)) == 1]
    assert len(vocab) == 1 + len(base) + 40  # <unk>, base symbols, one new symbol per merge
    assert trained.vocab_size == len(vocab) + 3
    assert [trained.start_id, trained.delimiter_id, trained.classify_id] == [len(vocab), len(vocab) + 1, len(vocab) + 2]
    assert trained.boundary_id == trained.start_id
    assert [trained._tokenizer.id_to_token(i) for i in range(len(vocab), len(vocab) + 3)] == list(SPECIAL_TOKENS)


def test_words_are_lower_cased_and_end_in_the_end_of_word_symbol(trained):
    pieces = tokens(trained, "LOWEST Lowest lowest")
    assert pieces == tokens(trained, "lowest lowest lowest")
    words = "".join(pieces).split(END_OF_WORD)
    assert words == ["lowest"] * 3 + [""]  # word-level BPE: each word's last symbol, and only it, ends in </w>
    assert tokens(trained, "lowest,")[: len(tokens(trained, "lowest"))] == tokens(trained, "lowest")


def test_min_frequency_can_stop_training_early(caplog):
    tokenizer = bpe.train(CORPUS, merges=800, min_frequency=3, show_progress=False)
    assert 40 < tokenizer.num_merges < 800
    assert f"learned {tokenizer.num_merges} of 800 merges" in caplog.text


def test_training_is_deterministic_and_the_hash_tracks_the_content(trained):
    again = bpe.train(CORPUS, merges=40, min_frequency=2, show_progress=False)
    other = bpe.train(CORPUS, merges=41, min_frequency=2, show_progress=False)
    assert again.sha256 == trained.sha256 != other.sha256
    assert re.fullmatch(r"[0-9a-f]{64}", trained.sha256)


def test_training_rejects_bad_arguments_and_empty_input():
    with pytest.raises(ValueError, match="merges"):
        bpe.train(CORPUS, merges=0, show_progress=False)
    with pytest.raises(ValueError, match="no text"):
        bpe.train(["   ", ""], merges=5, show_progress=False)


def test_training_refuses_more_merges_than_the_text_can_give_before_the_native_trainer():
    # tokenizers reserves the whole vocabulary up front: an impossible size aborts the process
    with pytest.raises(InputError, match="2,000,000,000 merges asked") as refused:
        bpe.train(CORPUS, merges=2_000_000_000, show_progress=False)
    assert refused.value.field == "merges"


# --------------------------------------------------------------------------------- text clean-up and words


@pytest.mark.parametrize("raw, expected", [
    ("a\u2014b\u2013c\u2015d", "a - b - c - d"),
    ("wait\u2026 \u00b4twas", "wait... 'twas"),
    ("stop!!now--then", "stop !! now -- then"),
    ("(a)[b]{c}|d|", "( a ) [ b ] { c } | d |"),
    ("a\\b c+d c++d 1/2 *x* _y_ ~z~ \"q\"", "a\\b c + d c ++ d 1 / 2 * x * _ y _ ~ z ~ \" q \""),
    ("  one \t two\u00a0three  \n\n  four \r\n", "one two three \n four"),
])
def test_standardize_matches_the_original_rules(raw, expected):
    assert standardize(raw) == expected


def test_rust_normalizer_does_the_same_replacements_and_newline_rule(trained):
    words = [w for w, _ in trained._tokenizer.pre_tokenizer.pre_tokenize_str(
        trained._tokenizer.normalizer.normalize_str("  A\u2014B\u2026C\u00b4d \n \n E\u00a0F  "))]
    assert words == ["a", "-", "b", "...", "c'd", "\n", "e", "f"]


@pytest.mark.parametrize("text", [
    "".join(chr(c) for c in range(128)) + "\r\n\rx",
    "plain line\r\nline with &amp; entity\nline with <tag> &amp;\nafter tag &amp;\n",
    "curly \u201cquotes\u201d and \u2018single\u2019\nplain line two\r\n\u00e2\u20ac\u0153mojibake\u00e2\u20ac\ufffd\n",
    "\ufeffBOM first\nfullwidth \uff21\uff22 ligature \ufb01 \x1b[31mred\x1b[0m\n",
])
def test_fix_text_equals_ftfy(text):
    assert fix_text(text) == ftfy.fix_text(text)


def test_word_splitting_keeps_every_character(trained):
    rng = random.Random(0)
    alphabet = "ab'.:-\"`$%&#<>=^\u2122\u00b0\u00e9 \n\t\u00a0x9,;!?()[]{}_~/|*+\u2026\u2014\u00b4dontsmll"
    pre, norm = trained._tokenizer.pre_tokenizer, trained._tokenizer.normalizer
    for _ in range(2000):
        text = norm.normalize_str("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))))
        words = [w for w, _ in pre.pre_tokenize_str(text)]
        assert "".join(words) == re.sub(r"[^\S\n]", "", text) and "" not in words, text


def test_special_token_strings_in_text_are_plain_text(trained):
    ids = trained.encode("_start_ _delimiter_ _classify_")
    assert ids and not {trained.start_id, trained.delimiter_id, trained.classify_id} & set(ids)


def test_decode_joins_words_and_shows_specials_unless_skipped(trained):
    ids = trained.encode("The lowest towers, newer.")
    assert trained.decode(ids) == "the lowest towers , newer ."
    framed = [trained.start_id, *ids, trained.classify_id]
    assert trained.decode(framed) == "_start_ the lowest towers , newer . _classify_"
    assert trained.decode(framed, skip_special_tokens=True) == trained.decode(ids)
    assert trained.encode("") == [] and trained.decode([]) == ""


# ------------------------------------------------------------------------------------------ saving, loading


def test_save_load_round_trip_and_hash(trained, tmp_path):
    path = trained.save(tmp_path)
    assert path == tmp_path / "tokenizer.json"
    assert sha256_file(path) == trained.sha256
    for source in (tmp_path, path):
        loaded = bpe.load(source)
        assert loaded.sha256 == trained.sha256
        assert loaded.encode_batch(CORPUS) == trained.encode_batch(CORPUS)
        assert (loaded.vocab_size, loaded.start_id) == (trained.vocab_size, trained.start_id)


def test_transformers_loads_the_file_with_the_same_ids(trained, tmp_path):
    hf = PreTrainedTokenizerFast(tokenizer_file=str(trained.save(tmp_path)))
    assert len(hf) == trained.vocab_size
    assert hf.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [trained.start_id, trained.delimiter_id,
                                                               trained.classify_id]
    for text in CORPUS:  # ftfy is the one step outside tokenizer.json
        assert hf.encode(ftfy.fix_text(text), add_special_tokens=False) == trained.encode(text)


def test_load_reports_missing_and_foreign_files(trained, tmp_path):
    with pytest.raises(FileNotFoundError, match="train-tokenizer"):
        bpe.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match="tokenizer.json"):
        bpe.load(tmp_path)
    spec = json.loads(trained.to_json())
    spec["added_tokens"] = []
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(InputError, match="last 3 ids"):
        bpe.load(tmp_path)


# ------------------------------------------------------------------------------------- the original vocab


@pytest.fixture(scope="module")
def vocab_files():
    vocab = shared_path("openai-gpt1")
    return vocab / "encoder_bpe_40000.json", vocab / "vocab_40000.bpe"


@pytest.fixture(scope="module")
def original(vocab_files) -> GPT1Tokenizer:
    return bpe.from_openai(*vocab_files)


@pytest.fixture(scope="module")
def exact(vocab_files) -> GPT1Tokenizer:
    return bpe.from_openai(*vocab_files, exact=True)


@pytest.fixture(scope="module")
def oracle(vocab_files) -> OracleEncoder:
    return OracleEncoder(*vocab_files)


def test_original_vocabulary_with_specials_appended(original):
    assert (original.vocab_size, original.num_merges) == (40478 + 3, 40000)
    assert [original.start_id, original.delimiter_id, original.classify_id] == [40478, 40479, 40480]
    assert original.encode("\u2603") == [0]  # an unknown symbol is id 0, as in the original
    assert original.encode("a\nb")[1] == 40477  # the line-break word "\n</w>"


@pytest.mark.parametrize("text", HAND_PICKED)
def test_fast_mode_matches_the_original_encoder_on_hand_picked_text(original, oracle, text):
    assert original.encode(text) == oracle.encode(text)


# Where fast mode knowingly differs (it sees lower-case text): exact mode still matches the original.
KNOWN_DIFFERENCES = ["DON'T SHOUT, MR. SMITH.", "The end.The start.", "Miss. Rev. Brown."]


@pytest.mark.parametrize("text", KNOWN_DIFFERENCES)
def test_exact_mode_covers_what_fast_mode_cannot_see(exact, original, oracle, text):
    assert exact.encode(text) == oracle.encode(text) != original.encode(text)


def test_bad_vocabulary_files_are_located(vocab_files, tmp_path):
    encoder, merges = vocab_files
    lines = merges.read_text(encoding="utf-8").split("\n")
    for bad_line, message in (("t h e", "expected a merge"), ("t \u2603", "missing")):
        broken = tmp_path / "vocab.bpe"
        broken.write_text("\n".join([*lines[:3], bad_line, *lines[3:]]), encoding="utf-8")
        with pytest.raises(InputError, match=rf"vocab.bpe:4: .*{message}"):
            bpe.from_openai(encoder, broken)
    (tmp_path / "encoder.json").write_text('{"a": 0, "b": 2}')
    with pytest.raises(InputError, match="distinct id"):
        bpe.from_openai(tmp_path / "encoder.json", merges)


# A sample of real paragraphs: cp1252 books, BOM books (their first paragraph starts with the BOM), CRLF, Ulysses.
PARITY_BOOKS = {"pg84.txt": 70, "pg2641.txt": 70, "pg64317.txt": 70, "158-0.txt": 70, "pg120.txt": 70,
                "2600-0.txt": 70, "pg4300.txt": 70, "pg76.txt": 70, "tinyshakespeare.txt": 70}


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    rng = random.Random(0)
    sample = []
    for name, n in PARITY_BOOKS.items():
        book = book_paragraphs(shared_path("books", name))
        sample += [book[0], *rng.sample(book[1:], n - 1)]
    return sample


@pytest.fixture(scope="module")
def reference(oracle, paragraphs) -> list[list[int]]:
    return [oracle.encode(p) for p in paragraphs]


def test_exact_mode_equals_the_original_on_every_sampled_paragraph(exact, paragraphs, reference):
    got = exact.encode_batch(paragraphs)
    assert [i for i, (a, b) in enumerate(zip(got, reference)) if a != b] == []
    assert any(p.startswith("\ufeff") for p in paragraphs) and any("\u2019" in p for p in paragraphs)


def test_fast_mode_parity_floor(original, paragraphs, reference):
    got = original.encode_batch(paragraphs)
    same = sum(a == b for a, b in zip(got, reference)) / len(paragraphs)
    matched = sum(sum(m.size for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
                  for a, b in zip(reference, got))
    # measured: 629/630 here, 99.89% of all 110,824 paragraphs (benchmarks/bench_tokenizer.py --parity)
    assert same >= 0.995
    assert matched / sum(map(len, reference)) >= 0.9995  # measured 99.997%


# ------------------------------------------------------------------------------------------------------ CLI


def test_cli_reports_a_folder_that_is_not_a_corpus(tmp_path, capsys):
    assert cli(["train-tokenizer", "--corpus", str(tmp_path), "--out", str(tmp_path / "tok")]) == 2
    assert "not an ingested corpus" in capsys.readouterr().err
    assert not (tmp_path / "tok").exists()
