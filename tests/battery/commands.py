"""CLI arguments, `--set` values and paths: what a user types wrong on the command line.

Every case runs `gpt1 ...` in this process; most are refused before any work, and the error line must name the
option, field or path and say what is wrong with it.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.battery.core import Case, cli
from tests.battery.fixtures import TINY_MODEL, sets

ARGS, SETTINGS, PATHS = "CLI arguments", "--set values", "paths"
NOWHERE = "no-such-folder"


def _argv(*parts):
    """argv of a case whose parts may be callables of (fx, work), resolved when the case runs."""
    return lambda fx, work: [p(fx, work) if callable(p) else p for p in parts]


shards = lambda fx, work: fx.shards  # noqa: E731
tokenizer = lambda fx, work: fx.tokenizer  # noqa: E731
corpus = lambda fx, work: fx.corpus  # noqa: E731
model = lambda fx, work: fx.model  # noqa: E731
sst2 = lambda fx, work: fx.tasks / "SST-2"  # noqa: E731
task_model = lambda fx, work: fx.finetuned / "model"  # noqa: E731
out = lambda fx, work: work / "out"  # noqa: E731


def other_tokenizer(fx, work: Path) -> Path:
    """A tokenizer of other settings (50 merges on one sample book): not the one the shards were made with."""
    from gpt1.tokenizer import bpe

    tokenizer = bpe.train([p.read_text(encoding="utf-8") for p in sorted((fx.sample / "books").glob("*.txt"))[:1]],
                          merges=50, show_progress=False)
    tokenizer.save(work / "other-tokenizer")
    return work / "other-tokenizer"


def pretrain(*extra, steps: str = "4"):
    return _argv("pretrain", "--preset", "smoke", "--shards", shards, "--out", out, "--tokenizer", tokenizer,
                 "--max-steps", steps, *sets(TINY_MODEL), *extra)


def finetune(*extra, data=sst2, checkpoint=model):
    return _argv("finetune", "--task", "sst2", "--data", data, "--checkpoint", checkpoint, "--out", out,
                 "--preset", "smoke", "--no-tracking", *extra)


def argument_cases() -> list[Case]:
    c = lambda name, argv, refuse, **kw: cli(ARGS, name, argv, refuse=refuse, **kw)  # noqa: E731
    return [
        c("no-command", _argv(), ["no command"]),
        c("unknown-command", _argv("frobnicate"), ["frobnicate", "invalid choice"], fast=True),
        c("unknown-global-option", lambda fx, w: ["--colour", *finetune()(fx, w)], ["--colour"]),
        c("finetune-missing-required", _argv("finetune", "--task", "sst2"), ["required", "--data"]),
        c("finetune-unknown-task", _argv("finetune", "--task", "imdb", "--data", "x", "--checkpoint", "x",
                                         "--out", "x"), ["--task", "imdb"]),
        c("finetune-unknown-option", finetune("--epochs", "3"), ["--epochs"]),
        c("finetune-device-cuda-on-cpu", finetune("--device", "cuda"), ["--device", "cuda"], fast=True),
        c("finetune-device-unknown", finetune("--device", "gpu0"), ["--device", "gpu0"]),
        c("finetune-device-missing-index", finetune("--device", "cuda:7"), ["--device", "cuda:7"]),
        c("finetune-device-meta", finetune("--device", "meta"), ["--device", "meta"]),
        c("predict-device-cuda-on-cpu", _argv("predict", "--model", task_model, "--input", sst2, "--split", "dev",
                                              "--device", "cuda"), ["--device", "cuda"]),
        c("predict-batch-size-zero", _argv("predict", "--model", task_model, "--input", sst2, "--split", "dev",
                                           "--batch-size", "0"), ["--batch-size", "0"]),
        c("predict-unknown-split", _argv("predict", "--model", task_model, "--input", sst2, "--split", "valid"),
          ["valid", "split"]),
        c("predict-wrong-task", _argv("predict", "--model", task_model, "--task", "cola", "--input", sst2,
                                      "--split", "dev"), ["cola", "sst2"]),
        c("tokenize-ctx-zero", _argv("tokenize", "--corpus", corpus, "--tokenizer", tokenizer, "--out", out,
                                     "--ctx", "0"), ["--ctx", "0"]),
        c("tokenize-ctx-text", _argv("tokenize", "--corpus", corpus, "--tokenizer", tokenizer, "--out", out,
                                     "--ctx", "long"), ["--ctx", "long"]),
        c("tokenize-workers-zero", _argv("tokenize", "--corpus", corpus, "--tokenizer", tokenizer, "--out", out,
                                         "--workers", "0"), ["--workers"]),
        c("tokenize-shard-rows-negative", _argv("tokenize", "--corpus", corpus, "--tokenizer", tokenizer,
                                                "--out", out, "--shard-rows", "-5"), ["--shard-rows"]),
        c("train-tokenizer-merges-zero", _argv("train-tokenizer", "--corpus", corpus, "--out", out,
                                               "--merges", "0"), ["merges"]),
        c("ingest-val-fraction-one", _argv("ingest", "--source", lambda fx, w: fx.sample / "books", "--out", out,
                                           "--val-fraction", "1"), ["val_fraction"]),
        c("ingest-max-documents-zero", _argv("ingest", "--source", lambda fx, w: fx.sample / "books",
                                             "--out", out, "--max-documents", "0"), ["--max-documents"]),
        c("pretrain-nproc-zero", pretrain("--nproc", "0"), ["--nproc"]),
        c("pretrain-max-steps-zero", pretrain(steps="0"), ["max_steps"]),
        c("pretrain-zero-stage-five", pretrain("--zero-stage", "5"), ["--zero-stage", "5"]),
        c("pretrain-precision-fp16-on-cpu", pretrain("--precision", "fp16", "--set", "pretrain.zero_stage=1"),
          ["fp16"]),
        c("pretrain-resume-nowhere", pretrain("--resume", lambda fx, w: w / NOWHERE), [NOWHERE]),
        c("pretrain-multinode-without-dry-run", pretrain("--nnodes", "2"), ["--nnodes", "dry-run"]),
        c("generate-negative-tokens", _argv("generate", "--checkpoint", model, "--prompt", "the",
                                            "--max-new-tokens", "-3"), ["--max-new-tokens"]),
        c("generate-negative-temperature", _argv("generate", "--checkpoint", model, "--prompt", "the",
                                                 "--temperature", "-1"), ["temperature"]),
        c("convert-unknown-format", _argv("convert", "--from", "tf", model, "--out", out), ["--from", "tf"]),
        c("report-labels-count", _argv("report", "--results", lambda fx, w: fx.finetuned, "--labels", "a", "b",
                                       "--out", out), ["--labels"]),
        c("preflight-unknown-preset", _argv("preflight", "--preset", "tiny"), ["tiny", "preset"]),
        c("ingest-offline-hub", _argv("ingest", "--source", "hf:nobody/nothing", "--out", out),
          ["nobody/nothing"]),
        c("debug-shows-the-traceback", lambda fx, work: ["--debug", *finetune("--device", "cuda")(fx, work)],
          ["--device", "cuda"], expect_traceback=True),
    ]


def setting_cases() -> list[Case]:
    """`--set` values, through `gpt1 pretrain` (pretrain.*, model.*) and `gpt1 finetune` (finetune.*)."""
    bad_pretrain = {
        "lr-negative": ("pretrain.lr=-1", ["pretrain.lr"]),
        "lr-text": ("pretrain.lr=fast", ["pretrain.lr"]),
        "lr-inf": ("pretrain.lr=inf", ["pretrain.lr", "finite"]),
        "lr-nan": ("pretrain.lr=.nan", ["pretrain.lr", "finite"]),
        "adam-beta-one": ("pretrain.adam_betas=[0.9,1.0]", ["pretrain.adam_betas", "< 1"]),
        "adam-beta-negative": ("pretrain.adam_betas=[-0.1,0.999]", ["pretrain.adam_betas", ">= 0"]),
        "adam-beta-one-value": ("pretrain.adam_betas=[0.9]", ["pretrain.adam_betas"]),
        "adam-beta-scalar": ("pretrain.adam_betas=0.9", ["pretrain.adam_betas"]),
        "zero-stage-four": ("pretrain.zero_stage=4", ["pretrain.zero_stage"]),
        "precision-fp8": ("pretrain.precision=fp8", ["pretrain.precision"]),
        "unknown-key": ("pretrain.learning_rate=1e-3", ["pretrain.learning_rate"]),
        "unknown-section": ("optimizer.lr=1e-3", ["optimizer"]),
        "section-as-value": ("pretrain=5", ["pretrain"]),
        "no-equals": ("pretrain.lr", ["pretrain.lr", "key.path=value"]),
        "empty-key": ("=3", ["=3"]),
        "heads-do-not-divide": ("model.n_head=3", ["n_embd", "n_head"]),
        "heads-zero": ("model.n_head=0", ["model.n_head"]),
        "dropout-above-one": ("model.attn_pdrop=1.5", ["model.attn_pdrop"]),
        "ctx-not-the-shards": ("model.n_ctx=64", ["n_ctx", "64"]),
        "batch-not-a-multiple": ("pretrain.global_batch_size=7", ["global_batch_size", "7"]),  # micro 4, below
        "bf16-at-stage-zero": ("pretrain.precision=bf16", ["zero_stage", "bf16"]),
        "offload-at-stage-zero": ("pretrain.offload_optimizer=true", ["offload_optimizer", "zero_stage"]),
        "warmup-negative": ("pretrain.warmup_steps=-1", ["pretrain.warmup_steps"]),
        "keep-last-zero": ("pretrain.keep_last=0", ["pretrain.keep_last"]),
        "yaml-list-for-number": ("pretrain.eval_every=[1,2]", ["pretrain.eval_every"]),
    }
    bad_finetune = {
        "unknown-task": ("finetune.tasks=[imdb]", ["imdb"]),
        "batch-size-zero": ("finetune.batch_size=0", ["finetune.batch_size"]),
        "warmup-fraction-one": ("finetune.warmup_fraction=1", ["finetune.warmup_fraction"]),
        "bad-row-fraction-two": ("finetune.max_bad_row_fraction=2", ["finetune.max_bad_row_fraction"]),
        "adam-betas-one": ("finetune.adam_betas=[1,1]", ["finetune.adam_betas"]),
        "scratch-and-transfer": ("finetune.from_scratch=true", ["from_scratch", "transfer_layers"]),
        "transfer-more-layers": ("finetune.transfer_layers=9", ["transfer_layers", "9"]),
        "precision-fp16": ("finetune.precision=fp16", ["finetune.precision"]),
        "lr-zero": ("finetune.lr=0", ["finetune.lr"]),
        "fanout-bogus": ("orchestration.fanout=cloud", ["orchestration.fanout"]),
    }
    cases = [cli(SETTINGS, f"pretrain/{name}", pretrain("--set", item, "--set", "pretrain.micro_batch_size=4"),
                 refuse=words,
                 fast=name in ("adam-beta-one", "lr-inf"))
             for name, (item, words) in bad_pretrain.items()
             if name not in ("bf16-at-stage-zero", "offload-at-stage-zero")]
    cases += [cli(SETTINGS, f"pretrain/{name}", pretrain("--set", item, "--set", "pretrain.zero_stage=0"),
                  refuse=words) for name, (item, words) in bad_pretrain.items()
              if name in ("bf16-at-stage-zero", "offload-at-stage-zero")]
    extra = {"scratch-and-transfer": ["--set", "finetune.transfer_layers=1"]}
    cases += [cli(SETTINGS, f"finetune/{name}", finetune("--set", item, *extra.get(name, [])), refuse=words,
                  fast=name == "transfer-more-layers")
              for name, (item, words) in bad_finetune.items()]
    return cases


def path_cases() -> list[Case]:
    def nowhere(fx, work: Path) -> Path:
        return work / NOWHERE

    def a_file(fx, work: Path) -> Path:
        path = work / "a-file"
        path.write_text("not a folder\n")
        return path

    def empty_folder(fx, work: Path) -> Path:
        path = work / "empty"
        path.mkdir(exist_ok=True)
        return path

    unwritable = lambda fx, work: Path("/proc/gpt1-battery/out") if os.geteuid() == 0 else Path("/")  # noqa: E731
    c = lambda name, argv, refuse, **kw: cli(PATHS, name, argv, refuse=refuse, **kw)  # noqa: E731
    return [
        c("finetune-checkpoint-nowhere", finetune(checkpoint=nowhere), [NOWHERE], fast=True),
        c("finetune-checkpoint-is-a-file", finetune(checkpoint=a_file), ["a-file"]),
        c("finetune-checkpoint-empty-folder", finetune(checkpoint=empty_folder), ["empty", "gpt1_config.json"]),
        c("finetune-checkpoint-is-the-shards", finetune(checkpoint=shards), ["shards", "gpt1_config.json"]),
        c("finetune-data-nowhere", finetune(data=nowhere), [NOWHERE]),
        c("finetune-data-empty-folder", finetune(data=empty_folder), ["empty", "train.tsv"]),
        c("finetune-data-another-tasks-folder", finetune(data=lambda fx, w: fx.tasks / "CoLA"),
          ["CoLA", "train.tsv"]),
        c("finetune-out-is-a-file", _argv("finetune", "--task", "sst2", "--data", sst2, "--checkpoint", model,
                                          "--out", a_file, "--no-tracking"), ["a-file"]),
        c("finetune-out-unwritable", _argv("finetune", "--task", "sst2", "--data", sst2, "--checkpoint", model,
                                           "--out", unwritable, "--no-tracking"), [("gpt1-battery", "/:")]),
        c("finetune-tokenizer-nowhere", finetune("--tokenizer", nowhere), [NOWHERE]),
        c("pretrain-shards-nowhere", _argv("pretrain", "--preset", "smoke", "--shards", nowhere, "--out", out),
          [NOWHERE]),
        c("pretrain-shards-are-a-corpus", _argv("pretrain", "--preset", "smoke", "--shards", corpus, "--out", out),
          ["corpus", "manifest.json"]),
        c("pretrain-out-is-a-model", _argv("pretrain", "--preset", "smoke", "--shards", shards, "--out",
                                           lambda fx, w: fx.copy(fx.model, w), *sets(TINY_MODEL)), ["final", "pretrain"]),
        c("pretrain-tokenizer-not-the-shards", pretrain("--tokenizer", other_tokenizer), ["tokenizer", "manifest"]),
        c("tokenize-corpus-nowhere", _argv("tokenize", "--corpus", nowhere, "--tokenizer", tokenizer, "--out", out),
          [NOWHERE]),
        c("tokenize-tokenizer-nowhere", _argv("tokenize", "--corpus", corpus, "--tokenizer", nowhere, "--out", out),
          [NOWHERE]),
        c("tokenize-out-is-a-corpus", _argv("tokenize", "--corpus", corpus, "--tokenizer", tokenizer, "--out",
                                            lambda fx, w: fx.copy(fx.corpus, w)), ["corpus"]),
        c("ingest-source-nowhere", _argv("ingest", "--source", nowhere, "--out", out), [NOWHERE]),
        c("ingest-source-empty-folder", _argv("ingest", "--source", empty_folder, "--out", out), ["empty"]),
        c("ingest-out-inside-source", _argv("ingest", "--source", lambda fx, w: fx.copy(fx.sample / "books", w),
                                            "--out", lambda fx, w: w / "books" / "corpus"), ["inside"]),
        c("train-tokenizer-corpus-is-books", _argv("train-tokenizer", "--corpus", lambda fx, w: fx.sample / "books",
                                                   "--out", out), ["books"]),
        c("report-results-nowhere", _argv("report", "--results", nowhere, "--out", out), [NOWHERE]),
        c("report-results-empty", _argv("report", "--results", empty_folder, "--out", out),
          ["empty", "metrics.json"]),
        c("predict-model-nowhere", _argv("predict", "--model", nowhere, "--input", sst2), [NOWHERE]),
        c("predict-model-is-pretrained", _argv("predict", "--model", model, "--input", sst2), ["task.json"]),
        c("predict-input-nowhere", _argv("predict", "--model", task_model, "--input", nowhere), [NOWHERE]),
        c("generate-checkpoint-nowhere", _argv("generate", "--checkpoint", nowhere, "--prompt", "the"), [NOWHERE]),
        c("convert-source-nowhere", _argv("convert", "--to", "hf", nowhere, "--out", out), [NOWHERE]),
        c("convert-out-is-source", _argv("convert", "--to", "hf", lambda fx, w: fx.copy(fx.model, w), "--out",
                                         lambda fx, w: w / "final"), ["final"]),
        c("replay-spool-nowhere", _argv("replay-spool", nowhere), [NOWHERE]),
    ]


def cases() -> list[Case]:
    return argument_cases() + setting_cases() + path_cases()
