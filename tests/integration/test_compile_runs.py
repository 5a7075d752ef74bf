"""A compiled DeepSpeed pre-training run (`model.compile=true`) killed after a checkpoint and resumed ends with the
uninterrupted run's weights."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

from gpt1.model.transformer import GPT1, WEIGHTS_NAME
from tiny_pretraining import data, env, losses, pretrain_args, run  # noqa: F401 (data: a fixture)


def test_compiled_pretraining_resumes_bit_identical(data, tmp_path):  # noqa: F811 (the imported fixture)
    """`gpt1 pretrain` with model.compile=true through the DeepSpeed engine, dropout on: killed after a checkpoint
    and resumed, it ends with the uninterrupted run's weights; checkpoints carry no `_orig_mod.` names."""
    from gpt1.pretrain.checkpoint import COMPLETE, tag_for

    def args(out):
        return pretrain_args(data, out, "--tracking-uri", f"sqlite:///{out}.db", sets=["model.compile=true"])

    run(args(tmp_path / "reference"), tmp_path / "reference.txt")
    assert "transformer blocks compiled" in (tmp_path / "reference.txt").read_text()

    out = tmp_path / "resumed"
    with open(tmp_path / "killed.txt", "w") as fh:  # own session: SIGKILL reaches the CLI and its worker
        victim = subprocess.Popen(args(out), env=env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 900
    while not (out / "checkpoints" / tag_for(3) / COMPLETE).exists():
        assert victim.poll() is None and time.time() < deadline, (tmp_path / "killed.txt").read_text()[-3000:]
        time.sleep(0.1)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    run(args(out) + ["--resume", "auto"], tmp_path / "resumed.txt")

    a = load_file(tmp_path / "reference" / "final" / WEIGHTS_NAME)
    b = load_file(out / "final" / WEIGHTS_NAME)
    assert not any("_orig_mod" in k for k in a) and a.keys() == b.keys()
    GPT1.from_pretrained(out / "final")  # every name is the model's own (it refuses unexpected or missing keys)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    ref, got = losses(tmp_path / "reference"), losses(out)
    assert sorted(got) == sorted(ref) and ref[8] < ref[1]
    assert [got[s] for s in sorted(ref) if s > 3] == pytest.approx([ref[s] for s in sorted(ref) if s > 3], abs=1e-6)
