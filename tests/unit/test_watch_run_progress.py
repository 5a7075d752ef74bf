"""scripts/watch_run.py, the one way to follow a run in the terminal: progress between a step's start and end,
nothing silent for long, and a run that cannot start or is waiting says why and what to do (fakes of Prefect's
client objects: the wording and the decisions, not the API)."""

from __future__ import annotations

import importlib.util
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("watch_run_progress", REPO / "scripts" / "watch_run.py")
watch_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(watch_run)


class Clock:
    """time.monotonic for the follower, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(watch_run.time, "monotonic", fake)
    return fake


def task_run(run_id: str, name: str, state: str, started: datetime | None = None):
    return SimpleNamespace(id=run_id, name=name, start_time=started, end_time=None,
                           state=SimpleNamespace(type=SimpleNamespace(value=state), message=None))


def log(run_id: str, message: str, level: int = 20):
    return SimpleNamespace(task_run_id=run_id, message=message, level=level)


def said(capsys) -> list[str]:
    return [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines()]


def step_line(done: int, eta: str) -> str:
    return (f"2026-11-27 01:22:49,115 INFO rank0 gpt1.pretrain: step {done}/1000 loss 4.8104 lr 0.000991 "
            f"grad_norm 0.890 tokens/s 2111 mfu 26.1% ETA {eta}")


def test_pre_training_progress_is_said_every_few_seconds_with_the_workers_own_eta(clock, capsys):
    follower = watch_run.Follower(start=clock.now)
    follower.task_run(task_run("p", "pretrain", "RUNNING"))
    follower.log(log("p", step_line(10, "3m36s")))
    clock.now += 2
    follower.log(log("p", step_line(20, "3m30s")))  # two seconds later: kept, not said
    clock.now += watch_run.SAY_EVERY
    follower.log(log("p", step_line(60, "2m50s")))
    assert said(capsys) == ["> pretrain", "  pretrain step 10/1000, loss 4.810, ETA 3m36s",
                            "  pretrain step 60/1000, loss 4.810, ETA 2m50s"]


def test_a_fine_tune_says_its_epochs_with_their_headline_scores(clock, capsys):
    follower = watch_run.Follower(start=clock.now)
    follower.task_run(task_run("r", "finetune-full-race", "RUNNING"))
    follower.log(log("r", "[finetune-full-race] 2026-11-27 01:32:13,375 INFO gpt1.finetune.train: race epoch 1/4: "
                          "train loss 2.5249, test/accuracy 61.90, test/accuracy_high 60.00, test/primary 61.90, "
                          "test/loss 1.10 (41.2 examples/s)"))
    assert said(capsys) == ["> finetune-full-race", "  finetune-full-race epoch 1/4: test accuracy 61.90"]


def test_after_a_quiet_stretch_it_says_what_runs_for_how_long_and_how_far(clock, capsys):
    follower = watch_run.Follower(start=clock.now)
    began = datetime.now(timezone.utc) - timedelta(seconds=40)
    follower.task_run(task_run("p", "pretrain", "RUNNING", began))
    follower.task_run(task_run("f", "finetune-no_pretrain-race", "RUNNING", began))
    follower.log(log("f", "[finetune-no_pretrain-race] ... INFO gpt1.finetune.train: race: update 60/108 (epoch 3/4) "
                          "loss 1.3, 12.0 examples/s, ETA 21s"))
    capsys.readouterr()
    clock.now += watch_run.QUIET - 1
    follower.quiet()
    assert said(capsys) == []  # not quiet for long enough yet
    clock.now += 2
    follower.quiet()
    [line] = said(capsys)
    assert line.startswith("  ... running: pretrain (40 s), finetune-no_pretrain-race (40 s, update 60/108, "
                           "epoch 3/4, ETA 21s)"), line


def test_a_run_waiting_to_start_says_why(clock):
    scheduled = SimpleNamespace(state=SimpleNamespace(name="Scheduled", type=SimpleNamespace(value="SCHEDULED")))
    late = SimpleNamespace(state=SimpleNamespace(name="Late", type=SimpleNamespace(value="SCHEDULED")))
    pending = SimpleNamespace(state=SimpleNamespace(name="Pending", type=SimpleNamespace(value="PENDING")))
    no_worker = "no worker is polling the work pool gpt1-cpu, so nothing will run this flow run: start a worker"
    assert "is Late after 40 s: no worker of gpt1-cpu has picked it up" in watch_run.waiting_reason(
        late, "gpt1-cpu", None, 40)
    assert no_worker in watch_run.waiting_reason(scheduled, "gpt1-cpu", no_worker, 5)
    assert "starting the flow's process" in watch_run.waiting_reason(pending, "gpt1-local", None, 8)


class FakeClient:
    """The few read calls of Prefect's client that the follower makes before a run exists."""

    api_url = "http://127.0.0.1:4200/api/"

    def __init__(self, pools: dict[str, list[str]], paused: tuple[str, ...] = ()):
        self.pools, self.paused = pools, paused  # pool -> its workers' statuses

    def read_flows(self):
        return [SimpleNamespace(id=1, name="gpt1")]

    def read_deployments(self):
        return [SimpleNamespace(flow_id=1, name="smoke")]

    def read_work_pool(self, name: str):
        from prefect.exceptions import ObjectNotFound

        if name not in self.pools:
            raise ObjectNotFound(None)
        return SimpleNamespace(is_paused=name in self.paused)

    def read_workers_for_work_pool(self, name: str):
        return [SimpleNamespace(status=SimpleNamespace(value=status)) for status in self.pools[name]]


def test_a_missing_deployment_is_named_with_the_command_that_creates_it():
    client = FakeClient({})
    local = watch_run.missing_deployment("gpt1/mini", client)
    assert "`make demo` deploys it" in local and "Deployed there: gpt1/smoke" in local
    cluster = watch_run.missing_deployment("gpt1/full", client)
    assert "prefect --no-prompt deploy --prefect-file pipelines.yaml -n full" in cluster
    assert "`make rehearse`" in cluster and "docs/cluster.md" in cluster
    assert "no such deployment" in watch_run.missing_deployment("gpt1/nope", client)


def test_a_pool_nobody_polls_is_said_with_how_to_start_a_worker():
    client = FakeClient({"gpt1-local": ["OFFLINE"], "gpt1-cpu": [], "ready": ["ONLINE", "OFFLINE"], "held": ["ONLINE"]},
                        paused=("held",))
    assert "`make demo` starts one" in watch_run.pool_problem(client, "gpt1-local")
    assert "prefect worker start --pool gpt1-cpu" in watch_run.pool_problem(client, "gpt1-cpu")
    assert "does not exist" in watch_run.pool_problem(client, "gone")
    assert "prefect work-pool resume held" in watch_run.pool_problem(client, "held")
    assert watch_run.pool_problem(client, "ready") is None
