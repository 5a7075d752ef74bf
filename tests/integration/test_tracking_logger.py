"""RunLogger on real stores: nested runs and lineage, failure, buffering while the server is unreachable and
reattaching, each on a SQLite store of its own (creating its tables costs seconds); metrics through outages, timers
and a request limit; a process exiting without end(); the code commit a run names, from a fresh process. The
in-process batching checks and the helpers they share: tests/unit/test_tracking.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

import gpt1
from gpt1.tracking import runs
from gpt1.tracking.logger import RunLogger, start_run
from tests.conftest import REPO
from tests.unit.test_tracking import (_closed_port, history, recorded_run, store,  # noqa: F401 (store: a fixture)
                                      wait_until)


def test_nested_runs_params_metrics_lineage(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("t", artifact_location=(tmp_path / "artifacts").as_uri())  # not ./mlruns
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
    first.flush()  # metrics are buffered: the first process's end (or exit) delivers them before a resume
    again = RunLogger("pretrain", experiment="t", uri=uri, run_id=first.run_id)
    again.log_metrics({"loss": 0.5}, step=2)
    again.flush()
    steps = [m.step for m in MlflowClient(uri).get_metric_history(first.run_id, "loss")]
    assert steps == [1, 2]


def test_one_call_larger_than_a_request_is_split(store):
    run, client = recorded_run(store, "wide", metrics_interval=60)
    run.log_metrics({f"m{i}": float(i) for i in range(2500)}, step=3)
    run.log_metrics({"loss": 1.0}, step=3)
    run.end()
    assert [len(r) for r in client.metric_requests()] == [1000, 1000, 500, 1]
    assert len(MlflowClient(store).get_run(run.run_id).data.metrics) == 2501


def test_metric_timestamps_are_those_of_the_calls(store):
    run, _ = recorded_run(store, "timestamps", metrics_interval=60)
    before = int(time.time() * 1000)
    run.log_metrics({"loss": 2.0}, step=1)
    time.sleep(0.3)
    run.log_metrics({"loss": 1.0}, step=2)
    time.sleep(0.3)
    delivered = int(time.time() * 1000)
    run.end()
    first, second = MlflowClient(store).get_metric_history(run.run_id, "loss")
    assert before <= first.timestamp and second.timestamp - first.timestamp >= 250
    assert second.timestamp <= delivered - 250


def test_server_down_mid_run_then_back_delivers_every_buffered_metric_once(store):
    run, client = recorded_run(store, "outage", metrics_interval=0.1)
    for step in range(1, 51):
        run.log_metrics({"loss": 1.0 / step}, step=step)
    assert run.flush() and run.pending == 0

    client.down = True
    for step in range(51, 151):
        run.log_metrics({"loss": 1.0 / step}, step=step)
        time.sleep(0.002)  # ~0.3 s of training: the background thread tries, fails, backs off
    run.log_params({"phase": "outage"})  # flushes the buffer first: fails too, everything queues in order
    for step in range(151, 201):
        run.log_metrics({"loss": 1.0 / step}, step=step)
    assert run.pending > 0 and client.failed >= 1
    client.down = False  # the server returns; the next retry (background thread, <= 2 s of backoff) catches up
    assert wait_until(lambda: run.pending == 0, timeout=30), run.pending
    run.end()

    sent = [(key, step) for r in client.metric_requests() for key, _, step, _ in r]
    assert sorted(sent) == [("loss", s) for s in range(1, 201)]  # delivered once each, none lost
    assert history(store, run.run_id, "loss") == [(s, 1.0 / s) for s in range(1, 201)]
    params_at = next(i for i, r in enumerate(client.requests) if r["params"])
    before_params = [step for r in client.requests[:params_at] for _, _, step, _ in r["metrics"]]
    assert sorted(before_params) == list(range(1, 151))  # logged before the param: delivered before it
    assert MlflowClient(store).get_run(run.run_id).data.params == {"phase": "outage"}


def test_system_metrics_are_sampled_and_survive_an_outage(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    run, client = recorded_run(store, "system", metrics_interval=0.1)
    runs.monitor_system(run)
    assert wait_until(lambda: any(k.startswith("system/") for r in client.requests for k, *_ in r["metrics"]))
    client.down = True
    time.sleep(1.0)  # samples taken while the server is unreachable: queued, not lost, and sampling goes on
    client.down = False
    run.end()
    steps = [s for s, _ in history(store, run.run_id, "system/cpu_utilization_percentage")]
    assert steps == list(range(len(steps))) and len(steps) >= 5, steps
    assert {"system/system_memory_usage_megabytes", "system/disk_usage_percentage"} <= set(
        MlflowClient(store).get_run(run.run_id).data.metrics)

    monkeypatch.setenv("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")
    off, _ = recorded_run(store, "no-system")
    runs.monitor_system(off)
    off.end()
    assert not any(k.startswith("system/") for k in MlflowClient(store).get_run(off.run_id).data.metrics)


def test_a_process_exiting_without_end_delivers_its_buffered_metrics(store):
    script = (
        "import sys\n"
        "from gpt1.tracking.logger import RunLogger\n"
        "run = RunLogger('exits', experiment='t', uri=sys.argv[1], metrics_interval=600)\n"
        "for step in range(1, 21):\n"
        "    run.log_metrics({'loss': 1.0 / step}, step=step)\n"
        "print(run.run_id)\n"  # no end(), no flush(): the exit drain sends the buffer
    )
    done = subprocess.run([sys.executable, "-c", script, store], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    assert history(store, run_id, "loss") == [(s, 1.0 / s) for s in range(1, 21)]


def test_runs_name_the_code_commit_only_from_a_checkout_that_tracks_it(store, tmp_path):
    run, _ = recorded_run(store, "versioned")
    run.end()
    tags = MlflowClient(store).get_run(run.run_id).data.tags
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert tags["mlflow.source.git.commit"] == head and tags["gpt1.version"] == gpt1.__version__
    assert tags["gpt1.git.dirty"] in ("true", "false")

    # the package copied into another repository, untracked there (an install inside someone's tree): no commit
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copytree(REPO / "gpt1", tmp_path / "gpt1", ignore=shutil.ignore_patterns("__pycache__"))
    script = ("import gpt1, json; from gpt1.tracking.logger import code_version; "
              "print(json.dumps([gpt1.__file__, code_version()]))")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    where, copied = json.loads(done.stdout.strip().splitlines()[-1])
    assert where.startswith(str(tmp_path)) and copied == {"gpt1.version": gpt1.__version__}
