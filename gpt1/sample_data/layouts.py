"""Helpers for writing the official file layouts: GLUE-style tsv, naive parse columns, NLI annotator votes, ids."""

from __future__ import annotations

import random
from pathlib import Path

from gpt1.io import write_text
from gpt1.sample_data.text import words


def tsv(
    path: Path,
    header: list[str] | None,
    rows: list[list],
    final_newline: bool = True,
    bom: bool = False,
):
    """GLUE-style tsv: TAB-separated, no quoting at all (so no field may hold a TAB or a newline)."""
    lines = [("\ufeff" if bom else "") + "\t".join(header)] if header else []
    for row in rows:
        fields = [str(f) for f in row]
        if any("\t" in f or "\n" in f for f in fields):
            raise ValueError(f"{path}: a field holds a TAB or newline: {fields}")
        lines.append("\t".join(fields))
    write_text(path, "\n".join(lines) + ("\n" if final_newline else ""))


def binary_parse(text: str) -> str:
    toks = words(text)
    body, end = (toks[:-1], toks[-1]) if toks and toks[-1] in ".?!" else (toks, None)

    def branch(ts: list[str]) -> str:
        return ts[0] if len(ts) == 1 else f"( {ts[0]} {branch(ts[1:])} )"

    inner = branch(body) if body else ""
    return f"( {inner} {end} )" if end else f"( {inner} )"


FUNCTION_TAGS = {
    "a": "DT",
    "an": "DT",
    "the": "DT",
    "is": "VBZ",
    "was": "VBD",
    "and": "CC",
    "of": "IN",
    "in": "IN",
    "on": "IN",
    "at": "IN",
    "by": "IN",
    "near": "IN",
    "to": "TO",
    "i": "PRP",
    "we": "PRP",
    "it": "PRP",
    "only": "JJ",
    "thing": "NN",
    ".": ".",
    ",": ",",
    "?": ".",
    "!": ".",
}


def flat_parse(text: str) -> str:
    tags = []
    for tok in words(text):
        tag = FUNCTION_TAGS.get(tok.lower())
        if tag is None:
            tag = "NNP" if tok[:1].isupper() else ("VBD" if tok.endswith("ed") else "NN")
        tags.append(f"({tag} {tok})")
    return f"(ROOT (S {' '.join(tags)}))"


def uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


NLI_LABEL_NAMES = ("entailment", "neutral", "contradiction")


def annotators(rng: random.Random, gold: str) -> list[str]:
    """Five annotator labels with `gold` in the majority (3-5 votes), in random order."""
    agree = rng.choice((3, 4, 4, 5, 5, 5))
    votes = [gold] * agree + [
        rng.choice([x for x in NLI_LABEL_NAMES if x != gold]) for _ in range(5 - agree)
    ]
    rng.shuffle(votes)
    return votes


def no_consensus(rng: random.Random) -> list[str]:
    first, second, third = rng.sample(NLI_LABEL_NAMES, 3)
    votes = [first, first, second, second, third]
    rng.shuffle(votes)
    return votes
