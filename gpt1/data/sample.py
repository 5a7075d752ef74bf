"""Deterministic offline sample data: a book-like corpus and the paper's 12 tasks in their official file layouts.

`gpt1 sample-data --out DIR [--seed N]` (or `write_sample_data(DIR, seed)`) writes, in a few seconds:

    DIR/books/*.txt          ~2.5 MB of generated "books" (chapters, paragraphs, hard-wrapped lines)
    DIR/tasks/<TASK>/...     CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE snli_1.0 SciTailV1.1 RACE StoryCloze
    DIR/sample_data.json     what was written: example counts per split, the lexicon halves

The same seed gives byte-identical files. The smoke preset pre-trains and fine-tunes on this data, so it is built
to show the paper's central claim on a tiny model: pre-training on the books makes fine-tuning generalise.

Design: the meaning is in the books, the held-out words are in the dev sets
---------------------------------------------------------------------------
Every label follows from the meaning of a few words (`gpt1.data.sample_lexicon`): sentiment adjectives (positive
or negative), hyponyms of ten categories (a heron is a bird), sets of synonyms, and verbs that take no object.
Each list is split once, by position, into a *train* half and an *eval* half. Task train splits use only
train-half words; dev and test splits only eval-half words. A model fine-tuned from scratch has never seen an
eval-half word with a label and has random embeddings for it, so it stays near chance on dev. The books use
both halves in the same consistent contexts, so a language model trained on them places each eval word next to
the train words that share its meaning, and the fine-tuned classifier carries over:

* sentiment: an adjective appears only beside reactions and moods of its own polarity ("The soup was dreadful.
  She groaned."), so the state after it predicts the polarity of what follows. -> SST-2, Story Cloze, RACE, MNLI.
* taxonomy: "a heron is a kind of bird", "like every bird, the heron has feathers", "the heron spread its
  wings" -> SNLI, MNLI, QNLI, RTE, SciTail, Story Cloze, RACE (hypernym entailment).
* synonymy: members of a set are used interchangeably in that set's own frames ("the clock was broken, so he
  mended / repaired / fixed it") plus glosses ("mend means the same as repair") -> MRPC, QQP, STS-B.
* grammar: every corpus sentence is grammatical; intransitive verbs never take an object -> CoLA
  (unacceptable = an intransitive verb with an object, or a noun/verb/adjective in the wrong slot).

Pairs are built so that surface form alone does not reveal the label: in NLI every (frame, direction) cell
holds two labels 50/50 decided by category membership (existential frame "saw a heron" -> "saw a bird":
entailment / neutral; exclusive frame "the only thing ... was a heron" -> "... a bird": entailment /
contradiction; reversed "... a bird" -> "... a heron": neutral / contradiction); paraphrase and similarity pairs
change the same number of words whatever the label, and only whether the changed word is a synonym decides it.

Choices where the spec was silent
---------------------------------
* Labels are balanced (exactly, by construction) except CoLA (60% acceptable; real 70%), MRPC (60% paraphrase;
  real 68%) and QQP (40% duplicate; real 37%), which keep the real skew's direction, milder.
* MNLI and SNLI hypotheses reuse the premise's frame with one noun phrase or adjective replaced; MNLI genres
  have their own frames, and dev_mismatched uses genres (and frames) that train never shows.
* SNLI, SciTail and Story Cloze test files carry labels (as the official ones do); GLUE test files do not.
  Story Cloze "val" is the training file (train-half words) and "test" the evaluation file (eval-half words).
* Parse columns (MNLI, SNLI) are well-formed but naive: a right-branching binary parse and a flat tagged parse.
* Official quirks are kept: MRPC BOM, SST-2 trailing space before the TAB, CoLA dev / RACE / Story Cloze files
  without a final newline, SNLI rows with gold_label "-" (about 2%), STS-B scores formatted both "3.800" and "3.8".
* Re-running into the same directory overwrites the same file names; nothing else is removed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from gpt1.data import sample_lexicon as lex
from gpt1.io import stable_hash, write_json, write_text

log = logging.getLogger(__name__)

SPLIT_HALF = {"train": "train", "dev": "eval", "test": "eval"}
SIZES = {  # examples per split (RACE: articles per level; 3 questions per middle, 6 per high article)
    "cola": {"train": 500, "dev": 200, "test": 50},
    "sst2": {"train": 500, "dev": 200, "test": 50},
    "mrpc": {"train": 500, "dev": 200, "test": 50},
    "stsb": {"train": 500, "dev": 200, "test": 50},
    "qqp": {"train": 500, "dev": 200, "test": 50},
    "mnli": {"train": 600, "dev": 200, "test": 50},
    "qnli": {"train": 500, "dev": 200, "test": 50},
    "rte": {"train": 500, "dev": 200, "test": 50},
    "snli": {"train": 600, "dev": 200, "test": 200},
    "scitail": {"train": 500, "dev": 200, "test": 200},
    "race": {"train": 30, "dev": 10, "test": 10},
    "storycloze": {"train": 400, "test": 200},
}
BOOKS = 10
BOOK_CHARS = 250_000  # per book on average -> ~2.5 MB in all
WRAP = 70


def _generator_version() -> str:
    """Hash of the generator's source: cached sample data is reused only while the code that wrote it is unchanged
    (the pipeline keys its sample stage by this)."""
    return stable_hash([Path(path).read_text(encoding="utf-8") for path in (__file__, lex.__file__)])


GENERATOR_VERSION = _generator_version()


# ------------------------------------------------------------------------------------------------ text helpers
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
        slots.update(n=p.name, he=p.he, his=p.his, him=p.him, He=p.he.capitalize(), His=p.his.capitalize())
    text = template.format(**slots)
    first = re.search(r"[A-Za-z]", text)  # capitalise after a leading quote, too
    return text if first is None else text[:first.start()] + text[first.start()].upper() + text[first.start() + 1:]


def a(word: str) -> str:
    return lex.with_article(word)


def ptb(text: str) -> str:
    """Treebank-style tokens as in SST-2 and MRPC: punctuation and clitics split off by spaces."""
    text = re.sub(r"'s\b", " 's", text)
    text = re.sub(r"([.,!?;:])", r" \1", text)
    return re.sub(r"\s+", " ", text).strip()


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z']+|[^\sA-Za-z']", text)


# ------------------------------------------------------------------------------------------------------ books
class Storyteller:
    """Paragraph generators for the books. Each scene teaches one relation through consistent contexts; all use
    the whole lexicon (both halves) the same way."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def paragraph(self) -> str:
        scene = self.rng.choices(self.SCENES, weights=self.WEIGHTS)[0]
        return " ".join(scene(self, person(self.rng)))

    # --- sentiment
    def sentiment(self, p: Person) -> list[str]:
        r = self.rng
        pol = r.choice(("positive", "negative"))
        adj1, adj2, adj3 = r.sample(lex.POSITIVE if pol == "positive" else lex.NEGATIVE, 3)
        thing, experience = r.choice(lex.EXPERIENCES)
        m = person(r, avoid=p.name)
        kw = dict(adj1=adj1, adj2=adj2, adj3=adj3, thing=thing, experience=experience, m=m.name,
                  reaction=r.choice(lex.REACTIONS[pol]).format(his=p.his),
                  other=r.choice(lex.REACTIONS[pol]).format(his=m.his), mood=r.choice(lex.MOODS[pol]),
                  outcome=r.choice(lex.OUTCOMES[pol]), verdict=lex.VERDICT[pol], time=r.choice(lex.TIMES),
                  opener=r.choice(lex.OPENERS[pol]))
        return [say(t, p, **kw) for t in r.choice(self.SENTIMENT_SHAPES)]

    SENTIMENT_SHAPES = (  # polarity next to the adjective ("a dreadful mess"), after it ("Sadly, ...") and beyond
        ("{n} {experience} {time}.", "The {thing} was {adj1} and {adj2}, a {adj3} {outcome}.",
         "{opener}, {he} {reaction}.", "It had been a very {verdict} {thing}, and {n} was {mood}."),
        ("'What a {adj1} {outcome}!' said {n} when {he} {experience}.", "{m} thought it {adj2} and {adj3}.",
         "{opener}, {m} {other}, and they were both {mood}."),
        ("When {n} {experience}, {he} {reaction}.", "It was a {adj1} {outcome} of a {thing}, the most {adj2} {he} had "
         "ever known.", "{opener}, {he} felt {mood} for the rest of the day."),
        ("Everyone said the {thing} was {adj1}.", "{n} {experience} {time} and thought it {adj2}, a {adj3} {outcome}.",
         "{opener}, {he} {reaction}.", "It was a {verdict} {thing}, {he} said later."),
        ("{n} {experience} with {m} {time}.", "'It is {adj1} and {adj2},' said {m}.", "'Yes, a {adj3} {outcome},' said "
         "{n}.", "{opener}, {he} {reaction}."),
        ("{time}, {n} {experience}.", "The {thing} was {adj1}, {adj2} and {adj3}.", "{opener}, {he} {reaction}, and {m} "
         "{other} as well.", "Nobody could remember a more {adj1} {outcome}."),
    )

    def review(self, p: Person) -> list[str]:
        r = self.rng
        pol = r.choice(("positive", "negative"))
        adj1, adj2 = r.sample(lex.POSITIVE if pol == "positive" else lex.NEGATIVE, 2)
        part1, part2 = r.sample(lex.REVIEW_PARTS, 2)
        m = person(r, avoid=p.name)
        kw = dict(adj1=adj1, adj2=adj2, part1=part1, part2=part2, work=r.choice(lex.REVIEWED),
                  village=r.choice(lex.VILLAGES), review=lex.REVIEW[pol], verdict=lex.VERDICT[pol], m=m.name,
                  reaction=r.choice(lex.REACTIONS[pol]).format(his=p.his), time=r.choice(lex.TIMES),
                  outcome=r.choice(lex.OUTCOMES[pol]), opener=r.choice(lex.OPENERS[pol]))
        return [say(t, p, **kw) for t in r.choice(self.REVIEW_SHAPES)]

    REVIEW_SHAPES = (
        ("{n} wrote about the new {work} for the {village} newspaper.", "{He} called the {part1} {adj1} and the "
         "{part2} {adj2}.", "The review was very {review}: a {adj1} {outcome}, {he} wrote."),
        ("The {work} opened in {village} {time}.", "The {part1} was {adj1}, and the {part2} was {adj2}.",
         "{opener}, {n} {reaction} all through it.", "{His} review was very {review}: a {verdict} {work}, {he} said."),
        ("'The {part1} is {adj1},' wrote {n}, 'and the {part2} is {adj2}.'", "It was a very {review} review, "
         "and {m} agreed that it was a {verdict} {work}."),
    )

    # --- taxonomy
    def creature(self, p: Person) -> list[str]:
        r = self.rng
        cat = r.choice(lex.CATEGORIES)
        x, y, z = r.sample(cat.members, 3)
        other = r.choice([c for c in lex.CATEGORIES if c is not cat])
        m = person(r, avoid=p.name)
        mod, mod2, mod3 = (r.choice(cat.modifiers) for _ in range(3))
        act, act2 = r.sample(cat.actions, 2)
        kw = dict(x=x, y=y, z=z, ax=a(x), cat=cat.name, acat=a(cat.name), plural=cat.plural, aother=a(other.name),
                  mod=mod, a_mod=a(mod), mod2=mod2, a_mod2=a(mod2), a_mod3=a(mod3), act=act, act2=act2,
                  place=r.choice(lex.PLACES),
                  time=r.choice(lex.TIMES), m=m.name, scene=r.choice(cat.scenes).format(x=x, n=p.name, his=p.his),
                  fact=r.choice(cat.facts)[1])
        return [say(t, p, **kw) for t in r.choice(self.CREATURE_SHAPES)]

    CREATURE_SHAPES = (  # the category both next to the word ("the ripe plum", "the heron flew") and stated
        ("{n} went out {place} {time}.", "There {he} saw {a_mod} {x}.", "{ax} is a kind of {cat}.",
         "The {x} {act} and {act2}."),
        ("'Look, {a_mod} {x}!' cried {n}.", "'Is it {acat}?' asked {m}.", "'Yes,' said {n}. 'Every {x} is {acat}.'",
         "The {mod2} {x} {act}."),
        ("The {mod} {cat} that {n} noticed {place} was {ax}.", "The {x} {act}.", "{scene}.",
         "Like every {cat}, the {x} {fact}."),
        ("{n} knew many {plural}, but {he} liked the {x} best.", "The {mod} {x} {act} {place}.",
         "No other {cat} was so dear to {him}."),
        ("{ax} is not {aother}; it is {acat}.", "The {mod} {x} {act} like any {mod2} {cat}.", "{scene}."),
        ("{time}, {n} spotted {a_mod} {x} {place}.", "It was {acat}, of course, and {scene}."),
        ("{m} asked {n} what kind of thing {ax} was.", "'{ax} is {acat},' said {n}. 'It {act} as every {cat} does.'"),
        ("A {mod} {cat} called the {x} {act} {place}.", "{n} watched until the {mod2} {x} {act2}."),
        ("The {mod} {x} {act}, and then the {mod2} {y} {act2}.", "{n} knew that both were {plural}."),
        ("{place}, {n} came upon {a_mod} {x}, {a_mod2} {y} and {a_mod3} {z}.", "All three {act}.",
         "{He} knew them all: the {x}, the {y} and the {z} are {plural}."),
        ("{n} saw {ax}, {acat}, {place}.", "The {x}, like every {mod} {cat}, {act}."),
        ("There was {a_mod} {cat} {place}: {ax}.", "The {x} {act} and {act2}."),
        ("{n} drew {a_mod} {x} and {a_mod2} {y} for {m}.", "'Both are {plural},' said {m}. 'The {x} {act} and the "
         "{y} {act2}.'"),
    )

    def lesson(self, p: Person) -> list[str]:
        r = self.rng
        cat = r.choice(lex.CATEGORIES)
        x, y = r.sample(cat.members, 2)
        other = r.choice([c for c in lex.CATEGORIES if c is not cat])
        z = r.choice(other.members)
        fact_pl, fact_sg = r.choice(cat.facts)
        teacher = r.choice(("Miss " + r.choice(lex.FEMALE_NAMES), "Mr " + r.choice(lex.MALE_NAMES)))
        kw = dict(teacher=teacher, plural=cat.plural, fact_pl=fact_pl, fact_sg=fact_sg, x=x, y=y, ax=a(x),
                  az=a(z), acat=a(cat.name), aother=a(other.name), cat=cat.name)
        return [say(t, p, **kw) for t in (
            "In the schoolroom, {teacher} taught the children about {plural}.",
            "'All {plural} {fact_pl},' said {teacher}.",
            "'The {x} is {acat}, so the {x} {fact_sg}. The {y} is {acat} too.'",
            "'And {az}?' asked {n}.", "'{az} is not {acat},' said {teacher}. 'It is {aother}.'")]

    def picture(self, p: Person) -> list[str]:
        r = self.rng
        cat = r.choice(lex.CATEGORIES)
        x = r.choice(cat.members)
        who, who2 = r.sample(lex.PEOPLE, 2)
        kw = dict(who=who, who2=who2, ax=a(x), x=x, acat=a(cat.name),
                  place=r.choice(lex.PLACES), doing=r.choice(("holding", "looking at", "pointing at", "drawing")))
        return [say(t, p, **kw) for t in (
            "{n} turned the page of the picture book.", "In the picture, {who} is {doing} {ax} {place}.",
            "The {x} is {acat}.", "Beside them, {who2} is watching.")]

    # --- synonyms
    def synonyms(self, p: Person) -> list[str]:
        r = self.rng
        group = r.choice(lex.SYNONYMS)
        frames = r.sample(group.frames, min(len(group.frames), r.choice((2, 3))))
        out = []
        for frame in frames:
            k = r.randrange(len(group.words))
            out.append(say(frame, p, w=group.forms("past")[k], b=group.forms("base")[k]))
        if r.random() < 0.35:  # state the synonymy outright now and then
            x, y = r.sample(group.forms("base"), 2)
            m = person(r, avoid=p.name)
            out.append(say(r.choice(lex.GLOSSES), p, a=x, b=y, A=x.capitalize(), m=m.name))
        return out

    # --- grammar (intransitive verbs never take an object)
    def rest(self, p: Person) -> list[str]:
        r = self.rng
        v1, v2, v3 = r.sample(lex.INTRANSITIVE, 3)
        ad1, ad2 = r.sample(lex.ADVERBIALS, 2)
        m = person(r, avoid=p.name)
        kw = dict(v1=v1, v2=v2, v3=v3, ad1=ad1, ad2=ad2, m=m.name, time=r.choice(lex.TIMES))
        return [say(t, p, **kw) for t in r.choice((
            ("{n} {v1} {ad1}.", "Then {he} {v2} {ad2}.", "{m} {v3} too."),
            ("{time}, {n} {v1}.", "{m} {v2} {ad1}, and nobody {v3}."),
            ("After the long day {n} {v1} {ad1} and {v2}.", "{m} {v3} {ad2}."),
        ))]

    # --- little stories whose ending fits what came before (sentiment and taxonomy together)
    def story(self, p: Person) -> list[str]:
        r = self.rng
        cat = r.choice(lex.CATEGORIES)
        x = r.choice(cat.members)
        pol = r.choice(("positive", "negative"))
        thing, experience = r.choice(lex.EXPERIENCES)
        kw = dict(place=r.choice(lex.PLACES), time=r.choice(lex.TIMES), ax=a(x), cat=cat.name, thing=thing,
                  experience=experience, adj=r.choice(lex.POSITIVE if pol == "positive" else lex.NEGATIVE),
                  reaction=r.choice(lex.REACTIONS[pol]).format(his=p.his), opener=r.choice(lex.OPENERS[pol]))
        return [say(t, p, **kw) for t in (
            "{n} went out {place} {time}.", "{He} spotted {ax} there and watched it for a long time.",
            "{n} said it was the finest {cat} {he} had ever seen.", "Afterwards {he} {experience}.",
            "The {thing} was {adj}.", "{opener}, {n} {reaction}.")]

    SCENES = (sentiment, review, creature, lesson, picture, synonyms, rest, story)
    WEIGHTS = (22, 5, 30, 5, 3, 22, 5, 8)


def wrap(text: str, width: int = WRAP) -> str:
    """Greedy hard wrap at spaces (what textwrap.fill does for plain prose, several times faster)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line])


def roman(n: int) -> str:
    out = ""
    for value, digits in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while n >= value:
            out, n = out + digits, n - value
    return out


def write_books(out: Path, seed: int) -> dict:
    """`out/books/book-NN.txt`: title, chapters of wrapped paragraphs separated by blank lines."""
    n_bytes, n_words = 0, 0
    for index in range(BOOKS):
        rng = random.Random(f"gpt1-sample/{seed}/book/{index}")
        teller = Storyteller(rng)
        title = rng.choice(("THE {v} STORIES", "A YEAR IN {v}", "THE CHILDREN OF {v}", "LETTERS FROM {v}",
                            "{h} OF {v}")).format(v=rng.choice(lex.VILLAGES).upper(), h=person(rng).name.upper())
        target = int(BOOK_CHARS * rng.uniform(0.7, 1.3))
        parts, size, chapter = [title, ""], 0, 0
        while size < target:
            chapter += 1
            parts += ["", f"CHAPTER {roman(chapter)}", ""]
            for _ in range(rng.randint(25, 45)):
                para = wrap(teller.paragraph())
                parts += [para, ""]
                size += len(para) + 2
        text = "\n".join(parts).rstrip("\n") + "\n"
        write_text(out / "books" / f"book-{index:02d}.txt", text)
        n_bytes += len(text.encode("utf-8"))
        n_words += len(text.split())
    return {"files": BOOKS, "bytes": n_bytes, "words": n_words}


# ------------------------------------------------------------------------------------ meaning of task examples
def balanced(n: int, labels: tuple, weights: tuple | None = None) -> list:
    """Exactly proportioned labels for n examples (in a fixed cycle; callers shuffle the finished rows)."""
    weights = weights or (1,) * len(labels)
    cycle = [label for label, w in zip(labels, weights) for _ in range(w)]
    return [cycle[i % len(cycle)] for i in range(n)]


NLI_LABELS = {("exist", True): "entailment", ("exist", False): "neutral",
              ("only", True): "entailment", ("only", False): "contradiction",
              ("only_reversed", True): "neutral", ("only_reversed", False): "contradiction"}
NLI_CELLS = tuple(NLI_LABELS)  # (scheme, member): six cells, two labels per scheme, 1/3 of each label overall


def taxonomy_pair(rng: random.Random, vocab: lex.Vocabulary, member: bool) -> tuple[str, str]:
    """(hyponym, category name): the category contains the hyponym iff `member`."""
    cat = rng.choice(lex.CATEGORIES)
    x = rng.choice(vocab.members[cat.name])
    asked = cat if member else rng.choice([c for c in lex.CATEGORIES if c is not cat])
    return x, asked.name


def sentiment_pair(rng: random.Random, vocab: lex.Vocabulary, member: bool) -> tuple[str, str]:
    """(adjective, "good"/"bad"): the verdict matches the adjective's polarity iff `member`."""
    pol = rng.choice(("positive", "negative"))
    other = "negative" if pol == "positive" else "positive"
    return rng.choice(vocab.sentiment[pol]), lex.VERDICT[pol if member else other]


def nli_phrases(scheme: str, specific: str, general: str) -> tuple[str, str]:
    """Premise and hypothesis fillers: the specific word first, except in the reversed scheme."""
    return (general, specific) if scheme == "only_reversed" else (specific, general)


# ------------------------------------------------------------------------------------------------- file writers
def tsv(path: Path, header: list[str] | None, rows: list[list], final_newline: bool = True, bom: bool = False):
    """GLUE-style tsv: TAB-separated, no quoting at all (so no field may hold a TAB or a newline)."""
    lines = ([("\ufeff" if bom else "") + "\t".join(header)] if header else [])
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


FUNCTION_TAGS = {"a": "DT", "an": "DT", "the": "DT", "is": "VBZ", "was": "VBD", "and": "CC", "of": "IN",
                 "in": "IN", "on": "IN", "at": "IN", "by": "IN", "near": "IN", "to": "TO", "i": "PRP", "we": "PRP",
                 "it": "PRP", "only": "JJ", "thing": "NN", ".": ".", ",": ",", "?": ".", "!": "."}


def flat_parse(text: str) -> str:
    tags = []
    for tok in words(text):
        tag = FUNCTION_TAGS.get(tok.lower())
        if tag is None:
            tag = "NNP" if tok[:1].isupper() else ("VBD" if tok.endswith("ed") else "NN")
        tags.append(f"({tag} {tok})")
    return f"(ROOT (S {' '.join(tags)}))"


def shuffled(rng: random.Random, rows: list) -> list:
    rows = list(rows)
    rng.shuffle(rows)
    return rows


# ------------------------------------------------------------------------------------------------------- tasks
class TaskWriter:
    """Writes every task; one method per task writes all its splits at the official paths."""

    def __init__(self, out: Path, seed: int):
        self.root, self.seed = out / "tasks", seed
        self.counts: dict[str, dict[str, int]] = {}

    def rng(self, task: str, split: str) -> random.Random:
        return random.Random(f"gpt1-sample/{self.seed}/{task}/{split}")

    def splits(self, task: str):
        for split, n in SIZES[task].items():
            yield split, n, self.rng(task, split), lex.vocabulary(SPLIT_HALF[split])

    def counted(self, task: str, split: str, examples: int) -> None:
        self.counts.setdefault(task, {})[split] = examples

    def write_all(self) -> dict:
        for task in SIZES:
            getattr(self, task)()
        return self.counts

    # --- CoLA: grammaticality through subcategorisation and word classes
    def cola(self):
        for split, n, rng, vocab in self.splits("cola"):
            rows = []
            for ok in balanced(n, (True, False), (3, 2)):
                family, sentence = cola_sentence(rng, vocab, ok)
                rows.append((family, ok, sentence))
            rows = shuffled(rng, rows)
            path = self.root / "CoLA" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "sentence"], [[i, s] for i, (_, _, s) in enumerate(rows)])
            else:  # no header; CoLA's dev.tsv has no final newline
                tsv(path, None, [[f, int(ok), "" if ok else "*", s] for f, ok, s in rows],
                    final_newline=split != "dev")
            self.counted("cola", split, len(rows))

    # --- SST-2: review snippets whose label is the polarity of their adjectives
    def sst2(self):
        for split, n, rng, vocab in self.splits("sst2"):
            rows = []
            for pol in balanced(n, ("positive", "negative")):
                adj1, adj2 = rng.sample(vocab.sentiment[pol], 2)
                part1, part2 = rng.sample(lex.REVIEW_PARTS, 2)
                work = rng.choice(lex.REVIEWED)
                text = rng.choice(SST2_SHAPES).format(adj1=adj1, adj2=adj2, part1=part1, part2=part2, work=work)
                rows.append((ptb(text.lower()), int(pol == "positive")))
            rows = shuffled(rng, rows)
            path = self.root / "SST-2" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "sentence"], [[i, s] for i, (s, _) in enumerate(rows)])
            else:  # every official train/dev row ends its sentence with a space
                tsv(path, ["sentence", "label"], [[s + " ", y] for s, y in rows])
            self.counted("sst2", split, len(rows))

    # --- MRPC / QQP / STS-B: synonym substitutions
    def mrpc(self):
        for split, n, rng, vocab in self.splits("mrpc"):
            rows = []
            for para in balanced(n, (True, False), (3, 2)):
                s1, s2 = paraphrase_pair(rng, vocab, para, MRPC_SHAPES, tokenized=True)
                rows.append((int(para), rng.randrange(100_000, 4_000_000), rng.randrange(100_000, 4_000_000), s1, s2))
            rows = shuffled(rng, rows)
            path = self.root / "MRPC" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                    [[i, *row[1:]] for i, row in enumerate(rows)])
            else:
                tsv(path, ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], rows, bom=True)
            self.counted("mrpc", split, len(rows))

    def qqp(self):
        for split, n, rng, vocab in self.splits("qqp"):
            rows = []
            for dup in balanced(n, (True, False), (2, 3)):
                rows.append((*paraphrase_pair(rng, vocab, dup, QQP_SHAPES, tokenized=False), int(dup)))
            rows = shuffled(rng, rows)
            base = rng.randrange(10_000, 300_000)
            path = self.root / "QQP" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["id", "question1", "question2"], [[i, q1, q2] for i, (q1, q2, _) in enumerate(rows)])
            else:
                tsv(path, ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                    [[base + i, 2 * (base + i) + 1, 2 * (base + i) + 2, q1, q2, y]
                     for i, (q1, q2, y) in enumerate(rows)])
            self.counted("qqp", split, len(rows))

    def stsb(self):
        for split, n, rng, vocab in self.splits("stsb"):
            rows = []
            for matched in balanced(n, (0, 1, 2, 3, 4)):
                s1, s2 = similarity_pair(rng, vocab, matched)
                score = min(5.0, max(0.0, 5 * matched / 4 + rng.uniform(-0.4, 0.4)))
                text = f"{score:.3f}" if rng.random() < 0.35 else f"{round(score, 1):g}"
                genre, filename, year = rng.choice(STSB_SOURCES)
                rows.append([genre, filename, year, f"{rng.randrange(1, 9999):04d}", "none", "none", s1, s2, text])
            rows = shuffled(rng, rows)
            header = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                      "sentence2", "score"]
            path = self.root / "STS-B" / f"{split}.tsv"
            if split == "test":
                tsv(path, header[:-1], [[i, *row[:-1]] for i, row in enumerate(rows)])
            else:
                tsv(path, header, [[i, *row] for i, row in enumerate(rows)])
            self.counted("stsb", split, len(rows))

    # --- entailment tasks: hypernyms (and, in MNLI, sentiment verdicts)
    def mnli(self):
        prompt = 100_000
        for split, n, rng, vocab in self.splits("mnli"):
            groups = {"train": [("train", MNLI_MATCHED)],
                      "dev": [("dev_matched", MNLI_MATCHED), ("dev_mismatched", MNLI_MISMATCHED)],
                      "test": [("test_matched", MNLI_MATCHED), ("test_mismatched", MNLI_MISMATCHED)]}[split]
            for name, genres in groups:
                rows = []
                for i, (scheme, member) in enumerate(balanced(n, NLI_CELLS)):
                    genre = rng.choice(sorted(genres))
                    frames = genres[genre]
                    if (i // len(NLI_CELLS)) % 3 == 2:  # a third of the pairs (of every cell) are about sentiment
                        word, verdict = sentiment_pair(rng, vocab, member)
                        p_fill, h_fill = nli_phrases(scheme, word, verdict)
                        frame = rng.choice(frames["sentiment_exist" if scheme == "exist" else "sentiment"])
                        thing = rng.choice(lex.EXPERIENCES)[0]
                        premise, hyp = (frame.format(thing=thing, adj=f) for f in (p_fill, h_fill))
                    else:
                        x, cat = taxonomy_pair(rng, vocab, member)
                        p_fill, h_fill = nli_phrases(scheme, x, cat)
                        frame = rng.choice(frames["exist" if scheme == "exist" else "only"])
                        place = rng.choice(lex.PLACES)
                        premise, hyp = (frame.format(np=a(f), place=place) for f in (p_fill, h_fill))
                    rows.append((genre, premise, hyp, NLI_LABELS[scheme, member]))
                rows = shuffled(rng, rows)
                table = []
                for i, (genre, s1, s2, label) in enumerate(rows):
                    prompt += rng.randrange(1, 40)
                    parses = [binary_parse(s1), binary_parse(s2), flat_parse(s1), flat_parse(s2)]
                    if split == "test":
                        table.append([i, prompt, prompt, genre, *parses, s1, s2])
                    elif split == "train":
                        table.append([i, prompt, f"{prompt}{label[0]}", genre, *parses, s1, s2, label, label])
                    else:
                        table.append([i, prompt, f"{prompt}{label[0]}", genre, *parses, s1, s2,
                                      *annotators(rng, label), label])
                header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                          "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
                if split == "train":
                    header += ["label1", "gold_label"]
                elif split == "dev":
                    header += ["label1", "label2", "label3", "label4", "label5", "gold_label"]
                tsv(self.root / "MNLI" / f"{name}.tsv", header, table)
                self.counted("mnli", name, len(table))

    def snli(self):
        for split, n, rng, vocab in self.splits("snli"):
            records = []
            for scheme, member in balanced(n, NLI_CELLS):
                x, cat = taxonomy_pair(rng, vocab, member)
                p_fill, h_fill = nli_phrases(scheme, x, cat)
                frame = rng.choice(SNLI_FRAMES["exist" if scheme == "exist" else "only"])
                who, place = rng.choice(lex.PEOPLE), rng.choice(lex.PLACES)
                premise, hyp = (say(frame, who=who, place=place, np=a(f)) for f in (p_fill, h_fill))
                records.append((premise, hyp, NLI_LABELS[scheme, member]))
            records = shuffled(rng, records)
            lines = []
            for premise, hyp, label in records:
                caption = f"{rng.randrange(10**8, 10**10)}.jpg#{rng.randrange(5)}"
                votes = annotators(rng, label) if split != "train" else [label]
                gold = label
                if rng.random() < 0.02:  # annotators without a majority: the official gold label is "-"
                    votes, gold = no_consensus(rng), "-"
                lines.append(json.dumps({
                    "annotator_labels": votes, "captionID": caption, "gold_label": gold,
                    "pairID": f"{caption}r1{label[0]}", "sentence1": premise,
                    "sentence1_binary_parse": binary_parse(premise), "sentence1_parse": flat_parse(premise),
                    "sentence2": hyp, "sentence2_binary_parse": binary_parse(hyp), "sentence2_parse": flat_parse(hyp),
                }))
            self.counted("snli", split, len(lines))
            write_text(self.root / "snli_1.0" / f"snli_1.0_{split}.jsonl", "\n".join(lines) + "\n")

    def qnli(self):
        for split, n, rng, vocab in self.splits("qnli"):
            rows = []
            for member in balanced(n, (True, False)):
                x, cat = taxonomy_pair(rng, vocab, member)
                p = person(rng)
                kw = dict(cat=cat, ax=a(x), place=rng.choice(lex.PLACES), time=rng.choice(lex.TIMES))
                question = say(rng.choice(QNLI_QUESTIONS), p, **kw)
                sentence = say(rng.choice(QNLI_SENTENCES), p, **kw)
                rows.append((question, sentence, "entailment" if member else "not_entailment"))
            rows = shuffled(rng, rows)
            path = self.root / "QNLI" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "question", "sentence"], [[i, q, s] for i, (q, s, _) in enumerate(rows)])
            else:
                tsv(path, ["index", "question", "sentence", "label"], [[i, *row] for i, row in enumerate(rows)])
            self.counted("qnli", split, len(rows))

    def rte(self):
        for split, n, rng, vocab in self.splits("rte"):
            rows = []
            for member in balanced(n, (True, False)):
                cat1, cat2, cat3 = rng.sample(lex.CATEGORIES, 3)
                x1, x2 = rng.choice(vocab.members[cat1.name]), rng.choice(vocab.members[cat2.name])
                asked = rng.choice((cat1, cat2)) if member else cat3
                p = person(rng)
                kw = dict(ax1=a(x1), ax2=a(x2), place=rng.choice(lex.PLACES), time=rng.choice(lex.TIMES),
                          village=rng.choice(lex.VILLAGES), acat=a(asked.name))
                premise = " ".join(say(t, p, **kw) for t in rng.choice(RTE_PREMISES))
                rows.append((premise, say(rng.choice(RTE_HYPOTHESES), p, **kw),
                             "entailment" if member else "not_entailment"))
            rows = shuffled(rng, rows)
            path = self.root / "RTE" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "sentence1", "sentence2"], [[i, s1, s2] for i, (s1, s2, _) in enumerate(rows)])
            else:
                tsv(path, ["index", "sentence1", "sentence2", "label"], [[i, *row] for i, row in enumerate(rows)])
            self.counted("rte", split, len(rows))

    def scitail(self):
        for split, n, rng, vocab in self.splits("scitail"):
            rows = []
            for member in balanced(n, (True, False)):
                x, cat_name = taxonomy_pair(rng, vocab, member)
                cat = lex.category(cat_name)
                fact_pl, fact_sg = rng.choice(cat.facts)
                premise = say(rng.choice(SCITAIL_PREMISES), plural=cat.plural, fact=fact_pl)
                hyp = say(rng.choice(SCITAIL_HYPOTHESES), ax=a(x), x=x, fact=fact_sg)
                rows.append((premise, hyp, "entails" if member else "neutral"))
            tsv(self.root / "SciTailV1.1" / "tsv_format" / f"scitail_1.0_{split}.tsv", None, shuffled(rng, rows))
            self.counted("scitail", split, len(rows))

    # --- multiple choice
    def race(self):
        for split, n, rng, vocab in self.splits("race"):
            questions = 0
            for level in ("middle", "high"):
                for number in range(1, n + 1):
                    article = race_article(rng, vocab, level)
                    article["id"] = f"{level}{number}.txt"
                    questions += len(article["questions"])
                    write_text(self.root / "RACE" / split / level / f"{number}.txt", json.dumps(article))
            self.counted("race", split, questions)  # examples are questions: 3 per middle, 6 per high article

    def storycloze(self):
        names = {"train": "cloze_test_val__spring2016 - cloze_test_ALL_val.csv",
                 "test": "cloze_test_test__spring2016 - cloze_test_ALL_test.csv"}
        for split, n, rng, vocab in self.splits("storycloze"):
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")  # RFC-4180 quoting: only fields that need it
            writer.writerow(["InputStoryid", "InputSentence1", "InputSentence2", "InputSentence3", "InputSentence4",
                             "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding"])
            for kind, right_first in shuffled(rng, zip(balanced(n, ("sentiment", "taxonomy")),
                                                       balanced(n, (1, 1, 2, 2)))):
                story, right, wrong = cloze_story(rng, vocab, kind)
                endings = [right, wrong] if right_first == 1 else [wrong, right]
                writer.writerow([uuid(rng), *story, *endings, right_first])
            write_text(self.root / "StoryCloze" / names[split], buf.getvalue().rstrip("\n"))
            self.counted("storycloze", split, n)


# ------------------------------------------------------------------------------------------ task example makers
SST2_SHAPES = ("the {part1} is {adj1} .", "a {adj1} , {adj2} {work} .", "{adj1} and {adj2} .",
               "the {work}'s {part1} is {adj1} and the {part2} is {adj2} .", "it's a {adj1} {work} .",
               "{adj1} {part1}", "what a {adj1} {work} !", "the {part1} feels {adj1} , the {part2} {adj2}",
               "an {adj1} , {adj2} piece of work", "{adj1} from start to finish .")

COLA_GOOD_BAD = {  # family -> (acceptable templates, unacceptable templates); each surface shape occurs in both
    "gs01": (("{n} {intrans} {adv}.", "{n} {trans} {the_obj} {adv}."),  # subcategorisation
             ("{n} {intrans} {the_obj} {adv}.", "{n} {needs_object} {adv}.")),
    "gs02": (("{n} {trans} {the_obj}.",), ("{n} {trans} {the_adj}{verb_as_noun}.", "{n} {noun} {the_obj}.")),
    "gs03": (("{n} saw {a_x} {place}.",), ("{n} saw {a_adj} {place}.", "{n} saw {a_verb} {place}.")),
    "gs04": (("The {obj} was {adj}.",), ("The {obj} was {noun}.",)),
    "gs05": (("{n} {intrans} and then {intrans2}.",), ("{n} {intrans} and then {noun}.",)),
}


def cola_sentence(rng: random.Random, vocab: lex.Vocabulary, ok: bool) -> tuple[str, str]:
    """An acceptable sentence, or one whose only fault is a word of the wrong class or subcategorisation."""
    family = rng.choice(sorted(COLA_GOOD_BAD))
    verbs = [w for s in vocab.synonyms["verb"] for w in s.forms("past")]
    needs_object = [w for s in vocab.synonyms["verb"] if s.needs_object for w in s.forms("past")]
    objs = [w for s in vocab.synonyms["obj"] for w in s.words]
    adjs = [w for s in vocab.synonyms["adj"] for w in s.words] + [w for ws in vocab.sentiment.values() for w in ws]
    members = [x for c in lex.CATEGORIES for x in vocab.members[c.name]]
    obj, noun = rng.sample(objs, 2)
    adj = rng.choice(adjs)
    intrans, intrans2 = rng.sample(vocab.intransitive, 2)
    with_adj = rng.random() < 0.5
    kw = dict(intrans=intrans, intrans2=intrans2, adv=rng.choice(lex.ADVERBIALS), trans=rng.choice(verbs),
              needs_object=rng.choice(needs_object), verb_as_noun=rng.choice(verbs), noun=noun, obj=obj, adj=adj,
              place=rng.choice(lex.PLACES), the_obj=f"the {adj} {obj}" if with_adj else f"the {obj}",
              the_adj=f"the {adj} " if with_adj else "the ", a_x=a(rng.choice(members)), a_adj=a(adj),
              a_verb=a(rng.choice(verbs)))
    good, bad = COLA_GOOD_BAD[family]
    return family, say(rng.choice(good if ok else bad), person(rng), **kw)


SLOTS = ("verb", "adj", "obj", "place")
MRPC_SHAPES = ("{n} {verb} the {adj} {obj} near the {place}.", "{time}, {n} {verb} the {adj} {obj} by the {place}.",
               "Near the {place}, {n} {verb} the {adj} {obj} {time}.", "{n} {verb} the {adj} {obj} beside the {place} "
               "{time}, {m} said.")
QQP_SHAPES = ("Why did {n} {verb_base} the {adj} {obj} near the {place}?", "How did {n} {verb_base} the {adj} {obj} "
              "by the {place}?", "Where can I {verb_base} {a_adj} {obj} near the {place}?",
              "Who {verb} the {adj} {obj} by the {place}?", "What is the best way to {verb_base} {a_adj} {obj} near "
              "the {place}?")


def slot_sets(vocab: lex.Vocabulary, slot: str) -> tuple:
    return vocab.synonyms["verb" if slot == "verb" else slot]


def fill_slots(rng: random.Random, vocab: lex.Vocabulary) -> dict:
    """One synonym set per slot (verb, adj, obj, place) and a member of each."""
    chosen = {}
    for slot in SLOTS:
        group = rng.choice(slot_sets(vocab, slot))
        chosen[slot] = (group, rng.randrange(len(group.words)))
    return chosen


def replace_slot(rng: random.Random, vocab: lex.Vocabulary, group: lex.SynonymSet, index: int, synonym: bool):
    """Another member of the same set (synonym) or a member of another set of the same kind."""
    if synonym:
        return group, rng.choice([i for i in range(len(group.words)) if i != index])
    other = rng.choice([g for g in slot_sets(vocab, "verb" if group.pos == "verb" else group.pos) if g is not group])
    return other, rng.randrange(len(other.words))


def render(shape: str, chosen: dict, p: Person, m: Person, time_: str) -> str:
    kw = {slot: chosen[slot][0].forms("past")[chosen[slot][1]] for slot in SLOTS}
    kw["verb_base"] = chosen["verb"][0].forms("base")[chosen["verb"][1]]
    kw["a_adj"] = a(kw["adj"])
    return say(shape, p, time=time_, m=m.name, **kw)


def paraphrase_pair(rng, vocab, paraphrase: bool, shapes: tuple, tokenized: bool) -> tuple[str, str]:
    """Same shape, 1-4 slots changed; all changes synonyms iff `paraphrase` (so the count of changes says nothing)."""
    first = fill_slots(rng, vocab)
    changed = rng.sample(SLOTS, rng.randint(1, 4))
    wrong = set() if paraphrase else set(rng.sample(changed, rng.randint(1, len(changed))))
    second = dict(first)
    for slot in changed:
        second[slot] = replace_slot(rng, vocab, *first[slot], synonym=slot not in wrong)
    p, m = person(rng), person(rng)
    shape, time_ = rng.choice(shapes), rng.choice(lex.TIMES)
    s1, s2 = render(shape, first, p, m, time_), render(shape, second, p, m, time_)
    return (ptb(s1), ptb(s2)) if tokenized else (s1, s2)


STSB_SOURCES = (("main-captions", "MSRvid", "2012test"), ("main-captions", "images", "2014"),
                ("main-news", "headlines", "2013"), ("main-forum", "deft-forum", "2014"))
STSB_SHAPES = ("{n} {verb} the {adj} {obj} near the {place}.", "{n} {verb} {a_adj} {obj} on the {place}.",
               "Near the {place}, {n} {verb} the {adj} {obj}.")


def similarity_pair(rng, vocab, matched: int) -> tuple[str, str]:
    """Every slot changes; `matched` of the four change to a synonym, the rest to another set's word."""
    first = fill_slots(rng, vocab)
    same = set(rng.sample(SLOTS, matched))
    second = {slot: replace_slot(rng, vocab, *first[slot], synonym=slot in same) for slot in SLOTS}
    p = person(rng)
    shape = rng.choice(STSB_SHAPES)
    return render(shape, first, p, p, ""), render(shape, second, p, p, "")


# MNLI: each genre has its own frames; {np} a noun phrase, {adj} an adjective or verdict, {thing} something judged.
MNLI_MATCHED = {
    "fiction": {"exist": ("Anna saw {np} {place} that evening.", "There was {np} {place}, Tom remembered."),
                "only": ("The only thing Anna saw {place} was {np}.", "All that Tom brought home was {np}."),
                "sentiment": ("Mia thought the {thing} was {adj}.", "The {thing} Ben remembered was {adj}."),
                "sentiment_exist": ("At least one {thing} that year was {adj}, Mia said.",)},
    "government": {"exist": ("The survey recorded {np} at the site {place}.", "Inspectors reported {np} on the "
                             "property."),
                   "only": ("The only item listed in the report was {np}.", "The inventory held a single entry, "
                            "{np}."),
                   "sentiment": ("The committee described the {thing} as {adj}.",),
                   "sentiment_exist": ("At least one {thing} reviewed by the committee was {adj}.",)},
    "slate": {"exist": ("The column mentions {np} in passing.", "Among other things, the essay describes {np}."),
              "only": ("The sole subject of the column is {np}.",),
              "sentiment": ("The critic calls the {thing} {adj}.", "Readers agree that the {thing} is {adj}."),
              "sentiment_exist": ("At least one {thing} the critic saw this year was {adj}.",)},
    "telephone": {"exist": ("yeah we saw {np} out {place} last week", "oh i think there was {np} {place}"),
                  "only": ("the only thing we ever saw out there was {np}",),
                  "sentiment": ("i thought the {thing} was {adj} you know", "well the {thing} was {adj}"),
                  "sentiment_exist": ("at least one {thing} we had was {adj}",)},
    "travel": {"exist": ("Visitors {place} can often see {np}.", "The walking tour {place} passes {np}."),
               "only": ("The only attraction {place} is {np}.",),
               "sentiment": ("Guidebooks describe the {thing} as {adj}.", "Locals say the {thing} is {adj}."),
               "sentiment_exist": ("At least one {thing} on the tour is {adj}.",)},
}
MNLI_MISMATCHED = {
    "facetoface": {"exist": ("well I saw {np} {place} the other day",), "only": ("the only thing I saw was {np}",),
                   "sentiment": ("I thought the {thing} was {adj}",),
                   "sentiment_exist": ("at least one {thing} there was {adj}",)},
    "letters": {"exist": ("Dear friend, this week I saw {np} {place}.",),
                "only": ("Dear friend, the only thing I saw {place} was {np}.",),
                "sentiment": ("Dear friend, the {thing} was {adj}.",),
                "sentiment_exist": ("Dear friend, at least one {thing} this week was {adj}.",)},
    "nineeleven": {"exist": ("The commission noted {np} near the scene.",),
                   "only": ("The only object recovered was {np}.",),
                   "sentiment": ("Witnesses called the {thing} {adj}.",),
                   "sentiment_exist": ("At least one {thing} that day was {adj}, witnesses said.",)},
    "oup": {"exist": ("The textbook shows a picture of {np}.",), "only": ("The only example in the chapter is {np}.",),
            "sentiment": ("The author considers the {thing} {adj}.",),
            "sentiment_exist": ("At least one {thing} in the chapter is {adj}.",)},
    "verbatim": {"exist": ("Caller: I saw {np} {place}.",), "only": ("Caller: The only thing I saw was {np}.",),
                 "sentiment": ("Caller: The {thing} was {adj}.",),
                 "sentiment_exist": ("Caller: At least one {thing} was {adj}.",)},
}
SNLI_FRAMES = {"exist": ("{who} is holding {np} {place}.", "{who} is looking at {np} {place}.",
                         "{who} is drawing {np} {place}.", "{who} points at {np} {place}."),
               "only": ("{who} {place} is holding {np} and nothing else.", "The only thing {who} is looking at "
                        "{place} is {np}.", "{who} is drawing {np} and nothing else {place}.")}
QNLI_QUESTIONS = ("Which {cat} did {n} see {place}?", "What kind of {cat} did {n} notice {time}?",
                  "Which {cat} was {place} {time}?", "Name the {cat} that {n} spotted {place}.")
QNLI_SENTENCES = ("{n} saw {ax} {place} {time}.", "{time}, {n} noticed {ax} {place}.",
                  "{place}, {n} spotted {ax} and pointed it out.")
RTE_PREMISES = (("{n} walked {place} {time}.", "There {he} saw {ax1} and {ax2}.", "Later {he} went home to {village}."),
                ("{time}, {n} took a walk {place}.", "{He} spotted {ax1}, and some time later {ax2}.",
                 "{He} told the whole family about it."),
                ("The people of {village} say that {ax1} can be seen {place}.", "{n} claims to have seen {ax2} there too."))
RTE_HYPOTHESES = ("{n} saw {acat}.", "There was {acat} {place}.", "{n} spotted {acat}.")
SCITAIL_PREMISES = ("All {plural} {fact}.", "{plural} {fact}, as every student of nature learns.",
                    "Scientists agree that all {plural} {fact}.")
SCITAIL_HYPOTHESES = ("{ax} {fact}.", "Every {x} {fact}.")


NLI_LABEL_NAMES = ("entailment", "neutral", "contradiction")


def annotators(rng: random.Random, gold: str) -> list[str]:
    """Five annotator labels with `gold` in the majority (3-5 votes), in random order."""
    agree = rng.choice((3, 4, 4, 5, 5, 5))
    votes = [gold] * agree + [rng.choice([x for x in NLI_LABEL_NAMES if x != gold]) for _ in range(5 - agree)]
    rng.shuffle(votes)
    return votes


def no_consensus(rng: random.Random) -> list[str]:
    first, second, third = rng.sample(NLI_LABEL_NAMES, 3)
    votes = [first, first, second, second, third]
    rng.shuffle(votes)
    return votes


def cloze_story(rng: random.Random, vocab: lex.Vocabulary, kind: str) -> tuple[list[str], str, str]:
    """Four sentences and (right, wrong) endings: the right one fits a sentiment adjective or a hyponym."""
    p, m = person(rng), person(rng)
    if kind == "sentiment":
        pol = rng.choice(("positive", "negative"))
        other = "negative" if pol == "positive" else "positive"
        thing, experience = rng.choice(lex.EXPERIENCES)
        kw = dict(experience=experience, thing=thing, adj=rng.choice(vocab.sentiment[pol]), m=m.name,
                  time=rng.choice(lex.TIMES))
        story = [say(t, p, **kw) for t in (
            "{n} {experience} {time}.", rng.choice(("{He} had been looking forward to it all week.",
                                                    "{His} friend {m} came along.", "It was the first time.")),
            "{He} thought the {thing} was {adj}.", rng.choice(("{He} told {m} about it.", "Then {he} went home.")))]
        right, wrong = (say("{n} " + rng.choice(lex.REACTIONS[q]) + ".", p) for q in (pol, other))
    else:
        cat, other = rng.sample(lex.CATEGORIES, 2)
        kw = dict(place=rng.choice(lex.PLACES), time=rng.choice(lex.TIMES), ax=a(rng.choice(vocab.members[cat.name])))
        story = [say(t, p, **kw) for t in (
            "{n} went out {place} {time}.", "{He} was hoping to see something new.", "Then {he} spotted {ax}.",
            rng.choice(("{He} watched it for a long time.", "After a while, {he} walked on.")))]
        right, wrong = (say("{n} said it was the finest {c} {he} had ever seen.", p, c=c.name) for c in (cat, other))
    return story, right, wrong


def uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


RACE_LOOKS = ("{He} looked at the {x} for a while.", "{He} had never seen such a fine {x}.",
              "{He} stopped to look at the {x} more closely.", "{He} told {his} family about the {x} later.")


def race_article(rng: random.Random, vocab: lex.Vocabulary, level: str) -> dict:
    """A short article (about 55-85 words) and 3-5 four-option questions answerable from it plus word meaning."""
    p = person(rng)
    cats = rng.sample(lex.CATEGORIES, 4)
    seen = cats[:2] if level == "high" else cats[:1]
    xs = [rng.choice(vocab.members[c.name]) for c in seen]
    places = rng.sample(lex.PLACES, 4)
    pol = rng.choice(("positive", "negative"))
    thing, experience = rng.choice(lex.EXPERIENCES)
    kw = dict(village=rng.choice(lex.VILLAGES), time=rng.choice(lex.TIMES), thing=thing, experience=experience,
              adj=rng.choice(vocab.sentiment[pol]))
    paragraphs = [[say("{n} lives in {village} with {his} family.", p, **kw),
                   say("{time}, {he} went for a long walk.", p, **kw)]]
    for x, place in zip(xs, places):
        # nothing but the word itself tells its category: a scene ("it spread its wings") would give the answer away
        paragraphs.append([say("{place}, {he} saw {ax}.", p, place=place, ax=a(x)),
                           say(rng.choice(RACE_LOOKS), p, x=x)])
    paragraphs.append([say("In the evening {he} {experience}.", p, **kw), say("The {thing} was {adj}.", p, **kw)])
    filler = ["{He} walked slowly and looked at everything.", "The weather was mild.",
              "{He} wrote about the day in {his} diary.", "{His} family listened to every word."]
    article = [list(sentences) for sentences in paragraphs]
    while len(words(" ".join(" ".join(s) for s in article))) < rng.randint(55, 70) and filler:
        article[-1].append(say(filler.pop(rng.randrange(len(filler))), p))
    text = "\n".join(" ".join(s) for s in article)

    questions = []
    for i, (x, cat) in enumerate(zip(xs, seen)):
        where = places[i]
        options = [c.name for c in cats]
        questions.append((rng.choice(("What kind of thing did {n} see {where}?", "{n} saw _ {where}.")),
                          [a(o) for o in options], a(cat.name), dict(where=where.lower())))
        if level == "high":
            questions.append(("Where did {n} see {acat}?", [pl.capitalize() for pl in places],
                              where.capitalize(), dict(acat=a(cat.name))))
    moods = {"positive": "{He} liked it very much.", "negative": "{He} did not like it at all."}
    questions.append(("What did {n} think of the {thing}?",
                      [moods["positive"], moods["negative"], "{He} never saw it.", "{He} sold it at the market."],
                      moods[pol], dict(thing=thing)))
    unseen = [c for c in lex.CATEGORIES if c not in seen]
    truth = rng.choice(seen)
    questions.append(("Which of the following is true?",
                      [f"{{n}} saw {a(c.name)}." for c in [truth, *rng.sample(unseen, 3)]],
                      f"{{n}} saw {a(truth.name)}.", {}))
    out = {"answers": [], "options": [], "questions": []}
    for question, options, right, slots in questions:
        options = shuffled(rng, options)
        out["answers"].append("ABCD"[options.index(right)])
        out["options"].append([say(o, p, **slots) for o in options])
        out["questions"].append(say(question, p, **slots))
    out["article"] = text
    return out


# --------------------------------------------------------------------------------------------------- entry point
def write_sample_data(out_dir: str | Path, seed: int = 0) -> dict:
    """Write the books and all 12 tasks under `out_dir`; returns (and saves as sample_data.json) a summary."""
    out = Path(out_dir)
    start = time.perf_counter()
    books = write_books(out, seed)
    counts = TaskWriter(out, seed).write_all()
    summary = {
        "seed": seed,
        "generator_version": GENERATOR_VERSION,
        "books": books,
        "tasks": counts,
        "lexicon": {half: lexicon_summary(lex.vocabulary(half)) for half in ("train", "eval")},
    }
    write_json(out / "sample_data.json", summary)
    seconds = time.perf_counter() - start
    log.info("sample data in %s: %d books (%.1f MB, %.1f MB/s), %d task examples, %.1f s", out, books["files"],
             books["bytes"] / 1e6, books["bytes"] / 1e6 / max(seconds, 1e-9),
             sum(sum(v.values()) for v in counts.values()), seconds)
    return summary


def lexicon_summary(vocab: lex.Vocabulary) -> dict:
    return {"sentiment": vocab.sentiment, "members": vocab.members, "intransitive": vocab.intransitive,
            "synonyms": {pos: [list(s.forms("base")) for s in sets] for pos, sets in vocab.synonyms.items()}}


def add_sample_data_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="output directory (books/ and tasks/ go here)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; the same seed writes identical files")


def run_sample_data(args: argparse.Namespace) -> int:
    summary = write_sample_data(args.out, seed=args.seed)
    print(f"wrote {args.out}/books: {summary['books']['files']} books, {summary['books']['bytes'] / 1e6:.2f} MB")
    for task, splits in summary["tasks"].items():
        print(f"wrote {args.out}/tasks {task}: " + ", ".join(f"{k} {v}" for k, v in splits.items()))
    return 0
