"""Real pre-training runs on tiny shards: `gpt1 pretrain` end to end, SIGKILL + resume exactness, an unreachable
tracking server, and two "nodes" on loopback (torchrun and the deepspeed launcher) against one process.

Every run is a few optimizer updates of a 2-layer, 32-wide model on 32-token blocks built from the generated
sample books with the real tokenizer and shards writer. Worker start-up (imports, DeepSpeed init) dominates.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from gpt1.pretrain.checkpoint import COMPLETE, tag_for
from gpt1.runtime.processes import free_port
from tiny_pretraining import (NO_DROPOUT, TIMEOUT, closed_port_uri, data, env, kill_after_checkpoint, losses,  # noqa: F401
                              pretrain_args, run)  # (data: a fixture)

@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """An uninterrupted `gpt1 pretrain` run (dropout on) tracked in a SQLite MLflow store."""
    out = tmp_path_factory.mktemp("reference")
    uri = f"sqlite:///{out / 'mlflow.db'}"
    run(pretrain_args(data, out / "run", "--tracking-uri", uri), out / "log.txt")
    return out / "run", uri


def test_cli_run_trains_logs_and_exports(reference, data):
    from gpt1.tokenizer import bpe
    from gpt1.model.transformer import GPT1

    out, uri = reference
    curve = losses(out)
    assert sorted(curve) == list(range(1, 9))
    assert sum(curve[s] for s in (7, 8)) < sum(curve[s] for s in (1, 2))  # it learns

    model = GPT1.from_pretrained(out / "final").eval()
    tok = bpe.load(out / "final")
    assert tok.sha256 == bpe.load(data / "tokenizer").sha256
    assert model.config.vocab_size == tok.vocab_size and model.config.n_layer == 2
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(out / "final" / "hf").eval()
    ids = torch.tensor([tok.encode("she opened the door and saw")])
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, model(ids).logits, atol=1e-4)
    hf_tokenizer = AutoTokenizer.from_pretrained(out / "final" / "hf")  # the complete hand-off (tests/unit/test_hf_handoff.py)
    assert hf_tokenizer("She opened the door.")["input_ids"] == [tok.start_id, *tok.encode("She opened the door.")]
    assert "Pre-trained by gpt1-pipeline for 8 steps" in (out / "final" / "hf" / "README.md").read_text()
    assert (out / "samples" / f"step-{8:08d}.txt").read_text().count("[") == 3

    client = MlflowClient(uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED"
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "val_loss", "val_ppl", "probe/sst2_accuracy",
            "probe/cola_mcc", "probe/race_accuracy", "probe/storycloze_accuracy",
            "probe/winograd_accuracy"} <= set(run.data.metrics)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [2, 4, 6, 8]
    params = run.data.params
    assert params["deepspeed.train_batch_size"] == "8" and params["deepspeed.gradient_accumulation_steps"] == "2"
    assert params["model.n_layer"] == "2" and params["pretrain.micro_batch_size"] == "4"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "deepspeed_config.json", "loss_curve.png", "samples", "final"} <= artifacts
    assert run.data.tags["ref.final.uri"] == str((out / "final").resolve())


@pytest.mark.slow
def test_sigkill_then_resume_ends_bit_identical(reference, data, tmp_path):
    ref_out, _ = reference
    out, uri = tmp_path / "run", f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = pretrain_args(data, out, "--tracking-uri", uri)
    kill_after_checkpoint(args, out, 3, tmp_path / "killed.txt")
    # Seeing its launcher gone, the worker stops as on SIGTERM: a checkpoint at its next logging boundary
    # (gpt1.pretrain.preemption). On a loaded machine it can train on to its last-step checkpoint before it sees
    # the launcher gone, and even write final/; a kill that came earlier is then what the checkpoints before
    # step 8 show, and the resumed run writes final/ again.
    for late in (out / "checkpoints").glob("step-*"):
        if int(late.name.split("-")[1]) > 6:
            shutil.rmtree(late)
    resumed_from = max(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*")
                       if (p / COMPLETE).exists())
    run_id = json.loads((out / "checkpoints" / tag_for(resumed_from) / "meta.json").read_text())["run_id"]
    # A checkpoint killed while being written: newer, but no COMPLETE marker and a truncated file.
    torn = out / "checkpoints" / tag_for(resumed_from + 1)
    shutil.copytree(out / "checkpoints" / tag_for(resumed_from), torn, dirs_exist_ok=True)
    (torn / COMPLETE).unlink()
    (torn / "mp_rank_00_model_states.pt").write_bytes(b"\0" * 10)

    run(args + ["--resume", "auto"], tmp_path / "resumed.txt")
    assert f"resumed from {out / 'checkpoints' / tag_for(resumed_from)}" in (tmp_path / "resumed.txt").read_text()
    assert not torn.exists()  # cleaned up by the next save

    a, b = load_file(ref_out / "final" / "gpt1.safetensors"), load_file(out / "final" / "gpt1.safetensors")
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    ref_curve, curve = losses(ref_out), losses(out)
    after = [s for s in ref_curve if s > resumed_from]
    assert [curve[s] for s in after] == pytest.approx([ref_curve[s] for s in after], abs=1e-6)

    client = MlflowClient(uri)
    (run_info,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run_info.info.run_id == run_id and run_info.info.status == "FINISHED"  # the same run, re-attached
    assert run_info.data.tags["resumed_at_step"] == str(resumed_from)
    assert max(m.step for m in client.get_metric_history(run_id, "loss")) == 8


@pytest.mark.slow
def test_sigterm_stops_two_ranks_at_one_update_with_a_checkpoint_and_the_rerun_resumes(data, tmp_path):
    """What an eviction does: SIGTERM to `gpt1 pretrain` (as Kubernetes sends it to a pod's first process) reaches
    both ranks, which agree on one update at a logging boundary, checkpoint it and exit; the launcher says so and
    exits 75 within the grace; `--resume auto` goes on from that checkpoint to the end."""
    out, steps = tmp_path / "run", 400
    args = pretrain_args(data, out, "--nproc", "2", steps=steps, sets=["pretrain.stop_grace_seconds=60"])
    with open(tmp_path / "stopped.txt", "w") as fh:
        launcher = subprocess.Popen(args, env=env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + TIMEOUT
    while not (out / "metrics.jsonl").exists() or max(losses(out), default=0) < 4:
        assert launcher.poll() is None and time.time() < deadline, (tmp_path / "stopped.txt").read_text()[-3000:]
        time.sleep(0.1)
    launcher.send_signal(signal.SIGTERM)
    signalled = time.time()
    code = launcher.wait(timeout=90)
    log = (tmp_path / "stopped.txt").read_text()
    assert code == 75 and time.time() - signalled < 60, log[-3000:]
    notice = json.loads((out / "preempted.json").read_text())
    stop = notice["step"]
    assert 4 <= stop < steps and stop % 2 == 0  # a logging boundary (log_every=2), before the end
    assert (out / "checkpoints" / tag_for(stop) / COMPLETE).exists() and not (out / "final").exists()
    assert f"stopped on request at update {stop} with checkpoint" in log.splitlines()[-1]
    assert max(losses(out)) == stop  # both ranks stopped at the same update: nothing trained past it

    run(args + ["--resume", "auto"], tmp_path / "resumed.txt")
    assert f"resumed from {out / 'checkpoints' / tag_for(stop)}" in (tmp_path / "resumed.txt").read_text()
    assert max(losses(out)) == steps and (out / "final" / "gpt1.safetensors").exists()


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [0, 1])
def test_a_two_rank_checkpoint_resumes_on_one_rank(data, tmp_path, zero_stage):
    """A requeue onto fewer GPUs: a checkpoint written by 2 ranks goes on with 1 and ends where the 2-rank run
    does (dropout off: the ranks' dropout streams cannot carry over). At ZeRO 1 the optimizer state is re-cut
    from the 2 ranks' partitions; a lost Adam state would move the weights by about the learning rate."""
    sets = [*NO_DROPOUT, f"pretrain.zero_stage={zero_stage}"]
    two, one = tmp_path / "two", tmp_path / "one"
    run(pretrain_args(data, two, "--nproc", "2", steps=6, sets=sets), tmp_path / "two.txt")
    resume = str(two / "checkpoints" / tag_for(3))
    run(pretrain_args(data, one, "--nproc", "1", "--resume", resume, steps=6, sets=sets), tmp_path / "one.txt")
    log = (tmp_path / "one.txt").read_text()
    assert "written by 2 processes, this job has 1" in log and f"resumed from {resume}" in log
    ref, got = losses(two), losses(one)
    assert sorted(got) == [4, 5, 6]
    assert [got[s] for s in sorted(got)] == pytest.approx([ref[s] for s in sorted(got)], abs=1e-5)
    a, b = load_file(two / "final" / "gpt1.safetensors"), load_file(one / "final" / "gpt1.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5
    assert sorted(p.name for p in (one / "checkpoints").iterdir() if p.is_dir()) == [tag_for(6)]  # no scratch left


@pytest.fixture(scope="module")
def single_process(data, tmp_path_factory):
    """One process, no dropout (so ranks are comparable), tracking server unreachable."""
    root = tmp_path_factory.mktemp("single")
    done = run(pretrain_args(data, root / "run", "--tracking-uri", closed_port_uri(), steps=4, sets=NO_DROPOUT),
               root / "log.txt")
    return root / "run", (root / "log.txt").read_text(), done


@pytest.mark.slow
def test_unreachable_tracking_server_is_not_fatal(single_process):
    out, log, _ = single_process
    assert "could not create MLflow run" in log
    assert (out / "final" / "gpt1.safetensors").exists() and sorted(losses(out)) == [1, 2, 3, 4]


def two_node_out(single: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(single / "config.json", out / "config.json")  # the resolved config, as `gpt1 pretrain --dry-run`
    data = json.loads((single / "config.json").read_text())
    assert data["pretrain"]["micro_batch_size"] == 4  # 2 ranks x 4 = the single process's 2 x 4 accumulation
    worker = ["--config", str(out / "config.json"), "--shards", json.loads(
        (single / "final" / "training.json").read_text())["shards"], "--out", str(out)]
    return out, worker


def launch_pair(commands: list[list[str]], tmp_path: Path) -> None:
    logs = [open(tmp_path / f"node{i}.txt", "w") for i in range(len(commands))]
    procs = [subprocess.Popen(c, env=env(), stdout=fh, stderr=subprocess.STDOUT) for c, fh in zip(commands, logs)]
    try:
        codes = [p.wait(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for fh in logs:
            fh.close()
    assert codes == [0, 0], "\n".join((tmp_path / f"node{i}.txt").read_text()[-2000:] for i in range(len(commands)))


def assert_same_training(out: Path, single: Path) -> None:
    ref, got = losses(single), losses(out)
    assert sorted(got) == sorted(ref)
    assert [got[s] for s in sorted(ref)] == pytest.approx([ref[s] for s in sorted(ref)], abs=1e-5)
    a, b = load_file(single / "final" / "gpt1.safetensors"), load_file(out / "final" / "gpt1.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-4
    assert json.loads((out / "checkpoints" / tag_for(3) / "meta.json").read_text())["world_size"] == 2


@pytest.mark.slow
def test_two_nodes_with_torchrun_match_one_process(single_process, tmp_path):
    single = single_process[0]
    out, worker = two_node_out(single, tmp_path)
    port = str(free_port())
    launch_pair([[sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={rank}",
                  "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "gpt1.pretrain",
                  *worker] for rank in (0, 1)], tmp_path)
    assert_same_training(out, single)


@pytest.mark.slow
def test_two_nodes_with_deepspeed_launcher_match_one_process(single_process, tmp_path):
    single = single_process[0]
    out, worker = two_node_out(single, tmp_path)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node0 slots=1\nnode1 slots=1\n")
    port = str(free_port())
    launch_pair([[sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(hostfile), "--no_ssh",
                  f"--node_rank={rank}", "--master_addr=127.0.0.1", f"--master_port={port}", "--module",
                  "gpt1.pretrain", *worker] for rank in (0, 1)], tmp_path)
    assert_same_training(out, single)
