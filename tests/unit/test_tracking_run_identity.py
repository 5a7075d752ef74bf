"""Which MLflow run a logger's calls reach when the run could not be created at first: nothing logged before the
run existed is lost, a create whose answer was lost is not repeated, an attempt resuming a step whose checkpoint
holds no run id continues that step's run, and a replayed spool lands in that same run (docs/failure-behaviour.md,
"The team stack": the stack's fault test, whose pre-training was preempted during a PostgreSQL outage and resumed
into a second `pretrain` run).

An outage is a real HTTP client aimed at a closed port; the store one SQLite database for the module, one experiment
per test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from gpt1.tracking import logger
from gpt1.tracking.logger import INTERRUPTED, RUN_KEY_TAG, STEP_TAGS, RunLogger
from gpt1.tracking.runs import TAG_CACHED, TAG_KEY, TAG_STAGE, stage_tags
from tests.unit.test_tracking import _closed_port

STEP = stage_tags("pretrain", key="ab552b5d813891c8", preset="smoke")


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_db) -> str:
    root = tmp_path_factory.mktemp("identity")
    shutil.copy(empty_mlflow_db, root / "mlflow.db")  # its tables already created
    return f"sqlite:///{root / 'mlflow.db'}"


@pytest.fixture
def experiment(store, tmp_path, request) -> str:
    """An experiment of this test's own, its artifacts under tmp_path; its name."""
    name = request.node.name[:200]
    MlflowClient(store).create_experiment(name, artifact_location=(tmp_path / "artifacts").as_uri())
    return name


def parent_run(store: str, experiment: str) -> str:
    client = MlflowClient(store)
    return client.create_run(client.get_experiment_by_name(experiment).experiment_id, run_name="parent").info.run_id


def children(store: str, experiment: str, parent: str) -> list:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(experiment).experiment_id
    return client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'")


def artifacts(store: str, run_id: str, path: str | None = None) -> list[str]:
    client = MlflowClient(store)
    found = []
    for item in client.list_artifacts(run_id, path):
        found += artifacts(store, run_id, item.path) if item.is_dir else [item.path]
    return sorted(found)


def steps(store: str, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in MlflowClient(store).get_metric_history(run_id, key))


def server_back(run: RunLogger, store: str) -> None:
    """The outage ends: the same logger now reaches the store."""
    run.uri, run._client = store, None


class UploadsFail:
    """A client whose artifact uploads answer 500, as MLflow does while its S3 server is down."""

    def __init__(self, store: str):
        self.real = MlflowClient(store)

    def __getattr__(self, name: str):
        if name in ("log_artifact", "log_artifacts", "log_text"):
            def refused(*args, **kwargs):
                raise MlflowException("S3 down", error_code="INTERNAL_ERROR")
            return refused
        return getattr(self.real, name)


class AnswerLost:
    """A client whose first create_run is stored but answered with a dropped connection (a server killed then)."""

    def __init__(self, store: str):
        self.real = MlflowClient(store)
        self.lost = 0

    def __getattr__(self, name: str):
        return getattr(self.real, name)

    def create_run(self, *args, **kwargs):
        run = self.real.create_run(*args, **kwargs)
        if not self.lost:
            self.lost += 1
            raise ConnectionError("connection reset by peer")
        return run


def test_step_tags_are_the_stage_tags():
    assert STEP_TAGS == (TAG_STAGE, TAG_KEY, TAG_CACHED)


def test_calls_made_before_the_run_exists_reach_it_once_created(store, experiment):
    run = RunLogger("late", experiment=experiment, uri=f"http://127.0.0.1:{_closed_port()}")
    run.log_params({"a": 1})
    for step in (10, 20):
        run.log_metrics({"grad_norm": 1.0 / step}, step=step)
    run.log_text("s", "samples/step-00000020.txt")
    assert not run.flush() and run.run_id is None and run.pending == 4
    server_back(run, store)
    run.end()
    assert run.pending == 0
    got = MlflowClient(store).get_run(run.run_id)
    assert got.data.params == {"a": "1"} and got.info.status == "FINISHED"
    assert steps(store, run.run_id, "grad_norm") == [10, 20]
    assert artifacts(store, run.run_id) == ["samples/step-00000020.txt"]


def test_a_create_whose_answer_was_lost_is_not_repeated(store, experiment):
    parent = parent_run(store, experiment)
    run = RunLogger("lost", experiment=experiment, uri=f"http://127.0.0.1:{_closed_port()}", parent_run_id=parent)
    run.log_metrics({"loss": 1.0}, step=1)
    run.uri, run._client = store, AnswerLost(store)
    assert not run.flush()  # stored, but the answer never came
    assert run.flush()
    [only] = children(store, experiment, parent)
    assert only.info.run_id == run.run_id and only.data.tags[RUN_KEY_TAG] == run.run_key
    assert steps(store, run.run_id, "loss") == [1]


def test_a_resumed_attempt_continues_the_run_its_checkpoint_could_not_name(store, experiment, tmp_path):
    """The stack's fault test in small: attempt 1 starts while the store is down, logs its first windows, writes a
    checkpoint (whose run id is None: no run yet) and is preempted; its run is created late, as it ends KILLED.
    Attempt 2 resumes from that checkpoint with no run id and logs the rest, its uploads refused (S3 down) and
    spooled; the replay delivers them. One `pretrain` run holds all of it."""
    from gpt1 import cli

    parent = parent_run(store, experiment)
    spool, out = tmp_path / "spool", tmp_path / "out"
    (out / "final").mkdir(parents=True)
    kwargs = {"experiment": experiment, "parent_run_id": parent, "tags": STEP, "spool_dir": spool,
              "continues": INTERRUPTED}  # as pre-training's worker asks

    first = RunLogger("pretrain", uri=f"http://127.0.0.1:{_closed_port()}", **kwargs)
    first.log_params({"lr": 0.1, "world_size": 1})
    for step in (10, 20):
        first.log_metrics({"grad_norm": float(step), "loss": 1.0 / step}, step=step)
    first.log_text("step 20", "samples/step-00000020.txt")
    first.flush()
    checkpoint_run_id = first.run_id
    assert checkpoint_run_id is None
    server_back(first, store)
    assert first.end("KILLED") is None  # delivered

    second = RunLogger("pretrain", uri=store, run_id=checkpoint_run_id, flush_timeout=0, **kwargs)
    assert second.run_id == first.run_id and second.reattached
    second._client = UploadsFail(store)
    second.log_params({"lr": 0.1, "world_size": 2})  # one value changed: MLflow refuses to change a param
    for step in (30, 40):
        second.log_metrics({"grad_norm": float(step), "loss": 1.0 / step}, step=step)
    second.log_text("step 40", "samples/step-00000040.txt")
    (out / "loss_curve.png").write_bytes(b"png")
    (out / "final" / "training.json").write_text("{}")
    second.log_artifact(out / "loss_curve.png")
    second.log_artifact(out / "final" / "training.json", "final")
    spooled = second.end("FINISHED")
    assert spooled is not None and json.loads(spooled.read_text())["run_id"] == first.run_id

    assert cli.main(["replay-spool", str(spool)]) == 0
    [run] = children(store, experiment, parent)
    assert run.info.run_id == first.run_id and run.info.status == "FINISHED"
    assert steps(store, run.info.run_id, "grad_norm") == [10, 20, 30, 40]
    assert run.data.params == {"lr": "0.1", "world_size": "1"} and run.data.tags["world_size"] == "2"
    assert artifacts(store, run.info.run_id) == ["final/training.json", "loss_curve.png",
                                                 "samples/step-00000020.txt", "samples/step-00000040.txt"]


def test_a_finished_or_failed_run_of_the_step_is_not_continued(store, experiment):
    parent = parent_run(store, experiment)
    step = {"experiment": experiment, "uri": store, "parent_run_id": parent, "continues": INTERRUPTED}
    done = RunLogger("pretrain", tags=STEP, **step)
    done.end("FAILED")
    again = RunLogger("pretrain", tags=STEP, **step)
    other = RunLogger("pretrain", tags={**STEP, TAG_KEY: "another"}, **step)
    assert len({done.run_id, again.run_id, other.run_id}) == 3 and not again.reattached


def test_a_step_that_restarts_starts_a_run_of_its_own(store, experiment):
    """A fine-tune retried after its worker died starts over: its earlier attempt's run, left RUNNING, stays as it
    is and the new attempt logs to a new run (only a step that resumes asks to continue, `continues`)."""
    parent = parent_run(store, experiment)
    died = RunLogger("finetune-full-sst2", experiment=experiment, uri=store, parent_run_id=parent, tags=STEP)
    died.log_metrics({"loss": 1.0}, step=1)
    died.flush()
    retried = RunLogger("finetune-full-sst2", experiment=experiment, uri=store, parent_run_id=parent, tags=STEP)
    retried.log_metrics({"loss": 0.5}, step=1)
    retried.flush()
    assert retried.run_id != died.run_id and not retried.reattached


def never_created(spool: Path, experiment: str, parent: str) -> Path:
    """The spool file of an attempt whose run was never created (the store down all along)."""
    gone = RunLogger("pretrain", experiment=experiment, uri=f"http://127.0.0.1:{_closed_port()}",
                     parent_run_id=parent, tags=STEP, spool_dir=spool, flush_timeout=0)
    gone.log_metrics({"grad_norm": 10.0}, step=10)
    path = gone.end("KILLED")
    assert path is not None and json.loads(path.read_text())["run_id"] is None
    return path


def test_a_replay_of_a_run_never_created_goes_to_its_step_s_run(store, experiment, tmp_path):
    """A later attempt created and finished the step's run: the spooled calls join it, and the spooled end (KILLED,
    recorded before that run ended) does not undo its FINISHED."""
    from gpt1 import cli

    parent = parent_run(store, experiment)
    path = never_created(tmp_path / "spool", experiment, parent)
    later = RunLogger("pretrain", experiment=experiment, uri=store, parent_run_id=parent, tags=STEP)
    later.log_metrics({"grad_norm": 30.0}, step=30)
    later.end("FINISHED")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "tracking_uri": store}))

    assert cli.main(["replay-spool", str(tmp_path / "spool")]) == 0
    [run] = children(store, experiment, parent)
    assert run.info.run_id == later.run_id and run.info.status == "FINISHED"
    assert steps(store, later.run_id, "grad_norm") == [10, 30]


def test_a_replay_finds_the_run_a_lost_create_answer_made(store, experiment, tmp_path):
    from gpt1 import cli

    parent = parent_run(store, experiment)
    path = never_created(tmp_path / "spool", experiment, parent)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "tracking_uri": store}))
    client = MlflowClient(store)
    made = client.create_run(client.get_experiment_by_name(experiment).experiment_id, run_name="pretrain",
                             tags={RUN_KEY_TAG: data["run_key"]})  # no parent tag: found by its key alone

    assert cli.main(["replay-spool", str(tmp_path / "spool")]) == 0
    assert children(store, experiment, parent) == []
    assert steps(store, made.info.run_id, "grad_norm") == [10]
    assert client.get_run(made.info.run_id).info.status == "KILLED"


def test_a_replay_whose_leftovers_cannot_be_written_keeps_its_file(store, tmp_path, monkeypatch):
    from gpt1 import cli

    path = never_created(tmp_path / "spool", "t", "p" * 32)

    def refused(self, directory, calls):
        raise OSError("No space left on device")

    monkeypatch.setattr(logger.RunLogger, "_spool", refused)
    code = cli.main(["replay-spool", str(tmp_path / "spool"), "--tracking-uri", f"http://127.0.0.1:{_closed_port()}",
                     "--timeout", "0"])
    assert code != 0 and path.exists() and not (tmp_path / "spool" / "replayed").exists()
