"""What `make venv` installs: torch's CPU build and no CUDA wheel. On a stock Linux machine PyPI's torch is the CUDA
build plus GBs of nvidia-* wheels; the Makefile adds PyTorch's CPU wheel index when it answers and, on x86-64 Linux,
requires the +cpu build. `make venv` itself, run on a venv that only records its installs:
tests/integration/test_make_venv.py."""

from __future__ import annotations

import importlib.metadata
import platform
import re

import torch

from conftest import REPO

CUDA_ONLY = re.compile(r"(nvidia-.*|cuda-.*|triton)")  # what a CUDA build of torch brings along
LOCK = REPO / "requirements" / "cpu.lock"


def test_torch_is_the_cpu_build_the_lock_pins():
    pinned = re.search(r"^torch==(\S+)$", LOCK.read_text(), re.MULTILINE).group(1)
    assert torch.__version__.split("+")[0] == pinned
    assert torch.version.cuda is None and torch.backends.cuda.is_built() is False
    if (platform.system(), platform.machine()) == ("Linux", "x86_64"):
        assert torch.__version__.endswith("+cpu")


def test_no_cuda_wheel_is_in_the_environment():
    names = {dist.metadata["Name"].lower().replace("_", "-") for dist in importlib.metadata.distributions()}
    assert "torch" in names and not sorted(n for n in names if CUDA_ONLY.fullmatch(n))


def test_make_venv_names_the_cpu_index_by_default():
    assert "TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu" in (REPO / "Makefile").read_text()
