"""A hostile environment: processes killed mid-run, a disk that fills up while a stage writes, an MLflow server
that does not answer.

These run as subprocesses (a kill or a full disk must hit a real process). A full disk is a small tmpfs mounted in
the case's folder (real ENOSPC); where mounting is not allowed (not root), a per-process file-size limit stands in
(EFBIG), with the same expectation: one line naming the path being written and the lack of space.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

from gpt1.io import read_json
from gpt1.runtime.processes import free_port
from gpt1.stages.outputs import DONE
from tests.battery.core import Case, Outcome, as_subprocess, cli, subprocess_env

KILLED, FULL, MLFLOW = "killed processes", "full disks", "unreachable MLflow"
DISK = "disk"  # the full disk's mount point in the case's folder
WAIT = 600


# -- a full disk --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def full_disk(work: Path, kib: int):
    """`work/disk`: a tmpfs of `kib` KiB (None when mounting is not allowed here: `limit_writes` is used instead)."""
    disk = work / DISK
    disk.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(disk)], capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def limit_writes(max_bytes: int):
    """A preexec_fn: every file write past `max_bytes` fails (EFBIG) instead of killing the process."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return apply


def on_full_disk(category: str, name: str, argv, kib: int, *, prepare=None, check=None, **kwargs) -> Case:
    """`gpt1 ARGV` writing into `work/disk`, which holds `kib` KiB; refused naming the disk and the lack of room."""

    def act(fx, work: Path) -> Outcome:
        with full_disk(work, kib) as mounted:
            if prepare:
                prepare(fx, work)
            preexec = None if mounted else limit_writes(kib * 1024)
            return as_subprocess(argv(fx, work), work, {"MLFLOW_TRACKING_URI": fx.tracking_uri}, preexec)

    # a file-size limit (EFBIG) reads as a full disk does: "no space left", naming the path
    return Case(category, name, act, refuse=[f"/{DISK}/", "no space left to write"], check=check, **kwargs)


def nothing_marked_done(folder: str):
    def check(fx, work: Path, outcome) -> str | None:
        done = list((work / folder).rglob(DONE)) if (work / folder).exists() else []
        return f"a failed write left {done[0]} marked done" if done else None
    return check


def full_disk_cases() -> list[Case]:
    d = lambda work, name: work / DISK / name  # noqa: E731
    return [
        on_full_disk(FULL, "ingest", lambda fx, w: ["ingest", "--source", fx.sample / "books", "--out", d(w, "corpus"),
                                                     "--max-chars", "300000"], 24, check=nothing_marked_done(DISK)),
        on_full_disk(FULL, "train-tokenizer", lambda fx, w: ["train-tokenizer", "--corpus", fx.corpus, "--out",
                                                              d(w, "tok"), "--merges", "300"], 8,
                     check=nothing_marked_done(DISK)),
        on_full_disk(FULL, "tokenize", lambda fx, w: ["tokenize", "--corpus", fx.corpus, "--tokenizer", fx.tokenizer,
                                                       "--out", d(w, "shards"), "--ctx", "32", "--workers", "1"], 48,
                     check=nothing_marked_done(DISK), fast=True),
        on_full_disk(FULL, "pretrain-launcher", lambda fx, w: fx.pretrain_argv(d(w, "run")), 4),
        on_full_disk(FULL, "pretrain-worker-checkpoint", lambda fx, w: fx.pretrain_argv(d(w, "run")), 160,
                     check=nothing_marked_done(DISK)),
        on_full_disk(FULL, "finetune", lambda fx, w: fx.finetune_argv("sst2", fx.tasks / "SST-2", d(w, "ft")), 64,
                     check=nothing_marked_done(DISK)),
        on_full_disk(FULL, "convert", lambda fx, w: ["convert", "--to", "hf", fx.model, "--out", d(w, "hf")], 32),
        on_full_disk(FULL, "report", lambda fx, w: ["report", "--results", fx.finetuned, "--out", d(w, "report")],
                     16),
        on_full_disk(FULL, "predict", lambda fx, w: ["predict", "--model", fx.finetuned / "model", "--input",
                                                      fx.tasks / "SST-2", "--split", "dev", "--out",
                                                      d(w, "predictions.jsonl")], 4),
        on_full_disk(FULL, "sample-data", lambda fx, w: ["sample-data", "--out", d(w, "sample")], 64),
    ]


# -- killed processes ---------------------------------------------------------------------------------------------
def start(argv: list, work: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpt1.cli", *map(str, argv)], cwd=work, env=subprocess_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"battery: {path} never appeared (exit {process.poll()}): {process.stderr.read()[-2000:]}")
        time.sleep(0.05)


def kill_pretrain_then_resume(fx, work: Path) -> Outcome:
    """kill -9 of `gpt1 pretrain` after its first checkpoint, then `--resume auto` to the end."""
    env = {"MLFLOW_TRACKING_URI": fx.tracking_uri}
    run = work / "run"
    launcher = start(fx.pretrain_argv(run), work, env)
    wait_for(run / "checkpoints" / "step-00000002" / "COMPLETE", launcher)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    time.sleep(2)  # its worker notices the launcher is gone and stops (gpt1.runtime.processes.exit_with_parent)
    return as_subprocess(fx.pretrain_argv(run, extra=["--resume", "auto"]), work, env)


def same_weights_as_uninterrupted(fx, work: Path, outcome) -> str | None:
    """The resumed run ends where the uninterrupted one did: every weight within 1e-6 (ZeRO-1's optimizer state
    reloads to within float rounding; tests/integration/test_pretrain_runs.py checks bit-identity at stage 0)."""
    resumed = work / "run" / "final" / "gpt1.safetensors"
    if not resumed.is_file():
        return "no final weights after the resume"
    ours, theirs = load_file(str(resumed)), load_file(str(fx.model / "gpt1.safetensors"))
    if ours.keys() != theirs.keys():
        return "the resumed run's final weights have other tensors"
    worst = max(float((ours[k] - theirs[k]).abs().max()) for k in ours)
    return None if worst <= 1e-6 else f"the resumed run's final weights differ from an uninterrupted run's by {worst}"


def kill_worker(fx, work: Path) -> Outcome:
    """kill -9 of the pre-training worker (not its launcher) after the first checkpoint."""
    run = work / "run"
    launcher = start(fx.pretrain_argv(run, steps=40), work, {"MLFLOW_TRACKING_URI": fx.tracking_uri})
    wait_for(run / "checkpoints" / "step-00000002" / "COMPLETE", launcher)
    workers = subprocess.run(["pgrep", "-f", f"gpt1.pretrain --config {run}/config.json"], capture_output=True,
                             text=True).stdout.split()
    for pid in workers:
        os.kill(int(pid), signal.SIGKILL)
    stdout, stderr = launcher.communicate(timeout=WAIT)
    return Outcome(launcher.returncode, stdout, stderr)


def kill_finetune_then_rerun(fx, work: Path) -> Outcome:
    """kill -9 of `gpt1 finetune` while it trains; the same command again then finishes."""
    out = work / "ft"
    argv = fx.finetune_argv("sst2", fx.tasks / "SST-2", out, extra=["--set", "finetune.max_train_examples=400",
                                                                     "--set", "finetune.epochs=3"])
    first = start(argv, work)
    wait_for(out / ".stage.json", first)
    time.sleep(3)
    first.send_signal(signal.SIGKILL)
    first.wait()
    if (out / "metrics.json").exists() or (out / DONE).exists():
        return Outcome(0, stderr="battery: the killed fine-tune left metrics.json or its done marker")
    return as_subprocess(argv, work)


def finished_finetune(fx, work: Path, outcome) -> str | None:
    if "killed fine-tune left" in outcome.stderr:
        return outcome.stderr
    metrics = work / "ft" / "metrics.json"
    return None if metrics.is_file() and read_json(metrics)["evaluated_on"]["rows"] > 0 else "no metrics.json"


def killed_cases() -> list[Case]:
    return [
        Case(KILLED, "pretrain-kill-9-then-resume", kill_pretrain_then_resume, check=same_weights_as_uninterrupted),
        Case(KILLED, "pretrain-worker-kill-9", kill_worker, refuse=["killed by signal 9", "--resume auto"]),
        Case(KILLED, "finetune-kill-9-then-rerun", kill_finetune_then_rerun, check=finished_finetune),
    ]


# -- an unreachable MLflow server -------------------------------------------------------------------------------------
def dead_server() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def spooled(folder: str):
    def check(fx, work: Path, outcome) -> str | None:
        if not (work / folder).is_dir() or not any((work / "spool").glob("*.json")):
            return "finished, but the undelivered MLflow calls were not spooled"
        return None
    return check


def mlflow_cases() -> list[Case]:
    spool = lambda work: {"GPT1_MLFLOW_SPOOL_DIR": str(work / "spool")}  # noqa: E731

    def tracked_finetune(fx, work: Path, uri: str) -> list:
        argv = fx.finetune_argv("sst2", fx.tasks / "SST-2", work / "ft")
        return [*(a for a in argv if a != "--no-tracking"), "--tracking-uri", uri]

    def finetune(fx, work: Path) -> Outcome:
        return as_subprocess(tracked_finetune(fx, work, dead_server()), work, spool(work))

    def pretrain(fx, work: Path) -> Outcome:
        return as_subprocess(fx.pretrain_argv(work / "run", extra=["--tracking-uri", dead_server()]), work,
                             spool(work))

    def replay(fx, work: Path) -> Outcome:
        finetune(fx, work)
        return as_subprocess(["replay-spool", work / "spool", "--tracking-uri", dead_server(), "--timeout", "5"],
                             work)

    return [
        Case(MLFLOW, "finetune-server-down", finetune, check=spooled("ft"), fast=True),
        Case(MLFLOW, "pretrain-server-down", pretrain, check=spooled("run")),
        Case(MLFLOW, "replay-to-a-server-still-down", replay, refuse=["127.0.0.1"]),
        cli(MLFLOW, "unknown-tracking-uri-scheme", lambda fx, w: tracked_finetune(fx, w, "bogus://nowhere"),
            refuse=["bogus://nowhere"]),
    ]


def cases() -> list[Case]:
    return full_disk_cases() + killed_cases() + mlflow_cases()

