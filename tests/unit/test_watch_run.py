"""scripts/watch_run.py, the terminal follower of `make demo`: what it prints of task run states and log lines."""

from __future__ import annotations

import importlib.util
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from uuid import uuid4

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("watch_run", REPO / "scripts" / "watch_run.py")
watch_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(watch_run)

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


def task_run(run_id: str, name: str, state: str, start: int | None, end: int | None = None):
    at = lambda s: None if s is None else T0 + timedelta(seconds=s)  # noqa: E731
    return SimpleNamespace(id=run_id, name=name, start_time=at(start), end_time=at(end),
                           state=SimpleNamespace(type=SimpleNamespace(value=state), message=None))


def log(run_id: str, second: int, message: str = "[full/sst2] loading"):
    return SimpleNamespace(task_run_id=run_id, timestamp=T0 + timedelta(seconds=second), message=message, level=20)


def lines(capsys) -> list[str]:
    return [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines()]


def test_a_task_run_is_said_once_per_state_and_timed_by_its_own_start_and_end(capsys):
    """The flow submits a fine-tune only once it holds a slot, so its task run's times are its work's."""
    follower = watch_run.Follower(start=0.0)
    follower.task_run(task_run("a", "finetune-full-sst2", "RUNNING", 100))
    follower.task_run(task_run("a", "finetune-full-sst2", "RUNNING", 100))  # polled again: said once
    follower.log(log("a", 101, "[full/sst2] sst2: acc = 91.50 on dev (majority baseline 50.00); outputs in out"))
    follower.task_run(task_run("a", "finetune-full-sst2", "COMPLETED", 100, 130))
    assert lines(capsys) == ["> finetune-full-sst2", "  full/sst2: acc 91.5 on dev (majority class 50.0)",
                             "  finetune-full-sst2 done (30 s)"]


def test_a_fine_tune_seen_only_when_finished_is_timed_from_its_state(capsys):
    follower = watch_run.Follower(start=0.0)
    follower.task_run(task_run("a", "finetune-full-rte", "COMPLETED", 0, 40))
    follower.log(log("a", 10))  # its logs arrive after it finished: no late start line
    assert lines(capsys) == ["  finetune-full-rte done (40 s)"]


def test_a_step_an_earlier_run_served_is_said_reused_not_timed(capsys):
    """The flow logs `<step>: reused, ...` (flows.prefect_api.REUSED) for a step whose output was already there."""
    follower = watch_run.Follower(start=0.0)
    follower.task_run(task_run("a", "pretrain", "RUNNING", 0))
    follower.log(log("a", 1, f"pretrain: {watch_run.REUSED} (/work/pretrain/abc)"))
    follower.log(log("a", 1, f"finetune-full-rte: {watch_run.REUSED} (another step's line)"))
    follower.task_run(task_run("a", "pretrain", "COMPLETED", 0, 2))
    assert lines(capsys) == ["> pretrain", f"  pretrain {watch_run.REUSED}", "  pretrain done (reused)"]


def test_the_results_table_is_the_flow_runs_results_markdown():
    artifacts = [SimpleNamespace(key="mlflow-parent-run", data="[run](http://x)"),
                 SimpleNamespace(key=f"{watch_run.RESULTS_ARTIFACT}smoke", data="| ours: full |")]
    client = SimpleNamespace(read_artifacts=lambda artifact_filter: artifacts)
    run_id = uuid4()
    assert watch_run.results_markdown(client, run_id) == "| ours: full |"
    assert watch_run.results_markdown(SimpleNamespace(read_artifacts=lambda artifact_filter: artifacts[:1]), run_id) is None
