"""Tiny real pre-training runs for the tests that need one: shards and a tokenizer built once per module from the
generated sample books (`data`), and `gpt1 pretrain` command lines of a 2-layer, 32-wide model on 32-token blocks.
Worker start-up (imports, DeepSpeed init) is most of a run's time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt1.io import write_json
from gpt1.pretrain.outputs import read_metrics
from gpt1.runtime.processes import free_port
from tests.conftest import overriding

TIMEOUT = 900
MODEL = ["model.n_ctx=32", "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.d_ff=128"]
RECIPE = ["pretrain.global_batch_size=8", "pretrain.micro_batch_size=4", "pretrain.warmup_steps=2",
          "pretrain.lr=3e-3", "pretrain.log_every=2", "pretrain.eval_every=4", "pretrain.eval_batches=2",
          "pretrain.probe_every=8"]
NO_DROPOUT = ["model.embd_pdrop=0", "model.attn_pdrop=0", "model.resid_pdrop=0"]


def closed_port_uri() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Sample books -> corpus (paragraphs as documents) -> tokenizer (300 merges) -> 32-token shards; sample tasks."""
    from gpt1.tokenizer import bpe
    from gpt1.data.ingest import corpus
    from gpt1.data.tokenize import tokenize_corpus
    from gpt1.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("pretrain-data")
    write_sample_data(root / "sample", seed=0)
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted((root / "sample" / "books").glob("*.txt"))[:2])
    docs = [p.strip() for p in text[:300_000].split("\n\n") if p.strip()]
    for split, part in (("train", docs[:-40]), ("val", docs[-40:])):
        (root / "corpus" / split).mkdir(parents=True)
        table = pa.table({"id": [str(i) for i in range(len(part))], "source": ["sample"] * len(part), "text": part},
                         schema=corpus.SCHEMA)
        pq.write_table(table, root / "corpus" / split / "part-00000.parquet")
    write_json(root / "corpus" / corpus.STATS_FILE, {"documents": len(docs)})
    tok = bpe.train(docs, merges=300, show_progress=False)
    tok.save(root / "tokenizer")
    tokenize_corpus(root / "corpus", tok, root / "shards", n_ctx=32, shard_rows=256, workers=1, show_progress=False)
    return root


def env() -> dict:
    # One thread per worker: the same arithmetic in every run, and no oversubscription of the shared cores.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}


def pretrain_args(data: Path, out: Path, *extra: str, steps: int = 8, sets: list[str] = ()) -> list[str]:
    args = [sys.executable, "-m", "gpt1.cli", "pretrain", "--preset", "smoke", "--shards", str(data / "shards"),
            "--out", str(out), "--tokenizer", str(data / "tokenizer"), "--task-data", str(data / "sample" / "tasks"),
            "--probe-examples", "8", "--max-steps", str(steps), "--save-every", "3"]
    # `sets` in place of the shared settings of the same keys: two settings of one key that differ are refused
    for item in overriding([*MODEL, *RECIPE], list(sets)):
        args += ["--set", item]
    return args + list(extra)


def run(args: list[str], log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as fh:
        done = subprocess.run(args, env=env(), stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    assert done.returncode == 0, log.read_text()[-4000:]
    return done


def losses(out: Path) -> dict[int, float]:
    return {step: r["loss"] for step, r in read_metrics(out / "metrics.jsonl").items() if "loss" in r}


def workers_of(out: Path) -> list[int]:
    """The pre-training worker processes training into `out`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "gpt1.pretrain" in cmdline and str(out) in cmdline and "gpt1.cli" not in cmdline:
                found.append(int(entry.name))
    return found


def kill_after_checkpoint(args: list[str], out: Path, step: int, log: Path) -> None:
    """Start `gpt1 pretrain` (`args`) in a session of its own, SIGKILL that session once the checkpoint of `step`
    is complete, and wait for the worker (a session of its own too) to see its launcher gone and stop. Stopping
    as on SIGTERM, it writes a checkpoint at its next logging boundary (gpt1.pretrain.preemption) and holds the
    output's lock until then, so a resume started earlier would be refused as a second writer."""
    from gpt1.pretrain.checkpoint import COMPLETE, tag_for

    with open(log, "w") as fh:
        victim = subprocess.Popen(args, env=env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + TIMEOUT
    while not (out / "checkpoints" / tag_for(step) / COMPLETE).exists():
        assert victim.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    while workers_of(out):
        assert time.time() < deadline, "the pre-training worker outlived its killed launcher"
        time.sleep(0.1)
