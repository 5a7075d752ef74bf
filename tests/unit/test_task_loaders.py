"""Task loaders under bad or unusual input: a stray quote in Story Cloze, a file of another task, RACE
at the promised depth, a missing evaluation split, MultiNLI's and SciTail's own formats, MNLI with one half; and
the complete GLUE files with their exact counts. Every case ends in the right examples or a clear InputError /
FileNotFoundError naming the file; `test_every_file_given_to_every_other_task` counts the outcomes."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import shared_path
from gpt1 import tasks
from gpt1.finetune.train import headline_split
from gpt1.io import InputError
from gpt1.tasks import get, load
from official_task_files import OFFICIAL, OWNER, STORY_VAL, task_file


def copy(src: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(src, folder / (name or src.name)))


# ---------------------------------------------------------------------------------------------------------------
# Story Cloze: one unclosed quote

def test_story_cloze_unclosed_quote_spoils_one_counted_row(tmp_path):
    lines = task_file("StoryCloze", STORY_VAL).read_bytes().rstrip(b"\n").split(b"\n")  # header + 300 stories
    at = next(i for i in range(100, len(lines)) if b'"' not in lines[i])  # a line without quotes
    story_id, rest = lines[at].split(b",", 1)
    lines[at] = story_id + b',"' + rest  # opens a quote that this line never closes
    path = tmp_path / STORY_VAL
    path.write_bytes(b"\n".join(lines))
    ids = [line.split(b",", 1)[0].decode() for line in lines[1:]]

    data = load("storycloze", tmp_path, "train")
    assert data.report.bad == {"unclosed quote": 1}
    assert (data.report.bad_rows[0].file, data.report.bad_rows[0].line) == (str(path), at + 1)
    assert data.report.rows == 300 and len(data) == 299  # the rows add up; nothing after the quote is lost
    assert [ex.id for ex in data] == ids[:at - 1] + ids[at:]
    assert f"{path}:{at + 1}" in data.report.summary()


def test_story_cloze_quote_closed_lines_later_merges_nothing(tmp_path):
    lines = task_file("StoryCloze", STORY_VAL).read_bytes().rstrip(b"\n").split(b"\n")
    first, second = (next(i for i in range(start, len(lines)) if b'"' not in lines[i]) for start in (10, 20))
    lines[first] = lines[first].replace(b",", b',"', 1)  # opened here ...
    lines[second] = lines[second].replace(b",", b'",', 1)  # ... and a stray quote ten lines on
    (tmp_path / STORY_VAL).write_bytes(b"\n".join(lines))
    data = load("storycloze", tmp_path, "train")
    assert [b.line for b in data.report.bad_rows] == [first + 1] and len(data) == 299 and data.report.rows == 300
    stray = lines[second].split(b",", 1)[0].decode()  # a quote inside an unquoted field is text (RFC 4180 reader)
    assert [ex.id for ex in data][first - 1:second - 1] == [line.split(b",", 1)[0].decode()
                                                          for line in lines[first + 1:second]] + [stray]


# ---------------------------------------------------------------------------------------------------------------
# A file of another task

def test_sst2_dev_is_not_loaded_as_cola(tmp_path):
    with pytest.raises(InputError) as err:  # in its distributed folder: SST-2/
        load("cola", task_file("SST-2", "dev.tsv"), "dev")
    assert "SST-2/" in str(err.value) and str(task_file("SST-2", "dev.tsv")) in str(err.value)
    moved = copy(task_file("SST-2", "dev.tsv"), tmp_path / "elsewhere")  # by its shape alone
    with pytest.raises(InputError) as err:
        load("cola", moved, "dev")
    assert str(moved) in str(err.value) and "not a file of CoLA" in str(err.value)
    assert "expected" in str(err.value) and err.value.line == 1


def test_same_shape_test_files_are_told_apart_by_their_folder(tmp_path):
    """CoLA's and SST-2's test.tsv both have the header `index<TAB>sentence`: read from their own folder only."""
    with pytest.raises(InputError, match="SST-2/, the folder of SST-2"):
        load("cola", task_file("SST-2"), "test")
    with pytest.raises(InputError, match="CoLA/, the folder of CoLA"):
        load("sst2", task_file("CoLA", "test.tsv"), "test")
    moved = copy(task_file("CoLA", "test.tsv"), tmp_path / "elsewhere")
    for task in ("cola", "sst2"):
        with pytest.raises(InputError, match="share this header") as err:
            load(task, moved, "test")
        assert err.value.file == str(moved)
    assert len(load("cola", copy(moved, tmp_path / "CoLA"), "test")) == 300


def test_a_test_file_is_not_a_labelled_split(tmp_path):
    moved = copy(task_file("RTE", "test.tsv"), tmp_path / "x", "dev.tsv")
    with pytest.raises(InputError, match="no label column 'label' for the dev split"):
        load("rte", moved, "dev")


def _hub_export(hf_datasets, path: Path, columns: dict) -> Path:
    hf_datasets.Dataset.from_dict(columns).to_parquet(str(path))
    return path


def test_hub_exports_of_another_dataset_are_refused(tmp_path):
    hf_datasets = pytest.importorskip("datasets")
    mnli = _hub_export(hf_datasets, tmp_path / "mnli.parquet",
                       {"premise": ["p"], "hypothesis": ["h"], "label": [0], "idx": [0]})
    with pytest.raises(InputError, match=r"columns \['idx'\] the hub's SNLI has not"):
        load("snli", mnli, "dev")
    snli = _hub_export(hf_datasets, tmp_path / "snli.parquet", {"premise": ["p"], "hypothesis": ["h"], "label": [2]})
    with pytest.raises(InputError, match=r"no column \['idx'\]"):
        load("mnli", snli, "dev_matched")
    with pytest.raises(InputError, match="label names"):  # same columns as SciTail's, but class indices
        load("scitail", snli, "dev")
    mrpc = _hub_export(hf_datasets, tmp_path / "mrpc.parquet",
                       {"sentence1": ["a"], "sentence2": ["b"], "label": [1], "idx": [0]})
    with pytest.raises(InputError, match="scores"):  # same columns as STS-B's, but class indices
        load("stsb", mrpc, "dev")
    (tmp_path / "rte").mkdir()
    stsb = _hub_export(hf_datasets, tmp_path / "rte" / "stsb.parquet",  # in a folder named like the task asked for
                       {"sentence1": ["a"], "sentence2": ["b"], "label": [3.2], "idx": [0]})
    with pytest.raises(InputError, match="class indices"):
        load("rte", stsb, "dev")


def test_hub_exports_with_the_same_schema_need_the_task_in_their_name(tmp_path):
    """MRPC's and RTE's hub schemas are identical (sentence1, sentence2, label, idx; class indices), as are CoLA's
    and SST-2's: the export's name says which."""
    hf_datasets = pytest.importorskip("datasets")
    pair = {"sentence1": ["a"], "sentence2": ["b"], "label": [1], "idx": [0]}
    unnamed = _hub_export(hf_datasets, tmp_path / "validation.parquet", pair)
    for task in ("mrpc", "rte"):
        with pytest.raises(InputError, match="name the export's file or folder after the task") as err:
            load(task, unnamed, "dev")
        assert err.value.file == str(unnamed)
    (tmp_path / "glue_mrpc").mkdir()
    named = _hub_export(hf_datasets, tmp_path / "glue_mrpc" / "validation.parquet", pair)
    assert [ex.label for ex in load("mrpc", named, "dev")] == [1]
    with pytest.raises(InputError, match="RTE \\(rte\\) or MRPC"):
        load("rte", named, "dev")
    hf_datasets.DatasetDict({"validation": hf_datasets.Dataset.from_dict({"sentence": ["x"], "label": [1],
                                                                          "idx": [0]})}).save_to_disk(tmp_path / "SST-2")
    assert len(load("sst2", tmp_path / "SST-2", "dev")) == 1
    with pytest.raises(InputError, match="CoLA \\(cola\\) or SST-2"):
        load("cola", tmp_path / "SST-2", "dev")


def split_for(task: str, split: str) -> str:
    spec = get(task)
    return split if split in spec.splits else "train" if split == "dev" else spec.splits[-1]


def outcome(task: str, path: Path, split: str) -> str:
    """'loaded' / 'clear' (an InputError or FileNotFoundError naming the file) / the unexpected exception."""
    try:
        load(task, path, split)
    except (InputError, FileNotFoundError) as err:
        return "clear" if str(path) in str(err) else f"unlocated: {err}"
    except Exception as err:  # noqa: BLE001 - what is being counted
        return f"traceback: {type(err).__name__}: {err}"
    return "loaded"


def test_every_file_given_to_every_other_task(tmp_path, capsys):
    """Each official file, moved out of its distributed folder (so only its shape can tell), loaded as each other
    task: always refused, with the file named. Printed counts feed the README."""
    counts = {"cases": 0, "clear": 0, "loaded": 0, "other": 0}
    for parts, split in OFFICIAL:
        source = task_file(*parts)
        moved = copy(source, tmp_path / "_".join(("from", *parts[:-1])))  # not a distributed folder's name
        for task in tasks.TASKS:
            if task == OWNER[parts[0]]:  # where it was: CoLA's and SST-2's test.tsv need their own folder
                assert outcome(task, source, split_for(task, split)) == "loaded", parts
                continue
            result = outcome(task, moved, split_for(task, split))
            counts["cases"] += 1
            counts[result if result in counts else "other"] += 1
            assert result == "clear", (parts, task, result)
    print(f"cross-task loads: {counts}")
    assert counts["cases"] == len(OFFICIAL) * (len(tasks.TASKS) - 1) and counts["clear"] == counts["cases"]


# ---------------------------------------------------------------------------------------------------------------
# RACE at the promised depth

def race_tree(root: Path, *levels_down: str) -> Path:
    """The shared RACE dev split (two levels, 16 articles) under root/<levels_down...>/RACE/dev/."""
    race = root.joinpath(*levels_down, "RACE")
    shutil.copytree(task_file("RACE", "RACE", "dev"), race / "dev")
    return race


def test_race_found_exactly_search_depth_below_and_a_clear_error_one_deeper(tmp_path):
    race_tree(tmp_path / "ok", "a", "b")  # RACE/ three folders below the path given
    assert len(load("race", tmp_path / "ok", "dev")) == 63
    race_tree(tmp_path / "deep", "a", "b", "c")  # four folders below
    with pytest.raises(FileNotFoundError) as err:
        load("race", tmp_path / "deep", "dev")
    assert str(tmp_path / "deep") in str(err.value) and "up to 3 folders below" in str(err.value)


def test_every_format_found_at_the_promised_depth(tmp_path):
    copy(task_file("RTE", "dev.tsv"), tmp_path / "glue" / "a" / "b" / "RTE")
    assert len(load("rte", tmp_path / "glue", "dev")) == 277
    copy(task_file("SciTail", "mt-dnn_sample", "tsv_format", "scitail_1.0_dev.tsv"),
         tmp_path / "sci" / "a" / "b" / "SciTailV1.1" / "tsv_format")
    assert len(load("scitail", tmp_path / "sci", "dev")) == 2  # the sample's two real lines
    copy(task_file("StoryCloze", STORY_VAL), tmp_path / "story" / "a" / "b" / "StoryCloze")
    assert len(load("storycloze", tmp_path / "story", "train")) == 300
    copy(task_file("RTE", "dev.tsv"), tmp_path / "deep" / "a" / "b" / "c" / "RTE")
    with pytest.raises(FileNotFoundError, match="up to 3 folders below"):
        load("rte", tmp_path / "deep", "dev")


# ---------------------------------------------------------------------------------------------------------------
# The paper's evaluation split missing: the fallback is visible

def test_fallback_to_dev_is_a_warning(caplog):
    split = SimpleNamespace(labelled=True)
    with caplog.at_level(logging.WARNING, logger="gpt1.finetune"):
        assert headline_split(get("race"), {"dev": split}) == "dev"
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "test is absent" in caplog.text
    caplog.clear()
    assert headline_split(get("race"), {"dev": split, "test": split}) == "test" and not caplog.records


# ---------------------------------------------------------------------------------------------------------------
# MultiNLI's and SciTail's own formats; MNLI with one half

def multinli_records(group: str, n: int = 4) -> list[dict]:
    labels = ["entailment", "neutral", "contradiction", "-"]
    return [{"annotator_labels": [labels[i % 4]] * 5, "genre": "fiction" if group == "matched" else "oup",
             "gold_label": labels[i % 4], "pairID": f"{i}{group[0]}", "promptID": str(i),
             "sentence1": f"premise {i}", "sentence1_binary_parse": "( p )", "sentence1_parse": "(ROOT p)",
             "sentence2": f"hypothesis {i}", "sentence2_binary_parse": "( h )", "sentence2_parse": "(ROOT h)"}
            for i in range(n)]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_multinli_jsonl_files(tmp_path):
    folder = tmp_path / "multinli_1.0"
    write_jsonl(folder / "multinli_1.0_train.jsonl", multinli_records("matched", 8))
    for group in ("matched", "mismatched"):
        write_jsonl(folder / f"multinli_1.0_dev_{group}.jsonl", multinli_records(group))
    train = load("mnli", tmp_path, "train")
    assert [ex.label for ex in train] == [0, 1, 2, 0, 1, 2] and train.report.excluded == {"no gold label": 2}
    dev = load("mnli", folder, "dev")
    assert [(ex.id, ex.group) for ex in dev] == [("0m", "matched"), ("1m", "matched"), ("2m", "matched"),
                                                  ("0m", "mismatched"), ("1m", "mismatched"), ("2m", "mismatched")]
    with pytest.raises(InputError, match="not a file of SNLI"):  # MultiNLI records are not SNLI's
        load("snli", folder / "multinli_1.0_train.jsonl", "train")


def test_multinli_txt_train_rows_of_11_fields(tmp_path):
    header = ("gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
              "sentence1\tsentence2\tpromptID\tpairID\tgenre\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5")
    rows = ["neutral\t( a )\t( b )\t(ROOT a)\t(ROOT b)\tA premise.\tA hypothesis.\t31193\t31193n\tgovernment\tneutral",
            "entailment\t( c )\t( d )\t(ROOT c)\t(ROOT d)\tC.\tD.\t101457\t101457e\ttelephone\tentailment"]
    (tmp_path / "multinli_1.0_train.txt").write_text("\n".join([header, *rows]) + "\n")
    data = load("mnli", tmp_path, "train")
    assert [(ex.text_a, ex.text_b, ex.label) for ex in data] == [("A premise.", "A hypothesis.", 1), ("C.", "D.", 0)]


def test_mnli_with_only_dev_matched_says_what_is_missing(tmp_path):
    folder = tmp_path / "MNLI"
    for name in ("train.tsv", "dev_matched.tsv"):
        copy(task_file("MNLI", "mt-dnn_sample", name), folder)
    with pytest.raises(FileNotFoundError) as err:
        load("mnli", folder, "dev")
    message = str(err.value)
    assert "found dev_matched" in message and "no dev_mismatched (dev_mismatched.tsv" in message
    assert "load dev_matched alone" in message
    assert len(load("mnli", folder, "dev_matched")) == 1


class WordTokenizer:
    start_id, delimiter_id, classify_id = 1000, 1001, 1002

    def encode(self, text):
        return [hash(word) % 997 for word in text.split()]


def test_finetune_names_the_missing_half_of_mnli_dev():
    from gpt1.config import FinetuneConfig
    from gpt1.finetune.train import load_task_data

    folder = task_file("MNLI", "k-shot", "16-42")  # train.tsv and dev_matched.tsv only
    with pytest.raises(InputError) as err:
        load_task_data(get("mnli"), folder, WordTokenizer(), 64, FinetuneConfig())
    assert "found dev_matched" in str(err.value) and "no dev_mismatched" in str(err.value)
    assert "no test_matched.tsv" in str(err.value)


SCITAIL_SNLI = {"sentence1_binary_parse": "( ( All animals ) ( breathe . ) )", "sentence1_parse": "(ROOT a)",
                "gold_label": "entailment", "sentence2_binary_parse": "( b )", "sentence1": "All animals breathe.",
                "annotator_labels": ["entailment"] * 5, "sentence2_parse": "(ROOT b)",
                "sentence2": "A heron breathes."}


def scitail_release(root: Path) -> Path:
    """A SciTailV1.1 folder with all four formats, each holding one dev pair (neutral in the dgem file only)."""
    release = root / "SciTailV1.1"
    write_jsonl(release / "snli_format" / "scitail_1.0_dev.txt", [SCITAIL_SNLI])  # JSON lines in a .txt
    write_jsonl(release / "predictor_format" / "scitail_1.0_structure_dev.jsonl", [{
        "answer": "heron", "sentence2_structure": "heron<>breathes", "sentence1": "All animals breathe.",
        "sentence2": "A heron breathes.", "gold_label": "entails", "question": "What breathes?"}])
    (release / "dgem_format").mkdir()
    (release / "dgem_format" / "scitail_1.0_structure_dev.tsv").write_text(
        "All plants grow.\tAn oak grows.\tneutral\toak<>grows\n")
    copy(task_file("SciTail", "mt-dnn_sample", "tsv_format", "scitail_1.0_dev.tsv"), release / "tsv_format")
    return release


def test_scitail_variant_formats(tmp_path):
    release = scitail_release(tmp_path)
    tsv_rows = task_file("SciTail", "mt-dnn_sample", "tsv_format", "scitail_1.0_dev.tsv").read_text().splitlines()
    preferred = load("scitail", tmp_path, "dev")  # all four present: tsv_format, the first in order of preference
    assert [ex.text_a for ex in preferred] == [row.split("\t")[0].strip() for row in tsv_rows]
    for folder, label in (("snli_format", "entails"), ("predictor_format", "entails"), ("dgem_format", "neutral")):
        [example] = load("scitail", release / folder, "dev")
        assert get("scitail").labels[example.label] == label, folder
    with pytest.raises(InputError, match="not a file of SNLI"):  # SciTail's snli_format lacks SNLI's captionID
        load("snli", release / "snli_format" / "scitail_1.0_dev.txt", "dev")


# ---------------------------------------------------------------------------------------------------------------
# The complete GLUE files (shared/data/glue-full): exact counts as published

@pytest.mark.parametrize("task,folder,counts", [
    ("cola", "CoLA", {"train": 8551, "dev": 1043, "test": 1063}),
    ("sst2", "SST-2", {"train": 67349, "dev": 872, "test": 1821}),
    ("mrpc", "MRPC", {"train": 3667, "dev": 408, "test": 1725}),
    ("stsb", "STS-B", {"train": 5749, "dev": 1500, "test": 1379}),
    ("rte", "RTE", {"train": 2490, "dev": 277, "test": 3000}),
])
def test_complete_glue_files_load_with_exact_counts(task, folder, counts):
    root = shared_path("glue-full", folder)
    for split, n in counts.items():
        data = load(task, root, split)
        assert (len(data), data.report.rows, dict(data.report.bad)) == (n, n, {}), split
        assert data.labelled == (split != "test")
