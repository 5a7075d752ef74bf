"""Hardening: no silent wrong result, no lost output, no traceback, under bad input, kills and
concurrent runs. Each test is one defect found by trying the CLI as a user would; the loader, shard and ingest
cases live beside their code (test_task_loaders.py, test_shards*.py, test_ingest_failures.py).

Pre-training cases share one tiny run (tests/integration/test_pretrain_runs.py's data: real tokenizer and shards).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpt1.cli import main as cli
from gpt1.config import ConfigError, load_config
from gpt1.io import read_json, sha256_file, write_json
from gpt1.runtime.processes import alive
from gpt1.stages.integrity import FOLDER_FIELD
from gpt1.stages.outputs import DONE
from tiny_pretraining import data, env, pretrain_args, workers_of  # noqa: F401 - `data` is a fixture

TIMEOUT = 900


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):  # noqa: F811
    """A finished 4-update run with checkpoints at updates 2 and 4."""
    out = tmp_path_factory.mktemp("trained") / "run"
    done = subprocess.run([*pretrain_args(data, out, steps=4), "--save-every", "2"], env=env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_non_finite_settings_are_refused_before_anything_runs():
    for bad in ("pretrain.lr=inf", "pretrain.lr=nan", "finetune.lr=-inf", "model.init_std=.nan"):
        with pytest.raises(ConfigError, match="finite number"):
            load_config("smoke", [bad])


@pytest.mark.slow
def test_a_killed_launcher_takes_its_worker_with_it_and_no_second_run_trains_beside_it(data, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "run"
    launcher = subprocess.Popen(pretrain_args(data, out, "--resume", "auto", steps=400), env=env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
        assert launcher.poll() is None, "the run ended before it trained"
        time.sleep(0.2)
    workers = workers_of(out)
    assert workers, "no worker found"
    launcher.send_signal(signal.SIGKILL)  # kill -9 of `gpt1 pretrain`
    launcher.wait()
    # While the orphaned worker lives it holds the output: a second run is refused, not started beside it.
    if any(alive(w) for w in workers):
        argv = pretrain_args(data, out, "--resume", "auto", steps=400)[3:]  # `gpt1 pretrain ...` in this process
        code = cli(argv)
        assert code == 2 and "is being written by another process" in capsys.readouterr().err
    deadline = time.monotonic() + 20
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(w) for w in workers), "the worker kept training after its launcher was killed"


@pytest.mark.slow
def test_a_planted_file_in_a_checkpoint_is_refused_not_executed(data, trained, tmp_path):  # noqa: F811
    """A planted pickle that runs code is refused by name (its bytes are not the ones the checkpoint recorded) and
    runs nothing (tests/integration/test_checkpoint_security.py plants more)."""
    run = tmp_path / "run"
    shutil.copytree(trained, run, ignore=shutil.ignore_patterns("final", DONE))
    (run / "checkpoints" / "step-00000004").rename(run / "checkpoints" / "step-00000004.gone")
    marker = tmp_path / "pwned"
    planted = run / "checkpoints" / "step-00000002" / "mp_rank_00_model_states.pt"
    code = (f"import os, torch\nclass Evil:\n    def __reduce__(self):\n        return (os.system, "
            f"('touch {marker}',))\ntorch.save({{'module': Evil()}}, {str(planted)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    done = subprocess.run([*pretrain_args(data, run, "--resume", "auto", steps=4), "--save-every", "2"], env=env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode != 0 and not marker.exists(), "the planted file's code ran"
    assert "changed since it was written" in done.stderr and planted.name in done.stderr


@pytest.mark.slow
def test_resume_from_a_checkpoint_outside_the_runs_folder(data, trained, tmp_path):  # noqa: F811
    elsewhere = tmp_path / "saved" / "step-00000002"
    shutil.copytree(trained / "checkpoints" / "step-00000002", elsewhere)
    out = tmp_path / "new-run"
    done = subprocess.run(pretrain_args(data, out, "--resume", str(elsewhere), steps=4), env=env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resumed from" in done.stdout + done.stderr and (out / "final").is_dir()


def test_outputs_that_are_not_the_stages_own_are_never_replaced(data, tmp_path, capsys):  # noqa: F811
    """`pretrain --out <a model folder>`, `train-tokenizer` over a tokenizer of other settings: refused by name,
    nothing touched, and replaced only with --force."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_text("precious")
    argv = pretrain_args(data, model, steps=2)[3:]
    assert cli(argv) == 2 and "not a `pretrain` output" in capsys.readouterr().err
    assert sorted(p.name for p in model.iterdir()) == ["weights.bin"]

    tok = tmp_path / "tok"
    assert cli(["train-tokenizer", "--corpus", str(data / "corpus"), "--out", str(tok), "--merges", "50"]) == 0
    before = (tok / "tokenizer.json").read_bytes()
    assert cli(["train-tokenizer", "--corpus", str(data / "corpus"), "--out", str(tok), "--merges", "60"]) == 2
    assert "other inputs or settings" in capsys.readouterr().err and (tok / "tokenizer.json").read_bytes() == before
    assert cli(["train-tokenizer", "--corpus", str(data / "corpus"), "--out", str(tok), "--merges", "60",
                "--force"]) == 0
    assert (tok / "tokenizer.json").read_bytes() != before


def test_an_unwritable_output_is_refused_before_training_the_tokenizer(data, tmp_path, capsys, monkeypatch):  # noqa: F811
    from gpt1.tokenizer import bpe

    def must_not_run(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(bpe, "train", must_not_run)
    target = Path("/proc/gpt1-cannot-write-here") if os.geteuid() == 0 else tmp_path / "ro" / "tok"
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o500)
    assert cli(["train-tokenizer", "--corpus", str(data / "corpus"), "--out", str(target)]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_finetune_refuses_another_runs_tokenizer(data, trained, tmp_path, capsys):  # noqa: F811
    other = tmp_path / "other-tok"
    assert cli(["train-tokenizer", "--corpus", str(data / "corpus"), "--out", str(other), "--merges", "40"]) == 0
    argv = ["finetune", "--task", "sst2", "--data", str(data / "sample" / "tasks" / "SST-2"), "--checkpoint",
            str(trained / "final"), "--tokenizer", str(other), "--out", str(tmp_path / "ft"), "--no-tracking"]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert "is not the one this model was trained with" in err and "Traceback" not in err
    assert cli(["generate", "--checkpoint", str(trained / "final"), "--tokenizer", str(other), "--prompt", "the"]) == 2
    assert "is not the one this model was trained with" in capsys.readouterr().err


def test_a_truncated_weights_file_is_one_line_not_a_traceback(trained, tmp_path, capsys):
    from gpt1.model.transformer import WEIGHTS_NAME

    broken = tmp_path / "broken"
    shutil.copytree(trained / "final", broken)
    weights = broken / WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert cli(["generate", "--checkpoint", str(broken), "--prompt", "the"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "weights" in err.lower()
    assert cli(["generate", "--checkpoint", str(tmp_path / "nowhere"), "--prompt", "the"]) == 2
    assert "--checkpoint " + str(tmp_path / "nowhere") + ": no such folder" in capsys.readouterr().err


def test_two_finetunes_into_one_folder_never_mix_and_a_killed_ones_results_do_not_survive(data, trained, tmp_path,  # noqa: F811
                                                                                            capsys):
    out = tmp_path / "ft"
    base = [sys.executable, "-m", "gpt1.cli", "finetune", "--task", "sst2", "--data",
            str(data / "sample" / "tasks" / "SST-2"), "--checkpoint", str(trained / "final"), "--out", str(out),
            "--no-tracking", "--preset", "smoke", "--set", "finetune.max_train_examples=400",
            "--set", "finetune.max_eval_examples=32", "--set", "finetune.epochs=1"]
    first = subprocess.Popen(base, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while not (out / ".stage.json").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.poll() is None, "the first fine-tune ended before a second could try the same folder"
    assert cli(base[3:]) == 2  # the same command, while the first one runs
    assert "is being written by another process" in capsys.readouterr().err
    assert first.wait(TIMEOUT) == 0
    finished = (out / "metrics.json").read_bytes()
    # A re-run with other settings (--force) killed mid-way: the old results must not pass for the new run's.
    rerun = subprocess.Popen([*base[:-1], "finetune.epochs=3", "--set", "finetune.lr=1e-4", "--force"], env=env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while (out / "metrics.json").exists() and rerun.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    rerun.send_signal(signal.SIGKILL)
    rerun.wait()
    assert rerun.returncode == -signal.SIGKILL, "the re-run finished before it could be killed"
    assert not (out / "metrics.json").exists() and not (out / DONE).exists()  # nothing of the old run left
    assert finished  # (what was there before the re-run started)


@pytest.mark.slow
def test_pre_training_that_diverges_stops_at_that_update_and_keeps_the_last_finite_checkpoint(data, tmp_path):  # noqa: F811
    """lr 1e30: the first update blows the weights up, a later loss is NaN. The run stops with one line naming the
    update and the checkpoint kept, every checkpoint on disk holds finite weights, and no final model is written."""
    from gpt1.pretrain.checkpoint import COMPLETE, WeightsOnlyLoads

    out = tmp_path / "run"
    argv = [*pretrain_args(data, out, steps=8, sets=["pretrain.lr=1e30", "pretrain.warmup_steps=1"]),
            "--save-every", "1"]
    done = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpt1 pretrain: error: pre-training diverged at update ") and "no final model" in last
    assert "Traceback" not in done.stderr
    assert not (out / "final").exists()
    kept = sorted(p.parent for p in (out / "checkpoints").glob(f"*/{COMPLETE}"))
    if kept:
        assert str(kept[-1]) in last
    for checkpoint in kept:
        for states in checkpoint.glob("mp_rank_*_model_states.pt"):
            module = WeightsOnlyLoads(None).load(str(states))["module"]
            assert all(bool(t.isfinite().all()) for t in module.values()), f"{checkpoint} holds NaN/inf weights"


@pytest.mark.slow
def test_fine_tuning_that_diverges_and_a_model_with_nan_outputs_are_errors_not_scores(data, trained, tmp_path,  # noqa: F811
                                                                                      capsys):
    from safetensors.torch import load_file, save_file

    from gpt1.finetune.predict import HEAD_NAME

    tasks_dir = data / "sample" / "tasks" / "SST-2"
    base = ["finetune", "--task", "sst2", "--data", str(tasks_dir), "--checkpoint", str(trained / "final"),
            "--no-tracking", "--preset", "smoke", "--set", "finetune.max_train_examples=64",
            "--set", "finetune.max_eval_examples=16", "--set", "finetune.epochs=1"]
    diverged = tmp_path / "diverged"
    assert cli([*base, "--out", str(diverged), "--set", "finetune.lr=1e30", "--set", "finetune.grad_clip=0"]) == 2
    err = capsys.readouterr().err
    assert "sst2: fine-tuning diverged at update " in err and "Traceback" not in err
    assert not (diverged / "metrics.json").exists() and not (diverged / "model").exists()

    good = tmp_path / "good"
    assert cli([*base, "--out", str(good)]) == 0
    capsys.readouterr()
    # Finite weights whose outputs overflow: an error, never an accuracy from NaN probabilities. Made in a copy
    # outside the stage's output (whose record would refuse the edited file) with task.json's record of the
    # head's hash updated (or the changed file would be refused before it is read).
    model = shutil.copytree(good / "model", tmp_path / "overflowing")
    head = load_file(str(model / HEAD_NAME))
    save_file({k: torch.full_like(v, 3e38) for k, v in head.items()}, str(model / HEAD_NAME))
    info = read_json(model / "task.json")
    files = {**info[FOLDER_FIELD], HEAD_NAME: sha256_file(model / HEAD_NAME)}
    write_json(model / "task.json", {**info, FOLDER_FIELD: files})
    code = cli(["predict", "--model", str(model), "--input", str(tasks_dir), "--split", "dev",
                "--out", str(tmp_path / "predictions.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "outputs are not finite" in err, err
    assert not (tmp_path / "predictions.jsonl").exists()
