"""One owner per stage: the same key from the CLI and the plan, one place deciding re-runs, one output policy.

The policy (gpt1.stages.outputs) is exercised on a tiny stand-in stage and on real ones: finished outputs are
reused, a folder that is not the stage's own is refused unless forced, a second writer waits or is refused, a
killed build leaves nothing half-written in place, and the lock outlives a launcher whose children still write.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from gpt1.cli import main as cli
from gpt1.config import load_config
from gpt1.io import read_json
from gpt1 import recipe
from gpt1.pipeline.run import run_step
from gpt1.stages import outputs
from gpt1.stages.base import Ref, StageJob, input_key
from gpt1.stages.outputs import DONE, OutputBusy, OutputError


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


def test_a_second_writer_is_refused_or_waits_and_then_reuses(tmp_path, source):
    out = tmp_path / "out"
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "from pathlib import Path\nfrom gpt1.stages.base import Ref\nfrom tests.unit.test_stages import Copy\n"
            f"Copy(Ref.to({str(source)!r}), seconds=4).run(Path({str(out)!r}), wait=False)\n")
    first = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(OutputBusy, match=f"pid {first.pid}"):
            Copy(Ref.to(source)).run(out, wait=False)
        waited = Copy(Ref.to(source)).run(out, wait=True)  # the pipeline: waits, then finds it finished
        assert waited.cached and first.wait(60) == 0
    finally:
        first.kill()


def test_a_killed_build_leaves_nothing_in_place_and_its_leftovers_are_removed(tmp_path, source):
    out = tmp_path / "out"
    Copy(Ref.to(source)).run(out, wait=False)
    before = (out / "copy.txt").read_text()
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "from pathlib import Path\nfrom gpt1.stages.base import Ref\nfrom tests.unit.test_stages import Copy\n"
            f"Copy(Ref.to({str(source)!r}), upper=True, seconds=60).run(Path({str(out)!r}), wait=False, force=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".out.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (out / "copy.txt").read_text() == before and list(tmp_path.glob(".out.tmp-*"))
    Copy(Ref.to(source), upper=True).run(out, wait=False, force=True)
    assert (out / "copy.txt").read_text() == before.upper() and not list(tmp_path.glob(".out.tmp-*"))


def test_a_child_started_with_the_lock_keeps_it_after_its_launcher_dies(tmp_path):
    """What keeps a pre-training worker's output safe when `gpt1 pretrain` is killed: the lock lives on in it."""
    out = tmp_path / "out"
    launcher = (f"import sys, subprocess, time; sys.path[:0] = {sys.path!r}\n"
                "from pathlib import Path\nfrom gpt1.stages import outputs\n"
                f"lock = outputs.lock(Path({str(out)!r}), wait=False)\n"
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
                "env={**__import__('os').environ, **lock.inherit_env()}, pass_fds=(lock.fd,))\n"
                "print(child.pid, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with pytest.raises(OutputBusy):
            outputs.lock(out, wait=False)
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:  # free once the last holder is gone (the child is reaped by init, not by us)
            try:
                outputs.lock(out, wait=False).release()
                break
            except OutputBusy:
                assert time.monotonic() < deadline, "the lock outlived every process holding it"
                time.sleep(0.1)
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


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


# -- real stages -------------------------------------------------------------------------------------------------
def save_local_hub_dataset(path: Path, texts: list[str]) -> None:
    import datasets

    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(path))


def test_editing_a_local_dataset_folder_reruns_ingestion_through_the_cli_and_the_pipeline(tmp_path):
    """The bug this design removes: a local `hf:` folder was fingerprinted by content in one layer and by name in
    another, so an edited folder kept its stale corpus. Now both paths take the stage's own key."""
    books = [f"Chapter {i}. It was a bright cold day in April, and the clocks were striking {i}." for i in range(40)]
    data = tmp_path / "hub-copy"
    save_local_hub_dataset(data, books)
    source = f"hf:{data}"
    out = tmp_path / "corpus"
    argv = ["ingest", "--source", source, "--out", str(out), "--no-progress", "--val-fraction", "0.1"]
    assert cli(argv) == 0
    first = read_json(out / DONE)
    plan = recipe.plan(load_config("smoke", [f"ingest.source={source}", "ingest.val_fraction=0.1"]), tmp_path / "work")
    assert plan.ref("ingest").key == first["key"]  # one fingerprint everywhere
    assert not run_step(plan, "ingest").cached and run_step(plan, "ingest").cached

    save_local_hub_dataset(data, [*books, "A new chapter, added after the first ingestion."])
    edited = recipe.plan(load_config("smoke", [f"ingest.source={source}", "ingest.val_fraction=0.1"]), tmp_path / "work")
    assert edited.ref("ingest").key != first["key"]
    result = run_step(edited, "ingest")  # what the flow's ingest task runs
    assert not result.cached and sum(result.marker["stats"]["documents"].values()) == 41
    assert cli([*argv, "--force"]) == 0  # the CLI's folder holds the old corpus: replaced on request
    assert read_json(out / DONE)["key"] == result.key
    assert sum(read_json(out / "stats.json")["documents"].values()) == 41


def test_the_tokenizer_stage_writes_its_stats_whoever_runs_it(tmp_path):
    """Before, only the CLI wrote tokenizer_stats.json, so a flow run never logged them."""
    plan = recipe.plan(load_config("smoke", ["train_tokenizer.merges=100"]), tmp_path / "work")
    for stage in ("sample-data", "ingest"):
        run_step(plan, stage)
    result = run_step(plan, "train-tokenizer")
    stats = json.loads((result.path / "tokenizer_stats.json").read_text())
    assert stats["merges_requested"] == 100 and 0 < stats["merges"] <= 100
    assert result.marker["stats"]["vocab_size"] == stats["vocab_size"]
    by_hand = tmp_path / "by-hand"
    assert cli(["train-tokenizer", "--corpus", str(plan.dir("ingest")), "--out", str(by_hand), "--merges", "100",
                "--expect-key", plan.ref("train-tokenizer").key]) == 0
    assert (by_hand / "tokenizer.json").read_bytes() == (result.path / "tokenizer.json").read_bytes()
