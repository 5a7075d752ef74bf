"""The official files of the twelve tasks under ../shared/data/tasks, one per layout the shared data holds (the
GLUE layout, k-shot and MT-DNN samples, SNLI's JSON lines and text, SciTail's tsv format, RACE articles, Story
Cloze's csv), each with the split it is; tests using them skip when the shared data is absent."""

from __future__ import annotations

from pathlib import Path

from conftest import shared_path

STORY_VAL = "cloze_test_val__spring2016 - cloze_test_ALL_val.csv"


def task_file(*parts) -> Path:
    return shared_path("tasks", *parts)


# The representative official files of every task, and which split each is.
OFFICIAL = [
    (("CoLA", "train.tsv"), "train"), (("CoLA", "test.tsv"), "test"),
    (("SST-2", "dev.tsv"), "dev"), (("SST-2", "test.tsv"), "test"),
    (("MRPC", "dev.tsv"), "dev"), (("MRPC", "test.tsv"), "test"),
    (("STS-B", "dev.tsv"), "dev"), (("STS-B", "test.tsv"), "test"), (("STS-B", "original", "sts-dev.tsv"), "dev"),
    (("QQP", "k-shot", "16-42", "train.tsv"), "train"), (("QQP", "mt-dnn_sample", "test.tsv"), "test"),
    (("MNLI", "mt-dnn_sample", "train.tsv"), "train"), (("MNLI", "mt-dnn_sample", "dev_matched.tsv"), "dev"),
    (("MNLI", "mt-dnn_sample", "test_matched.tsv"), "test"),
    (("QNLI", "dev.tsv"), "dev"), (("QNLI", "test.tsv"), "test"),
    (("RTE", "dev.tsv"), "dev"), (("RTE", "test.tsv"), "test"),
    (("SNLI", "Deltaus_sBiMPM", "snli_1.0", "snli_1.0_dev.jsonl"), "dev"),
    (("SNLI", "CooperUrichUT_snli", "snli_1.0", "snli_1.0_dev.txt"), "dev"),
    (("SNLI", "mt-dnn_sample", "dev.tsv"), "dev"), (("SNLI", "k-shot", "16-42", "train.tsv"), "train"),
    (("SciTail", "mt-dnn_sample", "tsv_format", "scitail_1.0_dev.tsv"), "dev"),
    (("RACE", "RACE", "dev", "high", "63.txt"), "dev"),
    (("StoryCloze", STORY_VAL), "train"),
]
OWNER = {"CoLA": "cola", "SST-2": "sst2", "MRPC": "mrpc", "STS-B": "stsb", "QQP": "qqp", "MNLI": "mnli",
         "QNLI": "qnli", "RTE": "rte", "SNLI": "snli", "SciTail": "scitail", "RACE": "race",
         "StoryCloze": "storycloze"}
