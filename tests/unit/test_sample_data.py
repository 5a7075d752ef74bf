"""The offline sample data: deterministic, in the official layouts, balanced, short, and built so that only a model
that learned word meaning from the books can generalise from the train split to dev (held-out lexicon halves).

The files are parsed here with small independent readers (csv with QUOTE_NONE for GLUE, json, csv for Story Cloze),
not with gpt1.tasks, so a layout slip in the generator cannot hide behind the same slip in a loader. Determinism (the
same bytes for a seed, pinned by digest): tests/integration/test_sample_data_determinism.py.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import random
import re
from pathlib import Path

import pytest

from gpt1.cli import main as cli_main
from gpt1.sample_data import lexicon as lex
from gpt1.sample_data import write_sample_data
from gpt1.tasks import TASKS

NLI3 = {"entailment", "neutral", "contradiction"}
STORY_HEADER = ["InputStoryid", "InputSentence1", "InputSentence2", "InputSentence3", "InputSentence4",
                "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding"]
SNLI_KEYS = ["annotator_labels", "captionID", "gold_label", "pairID", "sentence1", "sentence1_binary_parse",
             "sentence1_parse", "sentence2", "sentence2_binary_parse", "sentence2_parse"]
CATEGORY_WORDS = ({c.name for c in lex.CATEGORIES} | {c.plural for c in lex.CATEGORIES}
                  | {k.name for k in lex.KINDS.values()} | {k.plural for k in lex.KINDS.values()})
STORY_FILES = {"train": "cloze_test_val__spring2016 - cloze_test_ALL_val.csv",
               "test": "cloze_test_test__spring2016 - cloze_test_ALL_test.csv"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample") / "seed0"
    return out, write_sample_data(out, seed=0)


@pytest.fixture(scope="module")
def root(sample) -> Path:
    return sample[0]


@pytest.fixture(scope="module")
def tasks(root) -> Path:
    return root / "tasks"


def read_tsv(path: Path) -> list[list[str]]:
    text = path.read_bytes().decode("utf-8")
    return list(csv.reader(io.StringIO(text.lstrip("\ufeff")), delimiter="\t", quoting=csv.QUOTE_NONE))


UUID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+", UUID.sub(" ", text).lower())


def all_files(root: Path) -> list[str]:
    """The generated files (not the stage's own `.done` marker of a `gpt1 sample-data` run)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".done")


# ------------------------------------------------------------------------------------------------- determinism
def test_cli_rejects_missing_out(capsys):
    assert cli_main(["sample-data"]) == 2  # argparse's usage error, as an exit code (no SystemExit escapes main)
    assert "--out" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------- layouts
GLUE = [  # (file, header or None, columns, label column, labels)
    ("CoLA/train.tsv", None, 4, 1, {"0", "1"}),
    ("CoLA/dev.tsv", None, 4, 1, {"0", "1"}),
    ("CoLA/test.tsv", ["index", "sentence"], 2, None, None),
    ("SST-2/train.tsv", ["sentence", "label"], 2, 1, {"0", "1"}),
    ("SST-2/dev.tsv", ["sentence", "label"], 2, 1, {"0", "1"}),
    ("SST-2/test.tsv", ["index", "sentence"], 2, None, None),
    ("MRPC/train.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], 5, 0, {"0", "1"}),
    ("MRPC/dev.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], 5, 0, {"0", "1"}),
    ("MRPC/test.tsv", ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"], 5, None, None),
    ("STS-B/train.tsv", ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                         "sentence2", "score"], 10, None, None),
    ("STS-B/dev.tsv", ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                       "sentence2", "score"], 10, None, None),
    ("STS-B/test.tsv", ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                        "sentence2"], 9, None, None),
    ("QQP/train.tsv", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], 6, 5, {"0", "1"}),
    ("QQP/dev.tsv", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], 6, 5, {"0", "1"}),
    ("QQP/test.tsv", ["id", "question1", "question2"], 3, None, None),
    ("MNLI/train.tsv", ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                        "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"],
     12, 11, NLI3),
    *[(f"MNLI/{name}.tsv", ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1", "sentence2",
                            "label1", "label2", "label3", "label4", "label5", "gold_label"], 16, 15, NLI3)
      for name in ("dev_matched", "dev_mismatched")],
    *[(f"MNLI/{name}.tsv", ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"],
       10, None, None) for name in ("test_matched", "test_mismatched")],
    *[(f"{task}/{split}.tsv", ["index", first, second, "label"], 4, 3, {"entailment", "not_entailment"})
      for task, first, second in (("QNLI", "question", "sentence"), ("RTE", "sentence1", "sentence2"))
      for split in ("train", "dev")],
    ("QNLI/test.tsv", ["index", "question", "sentence"], 3, None, None),
    ("RTE/test.tsv", ["index", "sentence1", "sentence2"], 3, None, None),
    *[(f"SciTailV1.1/tsv_format/scitail_1.0_{split}.tsv", None, 3, 2, {"entails", "neutral"})
      for split in ("train", "dev", "test")],
]


@pytest.mark.parametrize("name,header,columns,label_col,labels", GLUE, ids=[g[0] for g in GLUE])
def test_tsv_layout(tasks, name, header, columns, label_col, labels):
    rows = read_tsv(tasks / name)
    if header:
        assert rows[0] == header
        rows = rows[1:]
    assert len(rows) >= 50
    assert {len(r) for r in rows} == {columns}
    for r in rows:  # no empty field, except CoLA's author's mark
        assert all(f.strip() for f in (r[:2] + r[3:] if name.startswith("CoLA/") and columns == 4 else r)), r
    if labels:
        assert {r[label_col] for r in rows} == labels
    if header and header[0] in ("index", "id"):
        assert [int(r[0]) for r in rows] == sorted(int(r[0]) for r in rows)


def test_official_quirks(tasks):
    assert (tasks / "MRPC/train.tsv").read_bytes().startswith(b"\xef\xbb\xbfQuality\t")
    assert (tasks / "MRPC/dev.tsv").read_bytes().startswith(b"\xef\xbb\xbfQuality\t")
    assert (tasks / "MRPC/test.tsv").read_bytes().startswith(b"index\t")
    assert all(r[0].endswith(" ") and not r[0].endswith("  ") for r in read_tsv(tasks / "SST-2/train.tsv")[1:])
    assert not (tasks / "CoLA/dev.tsv").read_bytes().endswith(b"\n")
    assert (tasks / "CoLA/train.tsv").read_bytes().endswith(b"\n")
    for row in read_tsv(tasks / "CoLA/train.tsv"):  # the author's mark: '*' exactly on unacceptable rows
        assert row[2] == ("*" if row[1] == "0" else "")
    scores = [r[9] for r in read_tsv(tasks / "STS-B/train.tsv")[1:]]
    assert any(re.fullmatch(r"\d\.\d{3}", s) for s in scores) and any(re.fullmatch(r"\d(\.\d)?", s) for s in scores)
    for name in ("dev_matched", "dev_mismatched"):  # gold label = majority of the five annotators
        for row in read_tsv(tasks / f"MNLI/{name}.tsv")[1:]:
            assert collections.Counter(row[10:15])[row[15]] >= 3
            assert row[2] == row[1] + row[15][0]
    genres = {split: {r[3] for r in read_tsv(tasks / f"MNLI/{split}.tsv")[1:]}
              for split in ("train", "dev_matched", "dev_mismatched")}
    assert genres["dev_matched"] <= genres["train"] and not genres["dev_mismatched"] & genres["train"]


def test_snli_jsonl(tasks):
    for split in ("train", "dev", "test"):
        lines = (tasks / f"snli_1.0/snli_1.0_{split}.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        assert all(list(r) == SNLI_KEYS for r in records)
        gold = collections.Counter(r["gold_label"] for r in records)
        assert set(gold) == NLI3 | {"-"} and 0 < gold["-"] < 0.05 * len(records)
        for r in records:
            votes = collections.Counter(r["annotator_labels"])
            if r["gold_label"] == "-":
                assert max(votes.values()) < 3
            else:
                assert votes[r["gold_label"]] == max(votes.values())
            assert r["pairID"].startswith(r["captionID"]) and r["sentence1"] and r["sentence2"]
            assert r["sentence1_binary_parse"].count("(") == r["sentence1_binary_parse"].count(")")


def test_race_articles(tasks):
    for split in ("train", "dev", "test"):
        for level in ("middle", "high"):
            files = sorted((tasks / "RACE" / split / level).glob("*.txt"))
            assert len(files) >= 10
            for path in files:
                raw = path.read_text(encoding="ascii")
                assert not raw.endswith("\n")
                article = json.loads(raw)
                assert list(article) == ["answers", "options", "questions", "article", "id"]
                assert article["id"] == f"{level}{path.name}"
                n = len(article["questions"])
                assert n >= 3 and len(article["answers"]) == n and len(article["options"]) == n
                assert set(article["answers"]) <= set("ABCD")
                assert all(len(opts) == 4 and len(set(opts)) == 4 for opts in article["options"])
                assert "\n" in article["article"]
                # answers need the meaning of a word: the article never names a category or kind outright
                assert not CATEGORY_WORDS & set(tokens(article["article"])), path


def test_story_cloze_csv(tasks):
    for split, name in STORY_FILES.items():
        raw = (tasks / "StoryCloze" / name).read_text(encoding="utf-8")
        assert not raw.endswith("\n")
        rows = list(csv.reader(io.StringIO(raw)))
        assert rows[0] == STORY_HEADER
        assert {len(r) for r in rows[1:]} == {8} and {r[7] for r in rows[1:]} == {"1", "2"}
        assert any("," in field for r in rows[1:] for field in r)  # so some fields are quoted (RFC 4180)
        assert re.search(r',"[^"]*,[^"]*",', raw)
        assert all(UUID.fullmatch(r[0]) for r in rows[1:])


def test_summary_counts_match_files(sample, tasks):
    _, summary = sample
    assert len(read_tsv(tasks / "CoLA/dev.tsv")) == summary["tasks"]["cola"]["dev"]
    assert len(read_tsv(tasks / "MNLI/dev_mismatched.tsv")) - 1 == summary["tasks"]["mnli"]["dev_mismatched"]
    race_dev = sum(len(json.loads(p.read_text())["questions"]) for p in (tasks / "RACE/dev").rglob("*.txt"))
    assert race_dev == summary["tasks"]["race"]["dev"]
    assert set(summary["tasks"]) == set(TASKS)  # every registered task has sample files


# ------------------------------------------------------------------------------------------- labels and lengths
def labelled_splits(tasks: Path) -> dict[str, list[str]]:
    """task/split -> label of every example (SNLI without its '-' rows)."""
    out = {}
    for split in ("train", "dev"):
        out[f"cola/{split}"] = [r[1] for r in read_tsv(tasks / f"CoLA/{split}.tsv")]
        for task, col in (("SST-2", 1), ("MRPC", 0), ("QQP", 5), ("QNLI", 3), ("RTE", 3)):
            out[f"{task}/{split}"] = [r[col] for r in read_tsv(tasks / f"{task}/{split}.tsv")[1:]]
    for name, col in (("train", 11), ("dev_matched", 15), ("dev_mismatched", 15)):
        out[f"mnli/{name}"] = [r[col] for r in read_tsv(tasks / f"MNLI/{name}.tsv")[1:]]
    for split in ("train", "dev", "test"):
        records = map(json.loads, (tasks / f"snli_1.0/snli_1.0_{split}.jsonl").read_text().splitlines())
        out[f"snli/{split}"] = [r["gold_label"] for r in records if r["gold_label"] != "-"]
        out[f"scitail/{split}"] = [r[2] for r in read_tsv(tasks / f"SciTailV1.1/tsv_format/scitail_1.0_{split}.tsv")]
    for split, name in STORY_FILES.items():
        out[f"storycloze/{split}"] = [r[7] for r in list(csv.reader(io.StringIO(
            (tasks / "StoryCloze" / name).read_text())))[1:]]
    return out


MAJORITY = {"cola": 0.6, "MRPC": 0.6, "QQP": 0.6}  # deliberately skewed like the real data; the rest balanced


def test_labels_are_balanced(tasks):
    for name, labels in labelled_splits(tasks).items():
        counts = collections.Counter(labels)
        share = max(counts.values()) / len(labels)
        expected = MAJORITY.get(name.split("/")[0], 1 / len(counts))
        assert abs(share - expected) < 0.03, (name, counts)
    answers = collections.Counter(a for p in (tasks / "RACE").rglob("*.txt") for a in json.loads(p.read_text())["answers"])
    assert min(answers.values()) > 0.15 * sum(answers.values())
    scores = [float(r[9]) for r in read_tsv(tasks / "STS-B/dev.tsv")[1:]]
    assert all(0 <= s <= 5 for s in scores) and all(any(k <= s < k + 1 for s in scores) for k in range(5))


def test_task_inputs_are_short(tasks):
    texts = [r[3] for r in read_tsv(tasks / "CoLA/train.tsv")]
    texts += [r[0] for r in read_tsv(tasks / "SST-2/train.tsv")[1:]]
    pairs = [(r[3], r[4]) for r in read_tsv(tasks / "MRPC/dev.tsv")[1:]]
    pairs += [(r[8], r[9]) for r in read_tsv(tasks / "MNLI/dev_mismatched.tsv")[1:]]
    pairs += [(r[1], r[2]) for task in ("QNLI", "RTE") for r in read_tsv(tasks / f"{task}/dev.tsv")[1:]]
    pairs += [(r[7], r[8]) for r in read_tsv(tasks / "STS-B/dev.tsv")[1:]]
    assert max(len(t.split()) for t in texts) <= 25
    assert max(len(a.split()) + len(b.split()) for a, b in pairs) <= 50
    for path in (tasks / "RACE").rglob("*.txt"):
        article = json.loads(path.read_text())
        size = len(article["article"].split())
        assert 30 <= size <= 90, path
        longest = max(len(q.split()) + max(len(o.split()) for o in opts)
                      for q, opts in zip(article["questions"], article["options"]))
        assert size + longest <= 105, path
    rows = list(csv.reader(io.StringIO((tasks / "StoryCloze" / STORY_FILES["test"]).read_text())))[1:]
    assert max(sum(len(s.split()) for s in r[1:5]) + max(len(r[5].split()), len(r[6].split())) for r in rows) <= 70


# -------------------------------------------------------------------------------------------- the lexicon design
def halves_words(half: str) -> set[str]:
    return lex.vocabulary(half).words


def split_files(tasks: Path, task: str, split: str) -> list[Path]:
    """The files of one task split ('dev' covers MNLI's matched and mismatched files)."""
    if task == "RACE":
        return sorted((tasks / "RACE" / split).rglob("*.txt"))
    if task == "StoryCloze":
        return [tasks / "StoryCloze" / STORY_FILES[split]] if split in STORY_FILES else []
    if task == "snli_1.0":
        return [tasks / task / f"snli_1.0_{split}.jsonl"]
    if task == "SciTailV1.1":
        return [tasks / task / "tsv_format" / f"scitail_1.0_{split}.tsv"]
    if task == "MNLI" and split != "train":
        return [tasks / task / f"{split}_{m}.tsv" for m in ("matched", "mismatched")]
    return [tasks / task / f"{split}.tsv"]


TASK_DIRS = ["CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "snli_1.0", "SciTailV1.1", "RACE",
             "StoryCloze"]


def test_train_and_eval_splits_use_disjoint_lexicon_halves(tasks):
    train_half, eval_half = halves_words("train"), halves_words("eval")
    assert not train_half & eval_half
    lexicon = train_half | eval_half
    for task in TASK_DIRS:
        used = {split: {w for path in split_files(tasks, task, split) for w in tokens(path.read_text())} & lexicon
                for split in ("train", "dev", "test")}
        assert used["train"] and used["train"] <= train_half, (task, sorted(used["train"] - train_half))
        held_out = used["dev"] | used["test"]
        assert held_out and held_out <= eval_half, (task, sorted(held_out - eval_half))


POLARITY = {**{w: 1 for w in lex.POSITIVE}, **{w: 0 for w in lex.NEGATIVE}}
ANIMAL = {x: int(c.kind == "animal") for c in lex.CATEGORIES for x in c.members}


def meaning(text: str, table: dict[str, int]) -> list[int]:
    return [table[w] for w in tokens(text) if w in table]


def test_each_label_follows_from_one_word_property(tasks):
    """The design: a label is the polarity of the (last) adjective or whether the noun names an animal."""
    for split in ("train", "dev"):
        for sentence, label in read_tsv(tasks / f"SST-2/{split}.tsv")[1:]:
            assert set(meaning(sentence, POLARITY)) == {int(label)}
        for row in read_tsv(tasks / f"MRPC/{split}.tsv")[1:]:
            assert meaning(row[3], POLARITY) == [] and meaning(row[4], POLARITY) == [int(row[0])]
        for row in read_tsv(tasks / f"QQP/{split}.tsv")[1:]:
            assert meaning(row[3], POLARITY) == [] and meaning(row[4], POLARITY) == [1 - int(row[5])]
        for row in read_tsv(tasks / f"STS-B/{split}.tsv")[1:]:
            agree = sum(meaning(row[8], POLARITY) + meaning(row[8], ANIMAL))
            assert abs(float(row[9]) - 2.5 * agree) <= 1.2 + 1e-9, row
        for _, question, sentence, label in read_tsv(tasks / f"QNLI/{split}.tsv")[1:]:
            assert meaning(sentence, ANIMAL) == [int(label == "entailment")]
        for _, premise, _, label in read_tsv(tasks / f"RTE/{split}.tsv")[1:]:
            assert max(meaning(premise, ANIMAL)) == int(label == "entailment")
    for split in ("train", "dev", "test"):
        for premise, hypothesis, label in read_tsv(tasks / f"SciTailV1.1/tsv_format/scitail_1.0_{split}.tsv"):
            assert meaning(hypothesis, ANIMAL) == [int(label == "entails")]
        for line in (tasks / f"snli_1.0/snli_1.0_{split}.jsonl").read_text().splitlines():
            record = json.loads(line)
            label = record["gold_label"] if record["gold_label"] != "-" else record["pairID"][-1]
            assert (meaning(record["sentence1"], ANIMAL) == [1]) == label.startswith("e")
    for split, name in STORY_FILES.items():
        for row in list(csv.reader(io.StringIO((tasks / "StoryCloze" / name).read_text())))[1:]:
            right, wrong = (row[4 + int(row[7])], row[7 - int(row[7])])
            assert meaning(right, ANIMAL) + meaning(right, POLARITY) == [1], row
            assert meaning(wrong, ANIMAL) + meaning(wrong, POLARITY) == [0], row


SLOT_PHRASES = re.compile("|".join(sorted((re.escape(x.lower()) for x in lex.PLACES + lex.TIMES + lex.PEOPLE),
                                           key=len, reverse=True)))
SLOT_WORDS = ({n.lower() for n in lex.FEMALE_NAMES + lex.MALE_NAMES + lex.VILLAGES}
              | {thing for thing, _ in lex.EXPERIENCES} | set(lex.REVIEWED) | set(lex.REVIEW_PARTS))


def masked(text: str) -> str:
    """The text with its meaning-bearing words replaced by W and its scene slots (names, places, times, things)
    by S: what is left is the surface form a model from scratch could key on."""
    lexicon = set(POLARITY) | set(ANIMAL)
    text = SLOT_PHRASES.sub(" S ", UUID.sub(" ", text).lower())
    return " ".join("W" if w in lexicon else "S" if w in SLOT_WORDS else w for w in re.findall(r"[a-z]+|S", text))


def surface_purity(rows: list[tuple[str, str]]) -> float:
    """How well the masked text predicts the label: the share of examples whose masked text's most frequent label
    is theirs (counting surface forms seen at least 4 times)."""
    groups = collections.defaultdict(collections.Counter)
    for text, label in rows:
        groups[masked(text)][label] += 1
    repeated = [c for c in groups.values() if sum(c.values()) >= 4]
    assert sum(sum(c.values()) for c in repeated) > len(rows) / 3  # the surface forms repeat: the check has teeth
    return sum(max(c.values()) for c in repeated) / sum(sum(c.values()) for c in repeated)


def test_surface_form_alone_does_not_give_binary_labels_away(tasks):
    """A model from scratch could learn a surface shortcut from the train split and keep it on dev: the masked
    text must predict the binary tasks' labels no better than it predicts the same labels shuffled."""
    binary = {
        "SST-2": [(r[0], r[1]) for r in read_tsv(tasks / "SST-2/train.tsv")[1:]],
        "MRPC": [(r[3] + " | " + r[4], r[0]) for r in read_tsv(tasks / "MRPC/train.tsv")[1:]],
        "QQP": [(r[3] + " | " + r[4], r[5]) for r in read_tsv(tasks / "QQP/train.tsv")[1:]],
        "QNLI": [(r[1] + " | " + r[2], r[3]) for r in read_tsv(tasks / "QNLI/train.tsv")[1:]],
        "RTE": [(r[1] + " | " + r[2], r[3]) for r in read_tsv(tasks / "RTE/train.tsv")[1:]],
        "SciTail": [(r[0] + " | " + r[1], r[2])
                    for r in read_tsv(tasks / "SciTailV1.1/tsv_format/scitail_1.0_train.tsv")],
    }
    rng = random.Random(0)
    for task, rows in binary.items():
        texts, labels = zip(*rows)
        chance = sum(surface_purity(list(zip(texts, rng.sample(labels, len(labels))))) for _ in range(20)) / 20
        assert surface_purity(rows) < chance + 0.06, (task, surface_purity(rows), chance)  # a shortcut: +0.2


@pytest.fixture(scope="module")
def paragraphs(root) -> list[set[str]]:
    out = []
    for path in sorted((root / "books").glob("*.txt")):
        out += [set(tokens(p)) for p in path.read_text(encoding="utf-8").split("\n\n")]
    return out


def test_books_shape_and_size(root, paragraphs):
    books = sorted((root / "books").glob("*.txt"))
    size = sum(p.stat().st_size for p in books)
    assert len(books) >= 5 and 1.5e6 <= size <= 5e6
    for path in books:
        text = path.read_text(encoding="utf-8")
        assert "CHAPTER I\n" in text and "\n\n" in text
        # one paragraph per line, as BooksCorpus: every line is a title, a heading or a whole paragraph
        assert all(not line or line.isupper() or line.endswith((".", "'", "?", "!")) for line in text.splitlines())
    types = set().union(*paragraphs)
    assert len(types) < 3000  # small enough for a ~2,000-merge BPE and a tiny model to learn


def test_books_teach_every_eval_word(paragraphs):
    index = collections.defaultdict(list)
    for i, words in enumerate(paragraphs):
        for w in words:
            index[w].append(i)
    v = lex.vocabulary("eval")
    cues = {pol: {r.split()[0] for r in lex.REACTIONS[pol]} | set(lex.MOODS[pol]) for pol in lex.REACTIONS}
    adjectives = {"positive": set(lex.POSITIVE), "negative": set(lex.NEGATIVE)}
    for pol, other in (("positive", "negative"), ("negative", "positive")):
        for adj in v.sentiment[pol]:
            around = [paragraphs[i] for i in index[adj]]
            assert sum(1 for p in around if p & cues[pol]) >= 20, adj
            assert not any(p & (cues[other] | adjectives[other]) for p in around), adj  # never a mixed signal
    for kind in ("animal", "plant"):
        for x in v.nouns(kind):
            around = [paragraphs[i] for i in index[x]]
            assert sum(1 for p in around if {kind, kind + "s"} & p) >= 50, x
    for verb in v.intransitive + v.transitive:
        assert len(index[verb]) >= 20, verb


@pytest.fixture(scope="module")
def following(root) -> dict[str, collections.Counter]:
    """word -> counts of the token right after it in the books (punctuation kept: "slept. Her" is no object)."""
    text = " ".join(p.read_text() for p in sorted((root / "books").glob("*.txt"))).lower()
    words = re.findall(r"[a-z]+|[^\sa-z]", text)
    after = collections.defaultdict(collections.Counter)
    for word, nxt in zip(words, words[1:]):
        after[word][nxt] += 1
    return after


def test_books_put_meaning_in_adjacent_words(following):
    """A tiny model learns adjacent-word statistics first (bigrams through the tied embedding), so every eval word
    must also show its meaning right next to it: "a dreadful mess", "the hungry heron ate", "fed the heron"."""
    v = lex.vocabulary("eval")
    for pol in ("positive", "negative"):
        other = "negative" if pol == "positive" else "positive"
        for adj in v.sentiment[pol]:
            assert sum(following[adj][noun] for noun in lex.OUTCOMES[pol]) >= 10, adj
            assert not any(following[adj][noun] for noun in lex.OUTCOMES[other]), adj
    first_words = {name: {a.split()[0] for a in kind.actions} for name, kind in lex.KINDS.items()}
    for kind, other in (("animal", "plant"), ("plant", "animal")):
        for x in v.nouns(kind):
            assert sum(following[x][w] for w in first_words[kind]) >= 20, x
            assert not any(following[x][w] for w in first_words[other]), x
            assert sum(following[mod][x] for mod in lex.KINDS[kind].modifiers) >= 20, x
            assert not any(following[mod][x] for mod in lex.KINDS[other].modifiers), x
    fed, watered = set(following["fed"]) - {"the"}, set(following["watered"]) - {"the"}
    assert not fed and not watered  # "fed the ...", "watered the ...": the noun comes two words on
    openers = {pol: {w.lower() for w in ws} for pol, ws in lex.OPENERS.items()}
    assert all(following["."][w] > 100 for ws in openers.values() for w in ws)


def test_who_is_fed_and_who_is_watered(root):
    text = " ".join(p.read_text() for p in sorted((root / "books").glob("*.txt"))).lower()
    fed = collections.Counter(re.findall(r"\bfed the (\w+)", text))
    watered = collections.Counter(re.findall(r"\bwatered the (\w+)", text))
    assert set(fed) <= {x for x, animal in ANIMAL.items() if animal} | {"hungry", "sleepy", "timid"}
    assert set(watered) <= {x for x, animal in ANIMAL.items() if not animal} | {"green", "leafy", "rooted"}
    assert min(fed[x] for x in lex.vocabulary("eval").nouns("animal")) >= 5


def test_verbs_keep_their_subcategorisation_in_the_books(following):
    for verb in lex.INTRANSITIVE:
        assert sum(following[verb].values()) >= 20, verb
        assert not {"the", "a", "an", "his", "her"} & set(following[verb]), (verb, following[verb])
    for verb in lex.TRANSITIVE:  # ... while verbs that need an object always have one
        assert following[verb] and set(following[verb]) <= {"the"}, (verb, following[verb])
