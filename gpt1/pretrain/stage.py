"""Stage `pretrain`: DeepSpeed pre-training, launched on this machine or as a multi-node Slurm job.

    gpt1 pretrain --preset NAME --shards DIR --out DIR [--tokenizer DIR] [--nproc N] [--resume auto] [--set k=v]

Everything that can fail is checked before a worker starts (config, shards, batch layout for the world size,
tokenizer, resume state); then OUT/config.json is written and the workers are started: one process directly, N
through torchrun (distributed.worker_command), or, with `launcher="slurm"`, the sbatch job of
infra/multinode/slurm (slurm.py). The training loop itself is worker.py.

Resumable in place: OUT keeps its checkpoints, and a run of the same key with `--resume auto` continues from the
latest complete one (without --resume an unfinished OUT is refused rather than silently restarted). The workers
hold OUT's lock with their launcher and stop when it dies (`gpt1.runtime.processes.exit_with_parent`), so a
killed `gpt1 pretrain` never leaves a worker training on beside a new run. torch, DeepSpeed and MLflow are
imported where a job runs, so declaring the stage (`gpt1 --help`) stays fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import yaml

from gpt1 import errors
from gpt1.config import Override, PipelineConfig, Setting, load_config
from gpt1.data.tokenize import BlockReader, load_manifest, verify_shards
from gpt1.io import write_json, write_text
from gpt1.model.files import TRAINING_NAME
from gpt1.pretrain import slurm
from gpt1.pretrain.distributed import deepspeed_config, device_type, worker_command
from gpt1.pretrain.inputs import (
    FINAL,
    check_curve_steps,
    curve_point,
    load_tokenizer,
    resolve_config,
    resume_point,
    task_data_source,
    total_steps,
)
from gpt1.redact import redact
from gpt1.runtime import processes
from gpt1.stages import outputs
from gpt1.stages.base import (
    Ref,
    Result,
    StageJob,
    add_config_args,
    add_output_args,
    keyed_settings,
    run_from_args,
)
from gpt1.tracking.logger import tracking_uri
from gpt1.tracking.runs import stage_tags

log = logging.getLogger(__name__)


# How the workers run, not what they compute: outside the key, so that a pre-training keeps its key (and is
# reused) whatever grace its launcher gives it.
RUN_SETTINGS = {"stop_grace_seconds", "collective_timeout_minutes"}


@dataclass(frozen=True)
class Job(StageJob):
    """Pre-training of `cfg` on `shards`. Only the shards, the tokenizer and the model and pre-training settings
    decide the weights (the key); how and where it runs does not."""

    stage: ClassVar[str] = "pretrain"
    summary: ClassVar[str] = "pre-train with DeepSpeed (launches workers)"
    section: ClassVar[str] = "pretrain"
    retries: ClassVar[int] = 2
    compute: ClassVar[bool] = True
    logs_itself: ClassVar[bool] = True
    mode: ClassVar[str] = "resume"
    shards: Ref
    tokenizer: Ref | None
    cfg: PipelineConfig
    task_data: str | None = None  # task folders for the zero-shot probes
    resume: str | None = None  # "auto" or a checkpoint folder; None refuses an unfinished OUT
    nproc: int = 1  # processes per node
    nnodes: int = 1
    launcher: str = "local"  # or "slurm"
    parent_run_id: str | None = None
    # OMP_NUM_THREADS per worker (a shared machine)
    threads: str | None = field(default=None, compare=False)
    log_line: Callable[[str], None] = field(default=print, compare=False, repr=False)

    @classmethod
    def of(cls, shards: Ref, tokenizer: Ref, cfg: PipelineConfig, task_data: str | None) -> Job:
        """Pre-training as the pipeline runs it: resumed when a checkpoint of its key is there, on the processes,
        nodes and launcher of `cfg.orchestration`."""
        o = cfg.orchestration
        return cls(
            shards,
            tokenizer,
            cfg,
            task_data=task_data,
            resume="auto",
            nproc=o.pretrain_nproc,
            nnodes=o.pretrain_nnodes,
            launcher=o.pretrain_launcher,
        )

    def identity(self) -> dict:
        return {
            "shards": self.shards.key,
            "tokenizer": self.tokenizer.key if self.tokenizer else None,
            # the vocabulary is the tokenizer's
            "model": keyed_settings(self.cfg.model, exclude={"vocab_size"}),
            "pretrain": keyed_settings(self.cfg.pretrain, exclude=RUN_SETTINGS),
        }

    # -- before any compute ------------------------------------------------------------------------------------
    def check(self, out: Path) -> tuple[PipelineConfig, str | None]:
        """Everything a worker would trip on, before OUT is touched: (resolved config, probe task data)."""
        from gpt1.model.transformer import compile_problem, memory_problem
        from gpt1.pretrain.checkpoint import recut_needed

        # first: a GPU job without CUDA stops in seconds, before the shards are hashed
        device = device_type()
        # a tracking store MLflow never opens stops now, not after training
        tracking_uri(self.cfg.tracking.tracking_uri)
        if self.launcher == "slurm":
            slurm.script()  # sbatch and the script are there
        else:  # the workers run here: a model no process of theirs can hold stops now, not inside them
            problem = memory_problem(self.cfg.model, *self.memory(device))
            if problem:
                raise ValueError(f"model: {problem}")
            problem = compile_problem(self.cfg.model, device)  # nor one they cannot compile
            if problem:
                raise ValueError(problem)
        manifest = load_manifest(self.shards.path)
        # every shard's bytes against the manifest, once per run
        checked = verify_shards(self.shards.path)
        log.info(
            "shards verified: %d shards, %.1f MB hashed in %.1f s",
            checked["shards"],
            checked["checked_bytes"] / 1e6,
            checked["seconds"],
        )
        cfg = resolve_config(self.cfg, manifest)
        deepspeed_config(cfg.pretrain, self.nproc * self.nnodes, device)  # batch layout, precision
        train_blocks = len(BlockReader(self.shards.path, "train"))
        if train_blocks < cfg.pretrain.global_batch_size:
            raise ValueError(
                f"{self.shards.path}: {train_blocks} train blocks, fewer than one global batch of "
                f"{cfg.pretrain.global_batch_size}"
            )
        check_curve_steps(cfg.pretrain, total_steps(cfg.pretrain, train_blocks))
        load_tokenizer(self.tokenizer.path if self.tokenizer else None, manifest)
        task_data = task_data_source(cfg, self.task_data)
        resume_from = resume_point(out, self.resume, cfg.model.model_dump())
        if resume_from is not None:
            recut_needed(resume_from, self.nproc * self.nnodes, cfg.pretrain.zero_stage)
        return cfg, task_data

    def memory(self, device: str) -> tuple[int, str]:
        """The memory the local workers share, and what it is: every GPU they use, or this machine's RAM."""
        if device == "cuda":
            import torch

            gpus = range(min(self.nproc, torch.cuda.device_count()))
            total = sum(torch.cuda.get_device_properties(i).total_memory for i in gpus)
            return total, f"{len(gpus)} GPU(s)"
        import psutil

        return psutil.virtual_memory().total, "this machine's memory"

    def prepare(self, out: Path) -> list[str]:
        """Check, write OUT/config.json (what every worker reads); returns the worker arguments."""
        cfg, _ = self.check(out)
        # credentials redacted: the workers take them from their environment (tracking_env)
        write_json(out / "config.json", redact(cfg.model_dump(mode="json")))
        args = [
            "--config",
            str(out / "config.json"),
            "--shards",
            str(self.shards.path),
            "--out",
            str(out),
        ]
        # Only a given task folder is passed on: the worker resolves finetune.data (a hub source, not a folder)
        # from the config itself, exactly as check() did.
        for flag, value in (
            ("--resume", self.resume),
            ("--tokenizer", self.tokenizer),
            ("--task-data", self.task_data),
            ("--parent-run-id", self.parent_run_id),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args

    def build(self, out: Path) -> dict:
        from gpt1.pretrain.preemption import read_notice
        from gpt1.pretrain.worker import WORKER

        worker_args = self.prepare(out)
        if self.launcher == "slurm":
            return {"slurm_job": self.submit_to_slurm(out)}
        command, env = worker_command(self.nproc, worker_args, self.cfg.pretrain.stop_grace_seconds)
        env.update(self.tracking_env())
        if self.threads and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = self.threads
        lock = outputs.held(out)
        env.update({**lock.inherit_env(), **processes.parent_env()})
        self.log_line(f"pretrain: starting {self.nproc} worker(s): {shlex.join(command)}")
        worker_errors: list[str] = []

        def forward(line: str) -> None:
            if (
                f"{WORKER} (rank" in line and ": error: " in line
            ):  # a worker's user error: report it as ours
                worker_errors.append(line.split(": error: ", 1)[1])
            self.log_line(line)

        # A session of their own: their watcher (exit_with_parent) then stops only them, never our caller. A
        # SIGTERM to us is passed on to them: they checkpoint and stop (gpt1.pretrain.preemption).
        started = time.time()
        code = processes.stream(
            command, forward, env, new_session=True, pass_fds=(lock.fd,), forward_sigterm=True
        )
        stopped = read_notice(out, started)
        if code != 0 and stopped:
            raise errors.Preempted(
                f"pre-training stopped on request at update {stopped['step']} with checkpoint "
                f"{stopped['checkpoint']}: re-run with --resume auto to continue from it"
            )
        if code != 0 and worker_errors:
            raise ValueError(worker_errors[0])
        if code != 0:
            what = (
                f"killed by signal {-code}"
                if code < 0
                else f"exited with {code} (its traceback is above)"
            )
            # killed from outside, or a bug
            failure = ValueError if code < 0 else errors.ReportedFailure
            raise failure(
                f"pre-training workers {what}; outputs so far in {out}: re-run with --resume auto to "
                "continue from the last complete checkpoint"
            )
        # Each model's summary is written last: a run stopped short must not count as done.
        for model in (*(curve_point(step) for step in self.cfg.pretrain.curve_steps), FINAL):
            if not (out / model / TRAINING_NAME).is_file():
                raise ValueError(
                    f"pre-training workers exited without the model {out / model}: re-run with "
                    "--resume auto to continue from the last complete checkpoint"
                )
        return {"final": str(out / FINAL)}

    def log_reuse(self, result: Result, parent_run_id: str | None) -> None:
        """Found finished by an earlier run: a child run `pretrain` of the parent with its recorded metrics, tagged
        `gpt1.cached=true` (a pre-training that ran logged its own run)."""
        if not parent_run_id or not result.cached:
            return
        from gpt1.pretrain.outputs import log_finished

        cfg = self.cfg
        log_finished(
            result.path,
            parent_run_id=parent_run_id,
            experiment=cfg.tracking.experiment,
            tracking_uri=cfg.tracking.tracking_uri,
            tags=stage_tags("pretrain", key=result.key, preset=cfg.preset, cached=True),
        )

    def tracking_env(self) -> dict[str, str]:
        """$MLFLOW_TRACKING_URI for the workers: the tracking store with its credentials, which the config file
        they read holds redacted; none when neither the config nor this environment names a store."""
        if not (self.cfg.tracking.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")):
            return {}
        return {"MLFLOW_TRACKING_URI": tracking_uri(self.cfg.tracking.tracking_uri)}

    def submit_to_slurm(self, out: Path) -> str:
        """Run the workers as the Slurm job of infra/multinode/slurm and wait for it; returns the job id."""
        resolved = write_text(
            out / "config.yaml",
            yaml.safe_dump(redact(self.cfg.model_dump(mode="json")), sort_keys=False),
        )
        env = {
            "SHARDS": str(self.shards.path),
            "TOKENIZER": str(self.tokenizer.path) if self.tokenizer else "",
            "TASK_DATA": self.task_data or "",
            "OUT": str(out),
            "PRESET": str(resolved),
            "GPUS_PER_NODE": str(self.nproc),
            "PARENT_RUN_ID": self.parent_run_id or "",
            **self.tracking_env(),
        }
        return slurm.run_job(slurm.script(), out, self.nnodes, env, self.log_line)


# -- CLI ------------------------------------------------------------------------------------------------------
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser, example="pretrain.lr=1e-4")
    parser.add_argument(
        "--shards", required=True, type=Path, help="gpt1 tokenize output (manifest.json + shards)"
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output folder: checkpoints, final/, metrics, samples",
    )
    parser.add_argument(
        "--resume", help="'auto': continue from the latest complete checkpoint (if any); or a path"
    )
    parser.add_argument("--max-steps", type=int, help="pretrain.max_steps")
    parser.add_argument("--save-every", type=int, help="pretrain.save_every")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), help="pretrain.precision")
    parser.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), help="pretrain.zero_stage")
    parser.add_argument(
        "--nproc", type=int, default=1, help="worker processes on this machine (default 1)"
    )
    parser.add_argument(
        "--nnodes",
        type=int,
        default=1,
        help="machines in the job (validation only: with --dry-run, see infra/multinode/)",
    )
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (tracking.tracking_uri)")
    parser.add_argument("--parent-run-id", help="MLflow parent run id (pipeline nesting)")
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer folder (samples, probes, copied into OUT/final)"
    )
    parser.add_argument("--task-data", help="folder of task folders for the zero-shot probes")
    parser.add_argument("--probe-examples", type=int, help="pretrain.probe_max_examples")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, write OUT/config.json and print the worker arguments (for multi-node "
        "launchers, infra/multinode/) without starting anything",
    )
    add_output_args(parser)


# a command's own flags are settings too: given beside a `--set` of the same key they must agree with it
FLAG_SETTINGS = {
    "--max-steps": "pretrain.max_steps",
    "--save-every": "pretrain.save_every",
    "--precision": "pretrain.precision",
    "--zero-stage": "pretrain.zero_stage",
    "--probe-examples": "pretrain.probe_max_examples",
    "--tracking-uri": "tracking.tracking_uri",
}


def _overrides(args: argparse.Namespace) -> list[Override]:
    flags = [
        Setting(key, value, f"{flag} {value}")
        for flag, key in FLAG_SETTINGS.items()
        if (value := getattr(args, flag[2:].replace("-", "_"))) is not None
    ]
    return [*args.overrides, *flags]


def job_from_args(args: argparse.Namespace) -> Job:
    if args.nproc < 1 or args.nnodes < 1:
        raise ValueError(f"--nproc and --nnodes must be >= 1, got {args.nproc} and {args.nnodes}")
    if args.nnodes > 1 and not args.dry_run:
        raise ValueError(
            "a multi-node job is started on every node by torchrun or the deepspeed launcher "
            "(infra/multinode/README.md); use --nnodes with --dry-run to validate it and write the config"
        )
    return Job(
        Ref.to(args.shards),
        Ref.to(args.tokenizer) if args.tokenizer else None,
        load_config(args.preset, _overrides(args)),
        task_data=args.task_data,
        resume=args.resume,
        nproc=args.nproc,
        nnodes=args.nnodes,
        parent_run_id=args.parent_run_id,
    )


def run_cli(args: argparse.Namespace) -> int:
    job = job_from_args(args)
    if args.dry_run:  # the multi-node job's batch host: its submitter holds the output
        out = args.out.absolute()
        job.check(out)  # before anything is written
        out.mkdir(parents=True, exist_ok=True)
        print(shlex.join(["-m", "gpt1.pretrain", *job.prepare(out)]))
        return 0
    result = run_from_args(job, args)
    print(f"final weights: {result.path / FINAL}")
    return 0
