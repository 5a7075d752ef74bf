"""Text helpers shared by the generated books and task files: people and pronouns, template filling, articles."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from gpt1.sample_data import lexicon as lex

POLARITIES = ("positive", "negative")
KINDS = ("animal", "plant")


@dataclass(frozen=True)
class Person:
    name: str
    he: str
    his: str
    him: str


def person(rng: random.Random, avoid: str | None = None) -> Person:
    while True:
        if rng.random() < 0.5:
            p = Person(rng.choice(lex.FEMALE_NAMES), "she", "her", "her")
        else:
            p = Person(rng.choice(lex.MALE_NAMES), "he", "his", "him")
        if p.name != avoid:
            return p


def say(template: str, p: Person | None = None, **slots) -> str:
    """Fill a template ({n} {he} {his} {him}, capitalised {He} {His}) and capitalise the sentence."""
    if p is not None:
        slots.update(
            n=p.name, he=p.he, his=p.his, him=p.him, He=p.he.capitalize(), His=p.his.capitalize()
        )
    text = template.format(**slots)
    first = re.search(r"[A-Za-z]", text)  # capitalise after a leading quote, too
    return (
        text
        if first is None
        else text[: first.start()] + text[first.start()].upper() + text[first.start() + 1 :]
    )


def a(word: str) -> str:
    return lex.with_article(word)


def ptb(text: str) -> str:
    """Treebank-style tokens as in SST-2 and MRPC: punctuation and clitics split off by spaces."""
    text = re.sub(r"'s\b", " 's", text)
    text = re.sub(r"([.,!?;:])", r" \1", text)
    return re.sub(r"\s+", " ", text).strip()


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z']+|[^\sA-Za-z']", text)


def other(polarity: str) -> str:
    return "negative" if polarity == "positive" else "positive"


def balanced(n: int, labels: tuple, weights: tuple | None = None) -> list:
    """Exactly proportioned labels for n examples (in a fixed cycle; callers shuffle the finished rows)."""
    weights = weights or (1,) * len(labels)
    cycle = [label for label, w in zip(labels, weights) for _ in range(w)]
    return [cycle[i % len(cycle)] for i in range(n)]


def shuffled(rng: random.Random, rows: list) -> list:
    rows = list(rows)
    rng.shuffle(rows)
    return rows
