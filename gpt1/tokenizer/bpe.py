"""GPT-1's text encoder on HF `tokenizers`: ftfy, the original standardisation, spaCy-style words, lower-case, BPE.

The original (openai/finetune-transformer-lm, text_utils.py) encodes a text as
    ftfy.fix_text -> text_standardize -> spaCy English tokenizer -> lower-case -> per-word BPE, `</w>` on the last
    symbol of each word (word-level, not byte-level) -> ids, unknown symbols -> 0
and appends `_start_ _delimiter_ _classify_` after the 40,478 BPE ids at fine-tuning time. Here the BPE runs in
`tokenizers` (Rust, parallel) and everything but ftfy is part of the saved tokenizer.json:

    Python   fix_text          ftfy.fix_text, with a proven-identical fast path for plain-ASCII lines (below)
    Rust     normalizer        the original standardisation's replacements (dashes, ellipsis, acute accent, newline
                               runs -> one "\n", strip), then lower-case
    Rust     pre-tokenizer     spaCy's English word splitting, emulated by one regex (see "Word splitting")
    Rust     model             BPE with end_of_word_suffix "</w>", unk "<unk>" (id 0 in the original vocabulary)

Two modes of `encode`:
- fast (default): the pipeline above. On the 40 shared books it reproduces the original ids on 99.9% of paragraphs
  (`benchmarks/bench_tokenizer.py --parity` names every class of mismatch).
- exact (`from_openai(..., exact=True)` / `load(..., exact=True)`, needs the `[exact]` extra): Python runs ftfy, the
  original `text_standardize` and `spacy.blank("en")`'s tokenizer, lower-cases each token, and the Rust BPE encodes
  the words as pre-tokenized input: ids equal the original algorithm's (tests/gpt1_oracle.py) on every paragraph.

Design choices:
- ftfy stays in Python (it has no Rust equivalent) and costs more than the whole Rust pipeline; `fix_text` skips it
  for lines that are printable ASCII without `&`, where ftfy can only rewrite "\r\n"/"\r" as "\n" (every other fix
  needs a non-ASCII character, an HTML entity or a control character).
- ftfy is not part of tokenizer.json, so `transformers.PreTrainedTokenizerFast(tokenizer_file=...)` gives our ids only
  for text that is already ftfy-clean; `save_transformers` (below) writes a transformers tokenizer with ftfy's
  character-by-character fixes built in. Special-token strings typed in raw text are plain text here (as in the
  original), while transformers matches them as specials.
- The spaCy token "\n " (a line break) encodes as "\n</w>" (id 40477): the original special-cased exactly that.
- Training learns exactly `merges` merges (fewer only if no pair reaches min_frequency) and is deterministic (see
  `train`). The vocabulary is laid out as the original's: `<unk>` (id 0), base symbols (each alphabet character
  alone and with `</w>`), merge results in merge order, then the 3 specials. The alphabet is the 1,000 most frequent
  characters (the original has 238); rarer ones are left out of training and encode as `<unk>`.
- `decode` joins words with spaces (the information lost by word splitting cannot come back) and shows specials
  as words unless told to skip them.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path

import ftfy
from ftfy import chardata as ftfy_chardata
from ftfy import fixes as ftfy_fixes
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from tqdm import tqdm

from gpt1.config import SPECIAL_TOKENS
from gpt1.io import InputError, read_json, write_json, write_text
from gpt1.stages.integrity import verify_beside

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
STATS_FILE = "tokenizer_stats.json"
END_OF_WORD = "</w>"
UNK = "<unk>"
LIMIT_ALPHABET = 1000
# A 40k-merge tokenizer.json is a few MB; far larger is not a tokenizer this pipeline wrote or can use.
MAX_TOKENIZER_BYTES = 256 << 20
# Token ids are u32 in `tokenizers` and in the shards beyond 65,535 ids.
MAX_VOCAB_SIZE = (1 << 32) - 1

# ---------------------------------------------------------------------------------------------------------------------
# Text clean-up: ftfy and the original standardisation

# A line of these characters is left alone by ftfy except for its line breaks.
_FTFY_INERT = re.compile(r"[\t\n\r\x20-\x25\x27-\x7e]*")
_LINES = re.compile(r"[^\n]*\n|[^\n]+")  # ftfy fixes text one "\n"-terminated segment at a time


def _fix_line_breaks(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def fix_text(text: str) -> str:
    """`ftfy.fix_text(text)`, segment by segment as ftfy does it, skipping ftfy on plain-ASCII lines."""
    if _FTFY_INERT.fullmatch(text):
        return _fix_line_breaks(text)
    fixed: list[str] = []
    unescape_html: str | bool = "auto"
    for line in _LINES.findall(text):
        if (
            unescape_html == "auto" and "<" in line
        ):  # ftfy's own rule: after a "<", entities stay as written
            unescape_html = False
        inert = _FTFY_INERT.fullmatch(line)
        fixed.append(
            _fix_line_breaks(line) if inert else ftfy.fix_text(line, unescape_html=unescape_html)
        )
    return "".join(fixed)


# The original's character replacements (the rest of its standardisation is whitespace and punctuation spacing).
_DASHES = "—–―"
_REPLACEMENTS = (*((dash, "-") for dash in _DASHES), ("…", "..."), ("´", "'"))
# The original's pattern was a non-raw string: its `\\+` reached `re` as `\+`, so backslashes are never split off.
_PUNCTUATION_RUNS = r'(-+|~+|!+|"+|;+|\?+|\++|,+|\)+|\(+|\/+|\*+|\[+|\]+|}+|{+|\|+|_+)'
# Python's `\s` (str.isspace), spelled out so the Rust regexes (Oniguruma: \xHH is a byte, \uHHHH a character)
# use the same set.
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def standardize(text: str) -> str:
    """The original `text_standardize`: the input spaCy expects in exact mode."""
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    text = re.sub(_PUNCTUATION_RUNS, r" \1 ", text)
    text = re.sub(r"\s*\n\s*", " \n ", text)
    text = re.sub(r"[^\S\n]+", " ", text)
    return text.strip()


def _normalizer() -> normalizers.Normalizer:
    """`standardize` for the word regex: the replacements, one "\n" per line break run, stripped, lower-cased.

    Spaces are left for the word regex to drop, and so is the punctuation spacing: it splits those runs itself.
    """
    return normalizers.Sequence(
        [
            normalizers.Replace(Regex(f"[{_DASHES}]"), "-"),
            normalizers.Replace("…", "..."),
            normalizers.Replace("´", "'"),
            normalizers.Replace(Regex(rf"\n[{_SPACE}]*"), "\n"),
            normalizers.Strip(),  # Unicode White_Space: Python's also has \x1c-\x1f, which ftfy removes
            normalizers.Lowercase(),
        ]
    )


# ---------------------------------------------------------------------------------------------------------------------
# Word splitting: spaCy's English tokenizer, emulated by one regex over the lower-cased text.
#
# spaCy cuts each space-separated chunk by peeling prefixes and suffixes (a step is skipped when what is left is a
# "special case" such as "Mr." or "'em"), splitting infixes, and expanding special cases such as "don't" -> do n't.
# Here one regex lists the words left to right (whitespace between them is dropped): a word is a prefix, a
# contraction's first part, a suffix or infix, or else a run of characters up to the next place one of those
# starts. "Chunk start" is a lookbehind (whitespace, a standalone punctuation mark or a prefix before it), "chunk
# end" a lookahead (only suffix characters until whitespace or a standalone mark). The text is already lower-case,
# so where spaCy looks at case we assume ordinary prose: a single letter before a final period is an initial ("J."
# stays whole), the abbreviations below are title words, contractions are not written in capitals.


def _alternatives(*patterns: str) -> str:
    return "(?:" + "|".join(patterns) + ")"


# Characters the original standardisation spaced out: spaCy then splits them one by one, but keeps runs of - ~ / |.
_STANDALONE = _alternatives(r"-+", r"~+", r"/+", r"\|+", r"[*!?;+()\[\]{}_\",]")
_BOUNDARY = rf"{_SPACE}*!?;+()\[\]{{}}_\",\-~/|"  # a character class's contents: what chunks end at
_PREFIX_CHARS = r"'`$£€¥#&§%=<>:"
_CHUNK_START = rf"(?<=\A|[{_BOUNDARY}{_PREFIX_CHARS}])"
_SYMBOL = r"[\p{So}&&[^°]]"
_SUFFIX_CHAR = r"(?:\.\.+|'s|['`:%&#<>.]|" + _SYMBOL + ")"
_CHUNK_END = rf"(?={_SUFFIX_CHAR}*(?:[{_BOUNDARY}]|\z))"
_UNITS = "km m dm cm mm ha nm yd in ft kg g mg t lb oz mph kmh pa hpa mbar mb kb gb tb".split()
# Period-final special cases that survive lower-casing: title abbreviations, months, companies.
_ABBREVIATIONS = (
    "mr mrs dr st messrs jr prof gen gov adm rep sen jan feb apr aug jul jun sept sep oct nov dec "
    "corp inc ltd bros co vs mt"
).split()
# Special cases ending in an apostrophe (dropped g), and the ones starting with one.
_ELIDED = "ol doin goin havin lovin nothin nuthin somethin".split()
_APOSTROPHE_WORDS = "em|bout|cause|cos|coz|cuz|nuff|s|d|ll|re"


def _not_whole(words: Iterable[str]) -> str:
    """A lookbehind placed after a match: the chunk so far is not exactly one of `words`."""
    starts = [rf"{edge}{quote}" for edge in (r"\A", rf"[{_BOUNDARY}]") for quote in ("", "'")]
    return "(?<!" + "|".join(start + word for word in words for start in starts) + ")"


_PREFIX = _CHUNK_START + _alternatives(
    r"''",
    rf"'(?!(?:{_APOSTROPHE_WORDS}|'){_CHUNK_END})",
    r"[`$£€¥#&§%=<>:]",
)
# Places where a word ends inside a chunk. All but the units start with a character that is not a letter or digit:
# the guards let the regex engine skip the lot at once inside ordinary words.
_SUFFIX_OR_INFIX = _alternatives(
    r"(?=[^\p{L}0-9])"
    + _alternatives(
        r"\n",
        _STANDALONE,
        r"\.\.+",
        _SYMBOL,
        rf"'s{_CHUNK_END}",
        rf"'{_CHUNK_END}" + _not_whole(f"{word}'" for word in _ELIDED),
        rf"[`:%&#<>]{_CHUNK_END}",
        # spaCy splits a final period after a digit, a lower-case letter or a quote; a single letter (at the chunk
        # start, after a period, a quote or a prefix) is an initial
        rf"\.{_CHUNK_END}"
        + _not_whole(rf"{word}\." for word in _ABBREVIATIONS)
        + rf"(?<=[0-9%'`\"]\.|[^.{_BOUNDARY}{_PREFIX_CHARS}]\p{{L}}\.|[\p{{L}}0-9]'\p{{L}}\.)",
        r"\^(?<=[0-9]\^)(?=[0-9-])",
        r"[:<>=](?<=[\p{L}0-9][:<>=])(?=\p{L})",
    ),
    rf"(?<=[0-9])(?:{'|'.join(_UNITS)}|[$£€¥]){_CHUNK_END}",  # after a number: 10 km, 5 $
)
# Contractions spaCy expands, as (first part, the rest up to the chunk end): auxiliary + n't, pronoun + 'd 'll 're 've
# 'm, several also without the apostrophe ("im" -> i m, but "its" and "well" stay whole).
_AUXILIARIES = "do does did is are was were have has had could would should might must need ought may dare ca wo sha ai"
_PRONOUNS = "i you he she it we they who what when where why how there that this these those"
_BARE_ENDINGS = {
    "i": "d|m|ve",
    "he": "d|s",
    "she": "s",
    "it": "d|ll",
    "we": "d|ve",
    "you": "d|ll|re|ve",
    "they": "d|ll|re|ve",
    "who": "d|ll|s|ve",
    "what": "d|ll|re|s|ve",
    "when": "d|ll|re|s|ve",
    "where": "d|ll|re|s|ve",
    "why": "d|ll|re|s|ve",
    "how": "d|ll|re|s|ve",
    "there": "d|ll|re|s|ve",
    "that": "d|ll|s",
    "this": "d|ll|s",
    "these": "d|ll|re|ve",
    "those": "d|ll|re|ve",
}
_CONTRACTIONS = [
    *((auxiliary, r"n'?t(?:'?ve)?") for auxiliary in _AUXILIARIES.split()),
    *((pronoun, r"'(?:d|ll|re|ve|m)(?:'ve)?") for pronoun in _PRONOUNS.split()),
    *((pronoun, f"(?:{endings})") for pronoun, endings in _BARE_ENDINGS.items()),
    *((modal, r"'?ve") for modal in "could would should might must not".split()),
    ("can", "not"),
    ("gon", "na"),
    ("got", "ta"),
    ("c'm", "on"),
    ("y'?", "all"),
]


def _first_parts(contractions: list[tuple[str, str]]) -> str:
    """The first parts, grouped by first letter so that a word is only compared with those it could start."""
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for first, rest in contractions:
        groups[first[0]].append(f"{first}(?={rest}{_CHUNK_END})")
    return _alternatives(
        *(f"(?={letter}){_alternatives(*group)}" for letter, group in groups.items())
    )


_CONTRACTION = _CHUNK_START + _first_parts(_CONTRACTIONS)
_CONTRACTION_MIDDLE = (
    rf"n'?t(?='?ve{_CHUNK_END})|'?(?:d|ll)(?='?ve{_CHUNK_END})"  # "don't've", "i'd've"
)
# Anything else: a run up to the next word end; letters not after a digit cannot start one (units can).
_RUN = rf"[^{_SPACE}](?:(?<![0-9])\p{{L}}+|(?!{_SUFFIX_OR_INFIX})[^{_SPACE}])*"
_WORD = _alternatives(_PREFIX, _SUFFIX_OR_INFIX, _CONTRACTION, _CONTRACTION_MIDDLE, _RUN)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(_WORD), behavior="removed", invert=True)


def _build(vocab: dict[str, int], merges: list[tuple[str, str]], unk: str = UNK) -> Tokenizer:
    """The full fast pipeline around a BPE vocabulary; the specials get the next 3 ids."""
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token=unk, end_of_word_suffix=END_OF_WORD)
    )
    tokenizer.normalizer = _normalizer()
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
    tokenizer.add_special_tokens(
        [AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS]
    )
    return tokenizer


# ---------------------------------------------------------------------------------------------------------------------
# The tokenizer


class GPT1Tokenizer:
    """Text <-> ids. `vocab_size` counts the BPE vocabulary and the 3 specials, which are the last 3 ids."""

    def __init__(self, tokenizer: Tokenizer, exact: bool = False) -> None:
        found = [tokenizer.token_to_id(s) for s in SPECIAL_TOKENS]  # None: not in the vocabulary
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        ids = list(range(size - len(SPECIAL_TOKENS), size))
        if found != ids:
            raise InputError(
                f"not a GPT-1 tokenizer: {', '.join(SPECIAL_TOKENS)} must be the last 3 ids, got {found} "
                f"in a vocabulary of {size}"
            )
        tokenizer.encode_special_tokens = (
            True  # "_start_" typed in a text is text, as in the original
        )
        self._tokenizer = tokenizer
        self.exact = exact
        self.start_id, self.delimiter_id, self.classify_id = ids
        self.vocab_size = size
        self._special_tokens = dict(zip(ids, SPECIAL_TOKENS))

    @property
    def boundary_id(self) -> int:
        """Precedes every document in pre-training shards."""
        return self.start_id

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self.exact:
            words = [self._spacy_words(text) for text in texts]
            return [
                e.ids for e in self._word_encoder.encode_batch_fast(words, is_pretokenized=True)
            ]
        return [
            e.ids for e in self._tokenizer.encode_batch_fast([fix_text(text) for text in texts])
        ]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        words: list[str] = []
        run: list[int] = []
        for i in itertools.chain(ids, [None]):
            if i is None or i in self._special_tokens:
                if run:
                    words.append(self._tokenizer.decode(run))
                    run = []
                if i is not None and not skip_special_tokens:
                    words.append(self._special_tokens[i])
            else:
                run.append(i)
        return " ".join(words)

    def to_json(self) -> str:
        return self._tokenizer.to_str()

    @cached_property
    def sha256(self) -> str:
        """Hash of the tokenizer.json content `save` writes."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    @cached_property
    def num_merges(self) -> int:
        return len(json.loads(self.to_json())["model"]["merges"])

    def save(self, directory: str | Path) -> Path:
        return write_text(Path(directory) / TOKENIZER_FILE, self.to_json())

    # exact mode: spaCy's words straight into the BPE model
    @cached_property
    def _word_encoder(self) -> Tokenizer:
        return Tokenizer(self._tokenizer.model)

    @cached_property
    def _spacy(self):
        try:
            import spacy
        except ImportError as err:
            raise ImportError("exact mode needs spaCy: pip install 'gpt1-pipeline[exact]'") from err
        return spacy.blank("en").tokenizer

    def _spacy_words(self, text: str) -> list[str]:
        words = (token.text.lower() for token in self._spacy(standardize(fix_text(text))))
        return ["\n" if word == "\n " else word for word in words]

    def __repr__(self) -> str:
        mode = "exact" if self.exact else "fast"
        return f"GPT1Tokenizer(vocab_size={self.vocab_size}, merges={self.num_merges}, {mode})"


def load(path: str | os.PathLike, exact: bool = False) -> GPT1Tokenizer:
    """A saved tokenizer: a tokenizer.json file or the folder holding one; in a model folder, the one its record
    holds (gpt1.stages.integrity.verify_beside: an edited tokenizer would give its ids other words)."""
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.exists() and not file.is_symlink():
        raise FileNotFoundError(f"{file}: no tokenizer here; run `gpt1 train-tokenizer` first")
    spec = read_json(file, max_bytes=MAX_TOKENIZER_BYTES)
    check_spec(spec, file)
    try:
        tokenizer = Tokenizer.from_str(json.dumps(spec))
    except Exception as err:  # tokenizers raises a bare Exception for what it cannot read
        raise InputError(f"not a tokenizers file ({err})", file=file) from None
    try:
        loaded = GPT1Tokenizer(tokenizer, exact=exact)
    except InputError as err:
        raise InputError(str(err), file=file) from None
    verify_beside(file)  # after the checks above, which name what is wrong in it
    return loaded


def check_spec(spec, file: str | os.PathLike) -> None:
    """Refuse a parsed tokenizer.json that is not a word-level GPT-1 BPE (naming `file` and the field) before
    `tokenizers` reads it: it accepts some of these and fails later, in the middle of encoding."""
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict):
        raise InputError("not a tokenizers file: no 'model' object", file=file, field="model")
    if model.get("type") != "BPE":
        raise InputError(
            f"model type is {model.get('type')!r}; a GPT-1 tokenizer is 'BPE'",
            file=file,
            field="model.type",
        )
    if model.get("end_of_word_suffix") != END_OF_WORD:
        raise InputError(
            f"end_of_word_suffix is {model.get('end_of_word_suffix')!r}; GPT-1's word-level BPE marks "
            f"the end of a word with {END_OF_WORD!r}",
            file=file,
            field="model.end_of_word_suffix",
        )
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not all(
        type(i) is int and 0 <= i < MAX_VOCAB_SIZE for i in vocab.values()
    ):
        raise InputError(
            f"expected an object mapping each symbol to an id 0..{MAX_VOCAB_SIZE - 1:,}",
            file=file,
            field="model.vocab",
        )
    unk = model.get("unk_token")
    if unk not in vocab:
        raise InputError(
            f"the unknown token {unk!r} is not in the vocabulary: text it cannot split would have no id",
            file=file,
            field="model.unk_token",
        )
    owner: dict[int, str] = {}
    added = spec.get("added_tokens") or []
    pairs = [
        *vocab.items(),
        *((t.get("content"), t.get("id")) for t in added if isinstance(t, dict)),
    ]
    for token, i in pairs:
        if owner.setdefault(i, token) != token:
            raise InputError(
                f"id {i} is given to two tokens ({owner[i]!r} and {token!r})",
                file=file,
                field="model.vocab" if token in vocab else "added_tokens",
            )


def from_openai(
    encoder_json: str | Path, vocab_bpe: str | Path, exact: bool = False
) -> GPT1Tokenizer:
    """The released GPT-1 vocabulary (encoder_bpe_40000.json + vocab_40000.bpe) with the 3 specials appended."""
    encoder = read_json(encoder_json)
    if not isinstance(encoder, dict) or sorted(encoder.values()) != list(range(len(encoder))):
        raise InputError(
            "expected a JSON object mapping each symbol to a distinct id 0..n-1", file=encoder_json
        )
    merges = []
    lines = Path(vocab_bpe).read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, start=1):
        if (
            number == 1 and line.startswith("#")
        ) or not line:  # "#version: 0.2" header, final newline
            continue
        parts = line.split()
        if len(parts) != 2:
            raise InputError(
                f"expected a merge 'left right', got {line!r}", file=vocab_bpe, line=number
            )
        missing = [s for s in (*parts, "".join(parts)) if s not in encoder]
        if missing:
            raise InputError(
                f"merge uses symbols missing from {Path(encoder_json).name}: {missing}",
                file=vocab_bpe,
                line=number,
            )
        merges.append((parts[0], parts[1]))
    # The original mapped unknown symbols to id 0, whatever its symbol (`<unk>` in the release).
    unk = min(encoder, key=encoder.__getitem__)
    return GPT1Tokenizer(_build(encoder, merges, unk=unk), exact=exact)


# ---------------------------------------------------------------------------------------------------------------------
# transformers export
#
# transformers runs a tokenizer.json as it is when tokenizer_config.json names the generic class (AutoTokenizer
# would otherwise pick `OpenAIGPTTokenizer`, which rebuilds a BERT-style pipeline around the vocabulary), but it
# cannot run ftfy. The export puts every step of ftfy that maps characters without context in front of the
# normalizer, built from ftfy's own tables: ligatures, fullwidth forms, curly quotes, line breaks, terminal escapes,
# control characters, NFC. What ftfy decides from context stays outside (mojibake, HTML entities, C1 controls): text
# with those gets other ids unless `ftfy.fix_text` runs first (coverage and cost: benchmarks/bench_hf_tokenizer.py).
# In transformers `tokenizer(text)` starts with `_start_`, as every pre-training document does, and typed
# special-token strings are specials (its convention); `encode` here reads them as plain text.

HF_TOKENIZER_CONFIG = "tokenizer_config.json"
HF_TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # transformers 5 loads it as TokenizersBackend; 4.x knows the name too


def _ftfy_character_fixes() -> normalizers.Normalizer:
    """The steps of `ftfy.fix_text` that map characters whatever their context, in ftfy's order."""
    removed = "".join(f"\\x{{{code:x}}}" for code in ftfy_chardata.CONTROL_CHARS)
    return normalizers.Sequence(
        [
            *(
                normalizers.Replace(chr(code), text)
                for table in (ftfy_chardata.LIGATURES, ftfy_chardata.WIDTH_MAP)
                for code, text in table.items()
            ),
            normalizers.Replace(Regex(ftfy_chardata.DOUBLE_QUOTE_RE.pattern), '"'),
            normalizers.Replace(Regex(ftfy_chardata.SINGLE_QUOTE_RE.pattern), "'"),
            normalizers.Replace("\r\n", "\n"),
            normalizers.Replace(
                Regex("[\r\u2028\u2029]"), "\n"
            ),  # ftfy's other line break, \x85, is a C1 control
            normalizers.Replace(Regex(ftfy_fixes.ANSI_RE.pattern), ""),
            normalizers.Replace(Regex(f"[{removed}]"), ""),
            normalizers.NFC(),
        ]
    )


def _normalizer_spec(normalizer: normalizers.Normalizer) -> dict:
    holder = Tokenizer(models.BPE())
    holder.normalizer = normalizer
    return json.loads(holder.to_str())["normalizer"]


def save_transformers(
    tokenizer: GPT1Tokenizer, directory: str | Path, model_max_length: int
) -> None:
    """Write tokenizer.json + tokenizer_config.json for `transformers.AutoTokenizer.from_pretrained(directory)`."""
    from transformers import PreTrainedTokenizerFast  # heavy, and needed only here

    exported = Tokenizer.from_str(tokenizer.to_json())
    exported.normalizer = normalizers.Sequence([_ftfy_character_fixes(), exported.normalizer])
    start, delimiter, classify = SPECIAL_TOKENS
    # No unk_token: transformers would add "<unk>" as a special token, matched in typed text.
    hf = PreTrainedTokenizerFast(
        tokenizer_object=exported,
        bos_token=start,
        eos_token=start,
        add_bos_token=True,
        extra_special_tokens=[delimiter, classify],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    hf.save_pretrained(directory)
    config = Path(directory) / HF_TOKENIZER_CONFIG
    write_json(config, {**read_json(config), "tokenizer_class": HF_TOKENIZER_CLASS})


def from_transformers(directory: str | Path) -> GPT1Tokenizer:
    """The tokenizer `save_transformers` exported to `directory`, as it was (same ids, same sha256)."""
    file = Path(directory) / TOKENIZER_FILE
    fixes = _normalizer_spec(_ftfy_character_fixes())["normalizers"]
    try:
        spec = read_json(file)
        steps = spec["normalizer"]["normalizers"]  # tokenizers flattens the nested sequences
    except (ValueError, KeyError, TypeError):
        steps = None
    if not isinstance(steps, list) or steps[: len(fixes)] != fixes:
        raise InputError("not a tokenizer exported by gpt1 (`gpt1 convert --to hf`)", file=file)
    check_spec(spec, file)
    spec.update(
        normalizer={"type": "Sequence", "normalizers": steps[len(fixes) :]}, post_processor=None
    )
    try:
        return GPT1Tokenizer(Tokenizer.from_str(json.dumps(spec)))
    except InputError as err:
        raise InputError(str(err), file=file) from err


# ---------------------------------------------------------------------------------------------------------------------
# Training


def _normalized_char(char: str) -> str:
    """What the normalizer makes of one character (replacements, lower-case); whitespace other than "\n" vanishes."""
    if char.isspace() and char != "\n":
        return ""
    for old, new in _REPLACEMENTS:
        char = char.replace(old, new)
    return char.lower()


def _alphabet(char_counts: collections.Counter, limit: int) -> list[str]:
    """The `limit` most frequent characters after normalization, ties by code point; sorted by code point."""
    counts: collections.Counter = collections.Counter()
    for char, count in char_counts.items():
        for normalized in _normalized_char(char):
            counts[normalized] += count
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return sorted(char for char, _ in ranked[:limit])


def merge_limit(characters: int, limit_alphabet: int) -> int:
    """The most merges `characters` characters of text can give, within the id type: a merge joins two adjacent
    symbols of a word, so a word of n characters gives at most n - 1."""
    ids_left = (
        MAX_VOCAB_SIZE - 1 - 2 * limit_alphabet - len(SPECIAL_TOKENS)
    )  # <unk>, c and c</w>, specials
    return max(0, min(characters - 1, ids_left))


def check_merges(
    merges: int,
    characters: int,
    limit_alphabet: int,
    what: str,
    file: str | os.PathLike | None = None,
    field: str = "merges",
) -> None:
    """Refuse a merge count no corpus of `characters` characters can give, before `tokenizers` is asked for it
    (it reserves room for the whole vocabulary up front, and an impossible size aborts the process)."""
    limit = merge_limit(characters, limit_alphabet)
    if merges > limit:
        raise InputError(
            f"{merges:,} merges asked, but {what} of {characters:,} characters can give at most {limit:,}",
            file=file,
            field=field,
        )


def train(
    texts: Iterable[str],
    merges: int,
    min_frequency: int = 2,
    show_progress: bool = True,
    limit_alphabet: int = LIMIT_ALPHABET,
) -> GPT1Tokenizer:
    """Learn `merges` BPE merges on `texts` with the fast pipeline's word splitting; the same texts give the same file.

    `texts` is read once: ftfy runs in Python while characters are counted and the fixed text is spooled to a
    temporary file, which `tokenizers` then trains on. Knowing the alphabet first makes training deterministic:
    `tokenizers` numbers the `</w>` symbols in hash-map order (huggingface/tokenizers#1794), and those numbers break
    ties between equally frequent pairs, so they are fixed here by registering every `c</w>` up front. Characters
    outside the alphabet are left out of training, as `tokenizers`' own limit_alphabet does, and encode as `<unk>`.
    """
    if merges < 1 or min_frequency < 1 or limit_alphabet < 1:
        raise ValueError(
            f"merges, min_frequency and limit_alphabet must be >= 1, got {merges}, {min_frequency}, "
            f"{limit_alphabet}"
        )
    char_counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="gpt1-tokenizer-") as tmp:
        spool = Path(tmp) / "fixed.jsonl"
        documents = 0
        progress = tqdm(
            desc="tokenizer: ftfy", unit="char", unit_scale=True, disable=not show_progress
        )
        with open(spool, "w", encoding="utf-8") as out, progress:
            for text in texts:
                fixed = fix_text(text)
                char_counts.update(fixed)
                out.write(json.dumps(fixed) + "\n")
                documents += 1
                progress.update(len(text))
        alphabet = _alphabet(char_counts, limit_alphabet)
        if not alphabet:
            raise ValueError("no text to train the tokenizer on")
        check_merges(merges, sum(char_counts.values()), limit_alphabet, "the training text")
        known = set(alphabet)
        left_out = {ord(c): None for c in char_counts if not set(_normalized_char(c)) <= known}

        def spooled() -> Iterator[str]:
            with open(spool, encoding="utf-8") as lines:
                for line in lines:
                    yield json.loads(line).translate(left_out)

        tokenizer = Tokenizer(models.BPE(unk_token=UNK, end_of_word_suffix=END_OF_WORD))
        tokenizer.normalizer = _normalizer()
        tokenizer.pre_tokenizer = _pre_tokenizer()
        trainer = trainers.BpeTrainer(
            # the alphabet twice (c, c</w>), the merges, and room for merges that rebuild an existing symbol
            vocab_size=2 * len(alphabet) + merges + 256,
            min_frequency=min_frequency,
            special_tokens=[c + END_OF_WORD for c in alphabet],
            end_of_word_suffix=END_OF_WORD,
            show_progress=show_progress,
        )
        tokenizer.train_from_iterator(spooled(), trainer, length=documents)
    learned = json.loads(tokenizer.to_str())["model"]
    kept: list[tuple[str, str]] = []
    for merge in learned["merges"][:merges]:
        # "left right" in older tokenizers releases, ["left", "right"] in newer ones
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        kept.append((left, right))
    if len(kept) < merges:
        log.warning(
            "learned %d of %d merges: no other pair occurs %d times",
            len(kept),
            merges,
            min_frequency,
        )
    # in case tokenizers saw more
    seen = (s for s in learned["vocab"] if len(s.removesuffix(END_OF_WORD)) == 1)
    base = sorted(
        {*alphabet, *(c + END_OF_WORD for c in alphabet), *seen},
        key=lambda s: (s.removesuffix(END_OF_WORD), s.endswith(END_OF_WORD)),
    )
    symbols = dict.fromkeys([UNK, *base, *(left + right for left, right in kept)])
    return GPT1Tokenizer(_build({s: i for i, s in enumerate(symbols)}, kept))


def capped(texts: Iterable[str], max_chars: int | None, counts: dict[str, int]) -> Iterator[str]:
    """`texts` up to `max_chars` characters in all (the last one cut), counting documents and characters."""
    for text in texts:
        if max_chars is not None:
            if counts["characters"] >= max_chars:
                break
            text = text[: max_chars - counts["characters"]]
        counts["documents"] += 1
        counts["characters"] += len(text)
        yield text


def check_matches(
    tokenizer: GPT1Tokenizer, model_dir: str | Path, what: str = "the tokenizer"
) -> None:
    """Refuse a tokenizer other than the one the model in `model_dir` was trained with: the hash pre-training
    records in `training.json`, else the model folder's own tokenizer.json. Folders with neither (a converted or
    hand-made checkpoint) cannot be checked and pass."""
    model_dir = Path(model_dir)
    training = model_dir / "training.json"
    expected = read_json(training).get("tokenizer_sha256") if training.is_file() else None
    own = model_dir / TOKENIZER_FILE
    if expected is None and own.is_file():
        expected = load(own).sha256
    if expected is not None and expected != tokenizer.sha256:
        raise InputError(
            f"{what} (sha256 {tokenizer.sha256[:12]}) is not the one this model was trained with "
            f"(sha256 {expected[:12]}): its token ids would mean other words",
            file=model_dir,
        )
