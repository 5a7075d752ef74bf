"""RunLogger: nesting, lineage, buffering while the tracking server is unreachable, and metrics sent in batches.

The batching tests wrap the logger's MlflowClient to see each request it makes; an outage is a real HTTP client
aimed at a port nobody listens on, the store a temp SQLite database. The checks that create a store each, wait out
outages and timers, or start another process: tests/integration/test_tracking_logger.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gpt1.tracking import logger, models, runs
from gpt1.tracking.logger import METRICS_PER_REQUEST, RunLogger


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- metrics sent in batches ----------------------------------------------------------------------------------
class RecordingClient:
    """Stands in for a RunLogger's MlflowClient: records every delivered `log_batch` request in order. While `down`,
    every call goes to a real HTTP client for a closed port instead, and fails as an unreachable server does."""

    def __init__(self, store: str):
        self.store = MlflowClient(store)
        self.unreachable = MlflowClient(f"http://127.0.0.1:{_closed_port()}")
        self.down = False
        self.requests: list[dict] = []  # {"metrics": [(key, value, step, timestamp)], "params": {...}, "tags": {...}}
        self.failed = 0  # log_batch requests that did not reach the store
        self.lock = threading.Lock()

    def _target(self) -> MlflowClient:
        return self.unreachable if self.down else self.store

    def __getattr__(self, name: str):
        return getattr(self._target(), name)

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        try:
            self._target().log_batch(run_id, metrics=metrics, params=params, tags=tags)
        except Exception:
            with self.lock:
                self.failed += 1
            raise
        with self.lock:
            self.requests.append({"metrics": [(m.key, m.value, m.step, m.timestamp) for m in metrics],
                                  "params": {p.key: p.value for p in params}, "tags": {t.key: t.value for t in tags}})

    def metric_requests(self) -> list[list[tuple]]:
        return [r["metrics"] for r in self.requests if r["metrics"]]


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_db) -> str:
    """One SQLite store for the batching tests (creating its tables costs seconds), with artifacts in a temp dir."""
    root = tmp_path_factory.mktemp("batching")
    shutil.copy(empty_mlflow_db, root / "mlflow.db")  # its tables already created
    uri = f"sqlite:///{root / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("t", artifact_location=(root / "artifacts").as_uri())
    return uri


def recorded_run(store: str, name: str, **kwargs) -> tuple[RunLogger, RecordingClient]:
    run = RunLogger(name, experiment="t", uri=store, **kwargs)
    client = RecordingClient(store)
    run._client = client
    return run, client


def history(store: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in MlflowClient(store).get_metric_history(run_id, key)]


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_request_limit_is_mlflows():
    from mlflow.utils.validation import MAX_ENTITIES_PER_BATCH, MAX_METRICS_PER_BATCH

    assert METRICS_PER_REQUEST <= min(MAX_METRICS_PER_BATCH, MAX_ENTITIES_PER_BATCH)


def test_300_metric_calls_reach_the_store_as_a_few_requests(store):
    keys = ["loss", "clf_loss", "lm_loss", "lr", "grad_norm"]
    run, client = recorded_run(store, "batched", metrics_interval=60)  # only size and end() send here
    started_ms = int(time.time() * 1000)
    for step in range(1, 301):  # 1,500 metrics: the buffer fills once, the background thread sends it
        run.log_metrics({k: step + i / 10 for i, k in enumerate(keys)}, step=step)
    logged_ms = int(time.time() * 1000)
    assert run.pending <= 300
    run.end()

    requests = client.metric_requests()
    assert 2 <= len(requests) <= 3 and all(len(r) <= METRICS_PER_REQUEST for r in requests), [len(r) for r in requests]
    sent = [m for r in requests for m in r]
    assert len(sent) == len(set(sent)) == 1500  # each metric sent once
    assert all(started_ms <= ts <= logged_ms for *_, ts in sent)  # the time of the call, not of the request
    for i, key in enumerate(keys):
        assert history(store, run.run_id, key) == [(s, s + i / 10) for s in range(1, 301)]
    assert MlflowClient(store).get_run(run.run_id).info.status == "FINISHED"
    assert run.pending == 0 and run not in logger._UNDELIVERED


def test_an_interval_of_zero_sends_every_call(store):
    run, client = recorded_run(store, "unbuffered", metrics_interval=0)
    for step in range(1, 31):
        run.log_metrics({"loss": 1.0 / step}, step=step)
        assert run.pending == 0  # sent before the call returned
    assert len(client.metric_requests()) == 30
    run.end()


def test_buffered_metrics_are_sent_once_old_enough_without_any_other_call(store):
    run, client = recorded_run(store, "aged", metrics_interval=0.2)
    run.log_metrics({"loss": 2.0}, step=1)
    run.log_metrics({"loss": 1.5}, step=2)
    assert run.pending == 2
    assert wait_until(lambda: run.pending == 0, timeout=20)  # the background thread sent them
    assert history(store, run.run_id, "loss") == [(1, 2.0), (2, 1.5)]
    assert len(client.metric_requests()) == 1
    run.end()


def test_every_other_call_sends_the_buffered_metrics_first(store):
    run, client = recorded_run(store, "order", metrics_interval=60)
    for step in (1, 2, 3):
        run.log_metrics({"loss": float(step)}, step=step)
    run.log_params({"lr": 0.1})
    run.log_metrics({"loss": 4.0}, step=4)
    run.set_tags({"phase": "eval"})
    run.log_metrics({"acc": 0.5}, step=4)
    run.log_text("done", "notes/done.txt")
    assert run.pending == 0  # what serving.log_model relies on: after an artifact call, 0 = all delivered
    run.log_metrics({"acc": 0.75}, step=5)
    run.end()

    kinds = [next(kind for kind in ("metrics", "params", "tags") if r[kind]) for r in client.requests]
    assert kinds == ["metrics", "params", "metrics", "tags", "metrics", "metrics"]
    assert [step for _, _, step, _ in client.requests[0]["metrics"]] == [1, 2, 3]  # one request for three calls
    assert history(store, run.run_id, "loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert history(store, run.run_id, "acc") == [(4, 0.5), (5, 0.75)]


def test_spool_holds_buffered_metrics_when_the_server_never_returns(tmp_path):
    gone = RunLogger("gone", experiment="t", uri=f"http://127.0.0.1:{_closed_port()}", spool_dir=tmp_path / "spool",
                     flush_timeout=0.5, metrics_interval=60)
    gone.log_params({"a": 1})
    stamps = []
    for step in (1, 2, 3):
        gone.log_metrics({"loss": 1.0 / step, "lr": 0.1}, step=step)
        stamps.append(int(time.time() * 1000))
    gone.set_tags({"k": "v"})
    gone.log_metrics({"loss": 0.2}, step=4)
    assert gone.pending == 6
    gone.end("FAILED")
    assert gone.pending == 0 and gone not in logger._UNDELIVERED

    [spool] = (tmp_path / "spool").glob("mlflow-undelivered-gone-*.json")
    calls = json.loads(spool.read_text())["calls"]
    assert [c["call"] for c in calls] == ["log_params", "log_metrics", "log_metrics", "log_metrics", "set_tags",
                                          "log_metrics", "end"]
    metric_calls = [c for c in calls if c["call"] == "log_metrics"]
    assert [(c["step"], c["metrics"]) for c in metric_calls] == [
        (1, {"loss": 1.0, "lr": 0.1}), (2, {"loss": 0.5, "lr": 0.1}), (3, {"loss": 1 / 3, "lr": 0.1}),
        (4, {"loss": 0.2})]
    assert all(c["timestamp"] <= stamp for c, stamp in zip(metric_calls, stamps))
    assert calls[0]["params"] == {"a": "1"} and calls[4]["tags"] == {"k": "v"} and calls[6]["status"] == "FAILED"


def test_threads_sharing_one_logger(store):
    run, client = recorded_run(store, "threads", metrics_interval=0.05)

    def worker(name: str) -> None:
        for step in range(1, 101):
            run.log_metrics({f"{name}/loss": step / 100}, step=step)
            if step % 25 == 0:
                run.set_tags({f"{name}/at": step})

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.end()
    got = MlflowClient(store).get_run(run.run_id)
    assert got.info.status == "FINISHED"
    for i in range(4):
        assert history(store, run.run_id, f"w{i}/loss") == [(s, s / 100) for s in range(1, 101)]
        assert got.data.tags[f"w{i}/at"] == "100"
    sent = [(key, step) for r in client.metric_requests() for key, _, step, _ in r]
    assert len(sent) == len(set(sent)) == 400


# -- what runs carry: code version, datasets, logged models, system metrics, champion, pipeline runs ----------------
def test_datasets_are_mlflow_data_sources_with_hub_ids_and_revisions(store):
    run, _ = recorded_run(store, "datasets")
    run.log_dataset("sst2/dev", "ab" * 40, runs.hub_dataset_source("nyu-mll/glue", config="sst2",
                                                                       split="validation", revision="bcdcba79"),
                    context="evaluation", profile={"rows": 872})
    run.log_dataset("corpus", "cd" * 40, "/data/corpus", context="training")
    run.end()
    inputs = {d.dataset.name: d for d in MlflowClient(store).get_run(run.run_id).inputs.dataset_inputs}
    hub = inputs["sst2/dev"].dataset
    assert hub.source_type == "hugging_face" and json.loads(hub.profile) == {"rows": 872}
    assert {k: v for k, v in json.loads(hub.source).items() if v} == {
        "path": "nyu-mll/glue", "config_name": "sst2", "split": "validation", "revision": "bcdcba79"}
    assert inputs["corpus"].dataset.source_type == "local" and len(hub.digest) == 36
    assert [t.value for t in inputs["sst2/dev"].tags if t.key == "mlflow.data.context"] == ["evaluation"]


def test_a_folder_model_is_a_logged_model_uploaded_or_by_reference_with_linked_metrics(store, tmp_path):
    from mlflow.artifacts import download_artifacts

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text('{"n_layer": 1}')
    (folder / "model.safetensors").write_bytes(b"weights")
    run, _ = recorded_run(store, "pretrain-like")
    run.log_metrics({"val_loss": 4.0}, step=20)
    run.log_metrics({"val_loss": 3.5}, step=30)
    models.log_files_model(run, "pretrained", folder, upload=True, model_type="gpt1-pretrained", step=30,
                        params={"model.n_layer": 1}, tags={"gpt1.preset": "smoke"})
    models.log_files_model(run, "by-reference", folder, upload=False, model_type="gpt1-pretrained", step=30)
    run.end()

    client = MlflowClient(store)
    logged = {m.name: m for m in client.search_logged_models([client.get_run(run.run_id).info.experiment_id])
              if m.source_run_id == run.run_id}
    uploaded, external = logged["pretrained"], logged["by-reference"]
    assert uploaded.model_id == run.model_ids["pretrained"] and str(uploaded.status) == "READY"
    assert uploaded.params == {"model.n_layer": "1"} and uploaded.tags["gpt1.location"] == str(folder)
    assert [(m.key, m.value, m.step) for m in uploaded.metrics] == [("val_loss", 3.5, 30)]  # the model's step
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "val_loss")] == [(20, 4.0), (30, 3.5)]
    with models.process_uri(store):  # MLflow resolves models:/ with the process-wide URI, whatever it is given
        local = Path(download_artifacts(f"models:/{uploaded.model_id}", dst_path=str(tmp_path / "down")))
    assert (local / "model.safetensors").read_bytes() == b"weights"
    assert external.tags["mlflow.model.isExternal"] == "true" and str(external.status) == "READY"
    assert external.tags["gpt1.sha256"] == uploaded.tags["gpt1.sha256"]
    outputs = {o.model_id: o.step for o in client.get_run(run.run_id).outputs.model_outputs}
    assert outputs == {uploaded.model_id: 30, external.model_id: 30}


def test_a_failed_model_upload_is_completed_on_retry_not_duplicated(store, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"x")
    run, client = recorded_run(store, "retried-model")
    real = client.store.log_model_artifacts
    calls = []

    def fail_once(model_id, local_dir, artifact_path=None):  # the server drops out after the model was created
        calls.append(model_id)
        if len(calls) == 1:
            raise ConnectionError("server went away")
        return real(model_id, local_dir, artifact_path)

    client.log_model_artifacts = fail_once
    models.log_files_model(run, "pretrained", folder, upload=True, model_type="t")
    assert run.pending == 1 and "pretrained" not in run.model_ids
    run.end()
    assert calls[0] == calls[1] == run.model_ids["pretrained"]  # the same model completed
    store_client = MlflowClient(store)
    mine = [m for m in store_client.search_logged_models([store_client.get_run(run.run_id).info.experiment_id])
            if m.source_run_id == run.run_id]
    assert len(mine) == 1 and str(mine[0].status) == "READY"


class FakeRegistry:
    """The two registry calls `update_champion` makes, over versions given as (version, tags)."""

    def __init__(self, versions: list[tuple[int, dict]]):
        self.versions = [type("V", (), {"version": str(v), "tags": tags}) for v, tags in versions]
        self.aliases: dict[str, str] = {}

    def search_model_versions(self, filter_string):
        assert filter_string == "name='m'"
        return self.versions

    def set_registered_model_alias(self, name, alias, version):
        self.aliases[alias] = version


def test_champion_is_the_best_headline_ties_keep_the_earliest():
    h = models.HEADLINE_TAG
    registry = FakeRegistry([(1, {h: "71.5"}), (2, {h: "80.25"}), (3, {h: "80.25"}), (4, {h: "nan"}), (5, {}),
                             (6, {h: "bad"})])
    assert models.update_champion(registry, "m") == "2" and registry.aliases == {"champion": "2"}
    registry = FakeRegistry([(1, {h: "-3.0"}), (2, {h: "12.0"})])  # MCC and Pearson can be negative
    assert models.update_champion(registry, "m") == "2"
    assert models.update_champion(FakeRegistry([(1, {})]), "m") is None


def test_pipeline_run_is_named_after_deployment_and_flow_run_and_opens_a_runs_view(store):
    from gpt1.config import load_config

    cfg = load_config("smoke", ["tracking.experiment=t", f"tracking.tracking_uri={store}",
                                "finetune.tasks=[sst2,stsb]"])
    run = runs.start_pipeline_run(cfg, flow="gpt1", deployment="smoke", flow_run="crimson-falcon",
                                      flow_run_id="1234")
    bare = runs.start_pipeline_run(cfg, flow="gpt1", flow_run="quiet-owl")
    run.end()
    bare.end()
    client = MlflowClient(store)
    got = client.get_run(run.run_id)
    assert got.info.run_name == "gpt1/smoke · crimson-falcon"
    assert client.get_run(bare.run_id).info.run_name == "gpt1 [smoke] · quiet-owl"
    assert {k: got.data.tags[k] for k in ("prefect.deployment", "prefect.flow_run_id", "gpt1.preset")} == {
        "prefect.deployment": "smoke", "prefect.flow_run_id": "1234", "gpt1.preset": "smoke"}
    assert got.data.params["train_tokenizer.merges"] == str(cfg.train_tokenizer.merges) and "gpt1.version" in got.data.tags

    link = got.data.tags["gpt1.runs_view"]
    experiment = client.get_experiment(got.info.experiment_id)
    key = link.split("viewStateShareKey=")[1]
    assert link.startswith(f"#/experiments/{experiment.experiment_id}/runs?")
    saved = json.loads(experiment.tags[runs.RUNS_VIEW_TAG + key])  # what the UI lists under "Views"
    assert saved["name"] == "headline metrics: full vs no_pretrain" and isinstance(saved["createdAt"], int)
    assert json.loads(saved["state"])["selectedColumns"][-4:] == [  # each variant's value side by side
        "metrics.`task/sst2/primary`", "metrics.`no_pretrain/task/sst2/primary`",
        "metrics.`task/stsb/primary`", "metrics.`no_pretrain/task/stsb/primary`"]
    assert sum(k.startswith(runs.RUNS_VIEW_TAG) for k in experiment.tags) == 1  # run 2: the same view
    assert experiment.tags["mlflow.note.content"].startswith(f"[Runs table with the headline metrics]({link})")

    client.set_experiment_tag(experiment.experiment_id, "mlflow.note.content", "my notes")
    runs.start_pipeline_run(cfg, flow="gpt1", flow_run="x").end()
    assert client.get_experiment(experiment.experiment_id).tags["mlflow.note.content"] == "my notes"  # kept


# -- gpt1 replay-spool ------------------------------------------------------------------------------------------------
def spooled_run(spool: Path, name: str, artifact: Path) -> RunLogger:
    """A run whose server never answers: everything it logs ends up in a spool file in `spool`."""
    gone = RunLogger(name, experiment="t", uri=f"http://127.0.0.1:{_closed_port()}", spool_dir=spool,
                     flush_timeout=0, tags={"gpt1.stage": "finetune"})
    gone.log_params({"lr": 0.1})
    for step in (1, 2, 3):
        gone.log_metrics({"loss": 1.0 / step}, step=step)
    gone.set_tags({"phase": "done"})
    gone.log_dataset("corpus", "ef" * 40, "/data/corpus", context="training", profile={"rows": 3})
    gone.log_artifact(artifact)
    gone.log_text("hello", "notes/hello.txt")
    gone.end("FINISHED")
    return gone


def test_replay_spool_delivers_a_never_created_run_in_order_once(store, tmp_path, capsys):
    from gpt1 import cli

    spool = tmp_path / "spool"
    artifact = tmp_path / "predictions.jsonl"
    artifact.write_text('{"id": 1}\n')
    gone = spooled_run(spool, "offline", artifact)
    [path] = spool.glob("mlflow-undelivered-*.json")
    stamps = [c["timestamp"] for c in json.loads(path.read_text())["calls"] if c["call"] == "log_metrics"]

    assert cli.main(["replay-spool", str(spool), "--tracking-uri", f"http://127.0.0.1:{_closed_port()}",
                     "--timeout", "0"]) == 2  # still down: what is left is a new file, the old one is gone
    [left] = spool.glob("mlflow-undelivered-*.json")
    assert left != path and len(json.loads(left.read_text())["calls"]) == 9

    assert cli.main(["replay-spool", str(spool), "--tracking-uri", store]) == 0
    assert "9 call(s) delivered" in capsys.readouterr().out
    client = MlflowClient(store)
    [run] = client.search_runs([client.get_experiment_by_name("t").experiment_id], "attributes.run_name = 'offline'")
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"}
    assert run.data.tags["phase"] == "done" and run.data.tags["gpt1.stage"] == "finetune"
    assert run.data.tags["mlflow.source.git.commit"] == gone.tags["mlflow.source.git.commit"]
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value, m.timestamp) for m in losses] == [(s, 1.0 / s, t) for s, t in zip((1, 2, 3), stamps)]
    assert run.inputs.dataset_inputs[0].dataset.name == "corpus"
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["notes", "predictions.jsonl"]
    assert not list(spool.glob("mlflow-undelivered-*.json")) and (spool / "replayed" / left.name).exists()
    assert cli.main(["replay-spool", str(spool), "--tracking-uri", store]) == 0  # nothing left: nothing sent twice
    assert len(client.get_metric_history(run.info.run_id, "loss")) == 3


def test_replay_spool_is_a_gpt1_command_with_help(capsys):
    from gpt1 import cli

    assert cli.main(["--help"]) == 0
    assert "replay-spool" in capsys.readouterr().out
    assert cli.main(["replay-spool", "--help"]) == 0
    usage = capsys.readouterr().out
    assert "gpt1 replay-spool" in usage and "DIR" in usage
    assert all(option in usage for option in ("--tracking-uri", "--timeout", "--skip-missing"))
    assert cli.main(["replay-spool"]) == 2  # no directory: argparse's one-line error
    assert "DIR" in capsys.readouterr().err


def test_replay_spool_refuses_what_it_cannot_replay(store, tmp_path, capsys):
    from gpt1 import cli

    spool = tmp_path / "spool"
    artifact = tmp_path / "gone.txt"
    artifact.write_text("x")
    spooled_run(spool, "lost-artifact", artifact)
    artifact.unlink()
    assert cli.main(["replay-spool", str(spool), "--tracking-uri", store]) == 2
    assert "gone.txt no longer exists" in capsys.readouterr().err
    assert cli.main(["replay-spool", str(spool), "--tracking-uri", store, "--skip-missing"]) == 0

    (spool / "mlflow-undelivered-bad-1.json").write_text('{"calls": []}')
    assert cli.main(["replay-spool", str(spool)]) == 2
    assert "not a gpt1 MLflow spool file" in capsys.readouterr().err


def test_a_planted_spool_reads_and_creates_nothing_outside_its_folders(store, tmp_path, capsys):
    """A spool file is an input: the files it names are uploaded only from under the folder holding the spool
    folder (or --allow), symlinks resolved, and the store it names must exist."""
    from gpt1 import cli

    run_folder, outside = tmp_path / "work", tmp_path / "elsewhere"
    spool = run_folder / "spool"
    artifact = run_folder / "predictions.jsonl"
    artifact.parent.mkdir(parents=True)
    artifact.write_text('{"id": 1}\n')
    spooled_run(spool, "planted", artifact)
    [path] = spool.glob("mlflow-undelivered-*.json")
    recorded = json.loads(path.read_text())
    outside.mkdir()
    (outside / "secret.txt").write_text("not for upload")
    (run_folder / "link.txt").symlink_to(outside / "secret.txt")

    def plant(**changes) -> None:
        spooled = {**recorded, **changes}
        path.write_text(json.dumps(spooled))

    for named in (outside / "secret.txt", run_folder / "link.txt"):
        calls = [{**c, "path": str(named)} if c["call"] == "log_artifact" else c for c in recorded["calls"]]
        plant(calls=calls)
        assert cli.main(["replay-spool", str(spool), "--tracking-uri", store]) == 2
        assert "is outside the folders a replay uploads from" in capsys.readouterr().err
    assert cli.main(["replay-spool", str(spool), "--tracking-uri", store, "--allow", str(outside)]) == 0
    client = MlflowClient(store)
    [run] = client.search_runs([client.get_experiment_by_name("t").experiment_id], "attributes.run_name = 'planted'")
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["link.txt", "notes"]  # as allowed

    shutil.move(spool / "replayed" / path.name, path)
    new_store = outside / "created-by-a-replay.db"
    plant(tracking_uri=f"sqlite:///{new_store}")
    assert cli.main(["replay-spool", str(spool)]) == 2
    assert "a replay does not create one" in capsys.readouterr().err and not new_store.exists()


def test_process_uri_keeps_the_environment_s_tracking_uri(monkeypatch, tmp_path):
    """MLflow's own restore deletes $MLFLOW_TRACKING_URI; a fine-tune worker's next task then logged to ./mlflow.db."""
    import mlflow

    from gpt1.tracking.models import process_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    with process_uri(f"sqlite:///{tmp_path / 'other.db'}"):
        assert mlflow.get_tracking_uri().startswith("sqlite:")
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:9"
