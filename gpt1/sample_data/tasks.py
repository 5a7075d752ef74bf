"""Every registered task's sample files, in its official layout: one writer per task (`TaskWriter.<task>`), all
splits, at the paths the task's loader expects under `tasks/<folder as distributed>/`.

Each task asks about one word property, always in the same direction (see `gpt1.sample_data`); train splits use the
lexicon's train half, dev and test splits its eval half.
"""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path
from typing import NotRequired, TypedDict

from gpt1.io import write_text
from gpt1.sample_data import lexicon as lex
from gpt1.sample_data.layouts import annotators, binary_parse, flat_parse, no_consensus, tsv, uuid
from gpt1.sample_data.text import KINDS, POLARITIES, a, balanced, other, person, ptb, say, shuffled
from gpt1.tasks import get

SPLIT_HALF = {"train": "train", "dev": "eval", "test": "eval"}
SIZES = {  # examples per split (RACE: articles per level; 3 questions per middle, 4 per high article)
    "cola": {"train": 500, "dev": 200, "test": 50},
    "sst2": {"train": 500, "dev": 200, "test": 50},
    "mrpc": {"train": 500, "dev": 200, "test": 50},
    "stsb": {"train": 300, "dev": 200, "test": 50},
    "qqp": {"train": 500, "dev": 200, "test": 50},
    "mnli": {"train": 600, "dev": 200, "test": 50},
    "qnli": {"train": 300, "dev": 200, "test": 50},
    "rte": {"train": 500, "dev": 200, "test": 50},
    "snli": {"train": 600, "dev": 200, "test": 200},
    "scitail": {"train": 300, "dev": 200, "test": 200},
    "race": {"train": 20, "dev": 12, "test": 12},
    "storycloze": {"train": 300, "test": 200},
}

# NLI (MNLI, SNLI): the hypothesis is the premise's frame with its noun replaced by "an animal". In an "exist"
# frame ("Anna saw a heron") an animal entails it and a plant leaves it open (neutral); in an "only" frame ("the
# only thing Anna saw was an oak") a plant contradicts it. Cells are drawn so each label is a third of the split.
NLI_CELLS = (
    ("exist", "animal", "entailment"),
    ("only", "animal", "entailment"),
    ("exist", "plant", "neutral"),
    ("exist", "plant", "neutral"),
    ("only", "plant", "contradiction"),
    ("only", "plant", "contradiction"),
)

MNLI_MATCHED = {
    "fiction": {
        "exist": ("Anna saw {np} {place} that evening.", "There was {np} {place}, Tom remembered."),
        "only": (
            "The only thing Anna saw {place} was {np}.",
            "All that Tom found {place} was {np}.",
        ),
    },
    "government": {
        "exist": (
            "The survey recorded {np} at the site {place}.",
            "Inspectors reported {np} on the property.",
        ),
        "only": (
            "The only item listed in the report was {np}.",
            "The inventory held a single entry, {np}.",
        ),
    },
    "slate": {
        "exist": (
            "The column mentions {np} in passing.",
            "Among other things, the essay describes {np}.",
        ),
        "only": ("The sole subject of the column is {np}.",),
    },
    "telephone": {
        "exist": ("yeah we saw {np} out {place} last week", "oh i think there was {np} {place}"),
        "only": ("the only thing we ever saw out there was {np}",),
    },
    "travel": {
        "exist": ("Visitors {place} can often see {np}.", "The walking tour {place} passes {np}."),
        "only": ("The only attraction {place} is {np}.",),
    },
}
MNLI_MISMATCHED = {
    "facetoface": {
        "exist": ("well I saw {np} {place} the other day",),
        "only": ("the only thing I saw was {np}",),
    },
    "letters": {
        "exist": ("Dear friend, this week I saw {np} {place}.",),
        "only": ("Dear friend, the only thing I saw {place} was {np}.",),
    },
    "nineeleven": {
        "exist": ("The commission noted {np} near the scene.",),
        "only": ("The only object recovered was {np}.",),
    },
    "oup": {
        "exist": ("The textbook shows a picture of {np}.",),
        "only": ("The only example in the chapter is {np}.",),
    },
    "verbatim": {
        "exist": ("Caller: I saw {np} {place}.",),
        "only": ("Caller: The only thing I saw was {np}.",),
    },
}
SNLI_FRAMES = {
    "exist": (
        "{who} is holding {np} {place}.",
        "{who} is looking at {np} {place}.",
        "{who} is drawing {np} {place}.",
        "{who} points at {np} {place}.",
    ),
    "only": (
        "{who} {place} is holding {np} and nothing else.",
        "The only thing {who} is looking at {place} is {np}.",
        "{who} is drawing {np} and nothing else {place}.",
    ),
}
QNLI_QUESTIONS = (
    "Which animal did {n} see {place}?",
    "What animal did {n} notice {time}?",
    "Which animal was {place} {time}?",
    "Name the animal that {n} spotted {place}.",
)
QNLI_SENTENCES = (
    "{n} saw {ax} {place} {time}.",
    "{time}, {n} noticed {ax} {place}.",
    "{place}, {n} spotted {ax} and pointed it out.",
)
RTE_PREMISES = (
    (
        "{n} walked {place} {time}.",
        "There {he} saw {ax1} and {ax2}.",
        "Later {he} went home to {village}.",
    ),
    (
        "{time}, {n} took a walk {place}.",
        "{He} spotted {ax1}, and some time later {ax2}.",
        "{He} told the whole family about it.",
    ),
    (
        "The people of {village} say that {ax1} can be seen {place}.",
        "{n} claims to have seen {ax2} there too.",
    ),
)
RTE_HYPOTHESES = ("{n} saw an animal.", "There was an animal {place}.", "{n} spotted an animal.")
SCITAIL_PREMISES = (
    "All animals {fact_pl}.",
    "Animals {fact_pl}, as every student of nature learns.",
    "Scientists agree that all animals {fact_pl}.",
)
SCITAIL_HYPOTHESES = ("{ax} {fact_sg}.", "Every {x} {fact_sg}.")
SST2_SHAPES = (
    "the {part1} is {adj1} .",
    "a {adj1} , {adj2} {work} .",
    "{adj1} and {adj2} .",
    "the {work}'s {part1} is {adj1} and the {part2} is {adj2} .",
    "it's a {adj1} {work} .",
    "{adj1} {part1}",
    "what a {adj1} {work} !",
    "the {part1} feels {adj1} , the {part2} {adj2}",
    "an {adj1} , {adj2} piece of work",
    "{adj1} from start to finish .",
)
# Paraphrase: the first sentence praises (MRPC) or complains (QQP) in plain words; the second says it again with
# an adjective, a paraphrase exactly when the adjective keeps that polarity.
MRPC_FIRST = (
    "The critics loved the {thing} {time} .",
    "{n} praised the {thing} in {village} .",
    "Everyone enjoyed the {thing} , {n} said .",
)
MRPC_SECOND = (
    "According to {n} , the {thing} {time} was {adj} .",
    "{n} described the {thing} as {adj} .",
    "The {thing} in {village} was {adj} , critics said .",
)
QQP_FIRST = (
    "Why did everyone hate the {thing}?",
    "Why did people dislike the {thing} {time}?",
    "What made everyone grumble about the {thing}?",
)
QQP_SECOND = (
    "Why was the {thing} so {adj}?",
    "What made the {thing} {time} so {adj}?",
    "How can a {thing} be this {adj}?",
)
STSB_SOURCES = (
    ("main-captions", "MSRvid", "2012test"),
    ("main-captions", "images", "2014"),
    ("main-news", "headlines", "2013"),
    ("main-forum", "deft-forum", "2014"),
)
# STS-B: the first sentence is always the same happy sighting of an animal; the second names what was seen.
STSB_FIRSTS = ("{n} was glad to see an animal {place}.", "{place}, {n} saw an animal and liked it.")
STSB_SECONDS = ("{n} saw {a_adj} {x} {place}.", "{place}, there was {a_adj} {x}.")

COLA_GOOD_BAD = {  # family -> (acceptable templates, unacceptable templates); each surface shape occurs in both
    "gs01": (
        ("{n} {intrans} {adv}.", "{n} {trans} the {obj} {adv}."),  # subcategorisation
        ("{n} {intrans} the {obj} {adv}.", "{n} {trans} {adv}."),
    ),
    "gs02": (("{n} {trans} the {obj}.",), ("{n} {trans} the {adj}.", "{n} {obj} the {obj2}.")),
    "gs03": (
        ("{n} saw {a_x} {place}.",),
        ("{n} saw {a_adj} {place}.", "{n} saw {a_verb} {place}."),
    ),
    "gs04": (("The {obj} was {adj}.",), ("The {obj} was {intrans}.", "The {obj} was {x}.")),
    "gs05": (("{n} {intrans} and then {intrans2}.",), ("{n} {intrans} and then {x}.",)),
}


class TaskWriter:
    """Writes every task; one method per task writes all its splits at the official paths."""

    def __init__(self, out: Path, seed: int):
        self.root, self.seed = out / "tasks", seed
        self.counts: dict[str, dict[str, int]] = {}

    def folder(self, task: str) -> Path:
        return self.root / get(task).folder

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
            path = self.folder("cola") / f"{split}.tsv"
            if split == "test":
                tsv(path, ["index", "sentence"], [[i, s] for i, (_, _, s) in enumerate(rows)])
            else:  # no header; CoLA's dev.tsv has no final newline
                tsv(
                    path,
                    None,
                    [[f, int(ok), "" if ok else "*", s] for f, ok, s in rows],
                    final_newline=split != "dev",
                )
            self.counted("cola", split, len(rows))

    # --- SST-2: review snippets whose label is the polarity of their adjectives
    def sst2(self):
        for split, n, rng, vocab in self.splits("sst2"):
            rows = []
            for pol in balanced(n, POLARITIES):
                adj1, adj2 = rng.sample(vocab.sentiment[pol], 2)
                part1, part2 = rng.sample(lex.REVIEW_PARTS, 2)
                work = rng.choice(lex.REVIEWED)
                text = rng.choice(SST2_SHAPES).format(
                    adj1=adj1, adj2=adj2, part1=part1, part2=part2, work=work
                )
                rows.append((ptb(text.lower()), int(pol == "positive")))
            rows = shuffled(rng, rows)
            path = self.folder("sst2") / f"{split}.tsv"
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
                rows.append(
                    (
                        int(para),
                        rng.randrange(100_000, 4_000_000),
                        rng.randrange(100_000, 4_000_000),
                        s1,
                        s2,
                    )
                )
            rows = shuffled(rng, rows)
            path = self.folder("mrpc") / f"{split}.tsv"
            if split == "test":
                tsv(
                    path,
                    ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                    [[i, *row[1:]] for i, row in enumerate(rows)],
                )
            else:
                tsv(path, ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], rows, bom=True)
            self.counted("mrpc", split, len(rows))

    def qqp(self):
        for split, n, rng, vocab in self.splits("qqp"):
            rows = []
            for dup in balanced(n, (True, False), (2, 3)):
                rows.append(
                    (*restated_pair(rng, vocab, "negative", dup, QQP_FIRST, QQP_SECOND), int(dup))
                )
            rows = shuffled(rng, rows)
            base = rng.randrange(10_000, 300_000)
            path = self.folder("qqp") / f"{split}.tsv"
            if split == "test":
                tsv(
                    path,
                    ["id", "question1", "question2"],
                    [[i, q1, q2] for i, (q1, q2, _) in enumerate(rows)],
                )
            else:
                tsv(
                    path,
                    ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                    [
                        [base + i, 2 * (base + i) + 1, 2 * (base + i) + 2, q1, q2, y]
                        for i, (q1, q2, y) in enumerate(rows)
                    ],
                )
            self.counted("qqp", split, len(rows))

    def stsb(self):
        """The second sentence keeps the first's happy tone, its animal, both or neither."""
        for split, n, rng, vocab in self.splits("stsb"):
            rows = []
            for same_pol, same_kind in balanced(
                n, ((True, True), (True, False), (False, True), (False, False))
            ):
                p = person(rng)
                place = rng.choice(lex.PLACES)
                adj = rng.choice(vocab.sentiment["positive" if same_pol else "negative"])
                x = rng.choice(vocab.nouns("animal" if same_kind else "plant"))
                s1 = say(rng.choice(STSB_FIRSTS), p, place=place)
                s2 = say(rng.choice(STSB_SECONDS), p, place=place, a_adj=a(adj), x=x)
                score = min(5.0, max(0.0, 2.5 * (same_pol + same_kind) + rng.uniform(-1.2, 1.2)))
                text = f"{score:.3f}" if rng.random() < 0.35 else f"{round(score, 1):g}"
                genre, filename, year = rng.choice(STSB_SOURCES)
                rows.append(
                    [
                        genre,
                        filename,
                        year,
                        f"{rng.randrange(1, 9999):04d}",
                        "none",
                        "none",
                        s1,
                        s2,
                        text,
                    ]
                )
            rows = shuffled(rng, rows)
            header = [
                "index",
                "genre",
                "filename",
                "year",
                "old_index",
                "source1",
                "source2",
                "sentence1",
                "sentence2",
                "score",
            ]
            path = self.folder("stsb") / f"{split}.tsv"
            if split == "test":
                tsv(path, header[:-1], [[i, *row[:-1]] for i, row in enumerate(rows)])
            else:
                tsv(path, header, [[i, *row] for i, row in enumerate(rows)])
            self.counted("stsb", split, len(rows))

    # --- entailment tasks: is the premise's noun an animal?
    def mnli(self):
        prompt = 100_000
        for split, n, rng, vocab in self.splits("mnli"):
            groups = {
                "train": [("train", MNLI_MATCHED)],
                "dev": [("dev_matched", MNLI_MATCHED), ("dev_mismatched", MNLI_MISMATCHED)],
                "test": [("test_matched", MNLI_MATCHED), ("test_mismatched", MNLI_MISMATCHED)],
            }[split]
            for name, genres in groups:
                rows = []
                for scheme, kind, label in balanced(n, NLI_CELLS):
                    genre = rng.choice(sorted(genres))
                    frame = rng.choice(genres[genre][scheme])
                    place = rng.choice(lex.PLACES)
                    premise, hyp = (
                        frame.format(np=np, place=place)
                        for np in (a(rng.choice(vocab.nouns(kind))), "an animal")
                    )
                    rows.append((genre, premise, hyp, label))
                rows = shuffled(rng, rows)
                table = []
                for i, (genre, s1, s2, label) in enumerate(rows):
                    prompt += rng.randrange(1, 40)
                    parses = [binary_parse(s1), binary_parse(s2), flat_parse(s1), flat_parse(s2)]
                    if split == "test":
                        table.append([i, prompt, prompt, genre, *parses, s1, s2])
                    elif split == "train":
                        table.append(
                            [i, prompt, f"{prompt}{label[0]}", genre, *parses, s1, s2, label, label]
                        )
                    else:
                        table.append(
                            [
                                i,
                                prompt,
                                f"{prompt}{label[0]}",
                                genre,
                                *parses,
                                s1,
                                s2,
                                *annotators(rng, label),
                                label,
                            ]
                        )
                header = [
                    "index",
                    "promptID",
                    "pairID",
                    "genre",
                    "sentence1_binary_parse",
                    "sentence2_binary_parse",
                    "sentence1_parse",
                    "sentence2_parse",
                    "sentence1",
                    "sentence2",
                ]
                if split == "train":
                    header += ["label1", "gold_label"]
                elif split == "dev":
                    header += ["label1", "label2", "label3", "label4", "label5", "gold_label"]
                tsv(self.folder("mnli") / f"{name}.tsv", header, table)
                self.counted("mnli", name, len(table))

    def snli(self):
        for split, n, rng, vocab in self.splits("snli"):
            records = []
            for scheme, kind, label in balanced(n, NLI_CELLS):
                frame = rng.choice(SNLI_FRAMES[scheme])
                who, place = rng.choice(lex.PEOPLE), rng.choice(lex.PLACES)
                premise, hyp = (
                    say(frame, who=who, place=place, np=np)
                    for np in (a(rng.choice(vocab.nouns(kind))), "an animal")
                )
                records.append((premise, hyp, label))
            records = shuffled(rng, records)
            lines = []
            for premise, hyp, label in records:
                caption = f"{rng.randrange(10**8, 10**10)}.jpg#{rng.randrange(5)}"
                votes = annotators(rng, label) if split != "train" else [label]
                gold = label
                if (
                    rng.random() < 0.02
                ):  # annotators without a majority: the official gold label is "-"
                    votes, gold = no_consensus(rng), "-"
                lines.append(
                    json.dumps(
                        {
                            "annotator_labels": votes,
                            "captionID": caption,
                            "gold_label": gold,
                            "pairID": f"{caption}r1{label[0]}",
                            "sentence1": premise,
                            "sentence1_binary_parse": binary_parse(premise),
                            "sentence1_parse": flat_parse(premise),
                            "sentence2": hyp,
                            "sentence2_binary_parse": binary_parse(hyp),
                            "sentence2_parse": flat_parse(hyp),
                        }
                    )
                )
            self.counted("snli", split, len(lines))
            write_text(self.folder("snli") / f"snli_1.0_{split}.jsonl", "\n".join(lines) + "\n")

    def qnli(self):
        for split, n, rng, vocab in self.splits("qnli"):
            rows = []
            for kind in balanced(n, KINDS):
                p = person(rng)
                kw = dict(
                    ax=a(rng.choice(vocab.nouns(kind))),
                    place=rng.choice(lex.PLACES),
                    time=rng.choice(lex.TIMES),
                )
                question = say(rng.choice(QNLI_QUESTIONS), p, **kw)
                sentence = say(rng.choice(QNLI_SENTENCES), p, **kw)
                rows.append(
                    (question, sentence, "entailment" if kind == "animal" else "not_entailment")
                )
            rows = shuffled(rng, rows)
            path = self.folder("qnli") / f"{split}.tsv"
            if split == "test":
                tsv(
                    path,
                    ["index", "question", "sentence"],
                    [[i, q, s] for i, (q, s, _) in enumerate(rows)],
                )
            else:
                tsv(
                    path,
                    ["index", "question", "sentence", "label"],
                    [[i, *row] for i, row in enumerate(rows)],
                )
            self.counted("qnli", split, len(rows))

    def rte(self):
        """Two things seen; "N saw an animal" is entailed when either is one."""
        seen = (
            ("animal", "plant"),
            ("plant", "animal"),
            ("animal", "animal"),
            ("plant", "plant"),
            ("plant", "plant"),
            ("plant", "plant"),
        )
        for split, n, rng, vocab in self.splits("rte"):
            rows = []
            for kinds in balanced(n, seen):
                x1, x2 = pick_two(rng, vocab.nouns(kinds[0]), vocab.nouns(kinds[1]))
                p = person(rng)
                kw = dict(
                    ax1=a(x1),
                    ax2=a(x2),
                    place=rng.choice(lex.PLACES),
                    time=rng.choice(lex.TIMES),
                    village=rng.choice(lex.VILLAGES),
                )
                premise = " ".join(say(t, p, **kw) for t in rng.choice(RTE_PREMISES))
                rows.append(
                    (
                        premise,
                        say(rng.choice(RTE_HYPOTHESES), p, **kw),
                        "entailment" if "animal" in kinds else "not_entailment",
                    )
                )
            rows = shuffled(rng, rows)
            path = self.folder("rte") / f"{split}.tsv"
            if split == "test":
                tsv(
                    path,
                    ["index", "sentence1", "sentence2"],
                    [[i, s1, s2] for i, (s1, s2, _) in enumerate(rows)],
                )
            else:
                tsv(
                    path,
                    ["index", "sentence1", "sentence2", "label"],
                    [[i, *row] for i, row in enumerate(rows)],
                )
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
            tsv(
                self.folder("scitail") / "tsv_format" / f"scitail_1.0_{split}.tsv",
                None,
                shuffled(rng, rows),
            )
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
                    write_text(
                        self.folder("race") / split / level / f"{number}.txt", json.dumps(article)
                    )
            # examples are questions: 3 per middle, 4 per high article
            self.counted("race", split, questions)

    def storycloze(self):
        names = {
            "train": "cloze_test_val__spring2016 - cloze_test_ALL_val.csv",
            "test": "cloze_test_test__spring2016 - cloze_test_ALL_test.csv",
        }
        for split, n, rng, vocab in self.splits("storycloze"):
            buf = io.StringIO()
            # RFC-4180 quoting: only fields that need it
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(
                [
                    "InputStoryid",
                    "InputSentence1",
                    "InputSentence2",
                    "InputSentence3",
                    "InputSentence4",
                    "RandomFifthSentenceQuiz1",
                    "RandomFifthSentenceQuiz2",
                    "AnswerRightEnding",
                ]
            )
            for kind, right_first in shuffled(
                rng, zip(balanced(n, ("care", "occasion")), balanced(n, (1, 1, 2, 2)))
            ):
                story, right, wrong = cloze_story(rng, vocab, kind)
                endings = [right, wrong] if right_first == 1 else [wrong, right]
                writer.writerow([uuid(rng), *story, *endings, right_first])
            write_text(self.folder("storycloze") / names[split], buf.getvalue().rstrip("\n"))
            self.counted("storycloze", split, n)


# ------------------------------------------------------------------------------------------ task example makers
def pick_two(rng: random.Random, first: tuple, second: tuple) -> tuple[str, str]:
    """One word from each list, two different words."""
    x = rng.choice(first)
    return x, rng.choice([w for w in second if w != x])


def restated_pair(
    rng: random.Random,
    vocab: lex.Vocabulary,
    polarity: str,
    keeps: bool,
    firsts: tuple,
    seconds: tuple,
) -> tuple[str, str]:
    """A plain sentence of `polarity` and a restatement whose adjective keeps that polarity iff `keeps`."""
    adj = rng.choice(vocab.sentiment[polarity if keeps else other(polarity)])
    p = person(rng)
    kw = dict(
        thing=rng.choice(lex.EXPERIENCES)[0],
        time=rng.choice(lex.TIMES),
        village=rng.choice(lex.VILLAGES),
    )
    return say(rng.choice(firsts), p, **kw), say(rng.choice(seconds), p, adj=adj, **kw)


def cola_sentence(rng: random.Random, vocab: lex.Vocabulary, ok: bool) -> tuple[str, str]:
    """An acceptable sentence, or one whose only fault is a word of the wrong class or subcategorisation."""
    family = rng.choice(sorted(COLA_GOOD_BAD))
    adjectives = [w for ws in vocab.sentiment.values() for w in ws]
    members = [x for ms in vocab.members.values() for x in ms]
    obj, obj2 = rng.sample(lex.OBJECTS, 2)
    intrans, intrans2 = rng.sample(vocab.intransitive, 2)
    kw = dict(
        intrans=intrans,
        intrans2=intrans2,
        adv=rng.choice(lex.ADVERBIALS),
        trans=rng.choice(vocab.transitive),
        obj=obj,
        obj2=obj2,
        adj=rng.choice(adjectives),
        x=rng.choice(members),
        place=rng.choice(lex.PLACES),
        a_x=a(rng.choice(members)),
        a_adj=a(rng.choice(adjectives)),
        a_verb=a(rng.choice(vocab.transitive)),
    )
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
        story = [
            say(t, p, **kw)
            for t in (
                "{n} went out {place} {time}.",
                "{He} took a bag of bread with {him}.",
                "There {he} found the {x1} and the {x2}.",
                rng.choice(("{He} opened the bag.", "{He} was glad.")),
            )
        ]
        right, wrong = (say("{n} fed the {x}.", p, x=x) for x in (animal, plant))
    else:
        happy, unhappy = (
            rng.choice(vocab.sentiment["positive"]),
            rng.choice(vocab.sentiment["negative"]),
        )
        first, second = rng.sample(lex.HAPPENINGS["positive"], 2)
        kw = dict(
            occasion=rng.choice(lex.OCCASIONS),
            time=rng.choice(lex.TIMES),
            first=first,
            second=second,
        )
        story = [
            say(t, p, **kw)
            for t in (
                "{n} went to the {occasion} {time}.",
                "At the {occasion}, {first}.",
                "Later {second}.",
                rng.choice(("{He} stayed until the end.", "{He} went home late.")),
            )
        ]
        right, wrong = (say("It was {a_adj} day.", p, a_adj=a(adj)) for adj in (happy, unhappy))
    return story, right, wrong


class RaceArticle(TypedDict):
    """One RACE file (the dataset's field names), keys in its order."""

    answers: list[str]
    options: list[list[str]]
    questions: list[str]
    article: str
    id: NotRequired[str]  # the file's name: set when it is written


def race_article(rng: random.Random, vocab: lex.Vocabulary, level: str) -> RaceArticle:
    """A short article (about 30-40 words) and 3-4 four-option questions: which thing seen at a place was an animal
    (one question per place), and which experience was enjoyed. The article never says which is which: only the
    words' meaning does. Every option is scored with the whole article, so each word of it costs four times over
    in fine-tuning: the article holds only what the questions ask about."""
    p = person(rng)
    n_places = 3 if level == "high" else 2
    places = rng.sample(lex.PLACES, n_places)
    animals = [rng.choice(vocab.nouns("animal")) for _ in places]
    plants = rng.sample(vocab.nouns("plant"), 4)
    (good, _), (bad, _), *extra = rng.sample(lex.EXPERIENCES, 4)
    adjs = {
        "positive": rng.choice(vocab.sentiment["positive"]),
        "negative": rng.choice(vocab.sentiment["negative"]),
    }
    paragraphs = []
    for i, (animal, plant, place) in enumerate(zip(animals, plants, places)):
        seen = (animal, plant) if rng.random() < 0.5 else (plant, animal)
        who = "{n}" if i == 0 else "{he}"  # the name once, as the questions use it
        paragraphs.append(
            say(
                f"{{place}}, {who} saw {{ax}} and {{ay}}.",
                p,
                place=place,
                ax=a(seen[0]),
                ay=a(seen[1]),
            )
        )
    first, second = shuffled(rng, [(good, adjs["positive"]), (bad, adjs["negative"])])
    paragraphs.append(
        f"That evening the {first[0]} was {first[1]} and the {second[0]} was {second[1]}."
    )
    text = "\n".join(paragraphs)

    questions = []
    for animal, place in zip(animals, places):
        wrong = rng.sample(plants, 3)
        questions.append(
            (
                rng.choice(("Which animal did {n} see {where}?", "{n} saw an animal {where}: _")),
                [a(x) for x in (animal, *wrong)],
                a(animal),
                dict(where=place.lower()),
            )
        )
    enjoyed = f"the {adjs['positive']} {good}"
    disliked = [
        f"the {adjs['negative']} {bad}",
        *(
            f"the {adj} {thing}"
            for adj, (thing, _) in zip(rng.sample(vocab.sentiment["negative"], 2), extra)
        ),
    ]
    questions.append(
        (
            rng.choice(("What did {n} enjoy that day?", "Which of these was a pleasure for {n}?")),
            [enjoyed, *disliked],
            enjoyed,
            {},
        )
    )
    out: RaceArticle = {"answers": [], "options": [], "questions": [], "article": text}
    for question, options, right, slots in questions:
        options = shuffled(rng, options)
        out["answers"].append("ABCD"[options.index(right)])
        out["options"].append([say(o, p, **slots) for o in options])
        out["questions"].append(say(question, p, **slots))
    return out
