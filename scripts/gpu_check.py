"""`make gpu-check`: the CUDA path of gpt1 proven on one GPU in under 8 minutes, one line per check.

    python scripts/gpu_check.py prepare --out build-artifacts/gpu-check   # any machine, once: the data
    python scripts/gpu_check.py run --prepared build-artifacts/gpu-check  # the GPU host, offline
    python scripts/gpu_check.py run --prepared build-artifacts/gpu-check --cpu   # the same checks on CPUs, tiny

`make gpu-check-prepare` also builds the wheelhouse beside the data, and `make gpu-check` installs from it into a
venv that sees the host's CUDA torch (docs/gpu.md). The checks, each through the real commands:

    environment            GPU, driver, torch, CUDA, cuDNN, NCCL, DeepSpeed
    pretrain eager|compiled micro N   `gpt1 pretrain` at the GPT-1 shape (12 x 768, ctx 512, vocab 40,481),
                           bf16 ZeRO-1 on one GPU: tokens/s and MFU, at the paper's per-rank micro-batch (8: 64
                           sequences on 8 GPUs) and at a large one; compiled runs come last (the slowest to start)
    loss parity            the same fp32 updates on the CPU and on CUDA
    resume                 a run restored from its checkpoint on CUDA: its first update identical, the next close
    finetune               one fine-tune (SST-2 sample) on CUDA: bf16 autocast, its accuracy and speed
    hf parity              the pre-trained model and its transformers export: the same logits on CUDA

`--cpu` runs them all on the CPU at a tiny shape (the compiled runs only with --compile): the dry run CI makes.
Every run writes under RUN (default PREPARED/run); RUN/results.json holds the numbers. Exit 1 when a check fails
or does not fit the time budget; `skip` marks a check the host cannot run (compiling without a C compiler).
Throughput is the median of the logged windows after the first (which holds start-up and compilation).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAPER_MICRO = 8  # the paper's 64 sequences per update on 8 GPUs
LOSS_TOLERANCE = 1e-3  # |loss difference| allowed between CPU and CUDA, and after a CUDA restore (fp32)
LOGIT_TOLERANCE = 1e-4  # |logit difference| between gpt1 and its transformers export (fp32)
SMALL_CTX = 64  # the real-text shards: parity, resume, fine-tune, and the --cpu throughput runs
SMALL_MODEL = ["model.n_layer=2", "model.n_embd=128", "model.n_head=4", "model.d_ff=512", "model.compile=false",
               "model.embd_pdrop=0", "model.attn_pdrop=0", "model.resid_pdrop=0"]
TINY_MODEL = ["model.n_layer=2", "model.n_embd=64", "model.n_head=2", "model.d_ff=256", f"model.n_ctx={SMALL_CTX}"]
NEVER = 10**9  # an update count no check reaches: the action only runs at the end


class CheckFailed(Exception):
    """A check's one-line reason."""


class CheckSkipped(Exception):
    """A check this host cannot run, and why (not a failure of gpt1)."""


@dataclass
class Mode:
    """What differs between the GPU run and the CPU dry run."""

    cpu: bool
    compile: bool  # include the compiled throughput runs

    @property
    def device(self) -> str:
        return "cpu" if self.cpu else "cuda"

    @property
    def shape(self) -> list[str]:
        """Throughput runs: the paper's model (its defaults), or a tiny one on CPUs."""
        return TINY_MODEL if self.cpu else []

    @property
    def micro_batches(self) -> tuple[int, int]:
        return (4, 16) if self.cpu else (PAPER_MICRO, 64)

    @property
    def throughput_steps(self) -> tuple[int, int]:
        """(updates, log_every): a few windows after the first."""
        return (6, 2) if self.cpu else (60, 10)


@dataclass
class Budget:
    """The whole check's time: each step gets at most `limit` seconds, never more than what is left."""

    seconds: float
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def timeout(self, limit: float) -> float:
        left = self.left()
        if left < 20:
            raise CheckFailed(f"not run: {max(left, 0):.0f} s of the {self.seconds:.0f} s budget left")
        return min(limit, left)


# -- running gpt1 -------------------------------------------------------------------------------------------------
def child_env(mode: Mode, on_cuda: bool) -> dict[str, str]:
    """The environment of a `gpt1` command: offline, and CUDA required when it is meant to run there."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PYTHONUNBUFFERED": "1"}
    env.pop("GPT1_REQUIRE_CUDA", None)
    if on_cuda and not mode.cpu:
        env.pop("DS_ACCELERATOR", None)
        env["GPT1_REQUIRE_CUDA"] = "1"  # a run meant for the GPU never quietly trains on the CPU
    else:
        env["DS_ACCELERATOR"] = "cpu"
        if mode.cpu:
            env.setdefault("OMP_NUM_THREADS", "1")  # tiny models on a shared CI machine
    return env


def gpt1(args: list[str], log: Path, env: dict[str, str], timeout: float) -> None:
    with open(log, "w") as fh:
        try:
            done = subprocess.run([sys.executable, "-m", "gpt1.cli", *args], env=env, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=timeout, cwd=log.parent)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"`gpt1 {args[0]}` ran over {timeout:.0f} s (log: {log})") from None
    if done.returncode != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise CheckFailed(f"`gpt1 {args[0]}` exited {done.returncode}: {lines[-1] if lines else ''} (log: {log})")


def pretrain(data: Path, out: Path, sets: list[str], env: dict[str, str], timeout: float, *extra: str) -> dict:
    """`gpt1 pretrain` into `out` (tracked in the run's own SQLite store); returns its metrics by update."""
    args = ["pretrain", "--preset", "paper", "--shards", str(data), "--out", str(out),
            "--tracking-uri", f"sqlite:///{out.parent / 'mlflow.db'}", *extra]
    for item in sets:
        args += ["--set", item]
    gpt1(args, out.parent / f"{out.name}.log", env, timeout)
    from gpt1.pretrain.outputs import read_metrics

    return read_metrics(out / "metrics.jsonl")


# -- the checks -----------------------------------------------------------------------------------------------------
def environment(mode: Mode) -> tuple[str, dict]:
    import torch

    from gpt1.runtime.cuda import cuda_problem, versions

    found = versions()
    if not mode.cpu:
        problem = cuda_problem()
        if problem:
            raise CheckFailed(f"no usable CUDA: {problem} (torch {found['torch']}, driver {found['driver']})")
        props = torch.cuda.get_device_properties(0)
        found["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    text = ", ".join(f"{k} {v}" for k, v in found.items() if v not in (None, 0))
    return (f"{text}; {os.cpu_count()} CPUs" + ("; --cpu dry run" if mode.cpu else "")), found


def throughput(mode: Mode, prepared: Path, run: Path, budget: Budget, compiled: bool, micro: int
               ) -> tuple[str, dict]:
    from gpt1.model.transformer import c_compiler

    if compiled and not mode.cpu and c_compiler() is None:
        raise CheckSkipped("no C compiler ($CC, gcc or clang) for Triton on this host: torch.compile cannot run")
    steps, log_every = mode.throughput_steps
    shards = prepared / "data" / ("shards-small" if mode.cpu else "shards-gpt1")
    sets = [*mode.shape, f"model.compile={str(compiled).lower()}", "pretrain.precision=bf16",
            "pretrain.zero_stage=1", f"pretrain.global_batch_size={micro}", f"pretrain.micro_batch_size={micro}",
            f"pretrain.max_steps={steps}", f"pretrain.warmup_steps={steps // 4}", f"pretrain.log_every={log_every}",
            f"pretrain.eval_every={NEVER}", "pretrain.eval_batches=1", f"pretrain.probe_every={NEVER}",
            f"pretrain.save_every={NEVER}"]
    out = run / f"pretrain-{'compiled' if compiled else 'eager'}-{micro}"
    started = time.monotonic()
    metrics = pretrain(shards, out, sets, child_env(mode, on_cuda=True), budget.timeout(240 if compiled else 150))
    windows = [metrics[s] for s in sorted(metrics) if "tokens_per_s" in metrics[s]][1:]
    if not windows:
        raise CheckFailed(f"no logging window after the first in {out / 'metrics.jsonl'}")
    tokens_per_s = statistics.median(w["tokens_per_s"] for w in windows)
    mfu = [w["mfu"] for w in windows if w.get("mfu") is not None]
    result = {"tokens_per_s": tokens_per_s, "mfu": statistics.median(mfu) if mfu else None, "micro_batch": micro,
              "compiled": compiled, "updates": steps, "seconds": time.monotonic() - started}
    model = json.loads((out / "config.json").read_text())["model"]  # as the run resolved it
    mfu_text = f"MFU {100 * result['mfu']:.1f}%" if result["mfu"] is not None else "MFU n/a"
    return (f"{tokens_per_s:,.0f} tokens/s, {mfu_text} ({model['n_layer']}x{model['n_embd']}, ctx {model['n_ctx']}, "
            f"vocab {model['vocab_size']:,}, bf16 ZeRO-1, 1 {mode.device}, {steps} updates, "
            f"{result['seconds']:.0f} s with start-up)"), result


def small_run_args(prepared: Path, steps: int = 4) -> tuple[list[str], list[str]]:
    """(sets, extra args) of the small fp32 runs: parity, resume, and the model the fine-tune starts from."""
    data = prepared / "data"
    sets = [*SMALL_MODEL, f"model.n_ctx={SMALL_CTX}", "pretrain.precision=fp32", "pretrain.zero_stage=0",
            "pretrain.global_batch_size=8", "pretrain.micro_batch_size=8", f"pretrain.max_steps={steps}",
            "pretrain.warmup_steps=2", "pretrain.lr=1e-3", "pretrain.log_every=1", "pretrain.save_every=2",
            "pretrain.keep_last=3", f"pretrain.eval_every={steps}", "pretrain.eval_batches=1",
            f"pretrain.probe_every={steps}", "pretrain.probe_max_examples=8"]
    return sets, ["--tokenizer", str(data / "tokenizer"), "--task-data", str(data / "sample" / "tasks")]


def losses(metrics: dict[int, dict]) -> dict[int, float]:
    return {step: record["loss"] for step, record in metrics.items() if "loss" in record}


def loss_parity(mode: Mode, prepared: Path, run: Path, budget: Budget) -> tuple[str, dict]:
    """The same fp32 updates on CUDA and on the CPU. The CUDA run is also what the later checks start from; the
    dry run makes only that one (its CPU twin would compare the CPU with itself)."""
    sets, extra = small_run_args(prepared)
    shards = prepared / "data" / "shards-small"
    on_device = losses(pretrain(shards, run / "parity-device", sets, child_env(mode, on_cuda=True),
                                budget.timeout(120), *extra))
    if mode.cpu:
        return f"dry run: {len(on_device)} fp32 updates on the cpu only (a GPU run compares them with CUDA's)", {}
    on_cpu = losses(pretrain(shards, run / "parity-cpu", sets, child_env(mode, on_cuda=False),
                             budget.timeout(120), *extra))
    if sorted(on_cpu) != sorted(on_device):
        raise CheckFailed(f"different updates recorded: {sorted(on_cpu)} vs {sorted(on_device)}")
    worst = max(abs(on_cpu[s] - on_device[s]) for s in on_cpu)
    result = {"max_abs_loss_difference": worst, "updates": len(on_cpu), "tolerance": LOSS_TOLERANCE}
    text = f"max |loss difference| {worst:.2e} over {len(on_cpu)} fp32 updates, cpu vs {mode.device} " \
           f"(tolerance {LOSS_TOLERANCE:g})"
    if worst > LOSS_TOLERANCE:
        raise CheckFailed(text)
    return text, result


def resume(mode: Mode, prepared: Path, run: Path, budget: Budget) -> tuple[str, dict]:
    """The device run of loss_parity as it was when killed after its update-2 checkpoint (a copy without what
    came later), resumed."""
    from gpt1.stages.outputs import DONE

    reference = run / "parity-device"
    if not (reference / "checkpoints" / "step-00000002").is_dir():
        raise CheckFailed(f"no checkpoint step-00000002 in {reference} (the loss parity check writes it)")
    out = run / "resumed"
    shutil.copytree(reference, out, ignore=shutil.ignore_patterns(
        DONE, "final", "step-00000004", "metrics.jsonl", "samples", "loss_curve.png"))
    sets, extra = small_run_args(prepared)
    resumed = losses(pretrain(prepared / "data" / "shards-small", out, sets, child_env(mode, on_cuda=True),
                              budget.timeout(120), *extra, "--resume", "auto"))
    from gpt1.pretrain.outputs import read_metrics

    expected = losses(read_metrics(reference / "metrics.jsonl"))
    if sorted(resumed) != [3, 4]:
        raise CheckFailed(f"the resumed run recorded updates {sorted(resumed)}, expected [3, 4]")
    later = abs(resumed[4] - expected[4])
    result = {"first_update_identical": resumed[3] == expected[3], "later_abs_difference": later,
              "tolerance": LOSS_TOLERANCE}
    text = f"update 3 after the restore {resumed[3]:.6f} vs {expected[3]:.6f} uninterrupted; update 4 differs by " \
           f"{later:.1e} (tolerance {LOSS_TOLERANCE:g}) on {mode.device}"
    if resumed[3] != expected[3] or later > LOSS_TOLERANCE:
        raise CheckFailed(text)
    return text, result


def finetune(mode: Mode, prepared: Path, run: Path, budget: Budget) -> tuple[str, dict]:
    start = run / "parity-device" / "final"
    out = run / "finetune-sst2"
    sets = ["finetune.epochs=1", "finetune.batch_size=32", "finetune.max_train_examples=256",
            "finetune.max_eval_examples=256", "finetune.lr=1e-4"]
    args = ["finetune", "--task", "sst2", "--data", str(prepared / "data" / "sample" / "tasks" / "SST-2"),
            "--checkpoint", str(start), "--out", str(out), "--tracking-uri", f"sqlite:///{run / 'mlflow.db'}"]
    for item in sets:
        args += ["--set", item]
    gpt1(args, run / "finetune-sst2.log", child_env(mode, on_cuda=True), budget.timeout(120))
    metrics = json.loads((out / "metrics.json").read_text())
    device, precision = metrics["device"], metrics["finetune_config"]["precision"]
    expected = ("cpu", "fp32") if mode.cpu else ("cuda", "bf16")
    result = {"device": device, "precision": precision, "accuracy": metrics["metrics"]["primary"],
              "examples_per_s": metrics["train"]["examples_per_s"]}
    text = f"sst2 on {device} in {precision}: accuracy {result['accuracy']:.1f} on {metrics['eval_split']}, " \
           f"{result['examples_per_s']:.0f} examples/s"
    if (device.split(":")[0], precision) != expected:
        raise CheckFailed(f"{text}; expected {expected[0]} in {expected[1]}")
    return text, result


def hf_parity(mode: Mode, prepared: Path, run: Path, budget: Budget) -> tuple[str, dict]:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    from gpt1.tokenizer import bpe
    from gpt1.model.transformer import GPT1

    final = run / "parity-device" / "final"
    device = torch.device(mode.device)
    transformers_logging.disable_progress_bar()  # one line per check
    ours = GPT1.from_pretrained(final).to(device).eval()
    theirs = AutoModelForCausalLM.from_pretrained(final / "hf").to(device).eval()
    ids = torch.tensor([bpe.load(final).encode("she opened the door and saw the old man by the window")],
                       device=device)
    with torch.no_grad():
        difference = float((ours(ids).logits - theirs(ids).logits).abs().max())
    text = f"max |logit difference| {difference:.1e} on {mode.device} (tolerance {LOGIT_TOLERANCE:g})"
    if difference > LOGIT_TOLERANCE:
        raise CheckFailed(text)
    return text, {"max_abs_logit_difference": difference, "tolerance": LOGIT_TOLERANCE}


# -- the run --------------------------------------------------------------------------------------------------------
def run_checks(prepared: Path, run: Path, mode: Mode, budget: Budget) -> int:
    if not (prepared / "data" / "prepared.json").is_file():
        print(f"gpu-check: {prepared}/data is not prepared: run `make gpu-check-prepare` (or "
              f"`python scripts/gpu_check.py prepare --out {prepared}`) on any machine first", file=sys.stderr)
        return 2
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    (paper, large), results, failed = mode.micro_batches, {}, False
    checks = [("environment", lambda: environment(mode))]
    checks += [(f"pretrain eager micro {m}", lambda m=m: throughput(mode, prepared, run, budget, False, m))
               for m in (paper, large)]
    checks += [("loss parity", lambda: loss_parity(mode, prepared, run, budget)),
               ("resume", lambda: resume(mode, prepared, run, budget)),
               ("finetune", lambda: finetune(mode, prepared, run, budget)),
               ("hf parity", lambda: hf_parity(mode, prepared, run, budget))]
    if mode.compile:
        checks += [(f"pretrain compiled micro {m}", lambda m=m: throughput(mode, prepared, run, budget, True, m))
                   for m in (paper, large)]
    print(f"gpu-check {datetime.date.today().isoformat()} on {mode.device}, budget {budget.seconds:.0f} s",
          flush=True)
    for name, check in checks:
        started = time.monotonic()
        try:
            text, data = check()
            status = "ok"
        except CheckSkipped as err:
            text, data, status = str(err), {}, "skip"
        except CheckFailed as err:
            text, data, status = str(err), {}, "FAIL"
            failed = True
        results[name] = {"status": status, "detail": text, **data, "check_seconds": time.monotonic() - started}
        print(f"{name:<28} {status:<4} {text}", flush=True)
    spent = time.monotonic() - budget.started
    summary = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "device": mode.device, "seconds": spent, "checks": results}
    (run / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{'total':<28} {'FAIL' if failed else 'ok':<4} {spent:.0f} s; results in {run / 'results.json'}")
    return 1 if failed else 0


# -- preparing the data (any machine) --------------------------------------------------------------------------------
def prepare(out: Path, gpt1_rows: int) -> int:
    """The sample corpus and tasks, a small tokenizer and 64-token shards of real text, and GPT-1-shape shards of
    random tokens (no tokenizer has the 40,481-entry vocabulary at hand; speed does not depend on which tokens)."""
    from gpt1.data.tokenize.write import write_random_shards

    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    steps = [["sample-data", "--out", str(data / "sample")],
             ["ingest", "--source", str(data / "sample" / "books"), "--out", str(data / "corpus"),
              "--max-chars", "2000000", "--no-progress"],
             ["train-tokenizer", "--corpus", str(data / "corpus"), "--out", str(data / "tokenizer"),
              "--merges", "1000"],
             ["tokenize", "--corpus", str(data / "corpus"), "--tokenizer", str(data / "tokenizer"), "--out",
              str(data / "shards-small"), "--ctx", str(SMALL_CTX), "--shard-rows", "1024", "--no-progress"]]
    for args in steps:
        print(f"prepare: gpt1 {args[0]}", flush=True)
        gpt1(args, data / f"{args[0]}.log", env, timeout=1800)
    print("prepare: GPT-1-shape shards of random tokens", flush=True)
    write_random_shards(data / "shards-gpt1", vocab_size=40481, n_ctx=512, rows={"train": gpt1_rows, "val": 64},
                        shard_rows=1024)
    (data / "prepared.json").write_text(json.dumps({"written": datetime.datetime.now(datetime.timezone.utc)
                                                    .isoformat(timespec="seconds"), "gpt1_rows": gpt1_rows}) + "\n")
    print(f"prepared {data}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="write the data the checks read (any machine)")
    prep.add_argument("--out", type=Path, default=REPO / "build-artifacts" / "gpu-check")
    prep.add_argument("--gpt1-rows", type=int, default=4096, help="train blocks of the GPT-1-shape shards")
    check = sub.add_parser("run", help="run the checks")
    check.add_argument("--prepared", type=Path, default=REPO / "build-artifacts" / "gpu-check")
    check.add_argument("--out", type=Path, help="where the runs go (default: PREPARED/run, or run-cpu)")
    check.add_argument("--cpu", action="store_true", help="dry run on CPUs at a tiny shape")
    check.add_argument("--compile", action="store_true", help="with --cpu: the compiled runs too (slow on CPUs)")
    check.add_argument("--budget", type=float, help="seconds for all checks (default 450 on a GPU, 600 on CPUs)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.out.absolute(), args.gpt1_rows)
    mode = Mode(cpu=args.cpu, compile=args.compile or not args.cpu)
    prepared = args.prepared.absolute()
    run = (args.out or prepared / ("run-cpu" if args.cpu else "run")).absolute()
    return run_checks(prepared, run, mode, Budget(args.budget or (600 if args.cpu else 450)))


if __name__ == "__main__":
    sys.exit(main())
