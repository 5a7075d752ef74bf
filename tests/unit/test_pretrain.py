"""Pre-training pieces that need no worker process: DeepSpeed config derivation, batch layout errors, weight-decay
groups, the LR schedule, checkpoint bookkeeping, RNG capture, text generation, MFU, and the pre-launch checks.

The end-to-end runs (CLI, kill/resume, multi-node, MLflow) are in test_pretrain_runs.py.
"""

from __future__ import annotations

import math
import os
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpt1.pretrain.checkpoint import COMPLETE, CheckpointManager, recut_needed, rng_state, set_rng_state, tag_for
from gpt1.config import ModelConfig, load_config
from gpt1.io import InputError, write_json
from gpt1.pretrain.distributed import batch_layout, deepspeed_config, prepare_env, worker_command
from gpt1.model.generate import generate
from gpt1.model.mfu import gpu_peak_flops, measure_matmul_flops, mfu
from gpt1.model.transformer import GPT1, flops_per_token
from gpt1.model.optim import lr_factor, param_groups
from gpt1.pretrain.inputs import check_curve_steps, resume_point, total_steps
from gpt1.pretrain.outputs import read_metrics

TINY = ModelConfig(vocab_size=50, n_ctx=16, n_layer=2, n_head=2, n_embd=16, d_ff=64)


pytestmark = pytest.mark.usefixtures("one_thread")


def pretrain_cfg(**changes):
    return load_config("smoke", [f"pretrain.{k}={v}" for k, v in changes.items()]).pretrain


# ------------------------------------------------------------------------------------ DeepSpeed config


def test_deepspeed_config_is_derived_from_the_pretrain_config():
    p = pretrain_cfg(global_batch_size=64, micro_batch_size=4, zero_stage=2, precision="bf16", grad_clip=0.5,
                     lr=1e-4, weight_decay=0.02, adam_eps=1e-6, offload_optimizer="true")
    ds = deepspeed_config(p, world_size=8, device="cuda")
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == \
        (64, 4, 2)
    assert ds["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    assert ds["gradient_clipping"] == 0.5
    adamw = ds["optimizer"]
    assert adamw["type"] == "AdamW"
    assert adamw["params"]["lr"] == 1e-4 and adamw["params"]["weight_decay"] == 0.02
    assert adamw["params"]["eps"] == 1e-6 and adamw["params"]["betas"] == [0.9, 0.999]
    assert "torch_adam" not in adamw["params"] and "fused" not in adamw["params"]  # offload: DeepSpeedCPUAdam


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_deepspeed_config_uses_torch_fused_adamw_and_default_micro_batch(device):
    """torch_adam: DeepSpeed builds torch.optim.AdamW(**params), fused=True included: no JIT-built op."""
    ds = deepspeed_config(pretrain_cfg(global_batch_size=16, zero_stage=0, precision="fp32"), world_size=2,
                          device=device)
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (8, 1)
    assert ds["optimizer"]["params"]["torch_adam"] is True and ds["optimizer"]["params"]["fused"] is True
    assert not ds["bf16"]["enabled"] and ds["zero_optimization"] == {"stage": 0}


def test_starting_the_process_group_on_cpu_builds_no_deepspeed_op(monkeypatch):
    """DeepSpeed's torch backend JIT-builds its shared-memory all-reduce op whenever it starts on the CPU
    accelerator; after skip_shm_comm_op (what init_world does) it asks for no build."""
    import deepspeed.ops
    from deepspeed.comm.torch import build_shm_op
    from deepspeed.ops.op_builder.builder import OpBuilder

    from gpt1.pretrain.distributed import skip_shm_comm_op

    def no_build(builder, *args, **kwargs):
        raise AssertionError(f"JIT build of {builder.name}")

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setattr(OpBuilder, "load", no_build)
    compatible = deepspeed.ops.__compatible_ops__
    monkeypatch.setitem(compatible, "deepspeed_shm_comm", True)  # restored after the test
    with pytest.raises(AssertionError, match="JIT build of deepspeed_shm_comm"):
        build_shm_op()  # what DeepSpeed would do
    skip_shm_comm_op()
    assert build_shm_op() is None


@pytest.mark.parametrize("changes, world, message", [
    ({"global_batch_size": 16}, 3, "not divisible by the world size 3"),
    ({"global_batch_size": 16, "micro_batch_size": 3}, 1, "not a multiple of pretrain.micro_batch_size=3"),
    ({"global_batch_size": 16, "micro_batch_size": 4}, 8, "x world size 8 = 32"),
    ({"precision": "bf16", "zero_stage": 0}, 1, "needs pretrain.zero_stage >= 1"),
    ({"precision": "fp16", "zero_stage": 1}, 1, "needs a GPU"),
    ({"offload_optimizer": "true", "zero_stage": 0}, 1, "offload_optimizer=true needs"),
    ({"precision": "bf16", "zero_stage": 1, "global_batch_size": 16, "micro_batch_size": 4}, 2,
     "would sum 2 micro-batch gradients per update in bf16"),
])
def test_inconsistent_settings_fail_with_the_numbers(changes, world, message):
    with pytest.raises(ValueError, match=message):
        deepspeed_config(pretrain_cfg(**changes), world_size=world, device="cpu")


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_accumulation_is_allowed_where_deepspeed_accumulates_in_fp32(stage):
    p = pretrain_cfg(precision="bf16", zero_stage=stage, global_batch_size=16, micro_batch_size=4)
    ds = deepspeed_config(p, world_size=2, device="cpu")
    assert ds["gradient_accumulation_steps"] == 2 and ds["data_types"] == {"grad_accum_dtype": "fp32"}


def test_batch_layout_multiplies_out():
    for world in (1, 2, 4):
        layout = batch_layout(pretrain_cfg(global_batch_size=32, micro_batch_size=2), world)
        assert layout.micro_batch * layout.grad_accum * layout.world_size == 32


def test_worker_command_single_process_sets_the_launcher_environment(monkeypatch):
    monkeypatch.setenv("RANK", "7")  # a parent job's rank must never leak into the workers
    command, env = worker_command(1, ["--config", "c.json"])
    assert command[:3] == [sys.executable, "-m", "gpt1.pretrain"] and command[-2:] == ["--config", "c.json"]
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "0", "1", "127.0.0.1")
    assert int(env["MASTER_PORT"]) > 0
    command, env = worker_command(3, ["--out", "o"])
    assert "torch.distributed.run" in command and "--nproc-per-node=3" in command and "RANK" not in env


# ------------------------------------------------------------------------------------- optimizer recipe


def test_each_venv_gets_its_own_deepspeed_op_cache_unless_one_is_set(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    prepare_env()
    ours = os.environ["TORCH_EXTENSIONS_DIR"]
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setattr(sys, "prefix", "/some/other/venv")
    prepare_env()
    assert os.environ["TORCH_EXTENSIONS_DIR"] != ours
    parents = {Path(p).parent for p in (ours, os.environ["TORCH_EXTENSIONS_DIR"])}
    assert parents == {tmp_path / "gpt1" / "torch_extensions"}
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/shared/cache")
    prepare_env()
    assert os.environ["TORCH_EXTENSIONS_DIR"] == "/shared/cache"  # an explicit setting wins


def test_weight_decay_applies_to_weights_only():
    model = GPT1(TINY)
    decay, no_decay = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert "tokens_embed.weight" in decayed and "blocks.0.attn.c_attn.weight" in decayed
    assert "blocks.0.mlp.c_fc.bias" in kept and "blocks.1.ln_2.weight" in kept and "blocks.1.ln_1.bias" in kept
    assert not decayed & kept and len(decayed | kept) == len(list(model.parameters()))


def test_schedule_warms_up_linearly_then_cosine_to_zero():
    f = lambda s, kind="cosine": lr_factor(s, warmup_steps=10, total_steps=110, schedule=kind)  # noqa: E731
    assert [round(f(s), 6) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert f(10) == 1.0 and f(60) == pytest.approx(0.5) and f(110) == pytest.approx(0.0, abs=1e-12)
    assert f(35) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))
    after = [f(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(after, after[1:]))
    assert f(60, "linear") == pytest.approx(0.5) and f(100, "constant") == 1.0


def test_schedule_through_lambdalr_matches_lr_factor():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=2.5e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup_steps=3, total_steps=8))
    seen = []
    for _ in range(8):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([2.5e-4 * lr_factor(s, warmup_steps=3, total_steps=8) for s in range(8)])


def test_total_steps_from_max_steps_or_epochs():
    assert total_steps(pretrain_cfg(max_steps=7), 1000) == 7
    p = load_config("paper", ["pretrain.epochs=3", "pretrain.global_batch_size=64"]).pretrain
    assert total_steps(p, 1000) == 3 * (1000 // 64)


def test_curve_points_come_before_the_last_update_in_increasing_order():
    p = load_config("paper", ["pretrain.epochs=1", "pretrain.global_batch_size=64", "pretrain.curve_steps=[5,10]"])
    check_curve_steps(p.pretrain, 11)
    with pytest.raises(ValueError, match=r"curve_steps \[10\]: this run trains 10 updates"):
        check_curve_steps(p.pretrain, 10)  # the final model is update 10
    for bad in ("[10,5]", "[5,5]", "[0]"):
        with pytest.raises(ValueError, match="positive and increasing"):
            pretrain_cfg(curve_steps=bad)
    with pytest.raises(ValueError, match=r"curve_steps \[1000\]: not before max_steps 1000"):
        pretrain_cfg(curve_steps="[500,1000]")  # smoke's max_steps


# ------------------------------------------------------------------------------------------ checkpoints


def _fake_checkpoint(root, step, complete=True, model=None):
    path = root / tag_for(step)
    path.mkdir(parents=True)
    write_json(path / "meta.json", {"step": step, "world_size": 1, "tokens_seen": 0, "reader": {}, "files": {},
                                    "model": model})
    if complete:
        (path / COMPLETE).write_text(f"{step}\n")
    return path


def test_another_world_size_recuts_zero_partitions_and_is_refused_at_stage_3(tmp_path):
    path = _fake_checkpoint(tmp_path, 4)  # written by 1 process
    assert not recut_needed(path, 1, 1)  # the same number: loaded as it is
    assert not recut_needed(path, 2, 0)  # stage 0: the optimizer state is whole in one file
    assert recut_needed(path, 2, 1) and recut_needed(path, 8, 2)
    with pytest.raises(InputError) as refused:
        recut_needed(path, 2, 3)
    assert refused.value.field == "world_size" and "written by 1 processes at ZeRO stage 3" in str(refused.value)


def test_incomplete_checkpoints_are_ignored_and_pruned(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (100, 200, 300):
        _fake_checkpoint(root, step)
    _fake_checkpoint(root, 400, complete=False)  # killed while writing
    (root / "zero_to_fp32.py").write_text("")  # DeepSpeed's helper script is not a checkpoint
    manager = CheckpointManager(root, keep_last=2)
    assert manager.latest_complete().name == tag_for(300)
    manager.prune()
    assert sorted(p.name for p in root.iterdir()) == [tag_for(200), tag_for(300), "zero_to_fp32.py"]


def test_resume_point_rules(tmp_path):
    model = TINY.model_dump()
    out = tmp_path / "out"
    assert resume_point(out, None, model) is None and resume_point(out, "auto", model) is None
    _fake_checkpoint(out / "checkpoints", 5, model=model)
    incomplete = _fake_checkpoint(out / "checkpoints", 9, complete=False, model=model)
    with pytest.raises(ValueError, match="already has checkpoints"):
        resume_point(out, None, model)
    assert resume_point(out, "auto", model).name == tag_for(5)
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        resume_point(out, str(incomplete), model)
    with pytest.raises(ValueError, match=r"model config changed.*n_layer"):
        resume_point(out, "auto", {**model, "n_layer": 3})


def test_rng_state_round_trips_through_json(tmp_path):
    import json

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.random(), np.random.rand(), torch.rand(1)
    state = json.loads(json.dumps(rng_state()))
    expected = (random.random(), np.random.rand(), torch.rand(3).tolist())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(3).tolist()) == expected


def test_read_metrics_keeps_the_last_value_per_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.5}\n{"step": 2, "val_loss": 2.7}\n'
                    '{"step": 2, "loss": 2.4}\n')  # a resumed run re-logged step 2
    assert read_metrics(path) == {1: {"step": 1, "loss": 3.0}, 2: {"step": 2, "loss": 2.4, "val_loss": 2.7}}


# ------------------------------------------------------------------------------------------- generation


def test_greedy_generation_matches_step_by_step_argmax():
    torch.manual_seed(0)
    model = GPT1(TINY).eval()
    prompt = [1, 2, 3]
    new = generate(model, prompt, 20, temperature=0)  # runs past n_ctx=16: sliding window
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(20):
            ids.append(int(model(torch.tensor([ids[-TINY.n_ctx:]])).logits[0, -1].argmax()))
    assert new == ids[3:]


def test_sampling_is_reproducible_with_a_generator_and_respects_top_k_and_stop():
    torch.manual_seed(0)
    model = GPT1(TINY).eval()
    draw = lambda seed, **kw: generate(model, [5], 12, temperature=1.0,  # noqa: E731
                                       generator=torch.Generator().manual_seed(seed), **kw)
    assert draw(1) == draw(1) and draw(1) != draw(2)
    state = torch.get_rng_state()
    draw(3, top_k=1)
    assert torch.equal(state, torch.get_rng_state())  # the global (training) RNG is untouched
    assert draw(4, top_k=1) == generate(model, [5], 12, temperature=0)
    greedy = generate(model, [5], 12, temperature=0)
    assert generate(model, [5], 12, temperature=0, stop_id=greedy[2]) == greedy[:greedy.index(greedy[2])]


# ------------------------------------------------------------------------------------------------ MFU


def test_mfu_counts_every_token_of_the_update():
    cfg = load_config("paper").model
    per_token = flops_per_token(cfg)
    tokens_per_s = 64 * 512 / 0.5  # one global batch (any split into micro-batches/ranks) per 0.5 s
    peak = gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak == 989e12 and gpu_peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
    assert gpu_peak_flops("Tesla T4", "bf16") is None and mfu(1.0, 1.0, None, 1) is None
    assert mfu(tokens_per_s, per_token, peak, world_size=8) == pytest.approx(
        tokens_per_s * per_token / (8 * 989e12))


def test_cpu_matmul_peak_is_measured():
    flops = measure_matmul_flops("fp32", size=128, seconds=0.05)
    assert 1e7 < flops < 1e14


# ---------------------------------------------------------------------------------- pre-launch checks


def test_cli_rejects_bad_input_before_launch(tmp_path, capsys):
    from gpt1.cli import main

    def pretrain(*args: str) -> str:
        assert main(["pretrain", "--preset", "smoke", "--out", str(tmp_path / "out"), *args]) == 2
        return capsys.readouterr().err

    assert "does not exist" in pretrain("--shards", str(tmp_path / "none"))
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "manifest.json").write_text('{"format": "gpt1-shards/1", "n_ctx": 64, "dtype": "uint16", '
                                          '"vocab_size": 300, "splits": {}}')
    assert re.search(r"n_ctx=64 .* model.n_ctx=128", pretrain("--shards", str(shards)))
    layout = ["--shards", str(shards), "--set", "model.n_ctx=64", "--set", "pretrain.global_batch_size=6",
              "--nproc", "2", "--nnodes", "2"]
    assert "not divisible by the world size 4" in pretrain(*layout, "--dry-run")
    assert "started on every node" in pretrain(*layout)
    assert not (tmp_path / "out").exists()  # nothing written when validation fails


def test_generate_cli_continues_a_prompt_with_the_checkpoint_tokenizer(tmp_path, capsys):
    from gpt1.tokenizer import bpe
    from gpt1.cli import main

    tok = bpe.train(["the cat sat on the mat .", "the dog ran to the cat ."] * 20, merges=30,
                          show_progress=False)
    torch.manual_seed(0)
    GPT1(TINY.model_copy(update={"vocab_size": tok.vocab_size})).save_pretrained(tmp_path / "final")
    args = ["generate", "--checkpoint", str(tmp_path / "final"), "--prompt", "the cat", "--max-new-tokens", "5",
            "--temperature", "0"]
    assert main(args) == 2 and "tokenizer.json" in capsys.readouterr().err  # no tokenizer beside the weights
    tok.save(tmp_path / "final")
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0 and capsys.readouterr().out == first  # greedy: deterministic
    assert first.startswith("the cat") and len(first.split()) > 2


def test_multinode_launch_files_use_the_worker_interface():
    import shlex

    import yaml

    from gpt1.pretrain.worker import worker_parser
    from tests.conftest import REPO

    service, job = yaml.safe_load_all((REPO / "infra/multinode/k8s/pretrain-job.yaml").read_text())
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["NNODES"]) == spec["completions"]
    assert int(env["GPUS_PER_NODE"]) == container["resources"]["limits"]["nvidia.com/gpu"]
    launcher, worker = container["args"][0].split("-m gpt1.pretrain")
    assert f"--master-addr={service['metadata']['name']}-0.{service['metadata']['name']}" in launcher
    parsed = worker_parser().parse_args(shlex.split(worker))  # every option exists
    assert parsed.resume == "auto" and parsed.config.startswith("/etc/gpt1")

    sbatch = (REPO / "infra/multinode/slurm/pretrain.sbatch").read_text()
    assert "--dry-run" in sbatch and "-m gpt1.pretrain --config \"$OUT/config.json\"" in sbatch


def test_a_model_this_machine_cannot_hold_is_refused_before_the_shards_are_read(tmp_path):
    """Judged by its fp32 weights alone, counted on the meta device: nothing is allocated and no shard is read
    (the shards named here do not exist)."""
    from gpt1.pretrain.stage import Job
    from gpt1.stages.base import Ref

    huge = load_config("smoke", ["model.n_embd=65536", "model.n_head=1", "model.d_ff=1048576", "model.n_layer=8"])
    job = Job(shards=Ref(tmp_path / "no-shards", "k"), tokenizer=None, cfg=huge)
    with pytest.raises(ValueError, match=r"^model: [\d,]+ parameters need [\d,.]+ GiB for their fp32 weights alone, "
                                         r"more than the [\d,.]+ GiB of this machine's memory"):
        job.check(tmp_path / "out")
    # the smoke model passes that check and goes on to the shards
    with pytest.raises(FileNotFoundError):
        Job(shards=Ref(tmp_path / "no-shards", "k"), tokenizer=None, cfg=load_config("smoke")).check(tmp_path / "o")


def test_the_process_group_times_out_as_configured(monkeypatch, tmp_path):
    """A hung collective fails after pretrain.collective_timeout_minutes, not DeepSpeed's half hour; the NCCL
    flight recorder's settings are NCCL's alone (a CPU group sets none)."""
    from datetime import timedelta

    import deepspeed

    from gpt1.pretrain import distributed

    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29500", "TORCH_EXTENSIONS_DIR": str(tmp_path),
                        "MLFLOW_DISABLE_TELEMETRY": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCH_FR_DUMP_TEMP_FILE", raising=False)
    seen = {}
    monkeypatch.setattr(deepspeed, "init_distributed", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(distributed, "device_type", lambda: "cpu")
    monkeypatch.setattr(distributed, "skip_shm_comm_op", lambda: None)
    distributed.init_world(load_config("smoke").pretrain.collective_timeout_minutes, tmp_path / "trace" / "rank_")
    assert seen["dist_backend"] == "gloo" and seen["timeout"] == timedelta(minutes=15)
    assert "TORCH_FR_DUMP_TEMP_FILE" not in os.environ and not (tmp_path / "trace").exists()
