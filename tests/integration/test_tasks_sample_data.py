"""Every task loads from sample data generated afresh: each split of each task labelled and without bad rows, MNLI's
two dev groups and RACE's two levels present. The loaders on the shipped samples and small files:
tests/unit/test_tasks.py."""

from __future__ import annotations

import pytest

from gpt1 import tasks
from gpt1.tasks import get, load


def test_every_task_loads_from_generated_sample_data(tmp_path):
    sample = pytest.importorskip("gpt1.sample_data")
    sample.write_sample_data(tmp_path)
    for name in tasks.TASKS:
        spec = get(name)
        folder = tmp_path / "tasks" / spec.folder
        for split in ("train", *spec.eval_splits):
            data = load(name, folder, split)
            assert len(data) > 0 and data.labelled, (name, split)
            assert not data.report.bad, (name, split, data.report.summary())
        assert len(load(name, folder, "test")) > 0
    assert {ex.group for ex in load("mnli", tmp_path / "tasks" / "MNLI", "dev")} == {"matched", "mismatched"}
    assert {ex.level for ex in load("race", tmp_path / "tasks" / "RACE", "test")} == {"middle", "high"}
