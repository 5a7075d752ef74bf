"""The `mini` recipe end to end on real data at reduced budgets: the mechanics of a `gpt1/mini` run, not its scores.

The real `mini` preset (its 4x128 model, its fine-tuning settings, task text and the leak check, documents cut at
paragraphs and aligned to blocks, two seeds per variant, `finetune.missing_data=skip`) with these budgets cut: the
first ~2M characters of the shared books (`ingest.max_chars`), 300 merges, 20 pre-training updates, and 200 of
MRPC's 3,668 train pairs (`finetune.max_train_examples`, evenly spaced). The task folder holds links to the
COMPLETE MRPC train, dev and test files; SST-2 and STS-B have no folder and must come out as not run. The stages run
through gpt1.pipeline, as the flow calls them (no Prefect): ingest (the books, then MRPC's unlabelled train pairs,
with MRPC's dev and test sentences removed), tokenizer, shards, pre-training (its `gpt1 pretrain` process, its
validation loss beside the n-gram baselines), both variants' fine-tunes for each seed in two reused worker
processes, and the curve (MRPC fine-tuned from the model pre-training wrote at update 10, each seed), and the
report: its baselines, the pre-trained minus from-scratch difference with its interval over both seeds, each
seed's own, the corpus's composition and the language model's line.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpt1.finetune.stage import metrics_of
from gpt1 import recipe
from gpt1.recipe import experiment as P
from gpt1.pipeline.run import run_step
from gpt1.config import load_config
from gpt1.runtime.workers import WorkerPool
from tests.conftest import shared_path

pytestmark = pytest.mark.slow

TRAIN_EXAMPLES = 200
MRPC_TRAIN_ROWS, MRPC_DEV_ROWS, MRPC_TEST_ROWS = 3667, 408, 1725  # the complete GLUE files, as tests/unit/test_task_loaders.py counts them
NOT_RUN = {"sst2": "SST-2", "stsb": "STS-B"}
VARIANTS = ["full", "full_seed1", "no_pretrain", "no_pretrain_seed1", "step_10", "step_10_seed1"]
# What each variant's fine-tune is, in the paper's Table 5 terms: the preset has no auxiliary LM term.
ABLATION = {"full": "no_aux_lm", "no_pretrain": "no_pretrain+no_aux_lm", "step_10": "no_aux_lm"}
REDUCED = [
    "ingest.max_chars=2000000", "train_tokenizer.merges=300",
    "pretrain.max_steps=20", "pretrain.warmup_steps=5", "pretrain.log_every=5", "pretrain.eval_every=10",
    "pretrain.eval_batches=2", "pretrain.save_every=10", "pretrain.probe_every=20", "pretrain.probe_max_examples=16",
    "pretrain.curve_steps=[10]", f"finetune.max_train_examples={TRAIN_EXAMPLES}", "report.headline_tasks=[mrpc:accuracy]",
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


def test_mini_recipe_runs_end_to_end_on_complete_mrpc_files_at_reduced_budgets(tmp_path):
    books, mrpc = shared_path("books"), shared_path("glue-full", "MRPC")
    glue = tmp_path / "glue"
    (glue / "MRPC").mkdir(parents=True)
    for split in ("train.tsv", "dev.tsv", "test.tsv"):
        (glue / "MRPC" / split).symlink_to(mrpc / split)
    cfg = load_config("mini", [f"ingest.source={books}", f"finetune.data={glue}",
                               f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", *REDUCED])
    assert cfg.model.n_layer == 4 and cfg.model.n_embd == 128 and cfg.finetune.epochs == 3  # the preset's own
    assert cfg.ingest.task_text and cfg.ingest.leak_check and cfg.tokenize.align_documents and cfg.finetune.seeds == 2
    plan = recipe.plan(cfg, tmp_path / "work")
    assert plan.tasks == ["mrpc"] and sorted(plan.missing_data()) == sorted(NOT_RUN)
    assert plan.variants == VARIANTS

    for stage in ("ingest", "train-tokenizer", "tokenize"):
        run_step(plan, stage)
    run_step(plan, "pretrain", threads="1")
    with WorkerPool(2) as workers, \
            ThreadPoolExecutor(2) as fanout:
        runs = {v: fanout.submit(run_step, plan, f"finetune-{v}-mrpc", workers=workers) for v in plan.variants}
        metrics = {v: metrics_of(run.result().path) for v, run in runs.items()}
    report = run_step(plan, "report")

    # the corpus: the books up to the limit, then MRPC's train pairs without their labels, its held-out sentences out
    stats = json.loads((plan.dir("ingest") / "stats.json").read_text())
    assert stats["subset"]["limit_reached"] and stats["settings"]["task_text"] == ["mrpc"]
    assert 0 < stats["origins"]["task_text"]["records"] <= MRPC_TRAIN_ROWS
    leak = stats["leak_check"]
    assert leak["held_out"]["mrpc"] == {"rows": {"dev": MRPC_DEV_ROWS, "test": MRPC_TEST_ROWS}, "not_found": []}
    assert leak["sentences_indexed"] > 1000 and set(leak["sentences_removed"]) == {"corpus", "task_text"}
    manifest = json.loads((plan.dir("tokenize") / "manifest.json").read_text())
    mix = manifest["composition"]
    assert mix["train_tokens"]["task_text"] > 0 and mix["train_tokens"]["corpus"] > mix["train_tokens"]["task_text"]
    assert mix["blocks_starting_a_document"] > 0.5

    # pre-training: its validation loss beside the n-gram baselines on the same tokens
    training = json.loads((plan.dir("pretrain") / "final" / "training.json").read_text())
    assert training["steps"] == 20 and training["corpus"] == mix
    model = training["language_model"]
    assert model["unigram_loss"] > model["bigram_loss"] > 0 and 0 < model["bigram_weight"] < 1
    batch = cfg.pretrain.global_batch_size  # validation scores whole global batches of the val split, at most 2
    val_blocks = min(2, manifest["splits"]["val"]["rows"] // batch) * batch
    assert val_blocks > 0 and model["scored_tokens"] == val_blocks * cfg.model.n_ctx
    assert model["beats_bigram_by"] == pytest.approx(model["bigram_loss"] - model["val_loss"])

    assert list(metrics) == VARIANTS
    for variant, result in metrics.items():
        base, seed = P.unseeded(variant)
        assert result["finetune_config"]["seed"] == (seed or 0) and result["eval_split"] == "dev"
        assert result["ablation"] == ABLATION[base]
        assert result["data"]["splits"]["train"]["rows"] == MRPC_TRAIN_ROWS  # the complete file was read ...
        assert result["train"]["examples"] == TRAIN_EXAMPLES                 # ... and capped for the budget
        assert result["splits"]["dev"]["examples"] == MRPC_DEV_ROWS
    assert metrics["full"]["pretraining"]["language_model"] == model
    assert metrics["step_10"]["pretraining"]["steps"] == 10 and metrics["no_pretrain"]["pretraining"] is None

    summary = json.loads((report.path / "results.json").read_text())
    assert set(summary["runs"]) == set(VARIANTS) and set(summary["not_run"]) == set(NOT_RUN)
    baseline = summary["baselines"]["mrpc"]
    assert (baseline["train_rows"], baseline["eval_rows"]) == (TRAIN_EXAMPLES, MRPC_DEV_ROWS)
    [compared] = summary["comparisons"]
    assert compared["runs"] == {"pretrained": ["full", "full_seed1"], "from_scratch": ["no_pretrain", "no_pretrain_seed1"]}
    gain, mean = compared["tasks"]["mrpc"], compared["headline"]
    assert gain["examples"] == MRPC_DEV_ROWS and gain["seeds"] == [2, 2] and gain["metric"] == "accuracy"
    average = sum(metrics[v]["metrics"]["accuracy"] for v in ("full", "full_seed1")) / 2
    scratch = sum(metrics[v]["metrics"]["accuracy"] for v in ("no_pretrain", "no_pretrain_seed1")) / 2
    assert gain["difference"] == pytest.approx(average - scratch) and gain["low"] <= gain["difference"] <= gain["high"]
    assert gain["baseline"] == pytest.approx(baseline["metrics"]["accuracy"])
    seeds = {entry["seed"]: entry["difference"] for entry in compared["per_seed"]}
    assert seeds[0] == pytest.approx(metrics["full"]["metrics"]["accuracy"]
                                     - metrics["no_pretrain"]["metrics"]["accuracy"])
    assert sorted(seeds) == [0, 1] and mean["difference"] == pytest.approx(sum(seeds.values()) / 2)
    assert compared["pretraining"]["corpus"] == mix and compared["pretraining"]["language_model"] == model
    # the curve: update 10's model and the final one, both seeds each, against the same twins
    assert [(p["steps"], len(p["runs"])) for p in compared["curve"]] == [(10, 2), (20, 2)]

    markdown = (report.path / "results.md").read_text()
    assert "**headline mean** (MRPC accuracy)" in markdown and "**Per seed**" in markdown
    assert "**Pre-training corpus**" in markdown and "Leak check:" in markdown
    assert "**Pre-training quality**" in markdown and "**Against the non-neural baseline**" in markdown
    found = tables(markdown)
    mrpc_cells = column(next(t for t in found.values() if "MRPC (F1)" in t[0]), "MRPC (F1)")  # Table 4
    for row in ("ours: full", "ours: no_pretrain", "majority class", "non-neural baseline"):
        assert 0 <= float(mrpc_cells[row].removesuffix(" †")) <= 100, row  # a score, not "—"
    not_run = markdown.split("### Not run")[1].split("###")[0]
    assert all(f"no files at {glue / folder}" in not_run for folder in NOT_RUN.values())
