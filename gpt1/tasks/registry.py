"""The twelve fine-tuning tasks of the paper, one `TaskSpec` each (field meanings in `gpt1.tasks.spec`).

Splits (where the paper is silent):
* GLUE tasks: train, dev, test (test is unlabelled: predictions go to `write_submission`).
* MNLI: dev_matched, dev_mismatched, test_matched, test_mismatched; `dev`/`test` load both halves, each example
  tagged `group` "matched"/"mismatched", so one evaluation yields both accuracies.
* Story Cloze has only two labelled files. As in GPT-1, `train` is the validation file (1,871 stories) and
  `test` the test file; there is no `dev`.
* `eval_splits` is where the paper's number comes from: dev for GLUE (hidden test labels), test for SNLI,
  SciTail, RACE and Story Cloze (public test labels).

Labels: `labels[i]` is the string the files (and the GLUE server) use for class i, in the order of the Hugging
Face datasets' class indices; STS-B is a regression (labels None, score in [0, 5]); multiple choice labels name
the answers (RACE A-D, Story Cloze ending 1/2) and `example.label` is the right answer's index.

Hub revisions: the GLUE tasks are pinned to one commit of `nyu-mll/glue` (GLUE_REVISION), so `finetune.data=hf`
reads the same rows everywhere; the other tasks' repositories are not pinned (`hf_revision=None`): pin one per
`hf:` reference in a preset (`finetune.task_data.snli=hf:snli@<commit>`); `gpt1 preflight` notes each unpinned one.
"""

from __future__ import annotations

from gpt1.tasks.spec import Columns, PaperColumn, Probe, Records, TaskSpec

GLUE_REVISION = "bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c"  # a commit of nyu-mll/glue
_NLI = ("entailment", "neutral", "contradiction")
_BINARY = ("0", "1")
_PAIR = ("sentence1", "sentence2")
_PARSES = ("sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse", "sentence2_parse")
_VOTES = ("label1", "label2", "label3", "label4", "label5")
_GLUE_FILES = ("{split}.tsv",)
_STSB = ("index", "genre", "filename", "year", "old_index", "source1", "source2", *_PAIR, "score")
# + labels: GLUE's train/dev layouts
_MNLI = (
    "index",
    "promptID",
    "pairID",
    "genre",
    *_PARSES,
    *_PAIR,
)
_SNLI_GLUE = ("index", "captionID", "pairID", *_PARSES, *_PAIR)


def _accuracy(header: str) -> tuple[PaperColumn, ...]:
    return (PaperColumn(header=header, metric="accuracy"),)


REGISTRY: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="cola",
            title="CoLA",
            kind="classification",
            labels=_BINARY,
            format="split_files",
            folder="CoLA",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=("sentence",),
                label="label",
                id="index",
                headers=(("index", "sentence"),),
                headerless=("source", "label", "mark", "sentence"),
            ),
            submission="CoLA",
            hf="glue/cola",
            hf_revision=GLUE_REVISION,
            hf_text=("sentence",),
            hf_columns=("sentence", "label", "idx"),
            metrics=("mcc", "accuracy"),
            glue=True,
            paper={"mcc": 45.4, "primary": 45.4},
            paper_ablations={"no_pretrain": 18.9, "no_aux_lm": 47.9},
            table=4,
            table_order=0,
            table_columns=(PaperColumn(header="CoLA (mc)", metric="mcc"),),
            ablation_column="CoLA (mc)",
            probe=Probe(heuristic="acceptability", splits=("train", "dev")),
        ),
        TaskSpec(
            name="sst2",
            title="SST-2",
            kind="classification",
            labels=_BINARY,
            format="split_files",
            folder="SST-2",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=("sentence",),
                label="label",
                id="index",
                headers=(("sentence", "label"), ("index", "sentence")),
            ),
            submission="SST-2",
            hf="glue/sst2",
            hf_revision=GLUE_REVISION,
            hf_text=("sentence",),
            hf_columns=("sentence", "label", "idx"),
            metrics=("accuracy",),
            glue=True,
            paper={"accuracy": 91.3, "primary": 91.3},
            paper_ablations={"no_pretrain": 84.0, "no_aux_lm": 92.0},
            table=4,
            table_order=1,
            table_columns=_accuracy("SST-2 (acc)"),
            ablation_column="SST2 (acc)",
            probe=Probe(heuristic="sentiment", splits=("dev",)),
        ),
        TaskSpec(
            name="mrpc",
            title="MRPC",
            kind="similarity",
            labels=_BINARY,
            format="split_files",
            folder="MRPC",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=("#1 String", "#2 String"),
                label="Quality",
                id="index",
                headers=(
                    ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                    ("index", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                ),
            ),
            submission="MRPC",
            hf="glue/mrpc",
            hf_revision=GLUE_REVISION,
            hf_text=_PAIR,
            hf_columns=(*_PAIR, "label", "idx"),
            metrics=("f1", "accuracy"),
            glue=True,
            paper={"f1": 82.3, "primary": 82.3},
            paper_ablations={"no_pretrain": 79.4, "no_aux_lm": 84.9},
            table=4,
            table_order=2,
            table_columns=(PaperColumn(header="MRPC (F1)", metric="f1"),),
            ablation_column="MRPC (F1)",
        ),
        TaskSpec(
            name="stsb",
            title="STS-B",
            kind="similarity",
            labels=None,
            format="split_files",
            folder="STS-B",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=_PAIR,
                label="score",
                id="index",
                headers=(_STSB, _STSB[:-1]),
                headerless=("genre", "filename", "year", "old_index", "score", *_PAIR),
                widths=(9,),
            ),
            submission="STS-B",
            hf="glue/stsb",
            hf_revision=GLUE_REVISION,
            hf_text=_PAIR,
            hf_columns=(*_PAIR, "label", "idx"),
            metrics=("pearson", "spearman"),
            glue=True,
            paper={"pearson": 82.0, "primary": 82.0},
            paper_ablations={"no_pretrain": 30.9, "no_aux_lm": 83.2},
            table=4,
            table_order=3,
            table_columns=(PaperColumn(header="STS-B (pc)", metric="pearson"),),
            ablation_column="STSB (pc)",
        ),
        TaskSpec(
            name="qqp",
            title="QQP",
            kind="similarity",
            labels=_BINARY,
            format="split_files",
            folder="QQP",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=("question1", "question2"),
                label="is_duplicate",
                id="id",
                headers=(
                    ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
                    ("id", "question1", "question2"),
                ),
            ),
            submission="QQP",
            hf="glue/qqp",
            hf_revision=GLUE_REVISION,
            hf_text=("question1", "question2"),
            hf_columns=("question1", "question2", "label", "idx"),
            metrics=("f1", "accuracy"),
            glue=True,
            paper={"f1": 70.3, "primary": 70.3},
            paper_ablations={"no_pretrain": 65.5, "no_aux_lm": 69.8},
            table=4,
            table_order=4,
            table_columns=(PaperColumn(header="QQP (F1)", metric="f1"),),
            ablation_column="QQP (F1)",
        ),
        TaskSpec(
            name="mnli",
            title="MNLI",
            kind="entailment",
            labels=_NLI,
            no_gold="-",
            # GLUE's tsv files first; MultiNLI 1.0's own jsonl and txt files (no test split) are read as well.
            format="split_files",
            folder="MNLI",
            file_names=("{split}.tsv", "multinli_1.0_{split}.jsonl", "multinli_1.0_{split}.txt"),
            columns=Columns(
                text=_PAIR,
                label="gold_label",
                id="index",
                headers=(
                    (*_MNLI, "label1", "gold_label"),
                    (*_MNLI, *_VOTES, "gold_label"),
                    _MNLI,
                    ("gold_label", *_PARSES, *_PAIR, "promptID", "pairID", "genre", *_VOTES),
                ),
                widths=(11,),
            ),  # MultiNLI's txt: train rows stop after label1
            records=Records(
                id="pairID",
                keys=frozenset(
                    {
                        "annotator_labels",
                        "genre",
                        "gold_label",
                        "pairID",
                        "promptID",
                        *_PARSES,
                        *_PAIR,
                    }
                ),
                required=frozenset({"promptID", "pairID", "genre", *_PAIR, "gold_label"}),
            ),
            splits=(
                "train",
                "dev",
                "dev_matched",
                "dev_mismatched",
                "test",
                "test_matched",
                "test_mismatched",
            ),
            file_groups=("matched", "mismatched"),
            submission="MNLI",
            submission_groups={"matched": "MNLI-m", "mismatched": "MNLI-mm"},
            hf="glue/mnli",
            hf_revision=GLUE_REVISION,
            hf_text=("premise", "hypothesis"),
            hf_columns=("premise", "hypothesis", "label", "idx"),
            metrics=("accuracy",),
            groups=("matched", "mismatched"),
            primary_is_group_mean=True,
            glue=True,
            # Table 5's "MNLI" 81.8 is the mean of matched and mismatched, as `primary` here.
            paper={"accuracy_matched": 82.1, "accuracy_mismatched": 81.4, "primary": 81.8},
            paper_ablations={"no_pretrain": 75.7, "no_aux_lm": 81.1},
            table=2,
            table_order=0,
            table_columns=(
                PaperColumn(header="MNLI-m", metric="accuracy_matched"),
                PaperColumn(header="MNLI-mm", metric="accuracy_mismatched"),
            ),
            ablation_column="MNLI (acc)",
        ),
        TaskSpec(
            name="qnli",
            title="QNLI",
            kind="entailment",
            labels=("entailment", "not_entailment"),
            format="split_files",
            folder="QNLI",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=("question", "sentence"),
                label="label",
                id="index",
                headers=(
                    ("index", "question", "sentence", "label"),
                    ("index", "question", "sentence"),
                ),
            ),
            submission="QNLI",
            hf="glue/qnli",
            hf_revision=GLUE_REVISION,
            hf_text=("question", "sentence"),
            hf_columns=("question", "sentence", "label", "idx"),
            metrics=("accuracy",),
            glue=True,
            paper={"accuracy": 88.1, "primary": 88.1},
            paper_ablations={"no_pretrain": 71.2, "no_aux_lm": 86.9},
            table=2,
            table_order=3,
            table_columns=_accuracy("QNLI"),
            ablation_column="QNLI (acc)",
        ),
        TaskSpec(
            name="rte",
            title="RTE",
            kind="entailment",
            labels=("entailment", "not_entailment"),
            format="split_files",
            folder="RTE",
            file_names=_GLUE_FILES,
            columns=Columns(
                text=_PAIR,
                label="label",
                id="index",
                headers=(("index", *_PAIR, "label"), ("index", *_PAIR)),
            ),
            submission="RTE",
            hf="glue/rte",
            hf_revision=GLUE_REVISION,
            hf_text=_PAIR,
            hf_columns=(*_PAIR, "label", "idx"),
            metrics=("accuracy",),
            glue=True,
            paper={"accuracy": 56.0, "primary": 56.0},
            paper_ablations={"no_pretrain": 53.8, "no_aux_lm": 54.4},
            table=2,
            table_order=4,
            table_columns=_accuracy("RTE"),
            ablation_column="RTE (acc)",
        ),
        TaskSpec(
            name="snli",
            title="SNLI",
            kind="entailment",
            labels=_NLI,
            no_gold="-",
            # The official jsonl and txt, and the SNLI tsv the GLUE download used to ship.
            format="split_files",
            folder="snli_1.0",
            file_names=("snli_1.0_{split}.jsonl", "snli_1.0_{split}.txt", "{split}.tsv"),
            columns=Columns(
                text=_PAIR,
                label="gold_label",
                id="pairID",
                headers=(
                    (*_SNLI_GLUE, "label1", "gold_label"),
                    (*_SNLI_GLUE, *_VOTES, "gold_label"),
                    ("gold_label", *_PARSES, *_PAIR, "captionID", "pairID", *_VOTES),
                ),
                widths=(11, 15),
                from_end="gold_label",
            ),
            records=Records(
                id="pairID",
                keys=frozenset(
                    {"annotator_labels", "captionID", "gold_label", "pairID", *_PARSES, *_PAIR}
                ),
                required=frozenset({"captionID", "pairID", *_PAIR, "gold_label"}),
            ),
            eval_splits=("test",),
            submission="SNLI",
            hf="snli",
            hf_text=("premise", "hypothesis"),
            hf_columns=("premise", "hypothesis", "label"),
            metrics=("accuracy",),
            paper={"accuracy": 89.9, "primary": 89.9},
            table=2,
            table_order=1,
            table_columns=_accuracy("SNLI"),
        ),
        TaskSpec(
            name="scitail",
            title="SciTail",
            kind="entailment",
            labels=("entails", "neutral"),
            label_aliases={"entailment": "entails"},  # snli_format writes "entailment"
            # SciTailV1.1/{tsv_format, snli_format (jsonl in .txt), predictor_format (jsonl),
            # dgem_format (4-field tsv)}.
            format="split_files",
            folder="SciTailV1.1",
            folder_depth=1,
            file_names=(
                "scitail_1.0_{split}.tsv",
                "scitail_1.0_{split}.txt",
                "scitail_1.0_structure_{split}.jsonl",
                "scitail_1.0_structure_{split}.tsv",
            ),
            columns=Columns(
                text=("premise", "hypothesis"),
                label="label",
                headerless=("premise", "hypothesis", "label"),
                widths=(4,),
            ),
            records=Records(
                keys=frozenset(
                    {
                        "annotator_labels",
                        "gold_label",
                        *_PARSES,
                        *_PAIR,
                        "answer",
                        "question",
                        "sentence2_structure",
                    }
                ),
                required=frozenset({*_PAIR, "gold_label"}),
            ),
            eval_splits=("test",),
            submission="SciTail",
            hf="scitail",
            hf_text=("premise", "hypothesis"),
            hf_columns=("premise", "hypothesis", "label"),
            hf_label_names=True,
            metrics=("accuracy",),
            paper={"accuracy": 88.3, "primary": 88.3},
            table=2,
            table_order=2,
            table_columns=_accuracy("SciTail"),
        ),
        TaskSpec(
            name="race",
            title="RACE",
            kind="multiple_choice",
            labels=("A", "B", "C", "D"),
            n_choices=4,
            format="race",
            folder="RACE",
            folder_depth=2,  # RACE/<split>/{middle,high}/<n>.txt
            eval_splits=("test",),
            submission="RACE",
            hf="race",
            hf_columns=("example_id", "article", "answer", "question", "options"),
            hf_label="answer",
            hf_label_names=True,
            metrics=("accuracy",),
            groups=("middle", "high"),
            paper={
                "accuracy": 59.0,
                "accuracy_middle": 62.9,
                "accuracy_high": 57.4,
                "primary": 59.0,
            },
            table=3,
            table_order=1,
            table_columns=(
                PaperColumn(header="RACE-m", metric="accuracy_middle"),
                PaperColumn(header="RACE-h", metric="accuracy_high"),
                PaperColumn(header="RACE", metric="accuracy"),
            ),
            probe=Probe(heuristic="answer_likelihood", splits=("dev",)),
        ),
        TaskSpec(
            name="storycloze",
            title="Story Cloze",
            kind="multiple_choice",
            labels=("1", "2"),
            n_choices=2,
            format="storycloze",
            folder="StoryCloze",
            splits=("train", "test"),
            splits_note="Story Cloze: train = the validation csv, test = the test csv",
            eval_splits=("test",),
            submission="StoryCloze",
            hf="story_cloze",
            hf_label="answer_right_ending",
            hf_splits={"train": "validation"},
            hf_manual=(
                "its csv files are shared only through the request form of the ROCStories / Story Cloze site "
                "(https://cs.rochester.edu/nlp/rocstories/); download the 2016 val and test csv files into one "
                "folder and set finetune.task_data.storycloze=/that/folder"
            ),
            hf_columns=(
                "story_id",
                "input_sentence_1",
                "input_sentence_2",
                "input_sentence_3",
                "input_sentence_4",
                "sentence_quiz1",
                "sentence_quiz2",
                "answer_right_ending",
            ),
            metrics=("accuracy",),
            paper={"accuracy": 86.5, "primary": 86.5},
            table=3,
            table_order=0,
            table_columns=_accuracy("Story Cloze"),
            probe=Probe(heuristic="answer_likelihood", splits=("train",)),
        ),
    )
}

TASKS = tuple(REGISTRY)
GLUE_TASKS = tuple(name for name, spec in REGISTRY.items() if spec.glue)


def get(task: str) -> TaskSpec:
    try:
        return REGISTRY[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}") from None
