"""The `mini` recipe end to end on real data at reduced budgets: the mechanics of a `gpt1/mini` run, not its scores.

The real `mini` preset (its 4x128 model, its fine-tuning settings, its five tasks, `finetune.missing_data=skip`)
with these budgets cut: the first ~2M characters of the shared books (`ingest.max_chars`), 300 merges, 20
pre-training updates, and 200 of RTE's 2,490 train pairs (`finetune.max_train_examples`, evenly spaced). The task
folder holds links to the COMPLETE RTE train and dev files (no test file, so none is read); the other four tasks
have no folder and must come out as not run. The stages run through gpt1.pipeline, as the flow calls them (no
Prefect): ingest, tokenizer, shards, pre-training (its `gpt1 pretrain` process), the two variants' fine-tunes in
two reused worker processes, the report: its baselines (majority class, non-neural) of RTE on the same rows, and
the pre-trained minus from-scratch difference with its interval, RTE standing in for the headline tasks, and the
curve: RTE fine-tuned from the model pre-training wrote at update 10 (`pretrain.curve_steps`).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpt1.finetune.stage import metrics_of
from gpt1.pipeline import plan as P
from gpt1.pipeline.run import run_step
from gpt1.config import load_config
from gpt1.runtime.workers import WorkerPool
from tests.conftest import shared_path

pytestmark = pytest.mark.slow

TRAIN_EXAMPLES = 200
RTE_TRAIN_ROWS, RTE_DEV_ROWS = 2490, 277  # the complete GLUE files (../shared/data/README.md)
NOT_RUN = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B"}
# What each variant's fine-tune is, in the paper's Table 5 terms: the preset has no auxiliary LM term.
ABLATION = {"full": "no_aux_lm", "no_pretrain": "no_pretrain+no_aux_lm", "step_10": "no_aux_lm"}
REDUCED = [
    "ingest.max_chars=2000000", "train_tokenizer.merges=300",
    "pretrain.max_steps=20", "pretrain.warmup_steps=5", "pretrain.log_every=5", "pretrain.eval_every=10",
    "pretrain.eval_batches=2", "pretrain.save_every=10", "pretrain.probe_every=20", "pretrain.probe_max_examples=16",
    "pretrain.curve_steps=[10]",
    f"finetune.max_train_examples={TRAIN_EXAMPLES}", "report.headline_tasks=[rte]",
]


def tables(markdown: str) -> dict[str, list[list[str]]]:
    """results.md's tables: section title -> rows of cells (header first, the |---| line dropped)."""
    found = {}
    for section in markdown.split("### ")[1:]:
        title, _, body = section.partition("\n")
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
                if line.startswith("|")]
        if rows:
            found[title.strip()] = [rows[0], *rows[2:]]
    return found


def column(table: list[list[str]], name: str) -> dict[str, str]:
    """First cell -> the cell under column `name`."""
    at = table[0].index(name)
    return {row[0]: row[at] for row in table[1:]}


def test_mini_recipe_runs_end_to_end_on_complete_rte_files_at_reduced_budgets(tmp_path):
    books, rte = shared_path("books"), shared_path("glue-full", "RTE")
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    for split in ("train.tsv", "dev.tsv"):
        (glue / "RTE" / split).symlink_to(rte / split)
    cfg = load_config("mini", [f"ingest.source={books}", f"finetune.data={glue}",
                               f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", *REDUCED])
    assert cfg.model.n_layer == 4 and cfg.model.n_embd == 128 and cfg.finetune.epochs == 3  # the preset's own
    plan = P.Plan.make(cfg, tmp_path / "work")
    assert plan.tasks == ["rte"] and sorted(plan.missing_data()) == sorted(NOT_RUN)

    for stage in ("ingest", "train-tokenizer", "tokenize"):
        run_step(plan, stage)
    run_step(plan, "pretrain", threads="1")
    with WorkerPool(2) as workers, \
            ThreadPoolExecutor(2) as fanout:
        runs = {v: fanout.submit(run_step, plan, f"finetune-{v}-rte", workers=workers) for v in plan.variants}
        metrics = {v: metrics_of(run.result().path) for v, run in runs.items()}
    report = run_step(plan, "report")

    stats = json.loads((plan.dir("ingest") / "stats.json").read_text())
    assert stats["subset"]["limit_reached"]
    training = json.loads((plan.dir("pretrain") / "final" / "training.json").read_text())
    assert training["steps"] == 20
    halfway = json.loads((plan.dir("pretrain") / "curve" / "step-00000010" / "training.json").read_text())
    assert (halfway["steps"], halfway["tokens_seen"]) == (10, training["tokens_seen"] // 2)
    assert list(metrics) == ["full", "no_pretrain", "step_10"]
    assert metrics["step_10"]["pretraining"]["steps"] == 10 and metrics["full"]["pretraining"]["steps"] == 20
    assert metrics["no_pretrain"]["pretraining"] is None
    for variant, result in metrics.items():
        assert result["ablation"] == ABLATION[variant] and result["eval_split"] == "dev"
        assert result["data"]["splits"]["train"]["rows"] == RTE_TRAIN_ROWS  # the complete file was read ...
        assert result["train"]["examples"] == TRAIN_EXAMPLES                 # ... and capped for the budget
        assert result["splits"]["dev"]["examples"] == RTE_DEV_ROWS and "test" not in result["splits"]
        assert 100 < result["train"]["peak_rss_mb"] < 4000

    summary = json.loads((report.path / "results.json").read_text())
    assert set(summary["runs"]) == {"full", "no_pretrain", "step_10"}
    assert summary["runs"]["no_pretrain"]["ablation"] == ABLATION["no_pretrain"]
    for variant, run in summary["runs"].items():
        rte_result = run["tasks"]["rte"]
        assert rte_result["metrics"]["primary"] == metrics[variant]["metrics"]["primary"]
        assert rte_result["wall_seconds"] > 0 and rte_result["peak_rss_mb"] == metrics[variant]["train"]["peak_rss_mb"]
        assert set(run["tasks"]) == {"rte"} and run["errors"] == {}
    assert set(summary["not_run"]) == set(NOT_RUN)
    for task, folder in NOT_RUN.items():
        assert summary["not_run"][task] == f"no files at {glue / folder}"

    markdown = (report.path / "results.md").read_text()
    found = tables(markdown)
    rte_cells = column(next(t for t in found.values() if "RTE" in t[0]), "RTE")  # Table 2 (NLI)
    for row in ("ours: full", "ours: no_pretrain", "majority class", "non-neural baseline"):
        assert 0 <= float(rte_cells[row].removesuffix(" †")) <= 100, row  # a score, not "—"
    assert float(rte_cells["majority class"]) == pytest.approx(metrics["full"]["majority"]["primary"], abs=0.05)
    table5 = column(found["Table 5: ablations (GLUE tasks, primary metric)"], "RTE (acc)")
    assert table5["ours: full (no_aux_lm)"] != "—" and table5["ours: no_pretrain (no_pretrain+no_aux_lm)"] != "—"
    for title in ("Fine-tune wall time (s)", "Fine-tune peak RSS (MB)"):
        cells = column(found[title], "RTE")
        assert set(cells) == {"ours: full", "ours: no_pretrain"} and all(float(c) > 0 for c in cells.values()), title
    not_run = markdown.split("### Not run")[1].split("###")[0]
    assert all(f"no files at {glue / folder}" in not_run for folder in NOT_RUN.values())

    # the baselines: learnt from the fine-tunes' 200 train pairs, scored on the 277 dev pairs they were scored on
    baseline = summary["baselines"]["rte"]
    assert (baseline["train_rows"], baseline["eval_rows"]) == (TRAIN_EXAMPLES, RTE_DEV_ROWS)
    assert 0 <= baseline["metrics"]["accuracy"] <= 100
    assert float(rte_cells["non-neural baseline"]) == pytest.approx(baseline["metrics"]["accuracy"], abs=0.05)
    for variant, run in summary["runs"].items():
        below = metrics[variant]["metrics"]["accuracy"] < baseline["metrics"]["accuracy"]
        assert run["tasks"]["rte"]["below_baseline"] == below
        assert variant == "step_10" or rte_cells[f"ours: {variant}"].endswith(" †") == below
    # both variants compared on the same rows, with an interval around the difference
    [compared] = summary["comparisons"]
    assert compared["runs"] == {"pretrained": ["full"], "from_scratch": ["no_pretrain"]}
    rte_gain, mean = compared["tasks"]["rte"], compared["headline"]
    assert rte_gain["examples"] == RTE_DEV_ROWS and rte_gain["seeds"] == [1, 1]
    assert rte_gain["difference"] == pytest.approx(metrics["full"]["metrics"]["accuracy"]
                                                   - metrics["no_pretrain"]["metrics"]["accuracy"])
    assert rte_gain["low"] <= rte_gain["difference"] <= rte_gain["high"]
    assert mean["tasks"] == {"rte": "accuracy"} and mean["difference"] == pytest.approx(rte_gain["difference"])
    assert "### Pre-trained minus from scratch" in markdown and "**headline mean** (RTE accuracy)" in markdown
    # the curve: the headline gain of the model at update 10 and of the final one, each against the same twin
    assert [(p["pretrained"], p["steps"]) for p in compared["curve"]] == [("step_10", 10), ("full", 20)]
    assert compared["curve"][1]["headline"]["difference"] == pytest.approx(mean["difference"])
    assert all(p["headline"]["low"] <= p["headline"]["difference"] <= p["headline"]["high"] for p in compared["curve"])
    assert "#### The curve" in markdown and (report.path / "curve.png").is_file()
    assert "ours: step_10" not in markdown  # in the curve, not in the paper's tables
