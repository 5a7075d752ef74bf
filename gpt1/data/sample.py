"""Deterministic offline sample data: a book-like corpus and the paper's 12 tasks in their official file layouts.

`gpt1 sample-data --out DIR [--seed N]` (or `write_sample_data(DIR, seed)`) writes, in a few seconds:

    DIR/books/*.txt          ~2.5 MB of generated "books" (chapters of paragraphs, one paragraph per line)
    DIR/tasks/<TASK>/...     CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE snli_1.0 SciTailV1.1 RACE StoryCloze
    DIR/sample_data.json     what was written: example counts per split, the lexicon halves

The same seed gives byte-identical files. The smoke preset pre-trains and fine-tunes on this data, so it is built
to show the paper's central claim on a tiny model: pre-training on the books makes fine-tuning generalise.

Design: the meaning is in the books, the held-out words are in the dev sets
---------------------------------------------------------------------------
Every label follows from a property of words (`gpt1.data.sample_lexicon`): the polarity of an adjective, whether
a noun names an animal or a plant, whether a verb takes an object. Each word list is split once, by position, into
a *train* half and an *eval* half. Task train splits use only train-half words; dev and test splits only eval-half
words. A model fine-tuned from scratch has never seen an eval-half word with a label and has random embeddings for
it, so it stays near chance on dev. The books use both halves in the same consistent contexts, so a language model
trained on them places each eval word next to the train words that share its meaning, and the fine-tuned
classifier carries over:

* polarity: an adjective appears only beside reactions, outcomes and moods of its own polarity ("a dreadful mess.
  Sadly, she groaned.") -> SST-2, MRPC, QQP, STS-B, RACE, Story Cloze.
* kind: members of four categories (birds and fish are animals; trees and flowers are plants) with the actions,
  facts and care of their kind ("the heron flew", "a heron is a bird, and every bird is an animal", "she fed the
  heron", "she watered the oak") -> MNLI, SNLI, QNLI, RTE, SciTail, STS-B, RACE, Story Cloze.
* subcategorisation: intransitive verbs never take an object, transitive verbs always do -> CoLA (unacceptable =
  an intransitive verb with an object, a transitive one without, or a word of the wrong class in a slot).

Each task asks about one property, always in the same direction
--------------------------------------------------------------
A pair task could ask whether two words *agree* (is the heron in the hypothesis' category? do the two adjectives
share a polarity?). That is an interaction between two positions, and measured on this data it is out of reach of
the smoke budget: with a pre-trained model that knows every word's polarity, "does the hypothesis' verdict (good /
bad) match the premise's adjective" stayed at chance after 6 epochs, and category agreement over ten categories
was not even fitted on the train split in 3 epochs. So every task here asks about one word's property, in one
direction, and the other sentence only sets the scene: entailment asks whether the premise's noun is an *animal*
(the hypothesis always says "an animal"), paraphrase whether the restatement keeps the first sentence's praise
(MRPC, STS-B) or complaint (QQP), QA and Story Cloze for the option that names an animal or the ending that is
happy. A classifier then needs one direction in the pre-trained states, which held-out words share with train
words: measured at the smoke budget, 97-100% on dev across seeds when the language model has learnt the words.

Pairs are built so that surface form alone does not reveal the label: in NLI every frame holds both labels of its
scheme ("exist" frames: entailment / neutral; "only" frames: entailment / contradiction), and MNLI
dev_mismatched uses genres and frames that train never shows.

Choices where the spec was silent
---------------------------------
* Labels are balanced (exactly, by construction) except CoLA (60% acceptable; real 70%), MRPC (60% paraphrase;
  real 68%) and QQP (40% duplicate; real 37%), which keep the real skew's direction, milder.
* The books are written one paragraph per line, as BooksCorpus is (no column wrapping).
* SNLI, SciTail and Story Cloze test files carry labels (as the official ones do); GLUE test files do not.
  Story Cloze "val" is the training file (train-half words) and "test" the evaluation file (eval-half words).
* Parse columns (MNLI, SNLI) are well-formed but naive: a right-branching binary parse and a flat tagged parse.
* Official quirks are kept: MRPC BOM, SST-2 trailing space before the TAB, CoLA dev / RACE / Story Cloze files
  without a final newline, SNLI rows with gold_label "-" (about 2%), STS-B scores formatted both "3.800" and "3.8".
* Re-running into the same directory overwrites the same file names; nothing else is removed.
"""

from __future__ import annotations

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
SIZES = {  # examples per split (RACE: articles per level; 3 questions per middle, 4 per high article)
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
    "race": {"train": 30, "dev": 12, "test": 12},
    "storycloze": {"train": 400, "test": 200},
}
BOOKS = 10
BOOK_CHARS = 250_000  # per book on average -> ~2.5 MB in all
POLARITIES = ("positive", "negative")
FEEL = {"loved": "love", "praised": "praise", "enjoyed": "enjoy", "hated": "hate", "disliked": "dislike",
        "grumbled about": "grumble about"}  # base forms of lexicon.FEELINGS
KINDS = ("animal", "plant")


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


def other(polarity: str) -> str:
    return "negative" if polarity == "positive" else "positive"


# ------------------------------------------------------------------------------------------------------ books
class Storyteller:
    """Paragraph generators for the books. Each scene teaches one property through consistent contexts; all use
    the whole lexicon (both halves) the same way."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def paragraph(self) -> str:
        scene = self.rng.choices(self.SCENES, weights=self.WEIGHTS)[0]
        return " ".join(scene(self, person(self.rng)))

    def polar(self, p: Person, pol: str) -> dict:
        """Slots of one polarity: three adjectives, an outcome, a reaction, a mood, an opener, a verdict."""
        r = self.rng
        adj1, adj2, adj3 = r.sample(lex.POSITIVE if pol == "positive" else lex.NEGATIVE, 3)
        m = person(r, avoid=p.name)
        return dict(adj1=adj1, adj2=adj2, adj3=adj3, a_adj1=a(adj1), m=m.name,
                    reaction=r.choice(lex.REACTIONS[pol]).format(his=p.his),
                    other=r.choice(lex.REACTIONS[pol]).format(his=m.his), mood=r.choice(lex.MOODS[pol]),
                    outcome=r.choice(lex.OUTCOMES[pol]), verdict=lex.VERDICT[pol], time=r.choice(lex.TIMES),
                    opener=r.choice(lex.OPENERS[pol]))

    # --- polarity
    def sentiment(self, p: Person) -> list[str]:
        thing, experience = self.rng.choice(lex.EXPERIENCES)
        kw = self.polar(p, self.rng.choice(POLARITIES))
        return [say(t, p, thing=thing, experience=experience, **kw) for t in self.rng.choice(self.SENTIMENT_SHAPES)]

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
        pol = r.choice(POLARITIES)
        part1, part2 = r.sample(lex.REVIEW_PARTS, 2)
        kw = dict(part1=part1, part2=part2, work=r.choice(lex.REVIEWED), village=r.choice(lex.VILLAGES),
                  review=lex.REVIEW[pol], **self.polar(p, pol))
        return [say(t, p, **kw) for t in r.choice(self.REVIEW_SHAPES)]

    REVIEW_SHAPES = (
        ("{n} wrote about the new {work} for the {village} newspaper.", "{He} called the {part1} {adj1} and the "
         "{part2} {adj2}.", "The review was very {review}: a {adj3} {outcome}, {he} wrote."),
        ("The {work} opened in {village} {time}.", "The {part1} was {adj1}, and the {part2} was {adj2}.",
         "{opener}, {n} {reaction} all through it.", "{His} review was very {review}: a {verdict} {work}, {he} said."),
        ("'The {part1} is {adj1},' wrote {n}, 'and the {part2} is {adj2}.'", "It was a very {review} review, "
         "and {m} agreed that it was a {verdict} {work}."),
    )

    def restatement(self, p: Person) -> list[str]:
        """Someone says it again in other words, with the same polarity (the paraphrase tasks' relation)."""
        r = self.rng
        thing, experience = r.choice(lex.EXPERIENCES)
        pol = r.choice(POLARITIES)
        felt = r.choice(lex.FEELINGS[pol])
        kw = dict(thing=thing, experience=experience, felt=felt, feel=FEEL[felt], **self.polar(p, pol))
        return [say(t, p, **kw) for t in r.choice(self.RESTATEMENT_SHAPES)]

    RESTATEMENT_SHAPES = (
        ("'The {thing} was {adj1},' said {n}.", "'You mean it was {adj2}?' asked {m}.",
         "'Yes, a {adj3} {outcome},' said {n}.", "{opener}, they both {other}."),
        ("Everyone {felt} the {thing} {time}.", "It was {adj1}, a {adj2} {outcome}, {n} said."),
        ("'Why did everyone {feel} the {thing}?' asked {n}.", "'Because it was so {adj1},' said {m}."),
        ("{n} {felt} the {thing}.", "In other words, it was {a_adj1} {outcome}, and {n} was {mood}."),
    )

    def occasion(self, p: Person) -> list[str]:
        """A day that goes well or badly, and how it is remembered (Story Cloze's endings)."""
        r = self.rng
        pol = r.choice(POLARITIES)
        first, second = r.sample(lex.HAPPENINGS[pol], 2)
        kw = dict(occasion=r.choice(lex.OCCASIONS), first=first, second=second, **self.polar(p, pol))
        return [say(t, p, **kw) for t in (
            "{n} went to the {occasion} {time}.", "At the {occasion}, {first}.", "Later {second}.",
            "It was a {adj1} day.", "{opener}, {n} {reaction}.")]

    # --- kind (animal or plant)
    def kind_slots(self, p: Person, cat: lex.Category | None = None) -> dict:
        r = self.rng
        cat = cat or r.choice(lex.CATEGORIES)
        kind = lex.KINDS[cat.kind]
        x, y = r.sample(cat.members, 2)
        z = r.choice([w for c in lex.CATEGORIES if c.kind == cat.kind for w in c.members if w not in (x, y)])
        kmod, kmod2 = (r.choice(kind.modifiers) for _ in range(2))
        kact, kact2 = r.sample(kind.actions, 2)
        fact_pl, fact_sg = r.choice(kind.facts)
        m = person(r, avoid=p.name)
        return dict(x=x, y=y, ax=a(x), ay=a(y), az=a(z), Ay=a(y).capitalize(), cat=cat.name, acat=a(cat.name),
                    kind=kind.name, akind=a(kind.name), kinds=kind.plural, fact_pl=fact_pl, fact_sg=fact_sg,
                    care=kind.care, kmod=kmod, a_kmod=a(kmod), kmod2=kmod2, a_kmod2=a(kmod2), kact=kact, kact2=kact2,
                    act=r.choice(cat.actions), m=m.name, place=r.choice(lex.PLACES), time=r.choice(lex.TIMES),
                    scene=r.choice(cat.scenes).format(x=x, n=p.name, his=p.his))

    def creature(self, p: Person) -> list[str]:
        kw = self.kind_slots(p)
        return [say(t, p, **kw) for t in self.rng.choice(self.CREATURE_SHAPES)]

    CREATURE_SHAPES = (  # kind cues right next to the member ("the hungry heron ate"), category and kind stated
        ("{n} went out {place} {time}.", "There {he} saw {a_kmod} {x}.", "The {x} {kact}, and then the {x} {act}.",
         "{ax} is {acat}, and every {cat} is {akind}."),
        ("'Look, {a_kmod} {x}!' cried {n}.", "'Is it {akind}?' asked {m}.", "'Yes,' said {n}. 'Every {x} is {akind}.'",
         "The {kmod2} {x} {kact}."),
        ("The {kmod} {x} {kact} {place}.", "{scene}.", "Like every {kind}, the {x} {fact_sg}."),
        ("{n} saw {ax}, {akind}, {place}.", "The {x} {kact}, as {kinds} do.", "The {kmod2} {x} {act}."),
        ("{time}, {n} spotted {a_kmod} {x} {place}.", "It was {akind}, of course, and {scene}."),
        ("{m} asked {n} what kind of thing {ax} was.", "'{ax} is {akind},' said {n}. 'It {fact_sg}, as every {kind} "
         "does.'"),
        ("There was {a_kmod} {x} {place}, and {a_kmod2} {y} beside it.", "Both were {kinds}.",
         "The {x} {kact} and the {y} {kact2}."),
        ("{n} {care} the {kmod} {x} {place}.", "The {x} {kact}, and {n} {care} the {y} too."),
        ("There were {kinds} {place}: {ax}, {ay} and {az}.", "The {kmod} {x} {kact}."),
    )

    def lesson(self, p: Person) -> list[str]:
        """General facts about a kind and what follows for its members (SciTail's premise and hypothesis)."""
        r = self.rng
        cat = r.choice(lex.CATEGORIES)
        other_cat = r.choice([c for c in lex.CATEGORIES if c.kind != cat.kind])
        z = r.choice(other_cat.members)
        teacher = r.choice(("Miss " + r.choice(lex.FEMALE_NAMES), "Mr " + r.choice(lex.MALE_NAMES)))
        kw = {**self.kind_slots(p, cat), "teacher": teacher, "az": a(z), "aother": a(other_cat.kind)}
        return [say(t, p, **kw) for t in (
            "In the schoolroom, {teacher} taught the children about {kinds}.", "'All {kinds} {fact_pl},' said {teacher}.",
            "'{ax} is {akind}, so {ax} {fact_sg}. {Ay} is {akind} too.'", "'And {az}?' asked {n}.",
            "'{az} is not {akind},' said {teacher}. 'It is {aother}.'")]

    def question(self, p: Person) -> list[str]:
        """A question about a kind and the answer that names one (QNLI's and RACE's questions)."""
        kw = self.kind_slots(p)
        return [say(t, p, **kw) for t in self.rng.choice((
            ("'Which {kind} did you see {place}?' asked {m}.", "'I saw {ax},' said {n}.", "'Did it {fact_pl}?'",
             "'Yes, all {kinds} {fact_pl}.'"),
            ("'What kind of thing is {ax}?' asked {n}.", "'{ax} is {akind},' said {m}, 'like {ay}.'"),
            ("Which {kind} grew or lived {place}?", "{ax} did, and {ay} too."),
        ))]

    def care(self, p: Person) -> list[str]:
        """Animals are fed and plants are watered (Story Cloze's endings)."""
        r = self.rng
        animal = self.kind_slots(p, r.choice([c for c in lex.CATEGORIES if c.kind == "animal"]))
        plant = self.kind_slots(p, r.choice([c for c in lex.CATEGORIES if c.kind == "plant"]))
        first, second = (animal, plant) if r.random() < 0.5 else (plant, animal)
        return [say(t, p, place=first["place"], time=first["time"], x1=first["x"], x2=second["x"],
                    care1=first["care"], care2=second["care"], akind1=first["akind"]) for t in (
            "{n} went {place} {time} with some bread and a can of water.", "{He} wanted to look after {akind1}.",
            "There {he} found the {x1} and the {x2}.", "{n} {care1} the {x1}, and then {he} {care2} the {x2}.")]

    def picture(self, p: Person) -> list[str]:
        """Scenes in a picture book, described as image captions are (SNLI's premises)."""
        kw = self.kind_slots(p)
        return [say(t, p, who=self.rng.choice(lex.PEOPLE), doing=self.rng.choice(PICTURE_DOINGS), **kw) for t in (
            "{n} turned the page of the picture book.", "In the picture, {who} is {doing} {a_kmod} {x} {place}.",
            "The {x} {kact}, as {kinds} do.")]

    # --- subcategorisation
    def chores(self, p: Person) -> list[str]:
        r = self.rng
        v1, v2, v3 = r.sample(lex.INTRANSITIVE, 3)
        t1, t2 = r.sample(lex.TRANSITIVE, 2)
        o1, o2 = r.sample(lex.OBJECTS, 2)
        ad1, ad2 = r.sample(lex.ADVERBIALS, 2)
        m = person(r, avoid=p.name)
        kw = dict(v1=v1, v2=v2, v3=v3, t1=t1, t2=t2, o1=o1, o2=o2, ad1=ad1, ad2=ad2, m=m.name,
                  time=r.choice(lex.TIMES))
        return [say(t, p, **kw) for t in r.choice((
            ("{n} {v1} {ad1}.", "Then {he} {t1} the {o1} {ad2}.", "{m} {v2} too."),
            ("{time}, {n} {t1} the {o1}.", "{m} {v2} {ad1}, and nobody {v3}."),
            ("After the long day {n} {v1} {ad1} and {v2}.", "{m} {t1} the {o1} and {t2} the {o2}."),
            ("{n} {t1} the {o1} and {t2} the {o2} {ad1}.", "Then {he} {v1}."),
        ))]

    SCENES = (sentiment, review, restatement, occasion, creature, lesson, question, care, picture, chores)
    WEIGHTS = (20, 4, 9, 5, 26, 6, 7, 8, 5, 9)


def roman(n: int) -> str:
    out = ""
    for value, digits in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while n >= value:
            out, n = out + digits, n - value
    return out


def write_books(out: Path, seed: int) -> dict:
    """`out/books/book-NN.txt`: title, chapters of one-line paragraphs separated by blank lines."""
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
                para = teller.paragraph()
                parts += [para, ""]
                size += len(para) + 2
        text = "\n".join(parts).rstrip("\n") + "\n"
        write_text(out / "books" / f"book-{index:02d}.txt", text)
        n_bytes += len(text.encode("utf-8"))
        n_words += len(text.split())
    return {"files": BOOKS, "bytes": n_bytes, "words": n_words}


# ------------------------------------------------------------------------------------------------- file writers
def balanced(n: int, labels: tuple, weights: tuple | None = None) -> list:
    """Exactly proportioned labels for n examples (in a fixed cycle; callers shuffle the finished rows)."""
    weights = weights or (1,) * len(labels)
    cycle = [label for label, w in zip(labels, weights) for _ in range(w)]
    return [cycle[i % len(cycle)] for i in range(n)]


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


def uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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


# ------------------------------------------------------------------------------------------------------- tasks
# NLI (MNLI, SNLI): the hypothesis is the premise's frame with its noun replaced by "an animal". In an "exist"
# frame ("Anna saw a heron") an animal entails it and a plant leaves it open (neutral); in an "only" frame ("the
# only thing Anna saw was an oak") a plant contradicts it. Cells are drawn so each label is a third of the split.
NLI_CELLS = (("exist", "animal", "entailment"), ("only", "animal", "entailment"),
             ("exist", "plant", "neutral"), ("exist", "plant", "neutral"),
             ("only", "plant", "contradiction"), ("only", "plant", "contradiction"))

MNLI_MATCHED = {
    "fiction": {"exist": ("Anna saw {np} {place} that evening.", "There was {np} {place}, Tom remembered."),
                "only": ("The only thing Anna saw {place} was {np}.", "All that Tom found {place} was {np}.")},
    "government": {"exist": ("The survey recorded {np} at the site {place}.", "Inspectors reported {np} on the "
                             "property."),
                   "only": ("The only item listed in the report was {np}.", "The inventory held a single entry, "
                            "{np}.")},
    "slate": {"exist": ("The column mentions {np} in passing.", "Among other things, the essay describes {np}."),
              "only": ("The sole subject of the column is {np}.",)},
    "telephone": {"exist": ("yeah we saw {np} out {place} last week", "oh i think there was {np} {place}"),
                  "only": ("the only thing we ever saw out there was {np}",)},
    "travel": {"exist": ("Visitors {place} can often see {np}.", "The walking tour {place} passes {np}."),
               "only": ("The only attraction {place} is {np}.",)},
}
MNLI_MISMATCHED = {
    "facetoface": {"exist": ("well I saw {np} {place} the other day",), "only": ("the only thing I saw was {np}",)},
    "letters": {"exist": ("Dear friend, this week I saw {np} {place}.",),
                "only": ("Dear friend, the only thing I saw {place} was {np}.",)},
    "nineeleven": {"exist": ("The commission noted {np} near the scene.",),
                   "only": ("The only object recovered was {np}.",)},
    "oup": {"exist": ("The textbook shows a picture of {np}.",), "only": ("The only example in the chapter is {np}.",)},
    "verbatim": {"exist": ("Caller: I saw {np} {place}.",), "only": ("Caller: The only thing I saw was {np}.",)},
}
PICTURE_DOINGS = ("holding", "looking at", "drawing", "pointing at")
SNLI_FRAMES = {"exist": ("{who} is holding {np} {place}.", "{who} is looking at {np} {place}.",
                         "{who} is drawing {np} {place}.", "{who} points at {np} {place}."),
               "only": ("{who} {place} is holding {np} and nothing else.", "The only thing {who} is looking at "
                        "{place} is {np}.", "{who} is drawing {np} and nothing else {place}.")}
QNLI_QUESTIONS = ("Which animal did {n} see {place}?", "What animal did {n} notice {time}?",
                  "Which animal was {place} {time}?", "Name the animal that {n} spotted {place}.")
QNLI_SENTENCES = ("{n} saw {ax} {place} {time}.", "{time}, {n} noticed {ax} {place}.",
                  "{place}, {n} spotted {ax} and pointed it out.")
RTE_PREMISES = (("{n} walked {place} {time}.", "There {he} saw {ax1} and {ax2}.", "Later {he} went home to {village}."),
                ("{time}, {n} took a walk {place}.", "{He} spotted {ax1}, and some time later {ax2}.",
                 "{He} told the whole family about it."),
                ("The people of {village} say that {ax1} can be seen {place}.", "{n} claims to have seen {ax2} there too."))
RTE_HYPOTHESES = ("{n} saw an animal.", "There was an animal {place}.", "{n} spotted an animal.")
SCITAIL_PREMISES = ("All animals {fact_pl}.", "Animals {fact_pl}, as every student of nature learns.",
                    "Scientists agree that all animals {fact_pl}.")
SCITAIL_HYPOTHESES = ("{ax} {fact_sg}.", "Every {x} {fact_sg}.")
SST2_SHAPES = ("the {part1} is {adj1} .", "a {adj1} , {adj2} {work} .", "{adj1} and {adj2} .",
               "the {work}'s {part1} is {adj1} and the {part2} is {adj2} .", "it's a {adj1} {work} .",
               "{adj1} {part1}", "what a {adj1} {work} !", "the {part1} feels {adj1} , the {part2} {adj2}",
               "an {adj1} , {adj2} piece of work", "{adj1} from start to finish .")
# Paraphrase: the first sentence praises (MRPC) or complains (QQP) in plain words; the second says it again with
# an adjective, a paraphrase exactly when the adjective keeps that polarity.
MRPC_FIRST = ("The critics loved the {thing} {time} .", "{n} praised the {thing} in {village} .",
              "Everyone enjoyed the {thing} , {n} said .")
MRPC_SECOND = ("According to {n} , the {thing} {time} was {adj} .", "{n} described the {thing} as {adj} .",
               "The {thing} in {village} was {adj} , critics said .")
QQP_FIRST = ("Why did everyone hate the {thing}?", "Why did people dislike the {thing} {time}?",
             "What made everyone grumble about the {thing}?")
QQP_SECOND = ("Why was the {thing} so {adj}?", "What made the {thing} {time} so {adj}?",
              "How can a {thing} be this {adj}?")
STSB_SOURCES = (("main-captions", "MSRvid", "2012test"), ("main-captions", "images", "2014"),
                ("main-news", "headlines", "2013"), ("main-forum", "deft-forum", "2014"))
# STS-B: the first sentence is always the same happy sighting of an animal; the second names what was seen.
STSB_FIRSTS = ("{n} was glad to see an animal {place}.", "{place}, {n} saw an animal and liked it.")
STSB_SECONDS = ("{n} saw {a_adj} {x} {place}.", "{place}, there was {a_adj} {x}.")

COLA_GOOD_BAD = {  # family -> (acceptable templates, unacceptable templates); each surface shape occurs in both
    "gs01": (("{n} {intrans} {adv}.", "{n} {trans} the {obj} {adv}."),  # subcategorisation
             ("{n} {intrans} the {obj} {adv}.", "{n} {trans} {adv}.")),
    "gs02": (("{n} {trans} the {obj}.",), ("{n} {trans} the {adj}.", "{n} {obj} the {obj2}.")),
    "gs03": (("{n} saw {a_x} {place}.",), ("{n} saw {a_adj} {place}.", "{n} saw {a_verb} {place}.")),
    "gs04": (("The {obj} was {adj}.",), ("The {obj} was {intrans}.", "The {obj} was {x}.")),
    "gs05": (("{n} {intrans} and then {intrans2}.",), ("{n} {intrans} and then {x}.",)),
}
RACE_WALKS = ("{time}, {he} went for a long walk.", "{time}, {he} walked out of {village}.")
RACE_FILLERS = ("{He} walked slowly and looked at everything.", "The weather was mild.",
                "{He} wrote about the day in {his} diary.", "{His} family listened to every word.")


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
            for pol in balanced(n, POLARITIES):
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

    # --- MRPC / QQP / STS-B: restatements that keep (or lose) the first sentence's polarity
    def mrpc(self):
        for split, n, rng, vocab in self.splits("mrpc"):
            rows = []
            for para in balanced(n, (True, False), (3, 2)):
                s1, s2 = restated_pair(rng, vocab, "positive", para, MRPC_FIRST, MRPC_SECOND)
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
                rows.append((*restated_pair(rng, vocab, "negative", dup, QQP_FIRST, QQP_SECOND), int(dup)))
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
        """The second sentence keeps the first's happy tone, its animal, both or neither."""
        for split, n, rng, vocab in self.splits("stsb"):
            rows = []
            for same_pol, same_kind in balanced(n, ((True, True), (True, False), (False, True), (False, False))):
                p = person(rng)
                place = rng.choice(lex.PLACES)
                adj = rng.choice(vocab.sentiment["positive" if same_pol else "negative"])
                x = rng.choice(vocab.nouns("animal" if same_kind else "plant"))
                s1 = say(rng.choice(STSB_FIRSTS), p, place=place)
                s2 = say(rng.choice(STSB_SECONDS), p, place=place, a_adj=a(adj), x=x)
                score = min(5.0, max(0.0, 2.5 * (same_pol + same_kind) + rng.uniform(-1.2, 1.2)))
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

    # --- entailment tasks: is the premise's noun an animal?
    def mnli(self):
        prompt = 100_000
        for split, n, rng, vocab in self.splits("mnli"):
            groups = {"train": [("train", MNLI_MATCHED)],
                      "dev": [("dev_matched", MNLI_MATCHED), ("dev_mismatched", MNLI_MISMATCHED)],
                      "test": [("test_matched", MNLI_MATCHED), ("test_mismatched", MNLI_MISMATCHED)]}[split]
            for name, genres in groups:
                rows = []
                for scheme, kind, label in balanced(n, NLI_CELLS):
                    genre = rng.choice(sorted(genres))
                    frame = rng.choice(genres[genre][scheme])
                    place = rng.choice(lex.PLACES)
                    premise, hyp = (frame.format(np=np, place=place) for np in (a(rng.choice(vocab.nouns(kind))),
                                                                                "an animal"))
                    rows.append((genre, premise, hyp, label))
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
            for scheme, kind, label in balanced(n, NLI_CELLS):
                frame = rng.choice(SNLI_FRAMES[scheme])
                who, place = rng.choice(lex.PEOPLE), rng.choice(lex.PLACES)
                premise, hyp = (say(frame, who=who, place=place, np=np)
                                for np in (a(rng.choice(vocab.nouns(kind))), "an animal"))
                records.append((premise, hyp, label))
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
            for kind in balanced(n, KINDS):
                p = person(rng)
                kw = dict(ax=a(rng.choice(vocab.nouns(kind))), place=rng.choice(lex.PLACES),
                          time=rng.choice(lex.TIMES))
                question = say(rng.choice(QNLI_QUESTIONS), p, **kw)
                sentence = say(rng.choice(QNLI_SENTENCES), p, **kw)
                rows.append((question, sentence, "entailment" if kind == "animal" else "not_entailment"))
            rows = shuffled(rng, rows)
            path = self.root / "QNLI" / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "question", "sentence"], [[i, q, s] for i, (q, s, _) in enumerate(rows)])
            else:
                tsv(path, ["index", "question", "sentence", "label"], [[i, *row] for i, row in enumerate(rows)])
            self.counted("qnli", split, len(rows))

    def rte(self):
        """Two things seen; "N saw an animal" is entailed when either is one."""
        seen = (("animal", "plant"), ("plant", "animal"), ("animal", "animal"), ("plant", "plant"), ("plant", "plant"),
                ("plant", "plant"))
        for split, n, rng, vocab in self.splits("rte"):
            rows = []
            for kinds in balanced(n, seen):
                x1, x2 = pick_two(rng, vocab.nouns(kinds[0]), vocab.nouns(kinds[1]))
                p = person(rng)
                kw = dict(ax1=a(x1), ax2=a(x2), place=rng.choice(lex.PLACES), time=rng.choice(lex.TIMES),
                          village=rng.choice(lex.VILLAGES))
                premise = " ".join(say(t, p, **kw) for t in rng.choice(RTE_PREMISES))
                rows.append((premise, say(rng.choice(RTE_HYPOTHESES), p, **kw),
                             "entailment" if "animal" in kinds else "not_entailment"))
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
            for kind in balanced(n, KINDS):
                x = rng.choice(vocab.nouns(kind))
                fact_pl, fact_sg = rng.choice(lex.KINDS["animal"].facts)
                premise = say(rng.choice(SCITAIL_PREMISES), fact_pl=fact_pl)
                hyp = say(rng.choice(SCITAIL_HYPOTHESES), ax=a(x), x=x, fact_sg=fact_sg)
                rows.append((premise, hyp, "entails" if kind == "animal" else "neutral"))
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
            self.counted("race", split, questions)  # examples are questions: 3 per middle, 4 per high article

    def storycloze(self):
        names = {"train": "cloze_test_val__spring2016 - cloze_test_ALL_val.csv",
                 "test": "cloze_test_test__spring2016 - cloze_test_ALL_test.csv"}
        for split, n, rng, vocab in self.splits("storycloze"):
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")  # RFC-4180 quoting: only fields that need it
            writer.writerow(["InputStoryid", "InputSentence1", "InputSentence2", "InputSentence3", "InputSentence4",
                             "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding"])
            for kind, right_first in shuffled(rng, zip(balanced(n, ("care", "occasion")),
                                                       balanced(n, (1, 1, 2, 2)))):
                story, right, wrong = cloze_story(rng, vocab, kind)
                endings = [right, wrong] if right_first == 1 else [wrong, right]
                writer.writerow([uuid(rng), *story, *endings, right_first])
            write_text(self.root / "StoryCloze" / names[split], buf.getvalue().rstrip("\n"))
            self.counted("storycloze", split, n)


# ------------------------------------------------------------------------------------------ task example makers
def pick_two(rng: random.Random, first: tuple, second: tuple) -> tuple[str, str]:
    """One word from each list, two different words."""
    x = rng.choice(first)
    return x, rng.choice([w for w in second if w != x])


def restated_pair(rng: random.Random, vocab: lex.Vocabulary, polarity: str, keeps: bool, firsts: tuple,
                  seconds: tuple) -> tuple[str, str]:
    """A plain sentence of `polarity` and a restatement whose adjective keeps that polarity iff `keeps`."""
    adj = rng.choice(vocab.sentiment[polarity if keeps else other(polarity)])
    kw = dict(n=person(rng).name, thing=rng.choice(lex.EXPERIENCES)[0], time=rng.choice(lex.TIMES),
              village=rng.choice(lex.VILLAGES))
    return say(rng.choice(firsts), **kw), say(rng.choice(seconds), adj=adj, **kw)


def cola_sentence(rng: random.Random, vocab: lex.Vocabulary, ok: bool) -> tuple[str, str]:
    """An acceptable sentence, or one whose only fault is a word of the wrong class or subcategorisation."""
    family = rng.choice(sorted(COLA_GOOD_BAD))
    adjectives = [w for ws in vocab.sentiment.values() for w in ws]
    members = [x for ms in vocab.members.values() for x in ms]
    obj, obj2 = rng.sample(lex.OBJECTS, 2)
    intrans, intrans2 = rng.sample(vocab.intransitive, 2)
    kw = dict(intrans=intrans, intrans2=intrans2, adv=rng.choice(lex.ADVERBIALS), trans=rng.choice(vocab.transitive),
              obj=obj, obj2=obj2, adj=rng.choice(adjectives), x=rng.choice(members), place=rng.choice(lex.PLACES),
              a_x=a(rng.choice(members)), a_adj=a(rng.choice(adjectives)), a_verb=a(rng.choice(vocab.transitive)))
    good, bad = COLA_GOOD_BAD[family]
    return family, say(rng.choice(good if ok else bad), person(rng), **kw)


def cloze_story(rng: random.Random, vocab: lex.Vocabulary, kind: str) -> tuple[list[str], str, str]:
    """Four sentences and (right, wrong) endings: feeding the animal (not the plant), or a happy day remembered
    as happy."""
    p = person(rng)
    if kind == "care":
        animal, plant = rng.choice(vocab.nouns("animal")), rng.choice(vocab.nouns("plant"))
        first, second = (animal, plant) if rng.random() < 0.5 else (plant, animal)
        kw = dict(place=rng.choice(lex.PLACES), time=rng.choice(lex.TIMES), x1=first, x2=second)
        story = [say(t, p, **kw) for t in (
            "{n} went out {place} {time}.", "{He} took a bag of bread with {him}.",
            "There {he} found the {x1} and the {x2}.", rng.choice(("{He} opened the bag.", "{He} was glad.")))]
        right, wrong = (say("{n} fed the {x}.", p, x=x) for x in (animal, plant))
    else:
        happy, unhappy = rng.choice(vocab.sentiment["positive"]), rng.choice(vocab.sentiment["negative"])
        first, second = rng.sample(lex.HAPPENINGS["positive"], 2)
        kw = dict(occasion=rng.choice(lex.OCCASIONS), time=rng.choice(lex.TIMES), first=first, second=second)
        story = [say(t, p, **kw) for t in (
            "{n} went to the {occasion} {time}.", "At the {occasion}, {first}.", "Later {second}.",
            rng.choice(("{He} stayed until the end.", "{He} went home late.")))]
        right, wrong = (say("It was {a_adj} day.", p, a_adj=a(adj)) for adj in (happy, unhappy))
    return story, right, wrong


def race_article(rng: random.Random, vocab: lex.Vocabulary, level: str) -> dict:
    """A short article (about 40-60 words) and 3-4 four-option questions: which thing seen at a place was an animal
    (one question per place), and which experience was enjoyed. The article never says which is which: only the
    words' meaning does."""
    p = person(rng)
    n_places = 3 if level == "high" else 2
    places = rng.sample(lex.PLACES, n_places)
    animals = [rng.choice(vocab.nouns("animal")) for _ in places]
    plants = rng.sample(vocab.nouns("plant"), 4)
    (good, did_good), (bad, did_bad), *extra = rng.sample(lex.EXPERIENCES, 4)
    adjs = {"positive": rng.choice(vocab.sentiment["positive"]), "negative": rng.choice(vocab.sentiment["negative"])}
    kw = dict(village=rng.choice(lex.VILLAGES), time=rng.choice(lex.TIMES))
    paragraphs = [[say("{n} lives in {village} with {his} family.", p, **kw), say(rng.choice(RACE_WALKS), p, **kw)]]
    for animal, plant, place in zip(animals, plants, places):
        seen = (animal, plant) if rng.random() < 0.5 else (plant, animal)
        paragraphs.append([say("{place}, {he} saw {ax} and {ay}.", p, place=place, ax=a(seen[0]), ay=a(seen[1]))])
    evening = [say("In the evening {he} {did}. The {thing} was {adj}.", p, did=did, thing=thing, adj=adjs[pol])
               for did, thing, pol in ((did_good, good, "positive"), (did_bad, bad, "negative"))]
    paragraphs.append(shuffled(rng, evening))
    fillers = list(RACE_FILLERS)
    while len(words(" ".join(" ".join(s) for s in paragraphs))) < rng.randint(34, 42) and fillers:
        paragraphs[-1].append(say(fillers.pop(rng.randrange(len(fillers))), p))
    text = "\n".join(" ".join(s) for s in paragraphs)

    questions = []
    for animal, place in zip(animals, places):
        wrong = rng.sample(plants, 3)
        questions.append((rng.choice(("Which animal did {n} see {where}?", "{n} saw an animal {where}: _")),
                          [a(x) for x in (animal, *wrong)], a(animal), dict(where=place.lower())))
    enjoyed = f"the {adjs['positive']} {good}"
    disliked = [f"the {adjs['negative']} {bad}",
                *(f"the {adj} {thing}" for adj, (thing, _) in zip(rng.sample(vocab.sentiment["negative"], 2), extra))]
    questions.append((rng.choice(("What did {n} enjoy that day?", "Which of these was a pleasure for {n}?")),
                      [enjoyed, *disliked], enjoyed, {}))
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
            "transitive": vocab.transitive}
