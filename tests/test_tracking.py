"""RunLogger: nesting, lineage, and buffering while the tracking server is unreachable."""

from __future__ import annotations

import socket

from mlflow.tracking import MlflowClient

from gpt1.tracking import RunLogger, start_run


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nested_runs_params_metrics_lineage(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with start_run("pipeline", experiment="t", uri=uri, tags={"k": "v"}) as parent:
        with start_run("stage", experiment="t", uri=uri, parent_run_id=parent.run_id) as child:
            child.log_params({f"p{i}": i for i in range(150)})  # > one REST batch
            child.log_metrics({"loss": 2.0}, step=1)
            child.log_metrics({"loss": 1.0}, step=2)
            child.log_dataset("corpus", "ab" * 32, "/data/corpus", context="training")
            child.log_text("hello", "samples/a.txt")
    client = MlflowClient(uri)
    run = client.get_run(child.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.run_id
    assert len(run.data.params) == 150 and run.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(child.run_id, "loss")] == [2.0, 1.0]
    assert run.inputs.dataset_inputs[0].dataset.name == "corpus"
    assert client.get_run(parent.run_id).data.tags["k"] == "v"


def test_failed_block_marks_run_failed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    try:
        with start_run("boom", experiment="t", uri=uri) as run:
            raise RuntimeError("x")
    except RuntimeError:
        pass
    assert MlflowClient(uri).get_run(run.run_id).info.status == "FAILED"


def test_unreachable_server_buffers_then_flushes(tmp_path):
    run = RunLogger("offline", experiment="t", uri=f"http://127.0.0.1:{_closed_port()}")
    assert run.run_id is None  # could not be created: nothing raised
    run.log_params({"a": 1})
    run.log_metrics({"loss": 3.0}, step=5)
    assert run.pending == 2
    # The server "comes back": point the same logger at a reachable store and flush in order.
    run.uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run._client = None
    assert run.flush() and run.pending == 0
    got = MlflowClient(run.uri).get_run(run.run_id)
    assert got.data.params == {"a": "1"} and got.data.metrics == {"loss": 3.0}


def test_reattach_by_run_id_continues_steps(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = RunLogger("pretrain", experiment="t", uri=uri)
    first.log_metrics({"loss": 1.0}, step=1)
    again = RunLogger("pretrain", experiment="t", uri=uri, run_id=first.run_id)
    again.log_metrics({"loss": 0.5}, step=2)
    steps = [m.step for m in MlflowClient(uri).get_metric_history(first.run_id, "loss")]
    assert steps == [1, 2]
