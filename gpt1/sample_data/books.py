"""The generated books: chapters of one-line paragraphs, each paragraph a scene that teaches one word property.

Every scene uses the whole lexicon (both halves) in the same consistent contexts, so a language model trained on
the books places each held-out word next to the train words that share its meaning (see `gpt1.sample_data`).
"""

from __future__ import annotations

import random
from pathlib import Path

from gpt1.io import write_text
from gpt1.sample_data import lexicon as lex
from gpt1.sample_data.text import POLARITIES, Person, a, person, say

BOOKS = 10
BOOK_CHARS = 250_000  # per book on average -> ~2.5 MB in all
# base forms of lexicon.FEELINGS
FEEL = {
    "loved": "love",
    "praised": "praise",
    "enjoyed": "enjoy",
    "hated": "hate",
    "disliked": "dislike",
    "grumbled about": "grumble about",
}
PICTURE_DOINGS = ("holding", "looking at", "drawing", "pointing at")


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
        return dict(
            adj1=adj1,
            adj2=adj2,
            adj3=adj3,
            a_adj1=a(adj1),
            m=m.name,
            reaction=r.choice(lex.REACTIONS[pol]).format(his=p.his),
            other=r.choice(lex.REACTIONS[pol]).format(his=m.his),
            mood=r.choice(lex.MOODS[pol]),
            outcome=r.choice(lex.OUTCOMES[pol]),
            verdict=lex.VERDICT[pol],
            time=r.choice(lex.TIMES),
            opener=r.choice(lex.OPENERS[pol]),
        )

    # --- polarity
    def sentiment(self, p: Person) -> list[str]:
        thing, experience = self.rng.choice(lex.EXPERIENCES)
        kw = self.polar(p, self.rng.choice(POLARITIES))
        return [
            say(t, p, thing=thing, experience=experience, **kw)
            for t in self.rng.choice(self.SENTIMENT_SHAPES)
        ]

    SENTIMENT_SHAPES = (  # polarity next to the adjective ("a dreadful mess"), after it ("Sadly, ...") and beyond
        (
            "{n} {experience} {time}.",
            "The {thing} was {adj1} and {adj2}, a {adj3} {outcome}.",
            "{opener}, {he} {reaction}.",
            "It had been a very {verdict} {thing}, and {n} was {mood}.",
        ),
        (
            "'What a {adj1} {outcome}!' said {n} when {he} {experience}.",
            "{m} thought it {adj2} and {adj3}.",
            "{opener}, {m} {other}, and they were both {mood}.",
        ),
        (
            "When {n} {experience}, {he} {reaction}.",
            "It was a {adj1} {outcome} of a {thing}, the most {adj2} {he} had ever known.",
            "{opener}, {he} felt {mood} for the rest of the day.",
        ),
        (
            "Everyone said the {thing} was {adj1}.",
            "{n} {experience} {time} and thought it {adj2}, a {adj3} {outcome}.",
            "{opener}, {he} {reaction}.",
            "It was a {verdict} {thing}, {he} said later.",
        ),
        (
            "{n} {experience} with {m} {time}.",
            "'It is {adj1} and {adj2},' said {m}.",
            "'Yes, a {adj3} {outcome},' said {n}.",
            "{opener}, {he} {reaction}.",
        ),
        (
            "{time}, {n} {experience}.",
            "The {thing} was {adj1}, {adj2} and {adj3}.",
            "{opener}, {he} {reaction}, and {m} {other} as well.",
            "Nobody could remember a more {adj1} {outcome}.",
        ),
    )

    def review(self, p: Person) -> list[str]:
        r = self.rng
        pol = r.choice(POLARITIES)
        part1, part2 = r.sample(lex.REVIEW_PARTS, 2)
        kw = dict(
            part1=part1,
            part2=part2,
            work=r.choice(lex.REVIEWED),
            village=r.choice(lex.VILLAGES),
            review=lex.REVIEW[pol],
            **self.polar(p, pol),
        )
        return [say(t, p, **kw) for t in r.choice(self.REVIEW_SHAPES)]

    REVIEW_SHAPES = (
        (
            "{n} wrote about the new {work} for the {village} newspaper.",
            "{He} called the {part1} {adj1} and the {part2} {adj2}.",
            "The review was very {review}: a {adj3} {outcome}, {he} wrote.",
        ),
        (
            "The {work} opened in {village} {time}.",
            "The {part1} was {adj1}, and the {part2} was {adj2}.",
            "{opener}, {n} {reaction} all through it.",
            "{His} review was very {review}: a {verdict} {work}, {he} said.",
        ),
        (
            "'The {part1} is {adj1},' wrote {n}, 'and the {part2} is {adj2}.'",
            "It was a very {review} review, and {m} agreed that it was a {verdict} {work}.",
        ),
    )

    def restatement(self, p: Person) -> list[str]:
        """Someone says it again in other words, with the same polarity (the paraphrase tasks' relation)."""
        r = self.rng
        thing, experience = r.choice(lex.EXPERIENCES)
        pol = r.choice(POLARITIES)
        felt = r.choice(lex.FEELINGS[pol])
        kw = dict(
            thing=thing, experience=experience, felt=felt, feel=FEEL[felt], **self.polar(p, pol)
        )
        return [say(t, p, **kw) for t in r.choice(self.RESTATEMENT_SHAPES)]

    RESTATEMENT_SHAPES = (
        (
            "'The {thing} was {adj1},' said {n}.",
            "'You mean it was {adj2}?' asked {m}.",
            "'Yes, a {adj3} {outcome},' said {n}.",
            "{opener}, they both {other}.",
        ),
        ("Everyone {felt} the {thing} {time}.", "It was {adj1}, a {adj2} {outcome}, {n} said."),
        (
            "'Why did everyone {feel} the {thing}?' asked {n}.",
            "'Because it was so {adj1},' said {m}.",
        ),
        (
            "{n} {felt} the {thing}.",
            "In other words, it was {a_adj1} {outcome}, and {n} was {mood}.",
        ),
    )

    def occasion(self, p: Person) -> list[str]:
        """A day that goes well or badly, and how it is remembered (Story Cloze's endings)."""
        r = self.rng
        pol = r.choice(POLARITIES)
        first, second = r.sample(lex.HAPPENINGS[pol], 2)
        kw = dict(
            occasion=r.choice(lex.OCCASIONS), first=first, second=second, **self.polar(p, pol)
        )
        return [
            say(t, p, **kw)
            for t in (
                "{n} went to the {occasion} {time}.",
                "At the {occasion}, {first}.",
                "Later {second}.",
                "It was a {adj1} day.",
                "{opener}, {n} {reaction}.",
            )
        ]

    # --- kind (animal or plant)
    def kind_slots(self, p: Person, cat: lex.Category | None = None) -> dict:
        r = self.rng
        cat = cat or r.choice(lex.CATEGORIES)
        kind = lex.KINDS[cat.kind]
        x, y = r.sample(cat.members, 2)
        z = r.choice(
            [w for c in lex.CATEGORIES if c.kind == cat.kind for w in c.members if w not in (x, y)]
        )
        kmod, kmod2 = (r.choice(kind.modifiers) for _ in range(2))
        kact, kact2 = r.sample(kind.actions, 2)
        fact_pl, fact_sg = r.choice(kind.facts)
        m = person(r, avoid=p.name)
        return dict(
            x=x,
            y=y,
            ax=a(x),
            ay=a(y),
            az=a(z),
            Ay=a(y).capitalize(),
            cat=cat.name,
            acat=a(cat.name),
            kind=kind.name,
            akind=a(kind.name),
            kinds=kind.plural,
            fact_pl=fact_pl,
            fact_sg=fact_sg,
            care=kind.care,
            kmod=kmod,
            a_kmod=a(kmod),
            kmod2=kmod2,
            a_kmod2=a(kmod2),
            kact=kact,
            kact2=kact2,
            act=r.choice(cat.actions),
            m=m.name,
            place=r.choice(lex.PLACES),
            time=r.choice(lex.TIMES),
            scene=r.choice(cat.scenes).format(x=x, n=p.name, his=p.his),
        )

    def creature(self, p: Person) -> list[str]:
        kw = self.kind_slots(p)
        return [say(t, p, **kw) for t in self.rng.choice(self.CREATURE_SHAPES)]

    CREATURE_SHAPES = (  # kind cues right next to the member ("the hungry heron ate"), category and kind stated
        (
            "{n} went out {place} {time}.",
            "There {he} saw {a_kmod} {x}.",
            "The {x} {kact}, and then the {x} {act}.",
            "{ax} is {acat}, and every {cat} is {akind}.",
        ),
        (
            "'Look, {a_kmod} {x}!' cried {n}.",
            "'Is it {akind}?' asked {m}.",
            "'Yes,' said {n}. 'Every {x} is {akind}.'",
            "The {kmod2} {x} {kact}.",
        ),
        ("The {kmod} {x} {kact} {place}.", "{scene}.", "Like every {kind}, the {x} {fact_sg}."),
        (
            "{n} saw {ax}, {akind}, {place}.",
            "The {x} {kact}, as {kinds} do.",
            "The {kmod2} {x} {act}.",
        ),
        ("{time}, {n} spotted {a_kmod} {x} {place}.", "It was {akind}, of course, and {scene}."),
        (
            "{m} asked {n} what kind of thing {ax} was.",
            "'{ax} is {akind},' said {n}. 'It {fact_sg}, as every {kind} does.'",
        ),
        (
            "There was {a_kmod} {x} {place}, and {a_kmod2} {y} beside it.",
            "Both were {kinds}.",
            "The {x} {kact} and the {y} {kact2}.",
        ),
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
        kw = {
            **self.kind_slots(p, cat),
            "teacher": teacher,
            "az": a(z),
            "aother": a(other_cat.kind),
        }
        return [
            say(t, p, **kw)
            for t in (
                "In the schoolroom, {teacher} taught the children about {kinds}.",
                "'All {kinds} {fact_pl},' said {teacher}.",
                "'{ax} is {akind}, so {ax} {fact_sg}. {Ay} is {akind} too.'",
                "'And {az}?' asked {n}.",
                "'{az} is not {akind},' said {teacher}. 'It is {aother}.'",
            )
        ]

    def question(self, p: Person) -> list[str]:
        """A question about a kind and the answer that names one (QNLI's and RACE's questions)."""
        kw = self.kind_slots(p)
        return [
            say(t, p, **kw)
            for t in self.rng.choice(
                (
                    (
                        "'Which {kind} did you see {place}?' asked {m}.",
                        "'I saw {ax},' said {n}.",
                        "'Did it {fact_pl}?'",
                        "'Yes, all {kinds} {fact_pl}.'",
                    ),
                    (
                        "'What kind of thing is {ax}?' asked {n}.",
                        "'{ax} is {akind},' said {m}, 'like {ay}.'",
                    ),
                    ("Which {kind} grew or lived {place}?", "{ax} did, and {ay} too."),
                )
            )
        ]

    def care(self, p: Person) -> list[str]:
        """Animals are fed and plants are watered (Story Cloze's endings)."""
        r = self.rng
        animal = self.kind_slots(p, r.choice([c for c in lex.CATEGORIES if c.kind == "animal"]))
        plant = self.kind_slots(p, r.choice([c for c in lex.CATEGORIES if c.kind == "plant"]))
        first, second = (animal, plant) if r.random() < 0.5 else (plant, animal)
        return [
            say(
                t,
                p,
                place=first["place"],
                time=first["time"],
                x1=first["x"],
                x2=second["x"],
                care1=first["care"],
                care2=second["care"],
                akind1=first["akind"],
            )
            for t in (
                "{n} went {place} {time} with some bread and a can of water.",
                "{He} wanted to look after {akind1}.",
                "There {he} found the {x1} and the {x2}.",
                "{n} {care1} the {x1}, and then {he} {care2} the {x2}.",
            )
        ]

    def picture(self, p: Person) -> list[str]:
        """Scenes in a picture book, described as image captions are (SNLI's premises)."""
        kw = self.kind_slots(p)
        return [
            say(t, p, who=self.rng.choice(lex.PEOPLE), doing=self.rng.choice(PICTURE_DOINGS), **kw)
            for t in (
                "{n} turned the page of the picture book.",
                "In the picture, {who} is {doing} {a_kmod} {x} {place}.",
                "The {x} {kact}, as {kinds} do.",
            )
        ]

    # --- subcategorisation
    def chores(self, p: Person) -> list[str]:
        r = self.rng
        v1, v2, v3 = r.sample(lex.INTRANSITIVE, 3)
        t1, t2 = r.sample(lex.TRANSITIVE, 2)
        o1, o2 = r.sample(lex.OBJECTS, 2)
        ad1, ad2 = r.sample(lex.ADVERBIALS, 2)
        m = person(r, avoid=p.name)
        kw = dict(
            v1=v1,
            v2=v2,
            v3=v3,
            t1=t1,
            t2=t2,
            o1=o1,
            o2=o2,
            ad1=ad1,
            ad2=ad2,
            m=m.name,
            time=r.choice(lex.TIMES),
        )
        return [
            say(t, p, **kw)
            for t in r.choice(
                (
                    ("{n} {v1} {ad1}.", "Then {he} {t1} the {o1} {ad2}.", "{m} {v2} too."),
                    ("{time}, {n} {t1} the {o1}.", "{m} {v2} {ad1}, and nobody {v3}."),
                    (
                        "After the long day {n} {v1} {ad1} and {v2}.",
                        "{m} {t1} the {o1} and {t2} the {o2}.",
                    ),
                    ("{n} {t1} the {o1} and {t2} the {o2} {ad1}.", "Then {he} {v1}."),
                )
            )
        ]

    SCENES = (
        sentiment,
        review,
        restatement,
        occasion,
        creature,
        lesson,
        question,
        care,
        picture,
        chores,
    )
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
        title = rng.choice(
            (
                "THE {v} STORIES",
                "A YEAR IN {v}",
                "THE CHILDREN OF {v}",
                "LETTERS FROM {v}",
                "{h} OF {v}",
            )
        ).format(v=rng.choice(lex.VILLAGES).upper(), h=person(rng).name.upper())
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
