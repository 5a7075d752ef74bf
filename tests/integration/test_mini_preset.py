"""The `mini` preset (real books, the tasks' own text, complete GLUE files, 2 CPU cores), its books-only twin, and
the benchmark that times the deployment and records its verdict."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from gpt1.config import FinetuneConfig, PretrainConfig, flatten, load_config
from gpt1 import recipe
from gpt1.recipe.experiment import variant_config
from conftest import REPO

HEADLINE = ["sst2", "mrpc", "stsb"]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_mini", REPO / "benchmarks" / "bench_mini.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mini_pretrains_on_books_and_task_text_and_fine_tunes_the_headline_tasks_twice():
    cfg = load_config("mini")
    paper_ft, paper_pt = FinetuneConfig(), PretrainConfig()
    assert cfg.finetune.tasks == HEADLINE and cfg.orchestration.ablations == ["no_pretrain"]
    # scaled: a small model, a few thousand merges, a bounded number of updates, on both cores
    assert cfg.model.n_layer < 12 and cfg.model.n_embd < 768 and 1000 <= cfg.train_tokenizer.merges < 10000
    assert cfg.pretrain.max_steps is not None and cfg.orchestration.pretrain_alone
    # what pre-training reads: the books, the tasks' train text, nothing of their dev or test files; documents
    # that start blocks where fine-tuning's sequences start
    assert cfg.ingest.task_text and cfg.ingest.leak_check and cfg.ingest.max_doc_chars and cfg.tokenize.align_documents
    # kept from the paper: the objective and its regularisation, the schedules' form
    for name in ("epochs", "clf_pdrop", "weight_decay", "from_scratch", "redraw_specials"):
        assert getattr(cfg.finetune, name) == getattr(paper_ft, name), name
    for name in ("schedule", "weight_decay", "grad_clip", "adam_betas"):
        assert getattr(cfg.pretrain, name) == getattr(paper_pt, name), name
    # the fine-tunes the verdict needs: both variants, two seeds each, sharing every setting but the start
    assert cfg.finetune.aux_lm_weight == 0 and cfg.finetune.seeds == 2 and cfg.pretrain.curve_steps == []
    plan = recipe.plan(cfg, "work")
    assert plan.variants == ["full", "full_seed1", "no_pretrain", "no_pretrain_seed1"]
    for seed in ("", "_seed1"):
        twin = variant_config(cfg, f"no_pretrain{seed}").finetune
        assert twin.model_dump(exclude={"from_scratch"}) == plan.finetune_config(f"full{seed}").model_dump(
            exclude={"from_scratch"})


def test_mini_names_public_sources_at_pinned_revisions_and_its_headline_tasks():
    """No path of a particular machine: the corpus and the tasks are hub datasets (GLUE pinned to a commit); the
    offline copies are overrides. The headline is where the paper's gain is large."""
    from gpt1.tasks.registry import GLUE_REVISION

    cfg = load_config("mini")
    assert cfg.ingest.source.startswith("hf:deepmind/pg19@") and cfg.finetune.data == "hf"
    settings = flatten(cfg.model_dump())
    assert not [key for key, value in settings.items() if isinstance(value, str) and value.startswith(("/", "~", "."))]
    plan = recipe.plan(cfg, "w")
    assert [plan.task_source(task) for task in HEADLINE] == [f"hf:glue/{task}@{GLUE_REVISION}" for task in HEADLINE]
    assert [t.where for t in plan.steps["ingest"].job.tasks] == [plan.task_source(task) for task in HEADLINE]
    assert cfg.report.headline() == (("stsb", "primary"), ("sst2", "primary"), ("mrpc", "accuracy"))


def test_mini_books_is_mini_without_the_task_text():
    mini, books = load_config("mini"), load_config("mini-books")
    assert not books.ingest.task_text and books.ingest.leak_check
    differs = {k for k, v in flatten(books.model_dump()).items() if flatten(mini.model_dump())[k] != v}
    assert differs == {"preset", "ingest.task_text", "tracking.experiment"}


REPORT = {"comparisons": [{
    "headline": {"difference": 4.2, "low": 1.1, "high": 7.3, "verdict": "gain", "pretrained": 70.0,
                 "from_scratch": 65.8, "baseline": 75.0},
    "tasks": {"stsb": {"metric": "pearson", "pretrained": 60.0, "from_scratch": 50.0, "difference": 10.0, "low": 6.0,
                       "high": 14.0, "baseline": 73.2},
              "rte": {"reason": "not run in full"}},
    "per_seed": [{"seed": 0, "difference": 5.0}, {"seed": 1, "difference": 3.4}],
    "pretraining": {"tokens_seen": 20480000,
                    "language_model": {"val_loss": 4.1, "bigram_loss": 4.9, "unigram_loss": 6.3,
                                       "beats_bigram_by": 0.8},
                    "corpus": {"train_tokens": {"corpus": 2000000, "task_text": 1000000},
                               "blocks_starting_a_document": 0.8,
                               "leak_check": {"sentences_removed": {"corpus": 0, "task_text": 190}}}}}],
    "runs": {"full": {"tasks": {"stsb": {"wall_seconds": 100.0}}}, "no_pretrain": {"tasks": {"stsb": {}}}}}


def test_the_benchmark_reads_the_verdict_the_seeds_and_the_language_model_from_the_report(tmp_path):
    bench = load_bench()
    figures = bench.summarise(REPORT)
    assert figures["headline"]["difference"] == 4.2 and figures["headline"]["verdict"] == "gain"
    assert set(figures["tasks"]) == {"stsb"} and figures["per_seed"] == {"seed_0": 5.0, "seed_1": 3.4}
    assert figures["lm"]["beats_bigram_by"] == 0.8 and figures["corpus"]["tokens_task_text"] == 1000000
    assert figures["corpus"]["leak_removed_task_text"] == 190
    stages = bench.stage_seconds(tmp_path, REPORT)
    assert stages == {"finetunes": 100.0, "finetune_count": 2}
    text = bench.markdown("gpt1/mini", 3600, figures, stages)
    assert "+4.2 [+1.1, +7.3]: gain" in text and "| stsb | pearson | 60.0 | 50.0 | +10.0 | [+6.0, +14.0] | 73.2 |" in text
    assert "Per seed: seed_0 +5.0, seed_1 +3.4" in text and "interpolated bigram 4.900" in text


def test_the_benchmark_needs_the_servers_and_an_empty_work_folder(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    command = [sys.executable, str(REPO / "benchmarks" / "bench_mini.py"), "--books", str(tmp_path),
               "--glue", str(tmp_path), "--work"]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run([*command, str(tmp_path / "new")], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "make demo" in done.stderr
    done = subprocess.run([*command, str(tmp_path / "used")], capture_output=True, text=True,
                          env={**env, "PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert done.returncode == 2 and "is not empty" in done.stderr
