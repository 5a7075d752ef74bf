"""One owner per stage: the same key from the CLI and the plan, one place deciding re-runs, one output policy.

The policy (gpt1.stages.outputs) is exercised on a tiny stand-in stage and on real ones: finished outputs are
reused, a folder that is not the stage's own is refused unless forced, a second writer waits or is refused, a
killed build leaves nothing half-written in place, and the lock outlives a launcher whose children still write.
The checks with other processes (a second writer, a killed build, a dead launcher):
tests/integration/test_stage_locks.py; real stages run by the CLI and by the pipeline:
tests/integration/test_stage_runs.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from gpt1.io import InputError, read_json
from gpt1.stages.base import Ref, StageJob, input_key
from gpt1.stages.outputs import DONE, OutputError


@dataclass(frozen=True)
class Copy(StageJob):
    """A stand-in stage: copies a text file, slowly if asked."""

    stage: ClassVar[str] = "copy"
    source: Ref
    upper: bool = False
    seconds: float = 0.0

    def identity(self) -> dict:
        return {"source": self.source.key, "upper": self.upper}

    def build(self, out: Path) -> dict:
        text = self.source.path.read_text()
        time.sleep(self.seconds)
        (out / "copy.txt").write_text(text.upper() if self.upper else text)
        return {"chars": len(text)}


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "source.txt"
    path.write_text("some text")
    return path


def test_a_finished_output_is_reused_and_a_changed_input_rebuilds_it(tmp_path, source):
    out = tmp_path / "out"
    first = Copy(Ref.to(source)).run(out, wait=False)
    assert not first.cached and (out / "copy.txt").read_text() == "some text"
    assert read_json(out / DONE)["key"] == first.key and read_json(out / DONE)["chars"] == 9
    again = Copy(Ref.to(source)).run(out, wait=False)
    assert again.cached and again.key == first.key
    source.write_text("other text")  # an input changed: this stage's output of the old input is stale
    with pytest.raises(OutputError, match="other inputs or settings"):
        Copy(Ref.to(source)).run(out, wait=False)
    assert Copy(Ref.to(source)).run(out, wait=False, force=True).key != first.key
    assert (out / "copy.txt").read_text() == "other text"


def test_folders_that_are_not_the_stages_own_are_refused_unless_forced(tmp_path, source):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_text("precious")
    with pytest.raises(OutputError, match="holds files that are not a `copy` output"):
        Copy(Ref.to(source)).run(model, wait=False)
    assert (model / "weights.bin").read_text() == "precious"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OutputError, match="holds a file"):
        Copy(Ref.to(source)).run(tmp_path / "a-file", wait=False)
    Copy(Ref.to(source)).run(model, wait=False, force=True)
    assert sorted(p.name for p in model.iterdir()) == [DONE, "copy.txt"]  # replaced whole, not mixed


def test_an_unwritable_place_fails_before_any_work(tmp_path, source):
    if os.geteuid() == 0:
        locked = Path("/proc/gpt1-cannot-write-here")  # root may write anywhere else
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
    started = time.monotonic()
    with pytest.raises(OutputError, match="cannot write output"):
        Copy(Ref.to(source), seconds=30).run(locked / "out", wait=False)
    assert time.monotonic() - started < 10


def test_an_input_is_keyed_by_its_stages_marker_or_its_bytes(tmp_path, source):
    out = tmp_path / "out"
    result = Copy(Ref.to(source)).run(out, wait=False)
    assert input_key(out) == result.key
    (out / "inner").mkdir()
    assert input_key(out / "inner") == Ref(out, result.key).inside("inner").key  # as the plan keys it ahead
    other = tmp_path / "plain"
    other.mkdir()
    (other / "f").write_text("a")
    before = input_key(other)
    (other / "f").write_text("b")
    assert input_key(other) != before
    with pytest.raises(FileNotFoundError, match="does not exist"):
        input_key(tmp_path / "missing")


def test_an_input_edited_after_its_stage_wrote_it_is_refused_not_reused(tmp_path, source):
    """An input's key is its stage's recorded key, so an edit in place would keep it: the files are checked
    against the stage's record, both where the CLI keys the input and where a planned job runs."""
    upstream, downstream = tmp_path / "up", tmp_path / "down"
    first = Copy(Ref.to(source)).run(upstream, wait=False)
    copied = upstream / "copy.txt"
    assert Copy(Ref.to(copied), upper=True).run(downstream, wait=False).key
    planned = Ref(copied, input_key(copied))  # as a plan holds it: keyed before the edit
    copied.write_text("SOME text")  # the same size: only its bytes tell
    for start in (lambda: Copy(Ref.to(copied), upper=True), lambda: Copy(planned, upper=True)):
        with pytest.raises(
            InputError, match=r"copy.txt: sha256 .* edited after `gpt1 copy` wrote it; re-run"
        ):
            start().run(downstream, wait=False)
    assert (downstream / "copy.txt").read_text() == "SOME TEXT"  # the earlier result is untouched
    (upstream / "planted.txt").write_text("x")
    with pytest.raises(InputError, match="planted.txt: not written by the stage"):
        input_key(upstream)
    Copy(Ref.to(source)).run(upstream, wait=False, force=True)  # re-run with --force: a new record
    assert input_key(upstream) == first.key
    assert Copy(Ref.to(copied), upper=True).run(downstream, wait=False).cached
