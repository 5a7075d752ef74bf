"""Zero-shot probe data that cannot be read, on sample data generated afresh: a hub task with no downloadable copy, an
unreachable hub, a broken folder each skip that probe only, with its reason; a task's own location is used. The
probes themselves: tests/unit/test_probes.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_probe_data_that_cannot_be_read_skips_that_probe_only(tmp_path, caplog, monkeypatch):
    """Pre-training must not stop over a diagnostic: a hub task with no downloadable copy (Story Cloze), an
    unreachable hub, a broken folder: each probe is skipped with its reason; a task's own location is used."""
    from gpt1.pretrain.probes import load_probe_data
    from gpt1.sample_data import write_sample_data

    write_sample_data(tmp_path / "sample")
    broken = tmp_path / "broken"
    (broken / "SST-2").mkdir(parents=True)
    (broken / "SST-2" / "dev.tsv").write_text("not\ta\tsst2\tfile\n")
    own = {"storycloze": str(tmp_path / "sample" / "tasks" / "StoryCloze")}
    with caplog.at_level("WARNING", logger="gpt1.pretrain.probes"):
        data = load_probe_data(broken, 8, own)
    assert "storycloze" in data and "sst2" not in data  # its own location read; the broken one skipped
    assert "zero-shot probe sst2 skipped" in caplog.text
    caplog.clear()
    from gpt1.pretrain import probes

    def unreachable(task, path, split, *args):
        raise ConnectionError(f"cannot reach the hub for {path}")

    monkeypatch.setattr(probes.tasks, "load", unreachable)
    with caplog.at_level("WARNING", logger="gpt1.pretrain.probes"):
        assert load_probe_data("hf", 8) == {}
    assert "no downloadable hub copy" in caplog.text and "ConnectionError" in caplog.text
