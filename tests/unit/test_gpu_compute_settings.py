"""How the model computes on a GPU, checked where a CPU can show it: the LM loss's fp32 accumulation of the
embedding gradient, torch.compile left off where Triton has no C compiler, fine-tunes in bf16 with TF32 matmuls
on CUDA, and RACE's batch split into micro-batches that fit a 40 GB card."""

from __future__ import annotations

import logging

import pytest
import torch

from gpt1 import tasks
from gpt1.config import FinetuneConfig, ModelConfig
from gpt1.finetune.train import examples_per_forward, training_precision
from gpt1.model import transformer
from gpt1.model.losses import add_product_fp32
from gpt1.runtime.cuda import use_tf32_matmuls

TINY = dict(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, n_embd=32, d_ff=64)


def test_embedding_gradient_sums_low_precision_products_in_fp32():
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(2, 64, 48, generator=generator), torch.randn(2, 48, 40, generator=generator))
    reference = a[0] @ b[0] + a[1] @ b[1]
    total = add_product_fp32(None, a[0].bfloat16(), b[0].bfloat16())
    total = add_product_fp32(total, a[1].bfloat16(), b[1].bfloat16())
    assert total.dtype == torch.float32
    torch.testing.assert_close(total, reference, rtol=0.05, atol=0.3)  # bf16 inputs: 8 bits of mantissa each
    exact = add_product_fp32(add_product_fp32(None, a[0], b[0]), a[1], b[1])
    torch.testing.assert_close(exact, reference)


def test_the_cuda_branch_calls_matmuls_that_this_torch_has():
    """What add_product_fp32 calls on CUDA, dispatched on the meta device (shapes and dtypes, no GPU)."""
    a = torch.empty(8, 4, dtype=torch.bfloat16, device="meta")
    b = torch.empty(4, 6, dtype=torch.bfloat16, device="meta")
    assert torch.mm(a, b, out_dtype=torch.float32).dtype == torch.float32
    total = torch.empty(8, 6, device="meta")
    assert torch.addmm(total, a, b, out_dtype=torch.float32).shape == (8, 6)


@pytest.mark.parametrize("setting, compiler, compiled", [
    ("auto", None, False), ("auto", "/usr/bin/gcc", True), (True, "/usr/bin/gcc", True), (False, "/usr/bin/gcc", False)])
def test_compile_auto_stays_off_on_cuda_without_a_c_compiler(setting, compiler, compiled, monkeypatch, caplog):
    monkeypatch.setattr(transformer, "c_compiler", lambda: compiler)
    model = transformer.GPT1(ModelConfig(**TINY, compile=setting))
    with caplog.at_level(logging.WARNING, logger=transformer.__name__):
        assert model.compile_for("cuda") is compiled
    warned = "no C compiler" in caplog.text
    assert warned == (setting == "auto" and compiler is None)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_compile_true_without_the_compiler_it_needs_stops_before_training(device, monkeypatch):
    """Said at start-up (the worker's model set-up, and the stage's check before any worker starts), with the
    way out, instead of inside torch.compile at the first update."""
    monkeypatch.setattr(transformer.shutil, "which", lambda name: None)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    cfg = ModelConfig(**TINY, compile=True)
    problem = transformer.compile_problem(cfg, device)
    assert problem and ("C compiler" if device == "cuda" else "C++ compiler") in problem
    assert "model.compile=false" in problem
    with pytest.raises(ValueError, match="model.compile=true, but no"):
        transformer.GPT1(cfg).compile_for(device)
    assert transformer.compile_problem(ModelConfig(**TINY, compile="auto"), device) is None
    monkeypatch.setenv("CXX" if device == "cpu" else "CC", "/opt/compiler")
    assert transformer.compile_problem(cfg, device) is None


def test_c_compiler_is_the_one_triton_would_take(monkeypatch):
    monkeypatch.setenv("CC", "/opt/cc-of-choice")
    assert transformer.c_compiler() == "/opt/cc-of-choice"
    monkeypatch.delenv("CC")
    monkeypatch.setattr(transformer.shutil, "which", lambda name: None)
    assert transformer.c_compiler() is None


@pytest.mark.parametrize("setting, device, runs", [
    ("auto", "cuda", "bf16"), ("auto", "cpu", "fp32"), ("fp32", "cuda", "fp32"), ("bf16", "cpu", "bf16")])
def test_finetune_precision_auto_is_bf16_on_cuda_only(setting, device, runs):
    assert training_precision(FinetuneConfig(precision=setting), torch.device(device)) == runs


def test_tf32_switch_is_one_inductor_can_read_back():
    before = torch.get_float32_matmul_precision()
    try:
        use_tf32_matmuls()
        assert torch.get_float32_matmul_precision() == "high"  # raises when only the CUDA backend's switch is set
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("task, settings, examples", [
    ("race", {}, 16),                       # 32 x 4 = 128 sequences of up to 512 tokens: two forwards of 64
    ("storycloze", {}, 32), ("stsb", {}, 32), ("sst2", {}, 32),
    ("race", {"micro_batch_size": 4}, 4),   # an explicit micro-batch that already fits wins
    ("race", {"forward_sequences": 2}, 1),  # never fewer than one example
])
def test_a_batch_is_split_so_no_forward_holds_more_than_forward_sequences(task, settings, examples):
    assert examples_per_forward(tasks.get(task), FinetuneConfig(**settings)) == examples
