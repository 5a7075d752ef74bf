"""The pre-training loop as a GPU runs it, checked on CPUs: gradients reduced in fp32 by a real DeepSpeed engine,
time-based evaluation and checkpoint cadence, batches prefetched with the reader state that resumes after them,
metrics.jsonl written through one open file, and bf16 ZeRO-1 across two ranks (gloo) through `gpt1 pretrain`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from mlflow.tracking import MlflowClient

from gpt1.config import load_config
from gpt1.pretrain import cadence as cadence_module
from gpt1.pretrain.cadence import Cadence
from gpt1.pretrain.distributed import deepspeed_config
from gpt1.pretrain.feed import prefetched
from gpt1.pretrain.outputs import MetricsLog, read_metrics
from tiny_pretraining import data, env, pretrain_args, run  # noqa: F401 (data: a fixture)


def pretrain(*overrides: str):
    return load_config("paper", list(overrides)).pretrain


@pytest.mark.parametrize("precision, stage, accumulate_fp32", [
    ("bf16", 1, False), ("bf16", 2, True), ("bf16", 3, True), ("fp32", 0, False)])
def test_generated_config_reduces_gradients_in_fp32(precision, stage, accumulate_fp32):
    ds = deepspeed_config(pretrain(f"pretrain.precision={precision}", f"pretrain.zero_stage={stage}"), 8, "cuda")
    assert ds["communication_data_type"] == "fp32"
    assert ds.get("data_types", {}).get("grad_accum_dtype") == ("fp32" if accumulate_fp32 else None)


ENGINE_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import deepspeed, torch
    from gpt1.config import load_config
    from gpt1.model import optim
    from gpt1.model.transformer import GPT1
    from gpt1.pretrain.distributed import deepspeed_config, init_world

    init_world()
    cfg = load_config("smoke", ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=64",
                                "model.n_ctx=16", "model.vocab_size=64", "pretrain.precision=bf16",
                                f"pretrain.global_batch_size={sys.argv[2]}", "pretrain.micro_batch_size=2",
                                f"pretrain.zero_stage={sys.argv[1]}"])
    model = GPT1(cfg.model)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=optim.param_groups(model, 0.01),
                                      config=deepspeed_config(cfg.pretrain, 1, "cpu"))
    print(json.dumps({"optimizer": type(engine.optimizer).__name__,
                      "communication": str(engine.communication_data_type),
                      "accumulation": str(engine.get_data_types()[1])}))
""")


@pytest.mark.parametrize("stage, global_batch, optimizer, accumulation", [
    (1, 2, "DeepSpeedZeroOptimizer", "torch.bfloat16"), (2, 4, "DeepSpeedZeroOptimizer", "torch.float32")])
def test_deepspeed_engine_takes_the_fp32_reduction_and_keeps_its_zero_optimizer(stage, global_batch, optimizer,
                                                                               accumulation):
    """DeepSpeed reads the keys (a misspelt key would leave bf16), and its ZeRO optimizer stays the one whose
    checkpoints `zero_to_fp32` consolidates (fp32 accumulation at ZeRO-1 would swap in another). ZeRO-1 runs
    without accumulation (micro-batch = global batch), the only bf16 layout it is allowed; ZeRO-2 accumulates
    two micro-batches in fp32."""
    done = subprocess.run([sys.executable, "-c", ENGINE_SCRIPT, str(stage), str(global_batch)], env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    engine = json.loads(done.stdout.strip().splitlines()[-1])
    assert engine == {"optimizer": optimizer, "communication": "torch.float32", "accumulation": accumulation}


def test_cadence_counts_updates_or_minutes_instead(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(cadence_module.time, "monotonic", lambda: clock[0])
    by_updates, by_time = Cadence(updates=5), Cadence(updates=5, minutes=2, last=clock[0])
    assert [s for s in range(1, 16) if by_updates.due_by_updates(s)] == [5, 10, 15]
    assert not by_updates.due_by_time()
    assert not any(by_time.due_by_updates(s) for s in range(1, 16))  # minutes replace the update count
    clock[0] += 119
    assert not by_time.due_by_time()
    clock[0] += 1
    assert by_time.due_by_time()
    by_time.ran()
    assert not by_time.due_by_time()


class CountingReader:
    """A reader whose state is how many batches it has handed out."""

    def __init__(self):
        self.handed_out = 0

    def batches(self):
        while True:
            self.handed_out += 1
            yield torch.full((1, 2, 3), self.handed_out)

    def state_dict(self) -> dict:
        return {"position": self.handed_out}


def test_prefetch_reads_one_batch_ahead_and_yields_the_state_after_each_batch():
    reader = CountingReader()
    feed = prefetched(reader.batches(), reader, torch.device("cpu"))
    for expected in (1, 2, 3):
        blocks, state = next(feed)
        assert int(blocks.flatten()[0]) == expected and state == {"position": expected}
        assert reader.handed_out == expected + 1  # the next one is already read


def test_metrics_log_appends_through_one_open_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 5.0}) + "\n")  # a resumed run appends
    log = MetricsLog(path)
    log.write({"step": 2, "loss": 4.0})
    log.write({"step": 2, "tokens_per_s": 10.0})
    log.flush()
    assert read_metrics(path) == {1: {"step": 1, "loss": 5.0}, 2: {"step": 2, "loss": 4.0, "tokens_per_s": 10.0}}
    log.close()


@pytest.mark.slow
def test_bf16_zero1_on_two_ranks_with_timed_cadence_and_diagnostics_on_rank_0(data, tmp_path):  # noqa: F811
    """Two gloo ranks, bf16, ZeRO-1, checkpoints and evaluations by time (a cadence shorter than a logging window,
    so both fall on every window's end), probe data for SST-2 only: the other probes' "skipped" warnings come from
    rank 0 alone, the one that runs them. The run's environment is on its MLflow params."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "SST-2").symlink_to(data / "sample" / "tasks" / "SST-2")
    out, uri = tmp_path / "run", f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = [*pretrain_args(data, out, "--nproc", "2", "--tracking-uri", uri, steps=6,
                           sets=["pretrain.precision=bf16", "pretrain.zero_stage=1", "pretrain.log_every=2",
                                 "pretrain.save_every_minutes=0.0001", "pretrain.eval_every_minutes=0.0001",
                                 "pretrain.keep_last=5"])]
    argv[argv.index("--task-data") + 1] = str(tasks)
    run(argv, tmp_path / "log.txt")

    assert sorted(p.name for p in (out / "checkpoints").glob("step-*")) == [f"step-{s:08d}" for s in (2, 4, 6)]
    records = read_metrics(out / "metrics.jsonl")
    assert sorted(s for s, r in records.items() if "loss" in r) == [1, 2, 3, 4, 5, 6]
    assert sorted(s for s, r in records.items() if "val_loss" in r) == [2, 4, 6]
    assert all(records[s]["tokens_per_s"] > 0 for s in (2, 4, 6))
    assert "probe/sst2_accuracy" in records[6]
    log = (tmp_path / "log.txt").read_text()
    skipped = [line for line in log.splitlines() if "zero-shot probe" in line and "skipped" in line]
    assert skipped and all(" rank0 " in line for line in skipped)
    client = MlflowClient(uri)
    (finished,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    params = finished.data.params
    assert params["env.torch"] == torch.__version__ and params["deepspeed.communication_data_type"] == "fp32"
    assert params["env.deepspeed"] != "None"
