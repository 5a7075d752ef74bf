"""Corrupted artefacts and planted pickles: what the pipeline wrote, changed afterwards (by a crash, a bad copy, a
person, or someone with write access to a shared volume), read back by the next command.

Each corruption is refused naming the file (and, for a recorded hash, both hashes' start), and a planted pickle
never runs: its code would create a marker file, which every planted-pickle case checks is absent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from gpt1.io import read_json, sha256_file, write_json
from gpt1.stages.integrity import FOLDER_FIELD
from gpt1.stages.outputs import DONE
from tests.battery.core import Case, cli

ARTEFACTS, PICKLES = "corrupted artefacts", "planted pickles"
MARKER = "planted-code-ran"
LAST = "step-00000004"
OPTIM = "zero_pp_rank_0_mp_rank_00_optim_states.pt"


def flip_byte(path: Path, at: float = 0.9) -> None:
    """One byte of `path` changed in place, near its end (inside a tensor's data for a weights file)."""
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def poison(path: Path, record: Path | None = None) -> None:
    """Every weight set to NaN; with `record`, its hash there updated (a deliberate change, not a corrupt copy)."""
    save_file({k: torch.full_like(v, float("nan")) for k, v in load_file(str(path)).items()}, str(path),
              metadata={"format": "pt"})
    if record is not None:
        held = read_json(record)
        write_json(record, {**held, FOLDER_FIELD: {**held[FOLDER_FIELD], path.name: sha256_file(path)}})


def plant_pickle(path: Path, marker: Path) -> None:
    """A torch file at `path` whose unpickling creates `marker` (written by another process: the class that runs
    the code exists only there)."""
    code = ("import torch\nclass Planted:\n    def __reduce__(self):\n"
            f"        return (open, ({str(marker)!r}, 'w'))\n"
            f"torch.save({{'optimizer_state_dict': Planted(), 'module': Planted()}}, {str(path)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def no_marker(fx, work: Path, outcome) -> str | None:
    return "the planted pickle's code ran" if (work / MARKER).exists() else None


def unfinished_run(fx, work: Path) -> Path:
    """A copy of the pre-training run as it was before its end (no final/, not marked done): resumable."""
    run = work / "run"
    shutil.copytree(fx.pretrained, run, ignore=shutil.ignore_patterns("final", DONE))
    return run


def finetune_from(folder: str, *extra: str):
    return lambda fx, work: fx.finetune_argv("sst2", fx.tasks / "SST-2", work / "out", checkpoint=work / folder,
                                              extra=list(extra))


def model_copy(change):
    def prepare(fx, work: Path) -> None:
        change(fx.copy(fx.model, work, "model"))
    return prepare


def artefact_cases() -> list[Case]:
    weights, config, record = "gpt1.safetensors", "gpt1_config.json", "training.json"
    c = lambda name, argv, refuse, prepare=None, **kw: cli(ARTEFACTS, name, argv, prepare=prepare,  # noqa: E731
                                                           refuse=refuse, **kw)
    resume = lambda fx, work: fx.pretrain_argv(work / "run", extra=["--resume", "auto"])  # noqa: E731
    predict = lambda fx, work: ["predict", "--model", work / "model", "--input", fx.tasks / "SST-2",  # noqa: E731
                                "--split", "dev", "--out", work / "predictions.jsonl"]

    def task_model(change):
        def prepare(fx, work: Path) -> None:
            change(fx.copy(fx.finetuned / "model", work, "model"))
        return prepare

    def checkpoint(change):
        def prepare(fx, work: Path) -> None:
            change(unfinished_run(fx, work) / "checkpoints" / LAST)
        return prepare

    def json_garbage(name: str):
        return lambda folder: (folder / name).write_text('{"truncated": ', encoding="utf-8")

    def not_utf8(name: str):
        return lambda folder: (folder / name).write_bytes(b"\xff\xfe" + (folder / name).read_bytes())

    def drop_key(name: str, key: str):
        return lambda folder: write_json(folder / name, {k: v for k, v in read_json(folder / name).items() if k != key})

    def shards_copy(change):
        def prepare(fx, work: Path) -> None:
            change(fx.copy(fx.shards, work, "shards"))
        return prepare

    pretrain_on = lambda fx, work: fx.pretrain_argv(work / "out", shards=work / "shards")  # noqa: E731
    return [
        c("weights-truncated", finetune_from("model"), [weights], model_copy(lambda m: truncate(m / weights)),
          fast=True),
        c("weights-bytes-changed", finetune_from("model"), [weights, "changed", record],
          model_copy(lambda m: flip_byte(m / weights)), fast=True),
        c("weights-nan-recorded", finetune_from("model"), [weights, "nan"],
          model_copy(lambda m: poison(m / weights, m / record))),
        c("weights-nan-unrecorded", finetune_from("model"), [weights, "nan"],
          model_copy(lambda m: ((m / record).unlink(), poison(m / weights)))),
        c("weights-are-text", finetune_from("model"), [weights],
          model_copy(lambda m: ((m / record).unlink(), (m / weights).write_text("weights\n")))),
        c("weights-bytes-changed-generate", lambda fx, w: ["generate", "--checkpoint", w / "model", "--prompt", "the"],
          [weights, "changed"], model_copy(lambda m: flip_byte(m / weights))),
        c("weights-bytes-changed-convert", lambda fx, w: ["convert", "--to", "hf", w / "model", "--out", w / "hf"],
          [weights, "changed"], model_copy(lambda m: flip_byte(m / weights))),
        c("model-config-garbage", finetune_from("model"), [config, "JSON"], model_copy(json_garbage(config))),
        c("model-config-a-list", finetune_from("model"), [config, "object"],
          model_copy(lambda m: (m / config).write_text("[1, 2]\n"))),
        c("model-config-other-shape", finetune_from("model"), [weights, "shape"],
          model_copy(lambda m: write_json(m / config, {**read_json(m / config), "d_ff": 64}))),
        c("model-config-bad-value", finetune_from("model"), [config, "n_layer"],
          model_copy(lambda m: write_json(m / config, {**read_json(m / config), "n_layer": -2}))),
        c("training-record-garbage", finetune_from("model"), [record, "JSON"], model_copy(json_garbage(record))),
        c("tokenizer-garbage", finetune_from("model"), ["tokenizer.json"], model_copy(json_garbage("tokenizer.json"))),
        c("tokenizer-not-utf8", finetune_from("model"), ["tokenizer.json", "UTF-8"],
          model_copy(not_utf8("tokenizer.json"))),
        c("task-head-truncated", predict, ["head"], task_model(lambda m: truncate(next(m.glob("*head*"))))),
        c("task-head-changed", predict, ["head", "changed"], task_model(lambda m: flip_byte(next(m.glob("*head*"))))),
        c("task-weights-changed", predict, [weights, "changed"], task_model(lambda m: flip_byte(m / weights))),
        c("task-json-garbage", predict, ["task.json", "JSON"], task_model(json_garbage("task.json"))),
        c("task-json-no-head", predict, ["task.json", "head"], task_model(drop_key("task.json", "head"))),
        c("manifest-garbage", pretrain_on, ["manifest.json", "JSON"], shards_copy(json_garbage("manifest.json"))),
        c("manifest-a-list", pretrain_on, ["manifest.json", "object"],
          shards_copy(lambda s: (s / "manifest.json").write_text("[]\n"))),
        c("manifest-no-splits", pretrain_on, ["manifest.json", "splits"],
          shards_copy(drop_key("manifest.json", "splits"))),
        c("shard-bytes-changed", pretrain_on, ["shard-00003"],
          shards_copy(lambda s: flip_byte(s / "train" / "shard-00003.arrow"))),
        c("shard-truncated", pretrain_on, ["shard-00001"],
          shards_copy(lambda s: truncate(s / "train" / "shard-00001.arrow"))),
        c("shard-missing", pretrain_on, ["shard-00002"],
          shards_copy(lambda s: (s / "train" / "shard-00002.arrow").unlink())),
        c("corpus-parquet-garbage", lambda fx, w: ["tokenize", "--corpus", w / "corpus", "--tokenizer",
                                                    fx.tokenizer, "--out", w / "out", "--ctx", "32"],
          ["part-00000.parquet"], lambda fx, w: (fx.copy(fx.corpus, w, "corpus") / "train" / "part-00000.parquet")
          .write_bytes(b"PAR1 this is not parquet PAR1")),
        c("checkpoint-meta-no-world-size", resume, ["meta.json", "world_size"],
          checkpoint(drop_key("meta.json", "world_size")), fast=True),
        c("checkpoint-meta-garbage", resume, ["meta.json", "JSON"], checkpoint(json_garbage("meta.json"))),
        c("checkpoint-meta-no-files", resume, ["meta.json", "files"], checkpoint(drop_key("meta.json", "files"))),
        c("checkpoint-file-missing", resume, [OPTIM, "missing"], checkpoint(lambda t: (t / OPTIM).unlink())),
        c("checkpoint-file-changed", resume, [OPTIM, "changed"], checkpoint(lambda t: flip_byte(t / OPTIM))),
        c("checkpoint-rng-garbage", resume, ["rank-00000.json", "changed"],
          checkpoint(json_garbage("rank-00000.json"))),
        c("checkpoint-other-model", lambda fx, w: fx.pretrain_argv(w / "run", extra=[
            "--resume", "auto", "--set", "model.d_ff=64"]), [("d_ff", "other inputs or settings")],
          checkpoint(lambda t: None)),
        c("spool-garbage", lambda fx, w: ["replay-spool", w / "spool"], ["mlflow-undelivered-1.json", "JSON"],
          lambda fx, w: ((w / "spool").mkdir(), (w / "spool" / "mlflow-undelivered-1.json").write_text("{,}"))),
        c("hub-export-rows-not-objects", lambda fx, w: fx.finetune_argv("sst2", w / "sst2", w / "out"),
          ["train.json"], lambda fx, w: _hub_export(w / "sst2", "[1, 2, 3]")),
        c("hub-export-second-row-not-an-object", lambda fx, w: fx.finetune_argv("sst2", w / "sst2", w / "out"),
          ["train.json", "malformed"],
          lambda fx, w: _hub_export(w / "sst2", json.dumps([{"sentence": "a fine film", "label": 1, "idx": 0}]
                                                           + ["not a row"] * 5))),
        c("hub-export-json-garbage", lambda fx, w: fx.finetune_argv("sst2", w / "sst2", w / "out"),
          ["train.json", "JSON"], lambda fx, w: _hub_export(w / "sst2", "[{,")),
        c("hub-export-parquet-garbage", lambda fx, w: fx.finetune_argv("sst2", w / "sst2", w / "out"),
          ["train.parquet", "Parquet"], lambda fx, w: _hub_export(w / "sst2", b"PAR1 nonsense PAR1", ".parquet")),
        c("ingest-jsonl-not-utf8", lambda fx, w: ["ingest", "--source", w / "docs.jsonl", "--out", w / "out"],
          ["docs.jsonl"], lambda fx, w: (w / "docs.jsonl").write_bytes(b'{"text": "\xff\xfe"}\n' * 3)),
        c("ingest-parquet-garbage", lambda fx, w: ["ingest", "--source", w / "docs.parquet", "--out", w / "out"],
          ["docs.parquet"], lambda fx, w: (w / "docs.parquet").write_bytes(b"PAR1 nonsense PAR1")),
        c("predict-input-jsonl-garbage", lambda fx, w: ["predict", "--model", fx.finetuned / "model", "--input",
                                                        w / "in.jsonl"], ["in.jsonl"],
          lambda fx, w: (w / "in.jsonl").write_text('{"sentence": "good"}\n{oops\n')),
        c("report-metrics-garbage", lambda fx, w: ["report", "--results", w / "run", "--out", w / "out"],
          ["metrics.json"], lambda fx, w: (fx.copy(fx.finetuned, w, "run") / "metrics.json").write_text("{")),
    ]


def _hub_export(folder: Path, rows, suffix: str = ".json") -> None:
    """A local hub export of SST-2 (train/validation record files) whose train file holds `rows`."""
    folder.mkdir()
    good = [{"sentence": f"a film {i}", "label": i % 2, "idx": i} for i in range(20)]
    (folder / "validation.json").write_text(json.dumps(good), encoding="utf-8")
    target = folder / f"train{suffix}"
    target.write_bytes(rows if isinstance(rows, bytes) else rows.encode("utf-8"))


def pickle_cases() -> list[Case]:
    c = lambda name, argv, prepare, refuse=None, check=no_marker, **kw: cli(  # noqa: E731
        PICKLES, name, argv, prepare=prepare, refuse=refuse, check=check, **kw)
    resume = lambda fx, work: fx.pretrain_argv(work / "run", extra=["--resume", "auto"])  # noqa: E731

    def in_last_checkpoint(name: str, record: bool = False):
        def prepare(fx, work: Path) -> None:
            tag = unfinished_run(fx, work) / "checkpoints" / LAST
            plant_pickle(tag / name, work / MARKER)
            if record:  # the planter also rewrote the record
                meta = read_json(tag / "meta.json")
                meta["files"][name] = {"bytes": (tag / name).stat().st_size, "sha256": sha256_file(tag / name)}
                write_json(tag / "meta.json", meta)
        return prepare

    def in_model(name: str, keep_record: bool = True):
        def prepare(fx, work: Path) -> None:
            model = fx.copy(fx.model, work, "model")
            if not keep_record:
                (model / "training.json").unlink()
            plant_pickle(model / name, work / MARKER)
        return prepare

    finetune = lambda fx, w: fx.finetune_argv("sst2", fx.tasks / "SST-2", w / "out", checkpoint=w / "model")  # noqa
    return [
        c("extra-optimizer-states-in-last-checkpoint", resume,
          in_last_checkpoint("zero_pp_rank_1_mp_rank_00_optim_states.pt"),
          refuse=["zero_pp_rank_1_mp_rank_00_optim_states.pt", "not written by this run"], fast=True),
        c("replaced-optimizer-states", resume, in_last_checkpoint(OPTIM), refuse=[OPTIM, "changed"]),
        c("replaced-model-states", resume, in_last_checkpoint("mp_rank_00_model_states.pt"),
          refuse=["mp_rank_00_model_states.pt", "changed"]),
        c("replaced-optimizer-states-and-its-record", resume, in_last_checkpoint(OPTIM, record=True),
          refuse=[OPTIM, "refused to load it"], subprocess_=True),
        c("pickle-as-weights", finetune, in_model("gpt1.safetensors", keep_record=False),
          refuse=["gpt1.safetensors", "safetensors"]),
        c("pickle-as-weights-recorded", finetune, in_model("gpt1.safetensors"),
          refuse=["gpt1.safetensors", "changed"]),
        c("pickle-beside-the-weights", finetune, in_model("pytorch_model.bin"), check=_accepted_without_marker),
        c("pickle-as-tokenizer", finetune, in_model("tokenizer.json"), refuse=["tokenizer.json"]),
    ]


def _accepted_without_marker(fx, work: Path, outcome) -> str | None:
    if (work / MARKER).exists():
        return "the planted pickle's code ran"
    return None if (work / "out" / "metrics.json").is_file() else "no metrics.json"


def cases() -> list[Case]:
    return artefact_cases() + pickle_cases()

