"""Shared fixtures. Real data from ../shared/data is used when present and skipped cleanly otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# Tests that point MLflow at a dead server must not wait out the production flush timeout (120 s) at every run end.
os.environ.setdefault("GPT1_MLFLOW_FLUSH_TIMEOUT", "3")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test when that data is not on this machine."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


@pytest.fixture
def shared_books() -> Path:
    return shared_path("books")


@pytest.fixture
def shared_tasks() -> Path:
    return shared_path("tasks")


@pytest.fixture
def openai_vocab() -> Path:
    return shared_path("openai-gpt1")


@pytest.fixture
def one_thread():
    """Tiny models on a shared 2-core machine: thread hand-offs cost more than the maths."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
