"""The report's non-neural baselines: each method on rows small enough to check by hand, and reading the same
rows a fine-tune read from what its metrics.json records."""

from __future__ import annotations

import math

import pytest

from gpt1.io import InputError
from gpt1.report import baselines
from gpt1.report.baselines import Rows, fit_predict, pair_features
from gpt1.tasks import ChoiceExample, PairExample, TextExample, get


def texts(*rows: tuple[str, int]) -> list[TextExample]:
    return [TextExample(str(i), text, label) for i, (text, label) in enumerate(rows)]


def pairs(*rows) -> list[PairExample]:
    return [PairExample(str(i), a, b, label) for i, (a, b, label) in enumerate(rows)]


def test_one_text_bag_of_words_learns_the_words_of_each_class():
    train = texts(("a good film", 1), ("a great film", 1), ("good and great", 1),
                  ("a bad film", 0), ("an awful film", 0), ("bad and awful", 0))
    evaluation = texts(("great", 1), ("awful", 0), ("good film", 1), ("bad film", 0))
    assert fit_predict(get("sst2"), train, evaluation) == [1, 0, 1, 0]


def test_a_single_class_train_split_predicts_that_class():
    assert fit_predict(get("cola"), texts(("one", 1), ("two", 1)), texts(("three", 0))) == [1]


def test_pair_features_by_hand():
    vectorizer = baselines._tfidf(ngram_range=(1, 1)).fit(["the cat sat", "the cat ran", "a dog"])
    [features] = pair_features(pairs(("The cat sat", "the cat ran.", 1)), vectorizer)
    jaccard, bigrams, share_a, share_b, length_a, length_b, length_gap, same_numbers, cosine = features
    assert (jaccard, bigrams, share_a, share_b) == (2 / 4, 1 / 3, 2 / 3, 2 / 3)  # {the, cat} of {the, cat, sat, ran}
    assert length_a == length_b == math.log1p(3) and length_gap == 0 and same_numbers == 1  # no numbers on either side
    assert 0 < cosine < 1
    [features] = pair_features(pairs(("in 1999 it rose 5", "it fell in 2001", 0)), vectorizer)
    assert features[7] == 0 and features[6] == pytest.approx(1 / 5)


def test_pairs_paraphrase_by_overlap_and_similarity_by_ridge():
    train = pairs(("the cat sat on the mat", "the cat sat on a mat", 1),
                  ("a dog ran in the park", "a dog ran in a park", 1),
                  ("birds sing at dawn", "birds sing at dawn", 1),
                  ("the cat sat on the mat", "stocks fell sharply", 0),
                  ("a dog ran in the park", "rain is expected today", 0),
                  ("birds sing at dawn", "the vote was close", 0))
    evaluation = pairs(("the sun rose over the hill", "the sun rose over a hill", 1),
                       ("the sun rose over the hill", "prices went up again", 0))
    assert fit_predict(get("mrpc"), train, evaluation) == [1, 0]
    scored = [PairExample(ex.id, ex.text_a, ex.text_b, 5.0 * ex.label) for ex in train]
    high, low = fit_predict(get("stsb"), scored, evaluation)
    assert high > 3 > low


def test_multiple_choice_picks_the_answer_nearest_the_context():
    train = [ChoiceExample("t", "the heron waded in the lake", "where was the heron?", ("in the lake", "at school"), 0)]
    evaluation = [ChoiceExample("e1", "a heron stood by the lake", "", ("a car", "the heron by the lake"), 1),
                  ChoiceExample("e2", "nothing in common", "", ("first", "second"), 0)]  # a tie: the first answer
    assert fit_predict(get("storycloze"), train, evaluation) == [1, 0]


def write_sst2(folder, train_rows: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    words = {1: ["good", "great", "fine", "lovely"], 0: ["bad", "awful", "poor", "dull"]}
    lines = [f"a {words[i % 2][i // 2 % 4]} film {i}\t{i % 2}" for i in range(train_rows)]
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(lines) + "\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"so {w}\t{label}\n" for label, ws in words.items()
                                                                   for w in ws))


def metrics_json(folder, cap: int | None, digests: dict | None = None) -> dict:
    """The fields of a fine-tune's metrics.json that say which rows it read."""
    return {"task": "sst2", "eval_split": "dev", "data": {"path": str(folder), "splits": digests or {}},
            "finetune_config": {"max_train_examples": cap, "max_eval_examples": None, "max_bad_row_fraction": 0.0}}


def test_the_baseline_reads_the_fine_tunes_rows_and_refuses_changed_files(tmp_path):
    from gpt1.finetune.rows import sources_digest

    folder = tmp_path / "SST-2"
    write_sst2(folder, 40)
    outcome = baselines.score(Rows.of(metrics_json(folder, 8)))  # rows 0, 5, 10, ...: every word once
    assert (outcome["train_rows"], outcome["eval_split"], outcome["eval_rows"]) == (8, "dev", 8)
    assert outcome["metrics"]["primary"] == outcome["metrics"]["accuracy"] == 100.0
    assert outcome["method"] == baselines.METHODS["text"]

    recorded = {split: {"sha256": sources_digest([str(folder / f"{split}.tsv")])} for split in ("train", "dev")}
    assert baselines.score(Rows.of(metrics_json(folder, None, recorded)))["train_rows"] == 40
    write_sst2(folder, 41)  # the train file changed after the fine-tune read it
    with pytest.raises(InputError, match="changed since the fine-tune"):
        baselines.score(Rows.of(metrics_json(folder, None, recorded)))


def test_the_table_without_a_fine_tune(tmp_path, capsys):
    write_sst2(tmp_path / "SST-2", 40)
    assert baselines.main(["--data", str(tmp_path), "--tasks", "sst2", "--max-train-examples", "8"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| SST-2")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["accuracy", "50.00", "100.00"] and cells[5:7] == ["8", "dev: 8"]
