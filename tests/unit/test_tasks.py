"""Task loaders on the real samples (counts derived independently from the bytes), local Hugging Face exports,
malformed rows, submissions, the registry and the paper's input transformations. What importing gpt1.tasks brings
in, seen from a fresh process: tests/integration/test_tasks_imports.py; every task on sample data generated afresh:
tests/integration/test_tasks_sample_data.py."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from conftest import shared_path
from gpt1 import tasks
from gpt1.config import load_config
from gpt1.io import InputError
from gpt1.tasks import collate, get, load
from gpt1.tasks.examples import ChoiceExample, PairExample, TextExample
from gpt1.tasks.hub import parse_ref
from gpt1.tasks.registry import GLUE_REVISION


# ---------------------------------------------------------------------------------------------------------------
# An independent reader: split the bytes on b"\n" and b"\t", nothing else.

def raw_rows(path, header=True):
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    rows = [line.decode("utf-8").split("\t") for line in lines]
    return rows[1:] if header else rows


def task_file(*parts):
    return shared_path("tasks", *parts)


# ---------------------------------------------------------------------------------------------------------------
# GLUE tsv

@pytest.mark.parametrize("task,folder,split,header,label_col,labels", [
    ("cola", "CoLA", "train", False, 1, ("0", "1")),
    ("cola", "CoLA", "dev", False, 1, ("0", "1")),
    ("sst2", "SST-2", "train", True, -1, ("0", "1")),
    ("sst2", "SST-2", "dev", True, -1, ("0", "1")),
    ("mrpc", "MRPC", "train", True, 0, ("0", "1")),
    ("mrpc", "MRPC", "dev", True, 0, ("0", "1")),
    ("qnli", "QNLI", "dev", True, -1, ("entailment", "not_entailment")),
    ("rte", "RTE", "train", True, -1, ("entailment", "not_entailment")),
    ("rte", "RTE", "dev", True, -1, ("entailment", "not_entailment")),
])
def test_glue_labelled_splits_match_the_bytes(task, folder, split, header, label_col, labels):
    path = task_file(folder, f"{split}.tsv")
    rows = raw_rows(path, header)
    data = load(task, path.parent, split)
    assert len(data) == len(rows)
    assert [ex.label for ex in data] == [labels.index(r[label_col]) for r in rows]
    assert data.report.bad_fraction == 0 and data.report.sources == [str(path)]


@pytest.mark.parametrize("task,folder,n_fields", [("cola", "CoLA", 2), ("sst2", "SST-2", 2), ("mrpc", "MRPC", 5),
                                                  ("stsb", "STS-B", 9), ("qnli", "QNLI", 3), ("rte", "RTE", 3)])
def test_glue_test_splits_are_unlabelled_and_keep_the_index(task, folder, n_fields):
    path = task_file(folder, "test.tsv")
    rows = raw_rows(path)
    assert {len(r) for r in rows} == {n_fields}
    data = load(task, path.parent, "test")
    assert [ex.id for ex in data] == [r[0] for r in rows]
    assert all(ex.label is None for ex in data) and not data.labelled


def test_sample_sizes_as_published():
    # Hand-checked with `wc -l` and `awk -F'\t'` (README section 2): 300 data rows per sampled file, RTE dev whole.
    assert len(load("rte", task_file("RTE"), "dev")) == 277
    assert len(load("cola", task_file("CoLA"), "test")) == 300
    assert len(load("qqp", task_file("QQP", "k-shot", "16-42"), "train")) == 32


def test_raw_quotes_are_text_not_quoting():
    path = task_file("MRPC", "dev.tsv")
    quoted = len(list(csv.reader(path.open(encoding="utf-8-sig", newline=""), delimiter="\t"))) - 1
    data = load("mrpc", path.parent, "dev")
    assert quoted < len(data) == 300  # a quoting csv reader merges lines; splitting on TAB does not
    assert any(text.count('"') % 2 for ex in data for text in (ex.text_a, ex.text_b))  # unbalanced, kept as is


def test_mrpc_bom_before_header():
    path = task_file("MRPC", "train.tsv")
    assert path.read_bytes().startswith(b"\xef\xbb\xbfQuality\t")
    data = load("mrpc", path, "train")
    first = raw_rows(path)[0]
    assert (data[0].label, data[0].text_a, data[0].text_b) == (int(first[0]), first[3].strip(), first[4].strip())


def test_cola_dev_without_final_newline(tmp_path):
    sample = task_file("CoLA", "dev.tsv").read_bytes()
    (tmp_path / "CoLA").mkdir()
    (tmp_path / "CoLA" / "dev.tsv").write_bytes(sample.rstrip(b"\n"))  # as the complete GLUE file ends
    data = load("cola", tmp_path / "CoLA", "dev")
    last = sample.rstrip(b"\n").split(b"\n")[-1].decode().split("\t")
    assert len(data) == sample.count(b"\n") == 300
    assert (data[-1].text, data[-1].label) == (last[3], int(last[1]))


def test_cola_original_files_and_headerless_detection():
    data = load("cola", task_file("CoLA", "original", "raw", "out_of_domain_dev.tsv"), "dev")
    rows = raw_rows(task_file("CoLA", "original", "raw", "out_of_domain_dev.tsv"), header=False)
    assert len(data) == len(rows) == 300
    assert [ex.text for ex in data] == [r[3] for r in rows]


def test_sst2_trailing_space_is_stripped():
    path = task_file("SST-2", "train.tsv")
    rows = raw_rows(path)
    assert all(r[0].endswith(" ") for r in rows)
    data = load("sst2", path, "train")
    assert [ex.text for ex in data] == [r[0].rstrip(" ") for r in rows]


def test_stsb_scores_in_both_formats():
    path = task_file("STS-B", "dev.tsv")
    scores = [r[9] for r in raw_rows(path)]
    assert any("." not in s for s in scores) and any(len(s.split(".")[-1]) == 3 for s in scores)
    assert any("." in s and len(s.split(".")[-1]) == 1 for s in scores)  # "4", "5.000" and "4.4" all occur
    data = load("stsb", path.parent, "dev")
    assert [ex.label for ex in data] == [float(s) for s in scores]
    assert get("stsb").regression


def test_stsb_original_distribution_with_extra_columns(tmp_path):
    rows = raw_rows(task_file("STS-B", "original", "sts-train.tsv"), header=False)
    assert {len(r) for r in rows} == {7}
    assert len(load("stsb", task_file("STS-B", "original", "sts-train.tsv"), "train")) == 300
    path = tmp_path / "sts-dev.tsv"  # the complete file has rows with 2 extra source columns
    path.write_text("main-news\tnews\t2012\t0001\t2.400\tA b.\tC d.\tsrc1\tsrc2\n"
                    "main-news\tnews\t2012\t0002\t4\tE f.\tG h.\n")
    data = load("stsb", path, "dev")
    assert [(ex.text_a, ex.text_b, ex.label) for ex in data] == [("A b.", "C d.", 2.4), ("E f.", "G h.", 4.0)]


def test_qqp_layouts():
    data = load("qqp", task_file("QQP", "k-shot", "16-42", "train.tsv"), "train")
    rows = raw_rows(task_file("QQP", "k-shot", "16-42", "train.tsv"))
    assert [(ex.id, ex.label) for ex in data] == [(r[0], int(r[5])) for r in rows]
    test = load("qqp", task_file("QQP", "mt-dnn_sample"), "test")
    assert len(test) == 1 and test[0].label is None and test[0].id == "0"


def test_mnli_dev_16_columns_train_12_test_10():
    folder = task_file("MNLI", "mt-dnn_sample")
    widths = {name: len(raw_rows(folder / f"{name}.tsv")[0]) for name in
              ("train", "dev_matched", "dev_mismatched", "test_matched")}
    assert widths == {"train": 12, "dev_matched": 16, "dev_mismatched": 16, "test_matched": 10}
    dev = load("mnli", folder, "dev")
    nli = get("mnli").labels
    expected = [nli.index(raw_rows(folder / f"dev_{g}.tsv")[0][-1]) for g in ("matched", "mismatched")]
    assert [(ex.group, ex.label) for ex in dev] == list(zip(("matched", "mismatched"), expected))
    assert [ex.group for ex in load("mnli", folder, "dev_mismatched")] == ["mismatched"]
    test = load("mnli", folder, "test")
    assert [(ex.group, ex.label) for ex in test] == [("matched", None), ("mismatched", None)]
    assert load("mnli", folder, "train")[0].label == nli.index(raw_rows(folder / "train.tsv")[0][-1])


def test_mnli_kshot_dev_matched_in_train_layout():
    path = task_file("MNLI", "k-shot", "16-42", "dev_matched.tsv")
    rows = raw_rows(path)
    assert {len(r) for r in rows} == {12}
    data = load("mnli", path.parent, "dev_matched")
    assert len(data) == 48 and all(ex.group == "matched" for ex in data)
    assert [ex.label for ex in data] == [get("mnli").labels.index(r[11]) for r in rows]


# ---------------------------------------------------------------------------------------------------------------
# SNLI and SciTail

@pytest.mark.parametrize("split,dashes", [("dev", 4), ("test", 6)])  # `grep -c '"gold_label": "-"'` on the samples
def test_snli_jsonl_excludes_and_counts_no_gold(split, dashes):
    path = task_file("SNLI", "Deltaus_sBiMPM", "snli_1.0", f"snli_1.0_{split}.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sum(r["gold_label"] == "-" for r in records) == dashes
    data = load("snli", path.parent, split)
    assert len(data) == len(records) - dashes
    assert data.report.excluded == {"no gold label": dashes} and not data.report.bad
    kept = [r for r in records if r["gold_label"] != "-"]
    assert [ex.id for ex in data] == [r["pairID"] for r in kept]
    assert [get("snli").labels[ex.label] for ex in data] == [r["gold_label"] for r in kept]


def test_snli_found_from_the_sample_folder_above():
    assert len(load("snli", task_file("SNLI", "Deltaus_sBiMPM"), "dev")) == 296


def test_snli_txt_14_columns():
    path = task_file("SNLI", "CooperUrichUT_snli", "snli_1.0", "snli_1.0_dev.txt")
    rows = raw_rows(path)
    assert {len(r) for r in rows} == {14}
    data = load("snli", path, "dev")
    assert [(ex.text_a, ex.id, get("snli").labels[ex.label]) for ex in data] == [(r[5], r[8], r[0]) for r in rows]


def test_snli_glue_tsv_rows_of_11_or_15_fields():
    path = task_file("SNLI", "k-shot", "16-42", "train.tsv")
    rows = raw_rows(path)
    assert {len(r) for r in rows} == {11, 15}
    data = load("snli", path.parent, "train")
    assert [get("snli").labels[ex.label] for ex in data] == [r[-1] for r in rows]
    assert [ex.text_b for ex in data] == [r[8] for r in rows]


def test_scitail_tsv_format_from_sample_folders():
    for folder in (task_file("SciTail", "mt-dnn_sample"), task_file("SciTail", "mt-dnn_sample", "tsv_format")):
        for split in ("train", "dev", "test"):
            rows = raw_rows(task_file("SciTail", "mt-dnn_sample", "tsv_format", f"scitail_1.0_{split}.tsv"), False)
            data = load("scitail", folder, split)
            assert [(ex.text_a, get("scitail").labels[ex.label]) for ex in data] == [(r[0].strip(), r[2])
                                                                                     for r in rows]


# ---------------------------------------------------------------------------------------------------------------
# RACE and Story Cloze

@pytest.mark.parametrize("split", ["train", "dev"])
def test_race_one_example_per_question(split):
    root = task_file("RACE")
    expected = []
    for level in ("middle", "high"):
        for path in sorted((root / "RACE" / split / level).glob("*.txt"), key=lambda p: int(p.stem)):
            article = json.loads(path.read_text())
            for q, answer in enumerate(article["answers"]):
                expected.append((f"{article['id']}#{q}", level, "ABCD".index(answer), tuple(article["options"][q])))
    data = load("race", root, split)
    assert [(ex.id, ex.level, ex.label, ex.options) for ex in data] == expected
    assert len(data) == {"train": 66, "dev": 63}[split]  # sum of len(questions) over the 16 articles, by hand
    assert any("\n" in ex.context for ex in data)  # paragraph breaks of the article are kept


def test_race_level_folder_and_single_file():
    high = task_file("RACE", "RACE", "dev", "high")
    assert {ex.level for ex in load("race", high, "dev")} == {"high"}
    one = load("race", high / "63.txt", "dev")
    assert [ex.id for ex in one] == [f"high63.txt#{q}" for q in range(len(one))] and len(one) == 4


@pytest.mark.parametrize("split,stem", [("train", "val"), ("test", "test")])
def test_story_cloze_300_stories_per_sample_file(split, stem):
    folder = task_file("StoryCloze")
    path = folder / f"cloze_test_{stem}__spring2016 - cloze_test_ALL_{stem}.csv"
    with path.open(newline="") as fh:
        records = list(csv.DictReader(fh))
    assert len(records) == path.read_bytes().count(b"\n") - 1 == 300  # no field spans lines in the samples
    data = load("storycloze", folder, split)
    assert [(ex.id, ex.label, ex.options[1]) for ex in data] == [
        (r["InputStoryid"], int(r["AnswerRightEnding"]) - 1, r["RandomFifthSentenceQuiz2"]) for r in records]
    assert any("," in ex.context for ex in data)  # quoted fields with commas come through whole
    assert data[0].question == "" and len(data[0].options) == 2


def test_story_cloze_any_file_name_and_no_final_newline(tmp_path):
    text = task_file("StoryCloze", "cloze_test_val__spring2016 - cloze_test_ALL_val.csv").read_bytes()
    (tmp_path / "stories_val.csv").write_bytes(text.rstrip(b"\n"))
    assert len(load("storycloze", tmp_path, "train")) == 300
    with pytest.raises(ValueError, match="train = the validation csv"):
        load("storycloze", tmp_path, "dev")
    with pytest.raises(FileNotFoundError, match="test"):
        load("storycloze", tmp_path, "test")


# ---------------------------------------------------------------------------------------------------------------
# Errors: malformed rows, ambiguity, missing files

def test_injected_malformed_row_is_counted_with_its_line(tmp_path):
    tmp_path = tmp_path / "RTE"  # as distributed: a task added later may share its header (GLUE's WNLI does)
    tmp_path.mkdir()
    lines = task_file("RTE", "dev.tsv").read_bytes().split(b"\n")
    lines.insert(10, b"9999\tonly two fields")  # becomes line 11
    lines.insert(50, b"9998\tcp1252 \x93quotes\x94\tx\tentailment")  # line 51
    (tmp_path / "dev.tsv").write_bytes(b"\n".join(lines))
    data = load("rte", tmp_path, "dev")
    assert len(data) == 277
    assert dict(data.report.bad) == {"expected 4 fields": 1, "not UTF-8": 1}
    assert [(b.line, b.file) for b in data.report.bad_rows] == [(11, str(tmp_path / "dev.tsv")),
                                                                (51, str(tmp_path / "dev.tsv"))]
    assert "dev.tsv:11" in data.report.summary()


def test_too_many_malformed_rows_is_an_input_error(tmp_path):
    tmp_path = tmp_path / "RTE"  # as distributed: a task added later may share its header (GLUE's WNLI does)
    tmp_path.mkdir()
    lines = task_file("RTE", "dev.tsv").read_text().split("\n")
    lines[5] = lines[5].rsplit("\t", 1)[0] + "\tmaybe"  # unknown label on line 6
    for at in (20, 30, 40):
        lines[at] = "broken"
    (tmp_path / "dev.tsv").write_text("\n".join(lines))
    with pytest.raises(InputError) as err:
        load("rte", tmp_path, "dev")
    assert (err.value.file, err.value.line, err.value.field) == (str(tmp_path / "dev.tsv"), 6, "label")
    assert "dev.tsv:6" in str(err.value)
    tolerant = load("rte", tmp_path, "dev", max_bad_fraction=0.05)
    assert tolerant.report.bad == {"unknown label": 1, "expected 4 fields": 3} and len(tolerant) == 273


def test_row_with_another_layouts_width_is_malformed(tmp_path):
    lines = task_file("STS-B", "dev.tsv").read_text().split("\n")
    lines[3] = "\t".join(lines[3].split("\t")[:9])  # 9 fields, like the original distribution, but no score
    (tmp_path / "dev.tsv").write_text("\n".join(lines))
    data = load("stsb", tmp_path, "dev")
    assert data.report.bad == {"expected 10 fields": 1} and data.report.bad_rows[0].line == 4 and len(data) == 299


def test_unrecognised_header_names_file_line_and_field(tmp_path):
    (tmp_path / "dev.tsv").write_text("a\tb\tc\td\te\n1\t2\t3\t4\t5\n")
    with pytest.raises(InputError) as err:
        load("rte", tmp_path, "dev")
    assert (err.value.line, err.value.field) == (1, "header")


def test_race_bad_article_counted(tmp_path):
    level = tmp_path / "RACE" / "dev" / "high"
    level.mkdir(parents=True)
    for path in task_file("RACE", "RACE", "dev", "high").glob("*.txt"):
        (level / path.name).write_bytes(path.read_bytes())
    article = json.loads((level / "63.txt").read_text())
    article["options"][1] = ["only", "three", "options"]
    (level / "63.txt").write_text(json.dumps(article))
    data = load("race", tmp_path, "dev", max_bad_fraction=0.1)
    assert data.report.bad == {"expected 4 options": 1} and data.report.bad_rows[0].field == "options[1]"
    assert len(data) == 29


def test_ambiguous_and_missing_inputs(tmp_path):
    with pytest.raises(InputError, match="2 places"):
        load("qnli", task_file("QNLI"), "train")  # both k-shot/ and mt-dnn_sample/ hold a train.tsv
    with pytest.raises(FileNotFoundError):
        load("rte", tmp_path, "dev")
    with pytest.raises(FileNotFoundError):
        load("rte", tmp_path / "nope", "dev")
    with pytest.raises(ValueError, match="dev_matched"):
        load("sst2", tmp_path, "dev_matched")
    with pytest.raises(ValueError, match="unknown task"):
        get("no-such-task")


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face exports (created here; no network)

@pytest.fixture(scope="module")
def hf_datasets():
    return pytest.importorskip("datasets")


def test_save_to_disk_dataset_dict(tmp_path, hf_datasets):
    ds = hf_datasets.DatasetDict({
        "train": hf_datasets.Dataset.from_dict({"sentence": ["good film ", "bad film"], "label": [1, 0],
                                                "idx": [0, 1]}),
        "validation": hf_datasets.Dataset.from_dict({"sentence": ["fine"], "label": [1], "idx": [7]}),
        "test": hf_datasets.Dataset.from_dict({"sentence": ["hidden"], "label": [-1], "idx": [3]}),
    })
    ds.save_to_disk(tmp_path / "sst2")
    train = load("sst2", tmp_path / "sst2", "train")
    assert [(ex.text, ex.label, ex.id) for ex in train] == [("good film", 1, "0"), ("bad film", 0, "1")]
    assert [(ex.id, ex.label) for ex in load("sst2", tmp_path / "sst2", "dev")] == [("7", 1)]
    assert load("sst2", tmp_path / "sst2", "test")[0].label is None


def test_save_to_disk_mnli_groups_and_race_levels(tmp_path, hf_datasets):
    pair = {"premise": ["p"], "hypothesis": ["h"], "idx": [0]}
    hf_datasets.DatasetDict({
        "validation_matched": hf_datasets.Dataset.from_dict({**pair, "label": [2]}),
        "validation_mismatched": hf_datasets.Dataset.from_dict({**pair, "label": [0]}),
    }).save_to_disk(tmp_path / "mnli")
    dev = load("mnli", tmp_path / "mnli", "dev")
    assert [(ex.group, ex.label) for ex in dev] == [("matched", 2), ("mismatched", 0)]
    race = hf_datasets.Dataset.from_dict({
        "example_id": ["high1.txt", "high1.txt", "middle9.txt"], "article": ["A."] * 3,
        "question": ["q1", "q2", "q3"], "options": [["a", "b", "c", "d"]] * 3, "answer": ["B", "D", "A"]})
    race.save_to_disk(tmp_path / "race_dev")  # a single Dataset is used whole
    data = load("race", tmp_path / "race_dev", "dev")
    assert [(ex.id, ex.level, ex.label) for ex in data] == [("high1.txt#0", "high", 1), ("high1.txt#1", "high", 3),
                                                             ("middle9.txt#0", "middle", 0)]


def test_parquet_and_json_records(tmp_path, hf_datasets):
    snli = hf_datasets.Dataset.from_dict({"premise": ["a", "b", "c"], "hypothesis": ["x", "y", "z"],
                                          "label": [0, -1, 2]})
    snli.to_parquet(str(tmp_path / "snli.parquet"))
    data = load("snli", tmp_path / "snli.parquet", "dev")
    assert [ex.label for ex in data] == [0, 2] and data.report.excluded == {"no gold label": 1}
    snli.to_json(str(tmp_path / "snli.jsonl"))  # JSON lines in the hub schema, not the official jsonl
    assert [ex.text_a for ex in load("snli", tmp_path / "snli.jsonl", "dev")] == ["a", "c"]
    folder = tmp_path / "stsb" / "data"
    folder.mkdir(parents=True)
    hf_datasets.Dataset.from_dict({"sentence1": ["s"], "sentence2": ["t"], "label": [3.2], "idx": [5]}).to_parquet(
        str(folder / "validation-00000-of-00001.parquet"))
    stsb = load("stsb", tmp_path / "stsb", "dev")
    assert [(ex.id, ex.label) for ex in stsb] == [("5", 3.2)]
    story = hf_datasets.Dataset.from_dict({
        "story_id": ["s1"], **{f"input_sentence_{i}": [f"S{i}."] for i in range(1, 5)},
        "sentence_quiz1": ["E1."], "sentence_quiz2": ["E2."], "answer_right_ending": [2]})
    story.to_json(str(tmp_path / "validation.jsonl"))
    [ex] = load("storycloze", tmp_path, "train")  # Story Cloze train = the validation set
    assert (ex.context, ex.options, ex.label) == ("S1. S2. S3. S4.", ("E1.", "E2."), 1)


def test_records_with_the_wrong_schema(tmp_path, hf_datasets):
    hf_datasets.Dataset.from_dict({"text": ["a"], "label": [0]}).to_parquet(str(tmp_path / "x.parquet"))
    with pytest.raises(InputError, match="sentence1"):
        load("rte", tmp_path / "x.parquet", "dev")


def test_hub_reference_goes_to_load_dataset(monkeypatch, hf_datasets):
    calls = []

    def fake_load_dataset(repo, config=None, split=None, revision=None):
        calls.append((repo, config, split, revision))
        columns = {"qqp": ("question1", "question2"), "mnli": ("premise", "hypothesis")}[config]
        return hf_datasets.Dataset.from_dict({columns[0]: ["a"], columns[1]: ["b"], "label": [1], "idx": [4]})

    monkeypatch.setattr(hf_datasets, "load_dataset", fake_load_dataset)
    [ex] = load("qqp", "hf:glue/qqp@main", "dev")
    assert (ex.id, ex.label) == ("4", 1) and calls == [("nyu-mll/glue", "qqp", "validation", "main")]
    calls.clear()
    assert len(load("mnli", get("mnli").hf_id, "test")) == 2  # the GLUE tasks' ids carry the pinned commit
    assert calls == [("nyu-mll/glue", "mnli", "test_matched", GLUE_REVISION),
                     ("nyu-mll/glue", "mnli", "test_mismatched", GLUE_REVISION)]


def test_parse_ref():
    assert parse_ref("hf:glue/sst2") == ("nyu-mll/glue", "sst2", None)
    assert parse_ref("hf:race") == ("ehovy/race", "all", None)
    assert parse_ref("hf:scitail@v2") == ("allenai/scitail", "tsv_format", "v2")
    assert parse_ref("hf:story_cloze") == ("LSDSem/story_cloze", "2016", None)
    assert parse_ref("hf:someone/my_snli:plain") == ("someone/my_snli", "plain", None)
    assert parse_ref("hf:nyu-mll/glue/rte") == ("nyu-mll/glue", "rte", None)


# ---------------------------------------------------------------------------------------------------------------
# Submissions

def test_write_submission_glue_format(tmp_path):
    test = load("sst2", task_file("SST-2"), "test")
    [path] = tasks.write_submission("sst2", test, [i % 2 for i in range(len(test))], tmp_path)
    assert path.name == "SST-2.tsv"
    rows = raw_rows(path)
    assert path.read_text().startswith("index\tprediction\n")
    assert rows == [[ex.id, str(i % 2)] for i, ex in enumerate(test)]


def test_write_submission_mnli_halves_and_stsb_floats(tmp_path):
    test = load("mnli", task_file("MNLI", "mt-dnn_sample"), "test")
    paths = tasks.write_submission("mnli", test, [2, 0], tmp_path)
    assert sorted(p.name for p in paths) == ["MNLI-m.tsv", "MNLI-mm.tsv"]
    assert raw_rows(tmp_path / "MNLI-m.tsv") == [["0", "contradiction"]]
    assert raw_rows(tmp_path / "MNLI-mm.tsv") == [["0", "entailment"]]
    stsb = load("stsb", task_file("STS-B"), "test")[:3]
    tasks.write_submission("stsb", stsb, [4.25, 0.0, 5], tmp_path)
    assert [r[1] for r in raw_rows(tmp_path / "STS-B.tsv")] == ["4.250", "0.000", "5.000"]
    with pytest.raises(ValueError):
        tasks.write_submission("stsb", stsb, [1.0], tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# Registry

def test_the_registry_holds_the_papers_tasks():
    paper = load_config("paper").finetune.tasks
    assert tuple(tasks.REGISTRY) == tasks.TASKS and set(paper) <= set(tasks.TASKS)
    kinds = {name: get(name).kind for name in paper}
    assert kinds == {"cola": "classification", "sst2": "classification", "mrpc": "similarity", "stsb": "similarity",
                     "qqp": "similarity", "mnli": "entailment", "qnli": "entailment", "rte": "entailment",
                     "snli": "entailment", "scitail": "entailment", "race": "multiple_choice",
                     "storycloze": "multiple_choice"}
    assert [(get(t).head, get(t).n_outputs) for t in ("mnli", "stsb", "mrpc", "race", "storycloze", "cola")] == [
        ("classification", 3), ("similarity", 1), ("similarity", 2), ("multiple_choice", 1),
        ("multiple_choice", 1), ("classification", 2)]
    assert get("cola").primary_metric == "mcc" and get("stsb").metrics == ("pearson", "spearman")
    assert get("storycloze").splits == ("train", "test") and get("race").eval_splits == ("test",)
    assert get("rte").transformation == "_start_ premise _delimiter_ hypothesis _classify_"


def test_a_thirteenth_task_is_one_spec(tmp_path, monkeypatch):
    """WNLI (GLUE's ninth task, which the paper leaves out), described by one TaskSpec and nothing else: it loads,
    is scored, writes its submission and gets a table in the results report."""
    from gpt1.report.render import read_runs, render_markdown
    from gpt1.tasks.spec import Columns

    pair = ("sentence1", "sentence2")
    spec = tasks.TaskSpec(
        name="wnli", title="WNLI", kind="entailment", labels=("0", "1"),
        format="split_files", folder="WNLI", file_names=("{split}.tsv",),
        columns=Columns(text=pair, label="label", id="index", headers=(("index", *pair, "label"), ("index", *pair))),
        submission="WNLI", hf="glue/wnli", hf_text=pair, hf_columns=(*pair, "label", "idx"), metrics=("accuracy",))
    monkeypatch.setitem(tasks.REGISTRY, "wnli", spec)
    folder = tmp_path / "glue_data" / "WNLI"
    folder.mkdir(parents=True)
    (folder / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA b.\tC d.\t1\n1\tE f.\tG h.\t0\n")
    (folder / "test.tsv").write_text("index\tsentence1\tsentence2\n7\tI j.\tK l.\n")
    dev = load("wnli", tmp_path / "glue_data", "dev")
    assert [(ex.text_a, ex.label) for ex in dev] == [("A b.", 1), ("E f.", 0)]
    assert tasks.evaluate("wnli", dev, [1, 1])["primary"] == 50.0
    [path] = tasks.write_submission("wnli", load("wnli", folder, "test"), [1], tmp_path / "submission")
    assert path.name == "WNLI.tsv" and raw_rows(path) == [["7", "1"]]
    run = tmp_path / "run" / "wnli"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"task": "wnli", "eval_split": "dev", "metrics": {"accuracy": 50.0,
                                                  "primary": 50.0}, "majority": {"accuracy": 50.0, "primary": 50.0}}))
    report = render_markdown(read_runs([tmp_path / "run"], ["full"]))
    assert "### Other tasks (not in the paper)" in report and "| ours: full | 50.0 |" in report


# ---------------------------------------------------------------------------------------------------------------
# Input transformations

class FakeTokenizer:
    """One id per whitespace word (1, 2, ...); specials after the vocabulary, as in GPT1Tokenizer."""

    start_id, delimiter_id, classify_id = 1000, 1001, 1002

    def __init__(self):
        self.vocab = {}

    def encode(self, text):
        return [self.vocab.setdefault(word, len(self.vocab) + 1) for word in text.split()]


@pytest.fixture
def tok():
    return FakeTokenizer()


def test_classification_transformation(tok):
    enc = get("sst2").encode(TextExample("0", "a fine film", 1), tok, 16)
    assert enc.single and enc.input_ids == [[1000, *tok.encode("a fine film"), 1002]] and enc.classify_pos == [4]
    assert not enc.truncated


def test_entailment_order_and_truncation_keeps_the_hypothesis(tok):
    spec = get("rte")
    premise, hypothesis = " ".join(f"p{i}" for i in range(30)), "h1 h2 h3"
    enc = spec.encode(PairExample("0", premise, hypothesis, 0), tok, 64)
    p, h = tok.encode(premise), tok.encode(hypothesis)
    assert enc.input_ids == [[1000, *p, 1001, *h, 1002]]
    short = spec.encode(PairExample("0", premise, hypothesis, 0), tok, 12)
    [seq] = short.input_ids
    assert len(seq) == 12 and short.truncated and short.classify_pos == [11]
    assert seq == [1000, *p[:6], 1001, *h, 1002]
    [tiny] = spec.encode(PairExample("0", premise, hypothesis, 0), tok, 5).input_ids
    assert tiny == [1000, 1001, *h[:2], 1002]  # the hypothesis is cut only once the premise is gone
    with pytest.raises(ValueError):
        spec.encode(PairExample("0", "a", "b", 0), tok, 2)


def test_similarity_both_orderings_longest_trimmed_first(tok):
    spec = get("mrpc")
    a, b = " ".join(f"a{i}" for i in range(10)), "b1 b2"
    enc = spec.encode(PairExample("0", a, b, 1), tok, 64)
    ia, ib = tok.encode(a), tok.encode(b)
    assert not enc.single
    assert enc.input_ids == [[1000, *ia, 1001, *ib, 1002], [1000, *ib, 1001, *ia, 1002]]
    assert enc.classify_pos == [len(ia) + len(ib) + 2] * 2
    cut = spec.encode(PairExample("0", a, b, 1), tok, 9)
    assert cut.input_ids[0] == [1000, *ia[:4], 1001, *ib, 1002] and cut.input_ids[1][1:3] == ib
    assert all(len(s) == 9 for s in cut.input_ids)


def test_multiple_choice_one_sequence_per_answer(tok):
    spec = get("race")
    article = " ".join(f"w{i}" for i in range(40))
    ex = ChoiceExample("x#0", article, "what is it ?", ("one", "two words", "three more words", "x"), 2, "high")
    full = spec.encode(ex, tok, 128)
    c, q = tok.encode(article), tok.encode("what is it ?")
    assert len(full.input_ids) == 4
    for seq, option, pos in zip(full.input_ids, ex.options, full.classify_pos):
        assert seq == [1000, *c, *q, 1001, *tok.encode(option), 1002] and pos == len(seq) - 1
    cut = spec.encode(ex, tok, 20)
    assert cut.truncated and max(map(len, cut.input_ids)) == 20
    kept = 20 - 3 - len(q) - 3
    for seq, option in zip(cut.input_ids, ex.options):  # same context for all; question and answers intact
        assert seq == [1000, *c[:kept], *q, 1001, *tok.encode(option), 1002]
    story = get("storycloze").encode(ChoiceExample("s", "It rained .", "", ("Sun .", "Wet .")), tok, 32)
    assert story.input_ids[0][:5] == [1000, *tok.encode("It rained ."), 1001]


def test_encode_rejects_the_wrong_example_type(tok):
    with pytest.raises(TypeError):
        get("race").encode(TextExample("0", "text"), tok, 16)


def test_collate_pads_right_and_masks(tok):
    spec = get("mrpc")
    batch = [spec.encode(PairExample(str(i), "a " * (i + 1), "b", 0), tok, 32) for i in range(3)]
    out = collate(batch)
    lengths = [len(e.input_ids[0]) for e in batch]
    assert out["input_ids"].shape == (3, 2, max(lengths)) and out["classify_pos"].shape == (3, 2)
    assert out["mask"].sum(-1).tolist() == [[n, n] for n in lengths]
    assert (out["input_ids"][~out["mask"]] == 0).all()
    picked = np.take_along_axis(out["input_ids"], out["classify_pos"][..., None], -1)
    assert (picked == 1002).all()
    last_real = out["mask"].sum(-1) - 1
    assert (last_real == out["classify_pos"]).all()
    single = collate([get("cola").encode(TextExample("0", "x y"), tok, 8)], length=8)
    assert single["input_ids"].shape == (1, 8) and single["classify_pos"].tolist() == [3]
    with pytest.raises(ValueError):
        collate(batch + [get("cola").encode(TextExample("0", "x"), tok, 8)])


def test_encode_all_on_real_story_cloze(tok):
    data = load("storycloze", task_file("StoryCloze"), "test")
    encoded = get("storycloze").encode_all(data[:20], tok, 40)
    assert len(encoded) == 20 and all(len(s) <= 40 for e in encoded for s in e.input_ids)
    assert all(s[-1] == 1002 for e in encoded for s in e.input_ids)
