"""The whole recipe as content-addressed stages, runnable without Prefect.

Each stage's output directory is `WORK/<stage>/<key>`, where the key hashes the stage's own config and its
upstream keys. A stage whose directory holds a `.done` marker is finished and skipped; changing a parameter
changes only the keys downstream of it (a fine-tune setting re-runs fine-tuning only). `flows/` wraps these
functions as Prefect tasks and uses the same keys as Prefect cache keys.

    plan = Plan.make(load_config("smoke"), "runs/")
    corpus = run_ingest(plan, sample_dir=run_sample_data(plan)) ...

Source hashing: a local source is hashed by content (so editing a book re-runs ingestion); a hub source
(`hf:id@revision`) by its id and revision, which is why pinning a revision matters for reproducibility.

Local fine-tunes run in `FinetuneWorkers`: reused worker processes that import torch, MLflow, scikit-learn and
torch._dynamo once, instead of a `gpt1 finetune` process per task paying ~12 s of start-up for a few seconds of
compute. Pre-training and the report stay `gpt1 ...` subprocesses (`stream_subprocess`).

Choices where the spec is silent:
- One single-process `ProcessPoolExecutor` per worker, not one executor with N processes: a process dying
  abruptly breaks its whole executor (CPython fails every pending and running future and stops the other
  workers), so with one executor per worker only the job that was on the dead process fails, and only that
  worker is rebuilt. Jobs wait for an idle worker in the calling thread, never inside an executor.
- Each worker sends its output through a pipe of its own (parent closes its copy of the writing end): a worker
  killed mid-write then ends its own pipe with EOF instead of leaving a lock shared by all workers held (as a
  shared multiprocessing.Queue would), and its reader thread ends with it.
- Workers poll their parent pid (1 s) and exit when it changes, like `gpt1.cli.stop_with_parent`, but exit the
  worker only: pool workers share the flow's process group. Not PR_SET_PDEATHSIG: it fires when the *thread*
  that spawned the worker exits, and fan-out threads come and go.
- A job runs `gpt1.cli.main(["finetune", ...])` with the argument list `gpt1 finetune` gets, so the CLI's checks,
  error.json and exit codes are the same in a worker and in a subprocess. Per-process state a fresh process would
  not carry over is reset around each job (MLflow's "gave up on this server" memory; the exit-time flush of
  undelivered MLflow calls, which multiprocessing workers never run). Every fine-tune seeds its own RNGs, so a
  job in a reused worker predicts what a fresh subprocess does (checked: identical SST-2 predictions).
- A variant that fine-tunes from a random init (`finetune.from_scratch`, the no-pre-training ablation) does not
  depend on pre-training: its key hashes the model config and the tokenizer key instead of the pretrain key, and
  its "checkpoint" is `random-init/` in its stage directory, holding only the model's gpt1_config.json with the
  tokenizer's vocabulary size. With an external checkpoint (`Plan.make(..., checkpoint=)`) the architecture is
  that checkpoint's, so every variant keeps hashing it.
"""

from __future__ import annotations

import glob
import io
import itertools
import logging
import multiprocessing
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpt1.config import FinetuneConfig, PipelineConfig
from gpt1.distributed import threads_per_process
from gpt1.io import read_json, sha256_file, sha256_tree, stable_hash, write_json

log = logging.getLogger(__name__)

DONE = ".done"
STAGES = ("sample", "ingest", "tokenizer", "shards", "pretrain", "finetune", "report")
SLURM_SCRIPT = Path(__file__).resolve().parents[1] / "infra" / "multinode" / "slurm" / "pretrain.sbatch"


def _source_fingerprint(source: str) -> str:
    """Content hash of a local source; the spec itself for a hub id (pin @revision to make it stable)."""
    if source.startswith("hf:") or source == "sample":
        return source
    path = Path(source)
    if path.is_dir():
        return sha256_tree(path)
    files = sorted(glob.glob(source)) if not path.exists() else [source]
    if not files:
        raise FileNotFoundError(f"data.source: nothing matches {source!r}")
    return stable_hash([(f, sha256_file(f)) for f in files], length=64)


@dataclass
class Plan:
    """Every stage's key and directory for one config, computed before anything runs."""

    cfg: PipelineConfig
    work: Path
    keys: dict[str, str] = field(default_factory=dict)
    external_checkpoint: Path | None = None  # fine-tune from this model instead of the pretrain stage

    @classmethod
    def make(cls, cfg: PipelineConfig, work: str | os.PathLike, checkpoint: str | os.PathLike | None = None) -> "Plan":
        """`checkpoint`: fine-tune from an existing pre-trained model instead of this plan's pretrain stage."""
        plan = cls(cfg, Path(work).resolve(), external_checkpoint=None if checkpoint is None else Path(checkpoint))
        d, k = cfg.data, plan.keys
        k["sample"] = stable_hash({"seed": d.sample_seed, "generator": _sample_version()})
        source = k["sample"] if d.source == "sample" else _source_fingerprint(d.source)
        k["ingest"] = stable_hash(
            {"source": source, "text_column": d.text_column, "val": d.val_fraction, "seed": d.split_seed,
             "min_chars": d.min_doc_chars, "rows_per_doc": d.rows_per_doc, "unwrap_lines": d.unwrap_lines}
        )
        k["tokenizer"] = stable_hash({"corpus": k["ingest"], "tok": cfg.tokenizer.model_dump()})
        k["shards"] = stable_hash(
            {"corpus": k["ingest"], "tok": k["tokenizer"], "n_ctx": cfg.model.n_ctx, "rows": d.shard_rows}
        )
        model = cfg.model.model_dump(exclude={"vocab_size"})  # vocab size comes from the tokenizer
        k["pretrain"] = stable_hash({"shards": k["shards"], "model": model, "pretrain": cfg.pretrain.model_dump()})
        if checkpoint is not None:
            k["pretrain"] = "external-" + stable_hash(str(Path(checkpoint).resolve()))
        for variant in ("full", *cfg.orchestration.ablations):
            ft = plan.finetune_config(variant).model_dump(exclude={"tasks"})
            if plan.from_random_init(variant):  # the architecture and the vocabulary, not what pre-training learnt
                start = {"random_init": {"model": model, "tokenizer": k["tokenizer"]}}
            else:
                start = {"pretrain": k["pretrain"]}
            k[f"finetune/{variant}"] = stable_hash({**start, "finetune": ft, "tasks_data": _task_data_key(plan)})
        k["report"] = stable_hash(sorted((n, v) for n, v in k.items() if n.startswith("finetune/")))
        return plan

    def finetune_config(self, variant: str) -> FinetuneConfig:
        """The fine-tune settings of a Table 5 variant: the configured run, or one ablation of it."""
        changes = {
            "full": {},
            "no_pretrain": {"from_scratch": True},
            "no_aux_lm": {"aux_lm_weight": 0.0},
            "transfer_layers": {"transfer_layers": self.cfg.orchestration.ablation_transfer_layers},
        }[variant]
        return self.cfg.finetune.model_copy(update=changes)

    def from_random_init(self, variant: str) -> bool:
        """The variant fine-tunes a randomly initialised model of this plan's own architecture, so it needs the
        tokenizer but not pre-training (with an external checkpoint, the architecture is the checkpoint's)."""
        return self.finetune_config(variant).from_scratch and self.external_checkpoint is None

    def random_init_dir(self, variant: str) -> Path:
        return self.dir(f"finetune/{variant}") / "random-init"

    def variant_config(self, variant: str) -> PipelineConfig:
        return self.cfg.model_copy(update={"finetune": self.finetune_config(variant)})

    @property
    def variants(self) -> list[str]:
        return ["full", *self.cfg.orchestration.ablations]

    def dir(self, stage: str) -> Path:
        """`finetune/<variant>` stages live under WORK/finetune/<key>, like every other stage."""
        return self.work / stage.split("/")[0] / self.keys[stage]

    def task_dir(self, task: str, variant: str = "full") -> Path:
        return self.dir(f"finetune/{variant}") / task

    def task_data(self, task: str) -> Path | str:
        """Where a task's files are: generated sample data, a folder of official layouts, or `hf:` ids."""
        from gpt1.tasks import get

        spec = get(task)
        source = self.cfg.finetune.data
        if source == "hf":
            return spec.hf_id
        root = self.dir("sample") / "tasks" if source == "sample" else Path(source)
        return root / spec.folder


def _sample_version() -> str:
    from gpt1.data import sample

    return getattr(sample, "GENERATOR_VERSION", "1")


def _task_data_key(plan: Plan) -> str:
    source = plan.cfg.finetune.data
    if source == "sample":
        return plan.keys["sample"]
    return source if source == "hf" else _source_fingerprint(source)


def is_done(path: Path) -> bool:
    return (path / DONE).exists()


def mark_done(path: Path, info: dict[str, Any]) -> None:
    write_json(path / DONE, {"finished": time.time(), **info})


def _once(plan: Plan, stage: str, build: Callable[[Path], dict[str, Any] | None]) -> Path:
    """Run `build(out_dir)` unless the stage's content-addressed directory is already finished."""
    out = plan.dir(stage)
    if is_done(out):
        log.info("%s: up to date (%s)", stage, out)
        return out
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    info = build(out) or {}
    mark_done(out, {"stage": stage, "key": plan.keys[stage], "seconds": round(time.time() - started, 3), **info})
    return out


# -- stages ---------------------------------------------------------------------------------------------------
def run_sample_data(plan: Plan) -> Path:
    from gpt1.data.sample import write_sample_data

    return _once(plan, "sample", lambda out: {"summary": write_sample_data(out, seed=plan.cfg.data.sample_seed)})


def run_ingest(plan: Plan) -> Path:
    from gpt1.data.ingest import ingest

    d = plan.cfg.data
    source = str(plan.dir("sample") / "books") if d.source == "sample" else d.source

    def build(out: Path) -> dict:
        stats = ingest(source, out / "corpus", text_column=d.text_column, val_fraction=d.val_fraction,
                       split_seed=d.split_seed, min_doc_chars=d.min_doc_chars, rows_per_doc=d.rows_per_doc,
                       unwrap_lines=d.unwrap_lines)
        return {"stats": stats}

    return _once(plan, "ingest", build) / "corpus"


def run_train_tokenizer(plan: Plan, corpus: Path) -> Path:
    from gpt1 import tokenizer
    from gpt1.data.corpus import iter_texts

    t = plan.cfg.tokenizer

    def build(out: Path) -> dict:
        texts = tokenizer.capped(iter_texts(corpus, "train"), t.max_train_chars, {"documents": 0, "characters": 0})
        tok = tokenizer.train(texts, merges=t.merges, min_frequency=t.min_frequency, limit_alphabet=t.limit_alphabet)
        tok.save(out)
        return {"vocab_size": tok.vocab_size, "sha256": tok.sha256}

    return _once(plan, "tokenizer", build)


def run_tokenize(plan: Plan, corpus: Path, tokenizer_dir: Path) -> Path:
    from gpt1.data.shards import tokenize_corpus

    d = plan.cfg.data

    def build(out: Path) -> dict:
        manifest = tokenize_corpus(corpus, tokenizer_dir, out, n_ctx=plan.cfg.model.n_ctx, shard_rows=d.shard_rows,
                                   workers=d.workers)
        return {"tokens": {s: v.get("tokens") for s, v in manifest.get("splits", {}).items()}}

    return _once(plan, "shards", build)


def stream_subprocess(cmd: list[str], log_line: Callable[[str], None] = print, env: dict | None = None) -> None:
    """Run a command, forwarding its output line by line (into Prefect's logs when called from a flow).

    The command gets its own session, so its whole process tree (a launcher and its workers) is one group; and it
    stops when this process dies (`gpt1.cli` watches GPT1_PARENT_PID), so a killed worker leaves no stage running
    on into the outputs a re-run takes over."""
    # Progress bars off: piped output has no terminal to redraw, so each update would become a log record.
    merged = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **os.environ, **(env or {}),
              "GPT1_PARENT_PID": str(os.getpid())}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=merged,
                            start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        log_line(line.rstrip())
    if proc.wait() != 0:
        raise RuntimeError(f"command failed with exit code {proc.returncode}: {' '.join(cmd)}")


def gpt1_command(*args: str) -> list[str]:
    """`gpt1 ...` run with this interpreter (works inside any venv, no PATH assumptions)."""
    return [sys.executable, "-m", "gpt1.cli", *args]


def stage_info(path: Path) -> dict:
    return read_json(path / DONE) if is_done(path) else {}


def _tracking_args(uri: str | None, parent_run_id: str | None) -> list[str]:
    args = ["--tracking-uri", uri] if uri else []
    return args + (["--parent-run-id", parent_run_id] if parent_run_id else [])


def write_resolved_config(cfg: PipelineConfig, path: Path) -> Path:
    """The exact config a subprocess stage runs with, as YAML beside its outputs (also its `--preset`)."""
    import yaml

    from gpt1.io import write_text

    return write_text(path, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def run_pretrain(plan: Plan, shards: Path, tokenizer_dir: Path, *, tracking_uri: str | None = None,
                 parent_run_id: str | None = None, log_line: Callable[[str], None] = print,
                 threads: str | None = None) -> Path:
    """DeepSpeed pre-training as a subprocess (`gpt1 pretrain`), or as a multi-node Slurm job when
    `orchestration.pretrain_launcher` is "slurm" (`run_slurm_job`); resumes from its latest checkpoint on re-run.

    `threads`: OMP_NUM_THREADS of each local pre-training process, when it shares the machine with fine-tunes
    (an OMP_NUM_THREADS set by the user wins); None leaves the launcher's default."""
    out = plan.dir("pretrain")
    final = out / "final"
    if is_done(out):
        log_line(f"pretrain: up to date ({out})")
        return final
    orch = plan.cfg.orchestration
    script = slurm_script() if orch.pretrain_launcher == "slurm" else None  # fails before any work is done
    vocab = read_json(shards / "manifest.json")["vocab_size"]
    cfg = plan.cfg.model_copy(update={"model": plan.cfg.model.model_copy(update={"vocab_size": vocab})})
    resolved = write_resolved_config(cfg, out / "config.yaml")
    started = time.time()
    info = {}
    if script is not None:
        task_data = _task_data_args(plan)  # [] or ["--task-data", DIR]
        env = {"SHARDS": str(Path(shards).resolve()), "TOKENIZER": str(Path(tokenizer_dir).resolve()),
               "TASK_DATA": task_data[-1] if task_data else "", "OUT": str(out), "PRESET": str(resolved),
               "GPUS_PER_NODE": str(orch.pretrain_nproc), "PARENT_RUN_ID": parent_run_id or ""}
        if tracking_uri:
            env["MLFLOW_TRACKING_URI"] = tracking_uri  # the workers' tracking server when the config names none
        info["slurm_job"] = run_slurm_job(script, out, orch.pretrain_nnodes, env, log_line)
    else:
        cmd = gpt1_command(
            "pretrain", "--preset", str(resolved), "--shards", str(shards), "--out", str(out), "--resume", "auto",
            "--tokenizer", str(tokenizer_dir), "--nproc", str(plan.cfg.orchestration.pretrain_nproc),
            *_task_data_args(plan), *_tracking_args(tracking_uri, parent_run_id),
        )
        env = {"OMP_NUM_THREADS": threads} if threads and "OMP_NUM_THREADS" not in os.environ else None
        stream_subprocess(cmd, log_line, env)
    mark_done(out, {"stage": "pretrain", "key": plan.keys["pretrain"], "seconds": round(time.time() - started, 3),
                    **info})
    return final


def slurm_script() -> Path:
    """The sbatch script of the repository checkout, once it is known that it can be submitted from here."""
    if not SLURM_SCRIPT.is_file():
        raise RuntimeError(f"orchestration.pretrain_launcher=slurm needs the repository checkout: {SLURM_SCRIPT} "
                           "not found (an installed wheel has no infra/)")
    if shutil.which("sbatch") is None:
        raise RuntimeError("orchestration.pretrain_launcher=slurm: `sbatch` is not on PATH; run the Prefect worker "
                           "on a Slurm login node")
    return SLURM_SCRIPT


def run_slurm_job(script: Path, out: Path, nnodes: int, env: dict[str, str],
                  log_line: Callable[[str], None] = print) -> str:
    """Submit `script` (infra/multinode/slurm/pretrain.sbatch) with `sbatch --wait` and return the job id.

    How it maps onto the cluster: this process (the Prefect worker, on a login node) only submits and waits; the
    job validates the config on its batch host (`gpt1 pretrain --dry-run`), then runs one torchrun per node. The
    paths in `env` (SHARDS, TOKENIZER, TASK_DATA, OUT, PRESET) are read and written by the compute nodes, so the
    work dir must be on a filesystem every node mounts at the same path (infra/multinode/README.md). sbatch's own
    lines stream as they come; the job's output, OUT/slurm-<id>.out, is forwarded to `log_line` once the job ends.
    If this process dies, the job runs on: `scancel` it before the stage is re-run."""
    cmd = ["sbatch", "--wait", f"--nodes={nnodes}", f"--output={out}/slurm-%j.out", str(script)]
    job_ids: list[str] = []

    def relay(line: str) -> None:
        submitted = re.match(r"Submitted batch job (\d+)", line)
        if submitted:
            job_ids.append(submitted.group(1))
        log_line(line)

    failure = None
    try:
        stream_subprocess(cmd, relay, env)
    except RuntimeError as err:
        failure = err
    if not job_ids:
        raise RuntimeError(f"sbatch did not report a submitted job ({failure or 'exit code 0'}); no job output in "
                           f"{out}/slurm-%j.out")
    job = job_ids[0]
    output = out / f"slurm-{job}.out"
    if output.exists():
        log_line(f"pretrain: output of Slurm job {job} ({output}):")
        with open(output, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                log_line(line.rstrip())
    if failure is not None:
        raise RuntimeError(f"Slurm job {job} failed ({failure}); its output: {output}") from failure
    if not (out / "final").is_dir():
        raise RuntimeError(f"Slurm job {job} ended without writing {out / 'final'} (is the work dir on the "
                           f"filesystem the nodes share?); its output: {output}")
    return job


def _task_data_args(plan: Plan) -> list[str]:
    source = plan.cfg.finetune.data
    if source == "hf":
        return []
    return ["--task-data", str(plan.dir("sample") / "tasks" if source == "sample" else Path(source))]


_variant_config_lock = threading.Lock()


def write_random_init(plan: Plan, variant: str, tokenizer_dir: Path) -> Path:
    """The "checkpoint" of a variant fine-tuned from a random init: a folder holding only the model's config
    (what `GPT1.save_pretrained` writes, with the tokenizer's vocabulary size), which `gpt1 finetune` accepts when
    `finetune.from_scratch` is set. Written atomically; rewritten only when it differs."""
    from gpt1 import tokenizer

    vocab = tokenizer.load(tokenizer_dir).vocab_size
    config = plan.cfg.model.model_copy(update={"vocab_size": vocab}).model_dump()
    folder = plan.random_init_dir(variant)
    path = folder / "gpt1_config.json"  # gpt1.model.CONFIG_NAME; not imported: the flow process never loads torch
    if not path.is_file() or read_json(path) != config:
        write_json(path, config)
    return folder


def finetune_args(plan: Plan, task: str, checkpoint: Path, tokenizer_dir: Path, variant: str = "full", *,
                  tracking_uri: str | None = None, parent_run_id: str | None = None) -> list[str]:
    """The arguments of `gpt1 finetune` for one task (also its resolved config, written beside the task dirs)."""
    out = plan.task_dir(task, variant)
    out.mkdir(parents=True, exist_ok=True)
    with _variant_config_lock:  # the fan-out's threads share this file, and gpt1.io's temp name is per process
        resolved = write_resolved_config(plan.variant_config(variant), out.parent / "config.yaml")
    return [
        "finetune", "--task", task, "--data", str(plan.task_data(task)), "--checkpoint", str(checkpoint),
        "--out", str(out), "--preset", str(resolved), "--tokenizer", str(tokenizer_dir),
        "--run-name", f"{variant}/{task}", *_tracking_args(tracking_uri, parent_run_id),
    ]


def finetune_command(plan: Plan, task: str, checkpoint: Path, tokenizer_dir: Path, variant: str = "full", *,
                     tracking_uri: str | None = None, parent_run_id: str | None = None) -> list[str]:
    return gpt1_command(*finetune_args(plan, task, checkpoint, tokenizer_dir, variant, tracking_uri=tracking_uri,
                                       parent_run_id=parent_run_id))


def run_finetune(plan: Plan, task: str, checkpoint: Path, tokenizer_dir: Path, variant: str = "full", *,
                 tracking_uri: str | None = None, parent_run_id: str | None = None,
                 log_line: Callable[[str], None] = print, workers: "FinetuneWorkers | None" = None) -> dict:
    """One task's fine-tune + eval; returns its metrics.json. In a worker of `workers` when given, else as a
    `gpt1 finetune` subprocess (the cluster's one-task flow, scripts)."""
    out = plan.task_dir(task, variant)
    label = f"{variant}/{task}"
    if is_done(out):
        log_line(f"finetune {label}: up to date ({out})")
        return read_json(out / "metrics.json")
    args = finetune_args(plan, task, checkpoint, tokenizer_dir, variant, tracking_uri=tracking_uri,
                         parent_run_id=parent_run_id)
    started = time.time()
    prefixed = lambda line: log_line(f"[{label}] {line}")  # noqa: E731
    try:
        if workers is not None:
            workers.run(args, prefixed)
        else:
            threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")
                       or threads_per_process(plan.cfg.orchestration.finetune_concurrency)}
            stream_subprocess(gpt1_command(*args), prefixed, threads)
    except RuntimeError as err:  # name the cause (the command's error.json), not only its exit code
        error = out / "error.json"
        if error.is_file() and error.stat().st_mtime >= started:
            raise RuntimeError(f"{label}: {read_json(error)['error']} ({err})") from None
        raise RuntimeError(f"{label}: {err}") from None
    mark_done(out, {"stage": "finetune", "task": task, "variant": variant, "seconds": round(time.time() - started, 3)})
    return read_json(out / "metrics.json")


# -- reused fine-tune worker processes ------------------------------------------------------------------------
class WorkerDied(RuntimeError):
    """A fine-tune worker process ended abruptly (killed, out of memory) while running a job."""


class FinetuneWorkers:
    """`workers` reused processes running `gpt1 finetune ...` jobs, one job per process at a time.

    Each worker is started on its first job (spawn, not fork: the flow process has threads), imports what a
    fine-tune needs once (`preload`), sets its torch threads to its share of the cores (`threads`, else the user's
    OMP_NUM_THREADS, else `threads_per_process(workers)`), and exits when this process dies. `run` blocks until a
    worker is idle, streams the job's output lines (logging and prints) to its `log_line` while it runs, and
    raises RuntimeError when the job fails (non-zero exit) or `WorkerDied` when its process ends abruptly; that
    worker alone is then replaced. A job is `main(args)` in the worker, `main` a "module:function" returning an
    exit code (`gpt1.cli.main`; tests give stand-ins). Thread-safe; `shutdown()` ends the workers, terminating any
    still running a job (a flow run that is failing)."""

    def __init__(self, workers: int, threads: str | None = None, *, preload: bool = True,
                 main: str = "gpt1.cli:main"):
        if workers < 1:
            raise ValueError(f"FinetuneWorkers: workers must be >= 1, got {workers}")
        self.threads = threads or os.environ.get("OMP_NUM_THREADS") or threads_per_process(workers)
        self._workers = [_Worker(i, self.threads, preload, main) for i in range(workers)]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._closed = False

    def run(self, args: list[str], log_line: Callable[[str], None] = print) -> None:
        """Run `gpt1 <args>` in an idle worker (waiting for one), forwarding its output lines to `log_line`."""
        if self._closed:
            raise RuntimeError("FinetuneWorkers: shut down")
        worker = self._idle.get()
        try:
            if self._closed:
                raise RuntimeError("FinetuneWorkers: shut down")
            code, pid = worker.run(args, log_line)
        finally:
            self._idle.put(worker)
        if code != 0:
            raise RuntimeError(f"`gpt1 {' '.join(args[:1])}` failed with exit code {code} (worker process {pid})")

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers started so far and still in use."""
        return [w.pid for w in self._workers if w.pid is not None]

    def shutdown(self) -> None:
        self._closed = True
        for worker in self._workers:
            worker.stop()

    def __enter__(self) -> "FinetuneWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


class _Worker:
    """One worker process (a one-process ProcessPoolExecutor) and the thread forwarding its output."""

    _job_ids = itertools.count(1)

    def __init__(self, index: int, threads: str, preload: bool, main: str):
        self.index, self.threads, self.preload, self.main = index, threads, preload, main
        self.pid: int | None = None
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # guards the current job's routing (the reader thread reads it)
        self._job: int | None = None
        self._sink: Callable[[str], None] | None = None
        self._job_output_done = threading.Event()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        reader, writer = context.Pipe(duplex=False)
        executor = ProcessPoolExecutor(1, mp_context=context, initializer=_worker_main,
                                       initargs=(writer, os.getpid(), self.threads, self.preload))
        try:
            self.pid = executor.submit(os.getpid).result()  # starts the process; the imports happen here, once
        except BrokenProcessPool:
            executor.shutdown(wait=False)
            raise WorkerDied("a fine-tune worker process died while starting (its imports failed or it was "
                             "killed); see the log lines before this error") from None
        finally:
            writer.close()  # the worker holds the only writing end now: its exit ends the reader below
        self._executor = executor
        threading.Thread(target=self._forward, args=(reader,), name=f"finetune-worker-{self.index}-output",
                         daemon=True).start()

    def _forward(self, reader) -> None:
        """Route the worker's lines to the current job's sink (other lines, e.g. start-up, to this module's log)."""
        while True:
            try:
                job, line = reader.recv()
            except (EOFError, OSError):  # the worker exited (or was killed mid-line)
                break
            with self._lock:
                sink = self._sink if job is not None and job == self._job else None
            if line is None:
                if sink is not None:
                    self._job_output_done.set()
                continue
            try:
                (sink or (lambda text: log.info("fine-tune worker %s: %s", self.pid, text)))(line)
            except Exception:  # noqa: BLE001 - a failing log sink must not stop the forwarding of later lines
                log.exception("fine-tune worker %s: could not forward a log line", self.pid)
        reader.close()

    def run(self, args: list[str], log_line: Callable[[str], None]) -> tuple[int, int | None]:
        """(exit code, worker pid) of one job; raises WorkerDied if the process ends abruptly meanwhile."""
        if self._executor is None:
            self._start()
        job = next(self._job_ids)
        with self._lock:
            self._job, self._sink = job, log_line
            self._job_output_done.clear()
        pid = self.pid
        try:
            code = self._executor.submit(_run_job, job, self.main, list(args)).result()
            # The job's last lines may still be in the pipe: they precede its end-of-output record.
            self._job_output_done.wait(timeout=60)
            return code, pid
        except BrokenProcessPool:
            self._discard()
            raise WorkerDied(f"the fine-tune worker process {pid} running it ended abruptly (killed by a signal, "
                             "e.g. out of memory); the worker is replaced for the jobs after it") from None
        finally:
            with self._lock:
                self._job, self._sink = None, None

    def _discard(self) -> None:
        executor, self._executor, self.pid = self._executor, None, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """End the worker process; one still running a job (a flow that is failing) is terminated, not waited for."""
        with self._lock:
            busy = self._job is not None
        pid, executor = self.pid, self._executor
        if executor is None:
            return
        if busy and pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        executor.shutdown(wait=True, cancel_futures=True)
        self._executor, self.pid = None, None


# -- inside a worker process ----------------------------------------------------------------------------------
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # as `gpt1.cli.main` configures it
_current_job: int | None = None


class _JobOutput(io.TextIOBase):
    """sys.stdout/sys.stderr of a worker: complete lines go to the parent, tagged with the running job's id."""

    encoding, errors = "utf-8", "replace"

    def __init__(self, writer, lock: threading.Lock):
        # One pipe and lock for both streams: every thread of the worker writes (logging, prints, the job).
        self._writer, self._lock, self._partial = writer, lock, ""

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:
                self._writer.send((_current_job, line.rstrip("\r")))
        return len(text)

    def end_of_job(self, last: bool) -> None:
        """Send what is left of a partial line; `last`: then the record that ends the job's output."""
        with self._lock:
            if self._partial:
                self._writer.send((_current_job, self._partial))
                self._partial = ""
            if last:
                self._writer.send((_current_job, None))

    def flush(self) -> None:  # lines are sent as they complete; a partial line waits for its end
        pass

    def isatty(self) -> bool:  # progress bars (tqdm, disable=None) stay off, as in a piped subprocess
        return False

    def writable(self) -> bool:
        return True


def _worker_main(writer, parent_pid: int, threads: str, preload: bool) -> None:
    """Initializer of a worker process: output to the parent, exit with it, thread share, imports done once."""
    os.environ.pop("GPT1_PARENT_PID", None)  # `gpt1.cli.stop_with_parent` would stop the flow's process group
    os.environ["OMP_NUM_THREADS"] = threads  # before torch is imported
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    lock = threading.Lock()
    sys.stdout, sys.stderr = _JobOutput(writer, lock), _JobOutput(writer, lock)
    logging.basicConfig(level=logging.INFO, format=_LOG_FORMAT, stream=sys.stderr, force=True)

    def exit_with_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)  # now, mid-job if need be: nothing may go on writing into the stage directories

    threading.Thread(target=exit_with_parent, name="exit-with-parent", daemon=True).start()
    if not preload:
        return
    import sklearn.metrics  # noqa: F401 - the task metrics
    import torch

    import gpt1.finetune  # noqa: F401 - torch, safetensors, the tasks, MLflow tracking
    import gpt1.serving  # noqa: F401 - MLflow models, pandas

    torch.set_num_threads(int(threads))
    # torch.optim.Optimizer.__init__ imports torch._dynamo on first use (~3 s): pay it here, once.
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])


def _run_job(job: int, main: str, args: list[str]) -> int:
    """One `gpt1 ...` command in this worker, as a fresh `gpt1` process would run it; returns its exit code."""
    global _current_job
    import importlib

    from gpt1 import tracking

    module, function = main.split(":")
    _current_job = job
    with tracking.as_own_process():
        try:
            code = getattr(importlib.import_module(module), function)(args)
        except SystemExit as exit:  # argparse and sys.exit(): the code (and message) a process would exit with
            if isinstance(exit.code, str):
                print(exit.code, file=sys.stderr)
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        except BaseException:  # noqa: BLE001 - reported like an uncaught exception ends a process
            traceback.print_exc()
            code = 1
    for stream, last in ((sys.stdout, False), (sys.stderr, True)):
        if isinstance(stream, _JobOutput):
            stream.end_of_job(last)
    _current_job = None
    return code


def run_report(plan: Plan, *, tracking_uri: str | None = None, parent_run_id: str | None = None,
               log_line: Callable[[str], None] = print) -> Path:
    """Results table of every variant beside the paper's numbers; logged on the parent run."""
    out = plan.dir("report")
    results = [str(plan.dir(f"finetune/{v}")) for v in plan.variants]
    cmd = gpt1_command("report", "--results", *results, "--labels", *plan.variants, "--out", str(out))
    if parent_run_id:
        cmd += ["--run-id", parent_run_id] + (["--tracking-uri", tracking_uri] if tracking_uri else [])
    stream_subprocess(cmd, log_line)
    if parent_run_id:
        log_results_on_parent(plan, out / "results.json", tracking_uri=tracking_uri, parent_run_id=parent_run_id)
    return out


def log_results_on_parent(plan: Plan, results_json: Path, *, tracking_uri: str | None, parent_run_id: str) -> None:
    """Headline metrics on the pipeline's parent run, named alike in every run so MLflow's compare view lines
    up runs and ablation deployments: `task/<task>/<metric>`, `glue_score` (and `<variant>/...` for ablations)."""
    from gpt1.tracking import RunLogger

    runs = read_json(results_json)["runs"]
    metrics: dict[str, float] = {}
    for variant, result in runs.items():
        prefix = "" if variant == "full" else f"{variant}/"
        for task, entry in result.get("tasks", {}).items():
            for name, value in (entry.get("metrics") or {}).items():
                metrics[f"{prefix}task/{task}/{name}"] = value
        if result.get("glue_score") is not None:
            metrics[f"{prefix}glue_score"] = result["glue_score"]
    run = RunLogger("report", experiment=plan.cfg.tracking.experiment, uri=tracking_uri, run_id=parent_run_id)
    run.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    run.flush()


def log_stage(plan: Plan, stage: str, path: Path, *, tracking_uri: str | None, parent_run_id: str | None,
              cached: bool) -> None:
    """A child MLflow run per in-process stage: its config, numeric stats, lineage and the stage key."""
    from gpt1.config import flatten
    from gpt1.tracking import RunLogger

    info = stage_info(path if path.name != "corpus" else path.parent)
    section = {"sample": "data", "ingest": "data", "tokenizer": "tokenizer", "shards": "data"}[stage]
    run = RunLogger(stage, experiment=plan.cfg.tracking.experiment, uri=tracking_uri, parent_run_id=parent_run_id,
                    tags={"gpt1.stage": stage, "gpt1.key": plan.keys[stage], "gpt1.cached": str(cached).lower()})
    run.log_params({f"{section}.{k}": v for k, v in flatten(getattr(plan.cfg, section).model_dump()).items()})
    numbers = {k: v for k, v in flatten(info).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    run.log_metrics({k.replace("[", "_").replace("]", ""): v for k, v in numbers.items()})
    run.log_dataset(f"{stage}-output", plan.keys[stage], str(path), context="output")
    for name in ("stats.json", "manifest.json", "tokenizer_stats.json"):
        if (path / name).exists():
            run.log_artifact(path / name)
    run.end()
