"""`gpt1 convert` run as its own process: the hub cache and offline mode come from its environment. The conversions
in-process, and the local hub cache they read: tests/unit/test_convert.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from gpt1.model.convert import from_hf_state_dict
from gpt1.model.transformer import GPT1
from tests.unit.test_convert import COMMITS, hub, trained  # noqa: F401 (hub, trained: fixtures)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_hub_cache_and_offline_mode_come_from_the_environment(hub, trained, tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(hub[0]), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "ours"
    done = subprocess.run([sys.executable, "-m", "gpt1.cli", "convert", "--from", "hf",
                           f"openai-community/openai-gpt@{COMMITS[0]}", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded, expected = GPT1.from_pretrained(out).state_dict(), from_hf_state_dict(hub[1][COMMITS[0]].state_dict())[1]
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())
