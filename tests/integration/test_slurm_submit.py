"""The pretrain stage as a Slurm job (`orchestration.pretrain_launcher=slurm`), end to end without Slurm.

Stand-ins for `sbatch`, `srun` and `scontrol` (small bash scripts put first on PATH) emulate a one-node cluster:
sbatch runs the batch script right here and waits for it. Everything else is real: the pretrain stage
(`gpt1.stages.pretrain.Job` with launcher "slurm") submits infra/multinode/slurm/pretrain.sbatch, which
validates with `gpt1 pretrain --dry-run` and trains with `torchrun` (c10d rendezvous on loopback) a 2-layer,
32-wide model for 3 updates on shards built by the pipeline's own stages from a slice of the generated books. A quick check runs the script with `gpt1` and `srun` that
only echo their arguments: the documented SHARED defaults, and the exact paths the stage passes instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt1 import recipe
from gpt1.recipe import experiment as P
from gpt1.pipeline.run import run_step
from gpt1.config import ConfigError, load_config
from gpt1.runtime.processes import free_port
from gpt1.io import read_json, write_json
from gpt1.pretrain import slurm
from gpt1.pretrain import stage as pretrain
from gpt1.data.tokenize import stage as shards
from gpt1.data.train_tokenizer import stage as tokenizer
from gpt1.stages.base import Ref
from gpt1.stages.outputs import DONE, is_done
from tests.conftest import overriding

TINY = [
    "model.n_ctx=32", "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.d_ff=128",
    "train_tokenizer.merges=300", "tokenize.workers=1",
    "pretrain.max_steps=3", "pretrain.warmup_steps=1", "pretrain.global_batch_size=8", "pretrain.log_every=1",
    "pretrain.eval_every=1000", "pretrain.eval_batches=1", "pretrain.probe_every=1000",
    "pretrain.probe_max_examples=4", "pretrain.save_every=1000",
]

# One node: the batch script runs here, with the variables Slurm would set; --wait, --nodes and --output are
# required because the pipeline must pass them.
FAKE_SBATCH = r"""#!/bin/bash
set -u
wait_for_job=0 nodes="" output=""
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    --wait) wait_for_job=1 ;;
    --nodes=*) nodes=${1#--nodes=} ;;
    --output=*) output=${1#--output=} ;;
    *) echo "fake sbatch: option not emulated: $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $wait_for_job != 1 || -z $nodes || -z $output || $# -lt 1 ]]; then
  echo "fake sbatch: expected --wait --nodes=N --output=FILE SCRIPT" >&2
  exit 2
fi
export SLURM_JOB_ID=$$ SLURM_NNODES=$nodes SLURM_JOB_NODELIST=localhost
echo "Submitted batch job $SLURM_JOB_ID"
bash "$@" > "${output//%j/$SLURM_JOB_ID}" 2>&1  # its exit status is sbatch's, as with --wait
"""

# One task on the one node: srun's own options are dropped, the command runs in its place.
FAKE_SRUN = r"""#!/bin/bash
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
exec "$@"
"""

FAKE_SCONTROL = r"""#!/bin/bash
if [[ ${1:-} == show && ${2:-} == hostnames ]]; then
  echo 127.0.0.1
else
  echo "fake scontrol: only 'show hostnames' is emulated" >&2
  exit 2
fi
"""


def plan_for(work: Path, extra: list[str] = ()) -> P.Experiment:
    return recipe.plan(load_config("smoke", overriding(TINY, extra)), work)


def slurm_job(shards_ref: Ref, tokenizer_ref: Ref, extra: list[str] = (), **kwargs) -> pretrain.Job:
    """The pretrain stage of `TINY` with `extra` in place of what it sets, on these inputs, submitted to Slurm (one
    node)."""
    return pretrain.Job(shards_ref, tokenizer_ref, load_config("smoke", overriding(TINY, extra)), resume="auto",
                        launcher="slurm", nnodes=1, **kwargs)


def write_bin(bin_dir: Path, scripts: dict[str, str]) -> Path:
    bin_dir.mkdir(parents=True)
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The stand-ins first on PATH (then this venv's `gpt1` and `torchrun`); a free rendezvous port; cwd in tmp."""
    bin_dir = write_bin(tmp_path / "fake-slurm", {"sbatch": FAKE_SBATCH, "srun": FAKE_SRUN, "scontrol": FAKE_SCONTROL})
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("RDZV_PORT", str(free_port()))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny model on a shared 2-core machine
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    monkeypatch.setenv("GPT1_REQUIRE_CUDA", "0")  # the script requires CUDA by default; this node is a CPU
    monkeypatch.chdir(tmp_path)  # anything written relative to the job's cwd stays in tmp
    return tmp_path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Sample stage -> a corpus of the first 200k characters of two books -> tokenizer and shards stages."""
    from gpt1.data.ingest import corpus

    work = tmp_path_factory.mktemp("work")
    plan = plan_for(work)
    books = sorted((run_step(plan, "sample-data").path / "books").glob("*.txt"))[:2]
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in books)[:200_000]
    docs = [d.strip() for d in text.split("\n\n") if d.strip()]
    corpus_dir = work / "corpus"
    for split, part in (("train", docs[:-30]), ("val", docs[-30:])):
        (corpus_dir / split).mkdir(parents=True)
        table = pa.table({"id": [str(i) for i in range(len(part))], "source": ["sample"] * len(part), "text": part},
                         schema=corpus.SCHEMA)
        pq.write_table(table, corpus_dir / split / "part-00000.parquet")
    write_json(corpus_dir / corpus.STATS_FILE, {"documents": len(docs)})
    cfg = plan.cfg
    tok = tokenizer.Job(Ref.to(corpus_dir), cfg.train_tokenizer).run(work / "tokenizer", wait=False)
    packed = shards.Job(Ref.to(corpus_dir), Ref(tok.path, tok.key), n_ctx=cfg.model.n_ctx,
                        shard_rows=cfg.tokenize.shard_rows).run(work / "shards", wait=False)
    return SimpleNamespace(work=work, tokenizer=Ref(tok.path, tok.key), shards=Ref(packed.path, packed.key))


def mlflow_store(root: Path) -> tuple[str, str]:
    """A SQLite tracking store (artifacts under root) and a parent run in it, as the pipeline's flow would have."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment(load_config("smoke").tracking.experiment,
                                          artifact_location=(root / "artifacts").as_uri())
    return uri, client.create_run(experiment, run_name="pipeline").info.run_id


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pretrain_stage_runs_as_a_slurm_job(data, cluster):
    from mlflow.tracking import MlflowClient

    from gpt1.model.transformer import GPT1
    from gpt1.pretrain.outputs import read_metrics

    uri, parent = mlflow_store(cluster / "mlflow")
    out = data.work / "pretrain"
    lines: list[str] = []
    stage = slurm_job(data.shards, data.tokenizer, [f"tracking.tracking_uri={uri}"], parent_run_id=parent,
                      log_line=lines.append)
    result = stage.run(out, wait=False)
    final = out / "final"

    assert result.path == out and not result.cached and is_done(out)
    job = read_json(out / DONE)["slurm_job"]
    assert f"Submitted batch job {job}" in lines  # sbatch's own output, streamed
    output = out / f"slurm-{job}.out"
    job_lines = [line.rstrip() for line in output.read_text(encoding="utf-8").splitlines()]
    start = lines.index(f"pretrain: output of Slurm job {job} ({output}):")
    assert lines[start + 1:] == job_lines  # the job's log, line by line, after it ended
    assert any(line.startswith("-m gpt1.pretrain --config") for line in job_lines)  # the dry-run on the batch host

    # The job trained what the stage asked for, on the stage's exact inputs.
    model = GPT1.from_pretrained(final)
    vocab = read_json(data.shards.path / "manifest.json")["vocab_size"]
    assert model.config.n_layer == 2 and model.config.n_embd == 32 and model.config.vocab_size == vocab
    assert sorted(s for s, r in read_metrics(out / "metrics.jsonl").items() if "loss" in r) == [1, 2, 3]
    assert read_json(final / "training.json")["shards"] == str(data.shards.path)
    assert (final / "tokenizer.json").exists()

    # Tracking reached the workers through the job's environment: a finished run nested under the parent.
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(stage.cfg.tracking.experiment).experiment_id])
    (child,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent]
    assert child.info.run_name == "pretrain" and child.info.status == "FINISHED"

    again: list[str] = []
    rerun = slurm_job(data.shards, data.tokenizer, [f"tracking.tracking_uri={uri}"], log_line=again.append)
    assert rerun.run(out, wait=False).cached and again == []  # finished: nothing is submitted twice


@pytest.mark.timeout(600)
def test_failing_job_names_its_output_file_and_leaves_the_stage_unfinished(data, cluster):
    out = cluster / "pretrain"
    lines: list[str] = []
    stage = slurm_job(data.shards, data.tokenizer, ["pretrain.max_steps=2"], log_line=lines.append)
    # The job fails on the batch host: the shards disappear between the submitter's checks and the job.
    run_job = slurm.run_job

    def run_job_after_losing_the_shards(*args, **kwargs):
        shutil.move(data.shards.path, cluster / "moved-shards")
        try:
            return run_job(*args, **kwargs)
        finally:
            shutil.move(cluster / "moved-shards", data.shards.path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(slurm, "run_job", run_job_after_losing_the_shards)
        with pytest.raises(RuntimeError, match=r"Slurm job \d+ failed") as failed:
            stage.run(out, wait=False)

    (output,) = out.glob("slurm-*.out")
    assert str(output) in str(failed.value)
    assert any(line.startswith("gpt1 pretrain: error:") for line in lines)  # the job's error reached the logs
    assert "gpt1 pretrain: error:" in output.read_text(encoding="utf-8")
    assert not is_done(out) and not (out / "final").exists()


def test_missing_sbatch_fails_clearly_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    stage = slurm_job(Ref(tmp_path / "shards", "s"), Ref(tmp_path / "tokenizer", "t"))
    with pytest.raises(RuntimeError, match=r"`sbatch` is not on PATH; run the Prefect worker on a Slurm login node"):
        stage.run(tmp_path / "pretrain", wait=False)
    assert not (tmp_path / "pretrain").exists()


def test_missing_sbatch_script_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "SCRIPT", tmp_path / "site-packages" / "infra" / "pretrain.sbatch")
    stage = slurm_job(Ref(tmp_path / "shards", "s"), Ref(tmp_path / "tokenizer", "t"))
    with pytest.raises(RuntimeError, match="needs the repository checkout"):
        stage.run(tmp_path / "pretrain", wait=False)
    assert not (tmp_path / "pretrain").exists()


def test_launcher_settings_default_to_local_and_are_validated():
    orchestration = load_config("smoke").orchestration
    assert orchestration.pretrain_launcher == "local" and orchestration.pretrain_nnodes == 1
    with pytest.raises(ConfigError, match="orchestration.pretrain_launcher"):
        load_config("smoke", ["orchestration.pretrain_launcher=pbs"])
    with pytest.raises(ConfigError, match="orchestration.pretrain_nnodes"):
        load_config("smoke", ["orchestration.pretrain_nnodes=0"])


def run_script_with_echoes(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The sbatch script with `gpt1` and `srun` that only print their arguments: what would run, and with what."""
    echo = 'echo "$(basename "$0") $*"\n'
    bin_dir = write_bin(tmp_path / "echo-bin", {"gpt1": "#!/bin/bash\n" + echo, "srun": "#!/bin/bash\n" + echo,
                                                "scontrol": FAKE_SCONTROL})
    job = {"SLURM_NNODES": "2", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]"}
    return subprocess.run(["bash", str(slurm.SCRIPT)], env={"PATH": f"{bin_dir}:/usr/bin:/bin", **job, **env},
                          capture_output=True, text=True, timeout=60)


def test_sbatch_script_keeps_its_shared_defaults_and_takes_exact_paths(tmp_path):
    assert subprocess.run(["bash", "-n", str(slurm.SCRIPT)]).returncode == 0

    manual = run_script_with_echoes(tmp_path, {"SHARED": "/shared/gpt1"})  # the documented manual use
    assert manual.returncode == 0, manual.stderr
    dry_run, srun = manual.stdout.splitlines()
    inputs = ("--shards /shared/gpt1/shards --tokenizer /shared/gpt1/tokenizer --out /shared/gpt1/runs/pretrain "
              "--resume auto --task-data /shared/gpt1/tasks")
    assert dry_run == f"gpt1 pretrain --preset paper --nproc 8 --nnodes 2 --dry-run {inputs}"
    assert srun.startswith("srun --kill-on-bad-exit=1 torchrun --nnodes 2 --nproc-per-node 8 --rdzv-id 7 ")
    assert "--rdzv-endpoint 127.0.0.1:29500 " in srun
    assert srun.endswith(f"-m gpt1.pretrain --config /shared/gpt1/runs/pretrain/config.json {inputs}")

    exact = run_script_with_echoes(tmp_path / "exact", {  # as the pipeline stage submits it: no SHARED
        "SHARDS": "/w/shards", "TOKENIZER": "/w/tok", "TASK_DATA": "", "OUT": "/w/out", "PRESET": "/w/out/config.yaml",
        "GPUS_PER_NODE": "2", "PARENT_RUN_ID": "abc", "RDZV_PORT": "31000"})
    assert exact.returncode == 0, exact.stderr
    dry_run, srun = exact.stdout.splitlines()
    inputs = "--shards /w/shards --tokenizer /w/tok --out /w/out --resume auto --parent-run-id abc"
    assert dry_run == f"gpt1 pretrain --preset /w/out/config.yaml --nproc 2 --nnodes 2 --dry-run {inputs}"
    assert "--rdzv-endpoint 127.0.0.1:31000 " in srun and srun.endswith(f"--config /w/out/config.json {inputs}")

    neither = run_script_with_echoes(tmp_path / "neither", {})
    assert neither.returncode != 0 and "set SHARED to a directory every node mounts" in neither.stderr
