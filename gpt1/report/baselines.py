"""Non-neural baselines: what a linear model on the surface of the text scores on the rows a fine-tune was trained
and scored on, the bar a fine-tuned score is read against.

    rows = Rows.of(read_json("WORK/finetune/<key>/sst2/<data key>/metrics.json"))
    outcome = score(rows)          # {"method": ..., "metrics": {"accuracy": ..., "primary": ...}, "train_rows": ...}

    python -m gpt1.report.baselines --data DIR --tasks cola sst2 [--max-train-examples N]   # a table, no fine-tune

They live in the report because they are a yardstick of the report: made when the report is made, from what each
fine-tune recorded in its metrics.json (its data, its train cap, its evaluation split and cap, its files' digests),
so they see exactly the fine-tune's rows and the report's key (which hashes the fine-tunes' keys) changes with
them. They are neither part of a fine-tune nor of a task's definition (gpt1.tasks imports no model).

One method per kind of task, with fixed hyperparameters (the same bar for every run, no search; the values were
chosen by 5-fold cross-validation on the complete GLUE train files, never on a dev file) and a fixed seed:

- one text (CoLA, SST-2): tf-idf of word unigrams and bigrams (sublinear term frequency) -> logistic regression,
  C = TEXT_C, classes weighted by their inverse frequency (without it an imbalanced task such as CoLA predicts
  the majority class and its Matthews correlation is 0);
- two texts (MNLI, SNLI, SciTail, QNLI, RTE, MRPC, QQP): the overlap features of `pair_features` ->
  standardised -> logistic regression, C = PAIR_C; STS-B, a score: the same features -> ridge regression,
  alpha = RIDGE_ALPHA;
- multiple choice (RACE, Story Cloze): the answer whose tf-idf vector is nearest (cosine) to the context and
  question; the train rows give only the idf weights.

A train split with a single class is predicted as that class. Scores come from `gpt1.tasks.metrics.compute` on
the evaluation rows, with their groups, exactly as the fine-tune's.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpt1 import tasks
from gpt1.config import FinetuneConfig
from gpt1.finetune.rows import evenly_spaced, sources_digest
from gpt1.io import InputError
from gpt1.tasks import ChoiceExample, PairExample, TaskSpec

SEED = 0
TEXT_C = 3.0
PAIR_C = 0.1
RIDGE_ALPHA = 1.0
METHODS = {
    "text": "tf-idf word 1-2-grams, logistic regression",
    "pair": "word-overlap features, logistic regression",
    "score": "word-overlap features, ridge regression",
    "choice": "answer nearest the context (tf-idf cosine)",
}
SETTINGS = {
    "seed": SEED,
    "text_c": TEXT_C,
    "pair_c": PAIR_C,
    "ridge_alpha": RIDGE_ALPHA,
    "methods": METHODS,
}
WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Rows:
    """Where a fine-tune's train and evaluation rows are, as its metrics.json records them."""

    task: str
    data: str
    eval_split: str
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    max_bad_fraction: float = FinetuneConfig().max_bad_row_fraction
    # (split, sha256 of its files) as the fine-tune read them
    digests: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(cls, result: dict) -> Rows:
        """The rows of a metrics.json; KeyError when it does not record them."""
        settings, splits = result["finetune_config"], result["data"]["splits"]
        wanted = ("train", result["eval_split"])
        return cls(
            result["task"],
            result["data"]["path"],
            result["eval_split"],
            settings["max_train_examples"],
            settings["max_eval_examples"],
            settings["max_bad_row_fraction"],
            tuple(
                (name, splits[name]["sha256"])
                for name in wanted
                if "sha256" in splits.get(name, {})
            ),
        )

    def load(self, split: str, limit: int | None) -> list:
        data = tasks.load(self.task, self.data, split, self.max_bad_fraction)
        recorded = dict(self.digests).get(split)
        if recorded and sources_digest(data.report.sources) != recorded:
            raise InputError(
                f"{self.task}/{split}: the files changed since the fine-tune read them",
                file=", ".join(data.report.sources),
            )
        return [data[i] for i in evenly_spaced(len(data), limit)]


def score(rows: Rows) -> dict:
    """The non-neural baseline of `rows`' task trained on its train rows and scored on its evaluation rows."""
    started = time.perf_counter()
    spec = tasks.get(rows.task)
    train = rows.load("train", rows.max_train_examples)
    evaluation = rows.load(rows.eval_split, rows.max_eval_examples)
    labels = [ex.label for ex in evaluation]
    if any(label is None for label in labels):
        raise InputError(
            f"{rows.task}/{rows.eval_split}: unlabelled rows cannot be scored", file=rows.data
        )
    predictions = fit_predict(spec, train, evaluation)
    groups = [ex.group for ex in evaluation]
    return {
        "method": METHODS[method_of(spec)],
        "metrics": tasks.metrics.compute(rows.task, labels, predictions, {"groups": groups}),
        "train_rows": len(train),
        "eval_split": rows.eval_split,
        "eval_rows": len(evaluation),
        "seconds": round(time.perf_counter() - started, 2),
    }


def method_of(spec: TaskSpec) -> str:
    if spec.kind == "multiple_choice":
        return "choice"
    if spec.kind == "classification":
        return "text"
    return "score" if spec.regression else "pair"


def fit_predict(spec: TaskSpec, train: list, evaluation: list) -> list:
    """Predictions (class or answer indices, or scores) for `evaluation`, learnt from the labelled `train`."""
    method = method_of(spec)
    if method == "choice":
        return nearest_answer(train, evaluation)
    y = np.asarray([ex.label for ex in train], dtype=float if spec.regression else int)
    if not spec.regression and len(set(y.tolist())) == 1:
        return [int(y[0])] * len(evaluation)
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if method == "text":
        vectorizer = _tfidf(ngram_range=(1, 2))
        model = LogisticRegression(
            C=TEXT_C, class_weight="balanced", max_iter=1000, random_state=SEED
        )
        model.fit(vectorizer.fit_transform([ex.text for ex in train]), y)
        return model.predict(vectorizer.transform([ex.text for ex in evaluation])).tolist()
    vectorizer = _tfidf(ngram_range=(1, 1)).fit(
        [text for ex in train for text in (ex.text_a, ex.text_b)]
    )
    estimator = (
        Ridge(alpha=RIDGE_ALPHA)
        if method == "score"
        else LogisticRegression(C=PAIR_C, max_iter=1000, random_state=SEED)
    )
    model = make_pipeline(StandardScaler(), estimator).fit(pair_features(train, vectorizer), y)
    return model.predict(pair_features(evaluation, vectorizer)).tolist()


def _tfidf(**options):
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(sublinear_tf=True, token_pattern=WORD.pattern, **options)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def pair_features(pairs: list[PairExample], vectorizer) -> np.ndarray:
    """Per pair: unigram and bigram Jaccard overlap, the share of each text's words found in the other, both
    lengths (log words), their relative difference, whether both hold the same numbers, and the tf-idf cosine."""
    cosines = _row_cosines(
        vectorizer.transform([ex.text_a for ex in pairs]),
        vectorizer.transform([ex.text_b for ex in pairs]),
    )
    rows = []
    for ex, cosine in zip(pairs, cosines):
        a, b = words(ex.text_a), words(ex.text_b)
        set_a, set_b = set(a), set(b)
        shared = len(set_a & set_b)
        bigrams_a, bigrams_b = set(zip(a, a[1:])), set(zip(b, b[1:]))
        numbers_a, numbers_b = {w for w in set_a if w.isdigit()}, {w for w in set_b if w.isdigit()}
        rows.append(
            [
                _share(shared, len(set_a | set_b)),
                _share(len(bigrams_a & bigrams_b), len(bigrams_a | bigrams_b)),
                _share(shared, len(set_a)),
                _share(shared, len(set_b)),
                math.log1p(len(a)),
                math.log1p(len(b)),
                _share(abs(len(a) - len(b)), max(len(a), len(b))),
                float(numbers_a == numbers_b),
                cosine,
            ]
        )
    return np.asarray(rows, dtype=float)


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _row_cosines(a, b) -> np.ndarray:
    """Cosine of each row of `a` with the same row of `b` (tf-idf rows are unit length, or all zero)."""
    return np.asarray(a.multiply(b).sum(axis=1)).ravel()


def nearest_answer(train: list[ChoiceExample], evaluation: list[ChoiceExample]) -> list[int]:
    """Per question, the index of the answer nearest (tf-idf cosine) to its context and question; ties go to the
    first answer."""
    # a RACE article is the context of several questions: counted once
    vectorizer = _tfidf(stop_words="english")
    vectorizer.fit(
        dict.fromkeys(text for ex in train for text in (ex.context, ex.question, *ex.options))
    )
    contexts = vectorizer.transform([f"{ex.context} {ex.question}" for ex in evaluation])
    answers = vectorizer.transform([option for ex in evaluation for option in ex.options])
    picks, start = [], 0
    for i, ex in enumerate(evaluation):
        count = len(ex.options)
        similarity = (answers[start : start + count] @ contexts[i].T).toarray().ravel()
        picks.append(int(np.argmax(similarity)))
        start += count
    return picks


# -- the table without a fine-tune ------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpt1.report.baselines",
        description="majority class and non-neural baseline per task, as the report "
        "computes them, on a folder of task folders",
    )
    parser.add_argument(
        "--data", required=True, type=Path, help="a folder of task folders (CoLA/, SST-2/, ...)"
    )
    parser.add_argument("--tasks", nargs="+", required=True, choices=tasks.TASKS)
    parser.add_argument(
        "--max-train-examples", type=int, help="the fine-tune's finetune.max_train_examples"
    )
    parser.add_argument(
        "--split", help="the evaluation split (default: the task's, as the fine-tune picks it)"
    )
    args = parser.parse_args(argv)
    print("| task | metric | majority | non-neural | method | train rows | rows scored | seconds |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for task in args.tasks:
        spec = tasks.get(task)
        rows = Rows(
            task,
            str(args.data / spec.folder),
            args.split or spec.eval_splits[0],
            args.max_train_examples,
        )
        outcome = score(rows)
        evaluation = rows.load(rows.eval_split, None)
        majority = tasks.metrics.majority_baseline(
            task,
            [ex.label for ex in rows.load("train", None)],
            [ex.label for ex in evaluation],
            {"groups": [ex.group for ex in evaluation]},
        )
        for metric in spec.metrics:
            print(
                f"| {spec.title} | {metric} | {majority[metric]:.2f} | {outcome['metrics'][metric]:.2f} | "
                f"{outcome['method']} | {outcome['train_rows']} | {outcome['eval_split']}: "
                f"{outcome['eval_rows']} | {outcome['seconds']:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
