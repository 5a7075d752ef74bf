"""A compiled DeepSpeed pre-training run (`model.compile=true`) killed after a checkpoint and resumed ends with the
uninterrupted run's weights."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from gpt1.model.transformer import GPT1, WEIGHTS_NAME
from tiny_pretraining import data, kill_after_checkpoint, losses, pretrain_args, run  # noqa: F401 (data: a fixture)


def test_compiled_pretraining_resumes_bit_identical(data, tmp_path):  # noqa: F811 (the imported fixture)
    """`gpt1 pretrain` with model.compile=true through the DeepSpeed engine, dropout on: killed after a checkpoint
    and resumed, it ends with the uninterrupted run's weights; checkpoints carry no `_orig_mod.` names."""
    def args(out):
        return pretrain_args(data, out, "--tracking-uri", f"sqlite:///{out}.db", sets=["model.compile=true"])

    run(args(tmp_path / "reference"), tmp_path / "reference.txt")
    assert "transformer blocks compiled" in (tmp_path / "reference.txt").read_text()

    out = tmp_path / "resumed"
    kill_after_checkpoint(args(out), out, 3, tmp_path / "killed.txt")
    run(args(out) + ["--resume", "auto"], tmp_path / "resumed.txt")

    a = load_file(tmp_path / "reference" / "final" / WEIGHTS_NAME)
    b = load_file(out / "final" / WEIGHTS_NAME)
    assert not any("_orig_mod" in k for k in a) and a.keys() == b.keys()
    GPT1.from_pretrained(out / "final")  # every name is the model's own (it refuses unexpected or missing keys)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    ref, got = losses(tmp_path / "reference"), losses(out)
    assert sorted(got) == sorted(ref) and ref[8] < ref[1]
    assert [got[s] for s in sorted(ref) if s > 3] == pytest.approx([ref[s] for s in sorted(ref) if s > 3], abs=1e-6)
