"""The CUDA guard of the GPU pools in a real pre-training worker process: without CUDA it stops in seconds, with one
line, before DeepSpeed is imported or any input read. The guard in-process: tests/unit/test_gpu_readiness.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch

from tests.unit.test_gpu_readiness import cuda_required  # noqa: F401 (a fixture)


def test_pretraining_worker_without_cuda_stops_in_seconds_with_one_line(cuda_required, tmp_path):
    """Before DeepSpeed is imported or any input read: the inputs here do not even exist."""
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "RANK", "WORLD_SIZE")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gpt1.pretrain", "--config", str(tmp_path / "none.json"),
                           "--shards", str(tmp_path / "none"), "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpt1 pretrain worker (rank 0): error: pre-training needs CUDA")
    assert f"torch {torch.__version__}" in lines[0]
    assert seconds < 60  # loose: a shared CI machine; the import of torch is most of it
