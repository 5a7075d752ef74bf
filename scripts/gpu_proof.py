"""The GPU proof run (docs/gpu.md): does pre-training pay on real data? The `gpu-proof` preset end to end on ONE GPU
in one command of at most seven minutes, from data prepared on any machine (`make gpu-proof-prepare`).

    python scripts/gpu_proof.py prepare --out build-artifacts/gpu-proof           # here: ingest, tokenizer, wheels
    python3 scripts/gpu_proof.py run --prepared build-artifacts/gpu-proof --out $OUT   # the GPU host, offline
    python scripts/gpu_proof.py prepare --cpu --out DIR && python scripts/gpu_proof.py run --cpu --prepared DIR
                                                                                  # the CPU rehearsal, tiny

`prepare` (a machine with the shared data and a package index) runs the pipeline's first stages through
gpt1.pipeline (ingest of the shared books with the tasks' train text and the leak check, the 8,000-merge tokenizer)
and packs what the GPU host needs into one folder under 64 MiB: the corpus (its rows, xz-compressed; the document
ids, sha256 of each text, are recomputed there), the tokenizer as the stage wrote it, the three tasks' GLUE files,
and the wheels the GPU image lacks (pydantic, DeepSpeed built pure-Python, ftfy, MLflow's skinny client with its SQL
store), chosen from requirements/gpu.lock with scripts/wheelhouse.py's helpers.

`run` (the GPU host; Python 3.12 with CUDA torch) installs the wheels beside the image's packages (`pip install
--no-deps --target`, no index), restores the corpus and the tokenizer into a work folder at the keys they had, makes
the same gpt1.pipeline Plan (the books are not there: their content key comes from prepare, and the plan's ingest
and tokenizer keys must be prepare's) and runs every remaining step through `gpt1.pipeline.run.run_step`, as the
flows do, scheduled by `gpt1.pipeline.schedule`: tokenize (several processes), pre-training (`gpt1 pretrain`,
DeepSpeed bf16, alone on the GPU), then 18 fine-tunes (STS-B, SST-2, MRPC x pre-trained and from scratch x 3 seeds)
nine at a time in a pool of reused worker processes (`orchestration.finetune_concurrency`), then the report stage.
MLflow tracks into a SQLite file in the work folder. Results are written to OUT as they come: the log, progress.json
after every step, the pre-training's metrics while it runs, and the report (results.md/json/png) as soon as a
pre-trained and a from-scratch fine-tune have finished, again as more finish (at most every 20 s) and at the end. At
the budget's end whatever still runs is stopped and the report is made of what finished (the budget leaves time for
it).

`--cpu` runs the same code path at a tiny size (a 2x64 model, 20 updates, 2M characters of books, 200 train rows
per fine-tune) on the CPUs: the rehearsal tests/integration/test_gpu_proof.py runs. `prepare --cpu` writes no
wheels (the rehearsal runs in this venv).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import gpu_check  # noqa: E402  (Budget, Mode, child_env: the same GPU-host environment as `make gpu-check`)
import wheelhouse  # noqa: E402  (the lock's pins, downloading and building wheels)

PRESET = "gpu-proof"
LIMIT_BYTES = 64 * 2**20  # what one call carries to the GPU host: the repository, the prepared folder, the wheels
PREPARED = "prepared.json"
WORK_MARKER = ".gpu-proof-work"  # a run's work folder: emptied by the next run, never a folder without it
PREPARED_MARKER = ".gpu-proof-prepared"  # likewise a prepared folder, from its first write (a killed prepare's too)
BUDGET_SECONDS = {"gpu": 420.0, "cpu": 1500.0}  # the whole `run` command: setup, stages, report
REPORT_SECONDS = {"gpu": 45.0, "cpu": 150.0}  # kept back at the end for the final report
INTERIM_REPORT_EVERY = {"gpu": 20.0, "cpu": 60.0}  # seconds at least between two interim reports
TASK_FILES = ("train.tsv", "dev.tsv", "test.tsv", "LICENSE.txt")  # a GLUE task folder as distributed
XZ_PRESET = 9
# What the GPU image lacks of what gpt1 imports at run time, by distribution name; the versions are the lock's
# (requirements/gpu.lock). Everything else gpt1 needs there (numpy, pyarrow, tokenizers, transformers, safetensors,
# scikit-learn, scipy, matplotlib, pandas, psutil, pyyaml, tqdm, einops, msgpack, ninja, py-cpuinfo, nvidia-ml-py,
# requests, click, cloudpickle, anyio, h11, ...) is in the image (its package list: docs/gpu.md, "The GPU proof run").
GPU_WHEELS = (
    "pydantic", "pydantic_core", "annotated-types", "typing-inspection", "typing_extensions",  # config
    "deepspeed", "hjson",  # pre-training
    "ftfy", "wcwidth",  # the text encoder
    # tracking: MLflow's client with its SQL store, which imports cryptography (the full `mlflow` adds its server
    # and UI: 12 MB more, which do not fit beside the corpus)
    "mlflow-skinny", "cachetools", "databricks-sdk", "google-auth", "pyasn1", "pyasn1-modules", "fastapi",
    "starlette", "uvicorn", "GitPython", "gitdb", "smmap", "importlib_metadata", "opentelemetry-api",
    "opentelemetry-proto", "opentelemetry-sdk", "opentelemetry-semantic-conventions", "python-dotenv", "sqlparse",
    "SQLAlchemy", "greenlet", "alembic", "Mako", "cryptography", "cffi", "pycparser",
    "protobuf",  # the lock's: MLflow's and OpenTelemetry's generated code check the runtime is not older
)
# The CPU rehearsal: the same steps and code at a size two CPU cores run in minutes. Prepare and run both apply
# it (the ingest and tokenizer keys must agree); the data subsets are the books' first 2M characters and 200 train
# rows (evenly spaced) per fine-tune, scored on at most 200 rows of each held-out split.
CPU_REHEARSAL = (
    "ingest.max_chars=2000000", "train_tokenizer.merges=500",
    "model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.d_ff=256",
    "tokenize.workers=2", "tokenize.shard_rows=1024",
    "pretrain.max_steps=20", "pretrain.warmup_steps=4", "pretrain.global_batch_size=16",
    "pretrain.micro_batch_size=16", "pretrain.precision=fp32", "pretrain.log_every=5", "pretrain.eval_every=10",
    "pretrain.eval_batches=2", "pretrain.save_every=10", "pretrain.probe_max_examples=8",
    "finetune.max_train_examples=200", "finetune.max_eval_examples=200", "finetune.epochs=1",
    "finetune.eval_batch_size=64", "orchestration.finetune_concurrency=2",
)
# OUT holds at most 8 files (what a device call brings back): these.
OUT_FILES = ("gpu-proof.log", "progress.json", "results.md", "results.json", "results.png",
             "pretrain-metrics.jsonl", "pretrain-training.json", "shards-manifest.json")


def mode_name(cpu: bool) -> str:
    return "cpu" if cpu else "gpu"


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def repository_bytes() -> int:
    """What a device call carries of the repository itself: tracked files and untracked ones git does not ignore."""
    try:
        names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, check=True, timeout=60).stdout.split(b"\0")
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum((REPO / n.decode()).stat().st_size for n in names if n and (REPO / n.decode()).is_file())


# -- prepare (any machine with the shared data) -----------------------------------------------------------------------
def task_folders(tasks: list[str]) -> dict[str, str]:
    from gpt1.tasks import get

    return {task: get(task).folder for task in tasks}


def copy_task_files(glue: Path, folders: dict[str, str], into: Path) -> None:
    """The tasks' GLUE folders, file for file (their content keys are the same wherever they are)."""
    for folder in folders.values():
        (into / folder).mkdir(parents=True, exist_ok=True)
        for name in TASK_FILES:
            if (glue / folder / name).is_file():
                shutil.copyfile(glue / folder / name, into / folder / name)


def pack_corpus(corpus: Path, into: Path) -> dict:
    """The ingested corpus as compactly as it travels: per split, its rows' `source` and `text` (Arrow IPC,
    xz-compressed); the `id` column is the sha256 of each text and is recomputed by `restore_corpus`. The stage's
    marker and stats.json travel unchanged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpt1.data.ingest.corpus import SPLITS, split_files

    into.mkdir(parents=True)
    for name in (".done", "stats.json"):
        shutil.copyfile(corpus / name, into / name)
    counts = {}
    for split in SPLITS:
        parts = [pq.read_table(path, columns=["source", "text"]) for path in split_files(corpus, split)]
        table = pa.concat_tables(parts)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        (into / f"{split}.arrows.xz").write_bytes(lzma.compress(sink.getvalue(), preset=XZ_PRESET))
        counts[split] = {"rows": table.num_rows, "parts": [p.num_rows for p in parts]}
    return counts


def restore_corpus(packed: Path, corpus: Path, counts: dict) -> None:
    """`pack_corpus` undone: the Parquet parts as the ingest stage lays them out (same rows in the same parts, its
    schema and compression), the ids recomputed, and the split content hash checked against stats.json."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpt1.data.ingest.corpus import SCHEMA, SPLITS, STATS_FILE
    from gpt1.io import read_json, write_json
    from gpt1.stages import integrity

    tmp = corpus.with_name(corpus.name + ".restoring")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    digests = {}
    for split in SPLITS:
        (tmp / split).mkdir()
        table = pa.ipc.open_stream(lzma.decompress((packed / f"{split}.arrows.xz").read_bytes())).read_all()
        texts = table.column("text").to_pylist()
        ids = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
        digests[split] = hashlib.sha256("".join(ids).encode()).digest()
        start = 0
        for number, rows in enumerate(counts[split]["parts"]):
            part = pa.table({"id": ids[start:start + rows], "source": table.column("source")[start:start + rows],
                             "text": texts[start:start + rows]}, schema=SCHEMA)
            pq.write_table(part, tmp / split / f"part-{number:05d}.parquet", compression="zstd", use_dictionary=False,
                           write_statistics=["id", "source"], row_group_size=2000)
            start += rows
        if start != table.num_rows:
            raise ValueError(f"{packed}: {split} has {table.num_rows} rows, its parts {start}")
    stats = read_json(packed / STATS_FILE)
    found = hashlib.sha256(digests["train"] + digests["val"]).hexdigest()
    if found != stats["content_hash"]:
        raise ValueError(f"{packed}: restored corpus hashes to {found}, stats.json says {stats['content_hash']}")
    shutil.copyfile(packed / STATS_FILE, tmp / STATS_FILE)
    # The rows are the ones ingest wrote (the content hash above), their Parquet bytes not: the marker travels with
    # a record of the files as they are here, or the next stage would refuse them as edited (gpt1.stages.integrity).
    marker = read_json(packed / ".done")
    write_json(tmp / ".done", {**marker, integrity.FIELD: integrity.record(tmp)})
    shutil.rmtree(corpus, ignore_errors=True)
    tmp.rename(corpus)


def gpu_wheels(into: Path, python_version: str) -> list[str]:
    """The lock's pins of GPU_WHEELS as wheels for CPython `python_version` (DeepSpeed, source only, built here
    into a pure-Python wheel), through scripts/wheelhouse.py."""
    wanted = {wheelhouse.normal(name) for name in GPU_WHEELS}
    pins = [pin for pin in wheelhouse.pins(wheelhouse.LOCK) if wheelhouse.normal(pin.split("==")[0]) in wanted]
    missing = wanted - {wheelhouse.normal(pin.split("==")[0]) for pin in pins}
    if missing:
        raise wheelhouse.WheelhouseError(f"not pinned in {wheelhouse.LOCK}: {sorted(missing)}")
    into.mkdir(parents=True)
    for pin in wheelhouse.download(pins, into, python_version):
        print(f"prepare: {pin.split()[0]} is published as source only: building its wheel", flush=True)
        wheelhouse.build_wheel(pin, pin.split("==")[0], into, python_version)
    return sorted(pin.split()[0] for pin in pins)  # name==version (the lock's hashes were checked on download)


def prepare(out: Path, data: Path, work: Path, cpu: bool, python_version: str, wheels: bool) -> int:
    from gpt1.config import load_config
    from gpt1 import recipe
    from gpt1.pipeline.run import run_step

    books = sorted(data.glob("books/*.txt")) + sorted(data.glob("books-more/*.txt"))
    glue = data / "glue-full"
    cfg = load_config(PRESET)
    folders = task_folders(cfg.finetune.tasks)
    missing = [str(glue / f) for f in folders.values() if not (glue / f / "train.tsv").is_file()]
    if not books or missing:
        print(f"gpu-proof: the shared data is not at {data} (books/, books-more/, glue-full/"
              f"{{{','.join(folders.values())}}}): pass --data", file=sys.stderr)
        return 2
    if out.is_dir() and any(out.iterdir()) and not (out / PREPARED_MARKER).is_file():
        print(f"gpu-proof: {out} holds something else (not a prepared folder): choose another --out", file=sys.stderr)
        return 2
    started = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / PREPARED_MARKER).touch()
    (work / "glue").mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # MLflow's SQLite store keeps its artifacts in ./mlruns: in the work folder, not the repository
    copy_task_files(glue, folders, work / "glue")
    source = f"{data}/books*/*.txt"  # books/ and books-more/: the 40 + 232 files
    overrides = [*(CPU_REHEARSAL if cpu else ())]
    settings = [f"ingest.source={source}", f"finetune.data={work / 'glue'}",
                f"tracking.tracking_uri=sqlite:///{work / 'mlflow.db'}"]
    cfg = load_config(PRESET, [*settings, *overrides])
    plan = recipe.plan(cfg, work / "pipeline")
    for name in ("ingest", "train-tokenizer"):
        print(f"prepare: {name}", flush=True)
        result = run_step(plan, name, log_line=lambda line: print(f"  {line}", flush=True))
        print(f"prepare: {name} {'up to date' if result.cached else 'done'}: {result.path}", flush=True)
    print("prepare: packing the corpus (xz)", flush=True)
    counts = pack_corpus(plan.dir("ingest"), out / "corpus")
    shutil.copytree(plan.dir("train-tokenizer"), out / "tokenizer")
    with tarfile.open(out / "tasks.tar.xz", "w:xz") as tar:
        for folder in folders.values():
            tar.add(work / "glue" / folder, arcname=folder)
    pins = []
    if wheels and not cpu:
        print(f"prepare: wheels for CPython {python_version} (the GPU image lacks them)", flush=True)
        pins = gpu_wheels(out / "wheels", python_version)
    stats = json.loads((plan.dir("ingest") / "stats.json").read_text())
    prepared = {
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode_name(cpu), "preset": PRESET, "overrides": overrides, "source": source,
        "source_key": plan.steps["ingest"].job.source_key, "books": len(books), "tasks": folders,
        "keys": {name: plan.ref(name).key for name in ("ingest", "train-tokenizer")},
        "corpus": {"splits": counts, "characters": stats["characters"], "origins": stats["origins"],
                   "leak_check": {k: stats.get("leak_check", {}).get(k) for k in ("sentences_indexed",
                                                                                "sentences_removed")}},
        "python_version": python_version, "wheels": pins,
    }
    (out / PREPARED).write_text(json.dumps(prepared, indent=2) + "\n")
    size, repo = tree_bytes(out), repository_bytes()
    sizes = {"corpus": tree_bytes(out / "corpus"), "tokenizer": tree_bytes(out / "tokenizer"),
             "tasks": (out / "tasks.tar.xz").stat().st_size,
             "wheels": tree_bytes(out / "wheels") if (out / "wheels").is_dir() else 0}
    print("prepare: " + ", ".join(f"{k} {mib(v)}" for k, v in sizes.items()))
    print(f"prepared {out} in {time.monotonic() - started:.0f} s: {mib(size)}; with the repository's files "
          f"({mib(repo)}) {mib(size + repo)} of the {mib(LIMIT_BYTES)} a device call carries")
    if size + repo > LIMIT_BYTES:
        print(f"gpu-proof: {out} and the repository are over {mib(LIMIT_BYTES)}", file=sys.stderr)
        return 1
    return 0


# -- run: the record of the run in OUT, written as it goes -----------------------------------------------------------
class Record:
    """OUT/gpu-proof.log (every line), OUT/progress.json (rewritten after every event) and copies of what the
    stages wrote (pre-training's metrics while it runs, the report) under the names of OUT_FILES."""

    def __init__(self, out: Path, started: float):
        self.out = out
        self.started = started
        self.lock = threading.Lock()
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "gpu-proof.log", "a", encoding="utf-8", buffering=1)
        self.progress: dict = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                               "steps": {}, "phases": {}}

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self, text: str) -> None:
        stamped = f"[{self.elapsed():6.1f}s] {text}"
        with self.lock:
            print(stamped, flush=True)
            self.log.write(stamped + "\n")

    def update(self, **fields) -> None:
        with self.lock:
            self.progress.update(fields)
            self.progress["elapsed_seconds"] = round(self.elapsed(), 1)
            tmp = self.out / ".progress.json.tmp"
            tmp.write_text(json.dumps(self.progress, indent=2, default=str) + "\n")
            tmp.replace(self.out / "progress.json")

    def step(self, name: str, **fields) -> None:
        with self.lock:
            self.progress["steps"].setdefault(name, {}).update(fields)
        self.update()

    def phase(self, name: str, seconds: float) -> None:
        with self.lock:
            self.progress["phases"][name] = round(seconds, 1)
        self.update()

    def copy(self, source: Path, name: str) -> None:
        assert name in OUT_FILES, name
        if source.is_file():
            tmp = self.out / f".{name}.tmp"
            shutil.copyfile(source, tmp)
            tmp.replace(self.out / name)


# -- run: the steps ----------------------------------------------------------------------------------------------------
def install_wheels(prepared: Path, site: Path, record: Record) -> None:
    """The carried wheels beside the image's packages: no index, no dependency resolution (the set is complete),
    into `site`, which goes first on this process's path and every child's PYTHONPATH."""
    wheels = sorted((prepared / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"gpu-proof: no wheels in {prepared / 'wheels'}: run prepare without --cpu")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                           "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
                           *map(str, wheels)], capture_output=True, text=True,
                          env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    if done.returncode != 0:
        raise SystemExit(f"gpu-proof: installing {len(wheels)} wheels failed: {done.stderr.strip()[-2000:]}")
    record.line(f"setup: {len(wheels)} wheels installed into {site}")


def environment(cpu: bool, work: Path, site: Path | None) -> None:
    """This process's environment, inherited by every stage process: gpu_check's (offline, CUDA required on the
    GPU, DeepSpeed on the CPU for --cpu), gpt1 importable, caches and MLflow's spool in the work folder."""
    os.environ.update(gpu_check.child_env(gpu_check.Mode(cpu=cpu, compile=False), on_cuda=True))
    if not cpu:
        os.environ.pop("DS_ACCELERATOR", None)
    paths = [str(site)] if site else []
    paths += [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for path in reversed(paths[:2]):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(work / "cache" / "torch_extensions"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(work / "cache" / "triton"))
    os.environ["GPT1_MLFLOW_SPOOL_DIR"] = str(work / "mlflow-spool")  # what SQLite could not take, kept
    os.environ.setdefault("GPT1_MLFLOW_FLUSH_TIMEOUT", "15")  # a process's end never waits long on tracking
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def holds_slots(plan, name: str) -> int:
    """The compute slots a step holds (as the flows count them): a fine-tune one, local pre-training all of them
    with `orchestration.pretrain_alone`, anything finished or not computing none."""
    from gpt1.stages.outputs import is_done

    step, o = plan.steps[name], plan.cfg.orchestration
    if not step.job.compute or is_done(step.out):
        return 0
    if step.stage != "pretrain":
        return 1
    return o.finetune_concurrency if o.pretrain_alone else 1


def proof_order(plan) -> list[str]:
    """The plan's steps but the report, in plan order, except that the fine-tunes go seed by seed (every task and
    variant of the first seed before the second's): a run stopped early still has paired comparisons. Within a
    seed the plan's order stays (the longest tasks first)."""
    from gpt1.recipe.experiment import unseeded

    names = [name for name, step in plan.steps.items() if step.stage != "report"]

    def seed(name: str) -> int:
        if plan.steps[name].stage != "finetune":
            return -1
        return unseeded(name.removeprefix("finetune-").split("-", 1)[0])[1] or plan.cfg.finetune.seed

    return sorted(names, key=lambda name: (seed(name), names.index(name)))


def finished_tasks(plan) -> dict[str, list[str]]:
    """Per variant, the tasks whose fine-tune finished (metrics.json)."""
    from gpt1.finetune.train import METRICS_FILE

    return {v: [t for t in plan.variant_tasks(v) if (plan.task_dir(t, v) / METRICS_FILE).is_file()]
            for v in plan.variants}


class Runner:
    """The plan's steps scheduled on this machine's slots until done or out of time, recorded as they end."""

    def __init__(self, plan, record: Record, budget: gpu_check.Budget, stop_at: float, cpu: bool):
        from gpt1.pipeline.schedule import Schedule
        from gpt1.runtime.workers import WorkerPool
        from gpt1.stages.base import stage_jobs

        self.plan, self.record, self.budget, self.stop_at, self.cpu = plan, record, budget, stop_at, cpu
        self.slots = plan.cfg.orchestration.finetune_concurrency
        self.order = proof_order(plan)
        self.schedule = Schedule(plan.needs, self.order, self.slots, holds_slot=lambda n: holds_slots(plan, n),
                                 runs_after_failures=lambda n: plan.steps[n].job.after_failures,
                                 available=plan.ready_early)
        preload = ("torch", "sklearn.metrics", *(job.__module__ for job in stage_jobs().values() if job.in_worker))
        self.workers = WorkerPool(self.slots, preload=preload)
        self.changed = threading.Condition()
        self.threads: dict[str, threading.Thread] = {}
        self.began: dict[str, float] = {}
        self.reporting: threading.Thread | None = None
        self.report_lock = threading.Lock()
        self.last_report = -float("inf")
        self.report_every = INTERIM_REPORT_EVERY[mode_name(cpu)]
        self.stopped = False

    # one step, in a thread of its own
    def _run(self, name: str) -> None:
        from gpt1.pipeline.run import run_step

        step = self.plan.steps[name]
        failure = None
        try:
            result = run_step(self.plan, name, workers=self.workers if step.stage == "finetune" else None,
                              log_line=lambda line: self.record.line(f"{name}: {line}" if not line.startswith("[")
                                                                     else line))
        except BaseException as err:  # noqa: BLE001 - the step's failure is recorded, the others go on
            failure = f"{type(err).__name__}: {err}"
            self.record.step(name, status="stopped" if self.stopped else "failed", error=failure[-1500:])
            self.record.line(f"{name}: {'stopped' if self.stopped else 'FAILED'}: {failure[-500:]}")
        else:
            try:
                found = self.outcome(name, result)
            except Exception as err:  # noqa: BLE001 - the step did its work; only its summary here is missing
                found = {"summary_error": f"{type(err).__name__}: {err}"}
            self.record.step(name, status="cached" if result.cached else "ok", **found)
        self.record.step(name, seconds=round(time.monotonic() - self.began[name], 1),
                         ended_at=round(self.record.elapsed(), 1))
        with self.changed:
            self.schedule.finish(name, failure)
            self.changed.notify_all()
        if step.stage == "finetune" and failure is None and not self.stopped:
            self.maybe_report(final=False)

    def outcome(self, name: str, result) -> dict:
        """The numbers progress.json shows for a finished step."""
        from gpt1.io import read_json

        stage = self.plan.steps[name].stage
        if stage == "finetune":
            metrics = read_json(result.path / "metrics.json")
            return {"metric": metrics["metrics"].get("primary"), "metrics": metrics["metrics"],
                    "eval_split": metrics["eval_split"], "train_examples": metrics["train"].get("examples"),
                    "device": metrics.get("device"), "precision": metrics["finetune_config"].get("precision")}
        if stage == "tokenize":
            manifest = result.path / "manifest.json"
            self.record.copy(manifest, "shards-manifest.json")
            found = read_json(manifest)
            return {"totals": found.get("totals"), "composition": found.get("composition")}
        if stage == "pretrain":
            self.copy_pretraining()
            training = read_json(result.path / "final" / "training.json")
            return {k: training.get(k) for k in ("steps", "tokens_seen", "language_model", "seconds",
                                                 "tokens_per_s", "corpus") if k in training}
        return {}

    def copy_pretraining(self) -> None:
        out = self.plan.dir("pretrain")
        self.record.copy(out / "metrics.jsonl", "pretrain-metrics.jsonl")
        self.record.copy(out / "final" / "training.json", "pretrain-training.json")

    def watch_pretraining(self) -> None:
        """Pre-training's metrics into OUT every 10 s while it runs, with its last logged window in progress.json."""
        from gpt1.pretrain.outputs import read_metrics

        path = self.plan.dir("pretrain") / "metrics.jsonl"
        while "pretrain" in self.threads and self.threads["pretrain"].is_alive():
            time.sleep(10)
            if path.is_file():
                self.record.copy(path, "pretrain-metrics.jsonl")
                with contextlib.suppress(Exception):
                    metrics = read_metrics(path)
                    last = metrics[max(metrics)]
                    self.record.step("pretrain", last_window={k: last.get(k) for k in (
                        "step", "loss", "tokens_per_s", "mfu", "lr", "val_loss") if k in last})

    def start(self, name: str, holds: int) -> None:
        self.schedule.start(name, holds)
        self.began[name] = time.monotonic()
        self.record.step(name, status="running", started_at=round(self.record.elapsed(), 1), slots=holds)
        self.record.line(f"start {name}" + (f" ({holds} slots)" if holds > 1 else ""))
        if self.plan.steps[name].stage == "pretrain" and not self.workers.pids:
            self.workers.start()  # their imports overlap pre-training
        thread = threading.Thread(target=self._run, args=(name,), name=name, daemon=True)
        self.threads[name] = thread
        thread.start()
        if name == "pretrain":
            threading.Thread(target=self.watch_pretraining, daemon=True).start()

    def execute(self) -> dict[str, str]:
        """Every step but the report, until all ended or the budget says stop; returns the failures by step."""
        with self.changed:
            while not self.schedule.finished:
                if time.monotonic() - self.budget.started >= self.stop_at:
                    break
                ready = self.schedule.next_step()
                if ready is None:
                    self.changed.wait(timeout=2.0)
                    continue
                self.start(*ready)
        if not self.schedule.finished:
            self.stop()
        return self.schedule.failures()

    def stop(self) -> None:
        """Out of time: the running steps are stopped (their processes terminated), the rest is not started."""
        from gpt1.runtime.processes import stop_stage_processes

        self.stopped = True
        running = sorted(self.schedule.running)
        pending = [n for n in self.order if n not in self.schedule.outcome and n not in self.schedule.running]
        self.record.line(f"budget: {self.record.elapsed():.0f} s gone, {self.budget.seconds - self.stop_at:.0f} s kept "
                         f"for the report: stopping {running or 'nothing'}; not started: {len(pending)} steps")
        for name in pending:
            self.record.step(name, status="not started (budget)")
        stop_stage_processes(timeout=10)
        self.workers.shutdown()
        for name in running:
            self.threads[name].join(timeout=30)

    # the report: again and again while the fine-tunes end (of the variants that have a finished task), at the end
    def comparable(self) -> list[str]:
        """The variants with a finished task, when they hold a pre-trained and from-scratch pair (else none)."""
        ran = [v for v, tasks in finished_tasks(self.plan).items() if tasks]
        return ran if {self.plan.finetune_config(v).from_scratch for v in ran} == {True, False} else []

    def maybe_report(self, final: bool) -> None:
        if final:
            if self.reporting is not None:
                self.reporting.join()
            self.report(final=True)
        elif (self.comparable() and time.monotonic() - self.last_report >= self.report_every
              and self.report_lock.acquire(blocking=False)):
            self.report_lock.release()  # one at a time, and not too often: a later fine-tune's end makes the next
            self.last_report = time.monotonic()
            self.reporting = threading.Thread(target=self.report, kwargs={"final": False}, daemon=True)
            self.reporting.start()

    def report(self, final: bool) -> None:
        """The report stage: the plan's own step once every variant has a finished task; before that (an interim
        report, or a run stopped early) the same stage's job on the variants that have one."""
        from gpt1.pipeline.run import run_step
        from gpt1.report import stage as report_stage

        with self.report_lock:
            finished = finished_tasks(self.plan)
            ran = self.comparable()
            if not ran:
                if final:
                    self.record.line("report: no pre-trained and from-scratch pair of fine-tunes finished: no report")
                    self.record.step("report", status="not run: nothing to compare")
                return
            started = time.monotonic()
            try:
                if final and len(ran) == len(finished):
                    path = run_step(self.plan, "report", log_line=self.record.line).path
                else:
                    step = self.plan.steps["report"]
                    job = report_stage.Job(tuple(self.plan.variant_dir(v) for v in ran), tuple(ran),
                                           step.job.not_run, step.job.headline, tracking_uri=step.job.tracking_uri)
                    path = job.run(step.out, wait=True, force=True, log_line=self.record.line).path
            except Exception as err:  # noqa: BLE001 - an interim report may meet a half-written task; the next one
                self.record.line(f"report: failed: {type(err).__name__}: {err}")
                if final:
                    self.record.step("report", status="failed", error=str(err)[-1500:])
                return
            for name in ("results.md", "results.json", "results.png"):
                self.record.copy(path / name, name)
            count = sum(len(t) for t in finished.values())
            self.record.step("report", status="ok" if final else "interim", path=str(path), fine_tunes=count,
                             variants=ran, seconds=round(time.monotonic() - started, 1),
                             at=round(self.record.elapsed(), 1))
            self.record.line(f"report: {'final' if final else 'interim'}, {count} fine-tunes of {len(ran)} variants, "
                             "in OUT/results.md")


def run(prepared: Path, out: Path, work: Path, cpu: bool, budget_seconds: float | None) -> int:
    budget = gpu_check.Budget(budget_seconds or BUDGET_SECONDS[mode_name(cpu)])
    meta_path = prepared / PREPARED
    if not meta_path.is_file():
        print(f"gpu-proof: {prepared} is not prepared: run `make gpu-proof-prepare` (or `python scripts/gpu_proof.py "
              f"prepare --out {prepared}`) on a machine with the shared data first", file=sys.stderr)
        return 2
    meta = json.loads(meta_path.read_text())
    if meta["mode"] != mode_name(cpu):
        print(f"gpu-proof: {prepared} was prepared for the {meta['mode']} run; this is the {mode_name(cpu)} run "
              f"({'add' if meta['mode'] == 'cpu' else 'drop'} --cpu, or prepare again)", file=sys.stderr)
        return 2
    if work.is_dir() and any(work.iterdir()) and not (work / WORK_MARKER).is_file():
        print(f"gpu-proof: {work} holds something else (not a gpu-proof work folder): choose another --work",
              file=sys.stderr)
        return 2
    record = Record(out, budget.started)
    stop_at = budget.seconds - REPORT_SECONDS[mode_name(cpu)]
    record.line(f"gpu-proof {mode_name(cpu)} run: budget {budget.seconds:.0f} s (the report from {stop_at:.0f} s on), "
                f"prepared {meta['written']}, work in {work}")
    record.update(mode=mode_name(cpu), budget_seconds=budget.seconds, prepared=meta)

    # setup: wheels, environment (CUDA checked first), the data restored at the keys prepare recorded
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / WORK_MARKER).touch()
    os.chdir(work)  # MLflow's SQLite store keeps its artifacts in ./mlruns: in the work folder, with its mlflow.db
    site = None
    if not cpu:
        site = work / "site"
        install_wheels(prepared, site, record)
    environment(cpu, work, site)
    try:
        text, found = gpu_check.environment(gpu_check.Mode(cpu=cpu, compile=False))
    except gpu_check.CheckFailed as err:
        record.line(f"environment: FAIL {err}")
        record.update(finished=True, environment_error=str(err))
        return 2
    record.line(f"environment: {text}")
    record.update(environment={**found, "cpus": os.cpu_count()})
    from gpt1.config import load_config
    from gpt1.data.ingest import stage as ingest_stage
    from gpt1 import recipe

    glue = work / "data" / "glue"
    with tarfile.open(prepared / "tasks.tar.xz") as tar:
        tar.extractall(glue, filter="data")
    pipeline = work / "pipeline"
    restore_corpus(prepared / "corpus", pipeline / "ingest" / meta["keys"]["ingest"], meta["corpus"]["splits"])
    shutil.copytree(prepared / "tokenizer", pipeline / "train-tokenizer" / meta["keys"]["train-tokenizer"])
    cfg = load_config(PRESET, [f"ingest.source={meta['source']}", f"finetune.data={glue}",
                               f"tracking.tracking_uri=sqlite:///{work / 'mlflow.db'}", *meta["overrides"]])
    # The books are not on this host: the one value of the plan that reads them, their content key, is prepare's.
    with mock.patch.object(ingest_stage, "source_key", lambda spec: meta["source_key"]):
        plan = recipe.plan(cfg, pipeline)
    planned = {name: plan.ref(name).key for name in meta["keys"]}
    if planned != meta["keys"]:
        record.line(f"setup: FAIL the plan here keys ingest/tokenizer as {planned}, prepare recorded {meta['keys']}: "
                    "the code, the preset or the task files differ from what prepare ran; prepare again")
        record.update(finished=True)
        return 2
    record.phase("setup", record.elapsed())
    record.update(plan={"variants": plan.variants, "tasks": plan.tasks, "steps": list(plan.steps),
                        "slots": cfg.orchestration.finetune_concurrency, "model": cfg.model.model_dump(),
                        "pretrain": {k: getattr(cfg.pretrain, k) for k in (
                            "max_steps", "global_batch_size", "lr", "warmup_steps", "precision", "zero_stage")},
                        "finetune": {k: getattr(cfg.finetune, k) for k in (
                            "epochs", "batch_size", "lr", "warmup_fraction", "aux_lm_weight", "seeds",
                            "max_train_examples")}})
    record.line(f"setup done: {len(plan.steps)} steps; fine-tunes {len(plan.variants)} variants x "
                f"{len(plan.tasks)} tasks, {cfg.orchestration.finetune_concurrency} at once")

    runner = Runner(plan, record, budget, stop_at, cpu)
    try:
        failures = runner.execute()
    finally:
        runner.workers.shutdown()
    record.phase("steps", record.elapsed())
    runner.maybe_report(final=True)
    if "pretrain" in runner.threads:
        runner.copy_pretraining()
    reported = (out / "results.md").is_file() and record.progress["steps"].get("report", {}).get("status") == "ok"
    record.update(finished=True, failures=failures, total_seconds=round(record.elapsed(), 1))
    for line in summary_lines(out / "results.json") if reported else []:
        record.line(line)
    record.line(f"total {record.elapsed():.0f} s of {budget.seconds:.0f}; {len(failures)} step(s) failed or stopped; "
                f"report {'in ' + str(out / 'results.md') if reported else 'NOT written'}")
    return 0 if reported and not failures else 1


def summary_lines(results: Path) -> list[str]:
    """The headline of results.json in a few lines (the end of the command's output)."""
    found = json.loads(results.read_text())
    lines = []
    for compared in found.get("comparisons", []):
        head = compared["headline"]
        if "difference" in head:
            lines.append(f"headline: {compared['pretrained']} minus {compared['from_scratch']}: "
                         f"{head['difference']:+.1f} [{head['low']:+.1f}, {head['high']:+.1f}] ({head['verdict']})")
        else:
            lines.append(f"headline: {compared['pretrained']} minus {compared['from_scratch']}: not computed "
                         f"(missing: {', '.join(head.get('missing', [])) or '?'})")
        lines += [f"  {task} ({entry['metric']}): {entry['difference']:+.1f} [{entry['low']:+.1f}, "
                  f"{entry['high']:+.1f}]" for task, entry in compared["tasks"].items() if "difference" in entry]
        lines += [f"  seed {s['seed']}: {s['difference']:+.1f} [{s['low']:+.1f}, {s['high']:+.1f}]"
                  for s in compared.get("per_seed", [])]
        model = (compared.get("pretraining") or {}).get("language_model")
        if model:
            lines.append(f"  language model: validation loss {model['val_loss']:.3f} vs bigram "
                         f"{model['bigram_loss']:.3f} nats/token")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_proof.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="ingest, tokenizer, tasks and wheels into one folder (the shared data here)")
    prep.add_argument("--out", type=Path, default=REPO / "build-artifacts" / "gpu-proof")
    prep.add_argument("--data", type=Path, default=Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" /
                                                                         "data")), help="the shared data folder")
    prep.add_argument("--work", type=Path, help="the pipeline's work folder here (default: OUT-work beside OUT)")
    prep.add_argument("--cpu", action="store_true", help="for the CPU rehearsal: data subsets, no wheels")
    prep.add_argument("--python-version", default="3.12", help="the GPU host's CPython X.Y (its wheels)")
    prep.add_argument("--no-wheels", action="store_true", help="leave the wheels out")
    go = sub.add_parser("run", help="the one command on the GPU host (or --cpu: the rehearsal)")
    go.add_argument("--prepared", type=Path, default=REPO / "build-artifacts" / "gpu-proof")
    go.add_argument("--out", type=Path, help="where the results go, as they come (default: PREPARED-results)")
    go.add_argument("--work", type=Path, help="the run's work folder (default: /tmp/gpu-proof-work, emptied first)")
    go.add_argument("--cpu", action="store_true", help="the CPU rehearsal (prepared with prepare --cpu)")
    go.add_argument("--budget", type=float, help="seconds for everything (default 420 on a GPU, 1500 with --cpu)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        out = args.out.absolute()
        work = (args.work or out.with_name(out.name + "-work")).absolute()
        try:
            return prepare(out, args.data.absolute(), work, args.cpu, args.python_version, not args.no_wheels)
        except wheelhouse.WheelhouseError as err:
            print(f"gpu-proof: {err}", file=sys.stderr)
            return 2
    prepared = args.prepared.absolute()
    out = (args.out or prepared.with_name(prepared.name + "-results")).absolute()
    work = (args.work or Path("/tmp/gpu-proof-work")).absolute()
    return run(prepared, out, work, args.cpu, args.budget)


if __name__ == "__main__":
    sys.exit(main())
