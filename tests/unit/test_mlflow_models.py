"""MLflow 3 on the pipeline's runs: registered task models with the `champion` alias, loaded by alias and fed raw
inputs; the pre-trained model as a logged model; child runs of cached stages; the values the stages really used
on the parent run.

One SQLite store for the module (its tables take seconds to create), a tiny checkpoint, sample task data, and two
real fine-tunes of SST-2 registered under one name; the rest logs synthetic stage outputs. The lineage of a real
ingestion: tests/integration/test_mlflow_lineage.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from gpt1 import recipe
from gpt1.recipe import experiment as P
from gpt1.pipeline.lineage import log_step
from gpt1.tracking import logger, models, runs
from gpt1.pretrain import outputs as pretrain_outputs
from gpt1 import tasks
from gpt1.tokenizer import bpe
from gpt1.config import FinetuneConfig, ModelConfig, TrackingConfig, load_config
from gpt1.finetune.train import FinetuneRun, finetune
from gpt1.finetune.train import log_finished as log_finished_finetune
from gpt1.io import read_json, write_json
from gpt1.model.transformer import GPT1
from gpt1.finetune.predict import raw_inputs
from gpt1.pretrain.outputs import log_finished as log_finished_pretrain
from gpt1.pretrain.outputs import log_pretrained_model
from gpt1.report.render import build_report
from gpt1.stages.base import Result
from gpt1.stages.outputs import mark_done

torch.set_num_threads(1)

EXPERIMENT = "test-mlflow-models"
REGISTERED = "test-models-sst2"
TINY = dict(n_ctx=64, n_layer=2, n_head=2, n_embd=32, d_ff=64)
# Two recipes of the same task, registered as versions 1 and 2 of one registered model.
RECIPES = (FinetuneConfig(lr=1e-3, batch_size=16, epochs=1, max_train_examples=32, max_eval_examples=40, seed=0),
           FinetuneConfig(lr=3e-3, batch_size=8, epochs=2, max_train_examples=64, max_eval_examples=40, seed=1))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mlflow-models")


@pytest.fixture(scope="module")
def store(work, empty_mlflow_db) -> str:
    shutil.copy(empty_mlflow_db, work / "mlflow.db")  # its tables already created
    uri = f"sqlite:///{work / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(EXPERIMENT, artifact_location=(work / "artifacts").as_uri())
    return uri


@pytest.fixture(scope="module")
def checkpoint(work, sample_tasks) -> Path:
    book = sorted((sample_tasks.parent / "books").glob("*.txt"))[0]
    tok = bpe.train([book.read_text(encoding="utf-8")[:100_000]], merges=200, show_progress=False)
    torch.manual_seed(0)
    GPT1(ModelConfig(vocab_size=tok.vocab_size, **TINY)).save_pretrained(work / "checkpoint")
    tok.save(work / "checkpoint")
    return work / "checkpoint"


@pytest.fixture(scope="module")
def registered(work, store, sample_tasks, checkpoint) -> list[tuple[Path, dict]]:
    """Two fine-tunes of SST-2 with different recipes, each registered as a version of REGISTERED."""
    return [(work / f"sst2-{i}", finetune("sst2", sample_tasks / "SST-2", checkpoint, work / f"sst2-{i}", cfg,
                                          tracking=TrackingConfig(tracking_uri=store, experiment=EXPERIMENT),
                                          run=FinetuneRun(registered_model=REGISTERED)))
            for i, cfg in enumerate(RECIPES)]


def test_champion_is_the_best_version_and_loads_by_alias_on_raw_inputs(registered, store, sample_tasks):
    client = MlflowClient(store)
    versions = sorted(client.search_model_versions(f"name='{REGISTERED}'"), key=lambda v: int(v.version))
    assert [v.run_id for v in versions] == [result["run_id"] for _, result in registered]
    scores = [result["metrics"]["primary"] for _, result in registered]
    assert [float(v.tags[models.HEADLINE_TAG]) for v in versions] == pytest.approx(scores)
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # the rule: highest, the earliest on a tie
    assert client.get_registered_model(REGISTERED).aliases == {"champion": versions[best].version}

    out_dir, _ = registered[best]
    expected = {r["id"]: r["prediction"] for r in map(json.loads, (out_dir / "predictions" / "dev.jsonl")
                                                      .read_text().splitlines())}
    dev = [ex for ex in tasks.load("sst2", sample_tasks / "SST-2", "dev") if ex.id in expected][:6]
    raw = pd.DataFrame([raw_inputs(tasks.get("sst2"), ex) for ex in dev])
    assert list(raw.columns) == ["sentence"]
    with models.process_uri(store):
        champion = mlflow.pyfunc.load_model(f"models:/{REGISTERED}@champion")
        newest = mlflow.pyfunc.load_model(f"models:/{REGISTERED}/latest")  # MLflow reserves the alias "latest"
    assert list(champion.predict(raw)["prediction"]) == [expected[ex.id] for ex in dev]
    assert newest.metadata.run_id == registered[-1][1]["run_id"]
    assert champion.metadata.model_id == versions[best].source.removeprefix("models:/")


def test_the_pretrained_model_is_logged_uploaded_or_by_reference(work, store, monkeypatch):
    final = work / "pretrain" / "final"
    (final / "hf").mkdir(parents=True)
    (final / "hf" / "config.json").write_text('{"model_type": "openai-gpt"}')
    (final / "hf" / "model.safetensors").write_bytes(b"\0" * 4096)
    cfg = load_config("smoke", ["model.n_layer=2"])
    metrics = {"loss": 3.1, "val_loss": 3.4, "probe/sst2": 55.0}  # at the last update

    def pretrain_run() -> logger.RunLogger:
        run = logger.RunLogger("pretrain", experiment=EXPERIMENT, uri=store)
        run.log_metrics({"loss": 4.0}, step=20)
        run.log_metrics(metrics, step=30)
        log_pretrained_model(run, final, cfg, 30, "ab" * 32)
        run.end()
        return run

    small = pretrain_run()
    monkeypatch.setattr(pretrain_outputs, "MODEL_UPLOAD_LIMIT", 1024)  # the same folder counted as large
    large = pretrain_run()

    client = MlflowClient(store)
    uploaded = client.get_logged_model(small.model_ids["pretrained"])
    external = client.get_logged_model(large.model_ids["pretrained"])
    for model in (uploaded, external):
        assert model.name == "pretrained" and model.model_type == "gpt1-pretrained"
        assert model.params["model.n_layer"] == "2" and model.tags["gpt1.location"] == str(final / "hf")
        assert model.tags["gpt1.weights_sha256"] == "ab" * 32  # the final weights' hash from training.json
        assert {m.key: m.value for m in model.metrics} == metrics
    assert "mlflow.model.isExternal" not in uploaded.tags and external.tags["mlflow.model.isExternal"] == "true"
    uploaded_files = {f.path for f in client.list_logged_model_artifacts(uploaded.model_id)}
    assert uploaded_files == {"config.json", "model.safetensors"}
    assert {f.path for f in client.list_logged_model_artifacts(external.model_id)} == {"MLmodel"}


def test_a_cached_finetune_and_pretraining_still_log_a_child_run_with_their_metrics(work, store, registered):
    client = MlflowClient(store)
    parent = logger.RunLogger("gpt1/smoke · rerun", experiment=EXPERIMENT, uri=store)
    out_dir, result = registered[0]
    tags = runs.stage_tags("finetune", key="k1", preset="smoke", cached=True)
    cached_id = log_finished_finetune(out_dir, run_name="finetune-full-sst2", parent_run_id=parent.run_id,
                                      experiment=EXPERIMENT, tracking_uri=store, tags=tags)
    cached, trained = client.get_run(cached_id), client.get_run(result["run_id"])
    assert cached.data.tags["mlflow.parentRunId"] == parent.run_id and cached.data.tags["gpt1.cached"] == "true"
    assert cached.data.tags["gpt1.source_run_id"] == result["run_id"] and cached.data.tags["gpt1.key"] == "k1"
    final = {k: v for k, v in trained.data.metrics.items() if k.startswith("task/")}
    assert final and {k: cached.data.metrics[k] for k in final} == final
    assert cached.data.params["finetune.lr"] == trained.data.params["finetune.lr"]
    assert ({d.dataset.name for d in cached.inputs.dataset_inputs}
            == {d.dataset.name for d in trained.inputs.dataset_inputs})

    out = work / "pretrain"
    write_json(out / "config.json", load_config("smoke").model_dump(mode="json"))
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 1, "loss": 5.0, "lr": 1e-4, "seconds": 0.1}, {"step": 2, "loss": 4.0, "lr": 2e-4, "seconds": 0.1},
        {"step": 2, "val_loss": 4.5, "val_ppl": 90.0})))
    write_json(out / "final" / "training.json", {"steps": 2, "tokens_seen": 4096, "mlflow_run_id": "abc",
                                                 "shards_key": "s1"})
    pretrain_id = log_finished_pretrain(out, parent_run_id=parent.run_id, experiment=EXPERIMENT, tracking_uri=store,
                                        tags=runs.stage_tags("pretrain", key="k2", cached=True))
    parent.end()
    logged = client.get_run(pretrain_id)
    assert logged.data.metrics == {"loss": 4.0, "lr": 2e-4, "val_loss": 4.5, "val_ppl": 90.0, "tokens_seen": 4096}
    assert logged.data.tags["gpt1.source_run_id"] == "abc" and logged.data.tags["gpt1.cached"] == "true"
    assert logged.data.params["model.vocab_size"] == str(load_config("smoke").model.vocab_size)


def test_pipeline_logs_cached_finetunes_once_and_the_values_used_on_the_parent(work, store, registered):
    client = MlflowClient(store)
    cfg = load_config("smoke", ["finetune.tasks=[sst2]", f"tracking.tracking_uri={store}",
                                f"tracking.experiment={EXPERIMENT}"])
    plan = recipe.plan(cfg, work / "plan")
    parent = runs.start_pipeline_run(cfg, flow="gpt1", flow_run="cached-run")

    # the tokenizer stage (finished earlier): its child run, and on the parent the vocabulary and merges learnt
    stats = {"vocab_size": 1383, "merges": 1313, "merges_requested": cfg.train_tokenizer.merges}
    tokenizer_dir = plan.dir("train-tokenizer")
    tokenizer_dir.mkdir(parents=True)
    log_step(plan, plan.steps["train-tokenizer"],
             Result(tokenizer_dir, plan.ref("train-tokenizer").key, {"stats": stats}, True), parent.run_id)

    # a fine-tune done by an earlier flow run: logged as cached; one this flow run did: not again
    task_dir = plan.task_dir("sst2")
    shutil.copytree(registered[0][0], task_dir)
    mark_done(task_dir, "finetune", "task-key")
    step = plan.steps["finetune-full-sst2"]
    log_step(plan, step, Result(task_dir, "task-key", {}, True), parent.run_id)
    result = read_json(task_dir / "metrics.json")
    write_json(task_dir / "metrics.json", {**result, "parent_run_id": parent.run_id})
    log_step(plan, step, Result(task_dir, "task-key", {}, True), parent.run_id)

    # a report an earlier run wrote: its files and headline metrics on this parent too
    build_report([plan.variant_dir("full")], work / "report", ["full"])
    log_step(plan, plan.steps["report"], Result(work / "report", "report-key", {}, True), parent.run_id)
    parent.end()

    got = client.get_run(parent.run_id)
    assert got.data.metrics["task/sst2/accuracy"] == pytest.approx(result["metrics"]["accuracy"])
    assert sorted(a.path for a in client.list_artifacts(parent.run_id, "report")) == [
        "report/results.json", "report/results.md", "report/results.png"]
    assert got.data.params["train_tokenizer.merges"] == str(cfg.train_tokenizer.merges)  # the config as asked stays
    assert {k: v for k, v in got.data.params.items() if k.startswith("resolved.")} == {
        "resolved.train_tokenizer.merges": "1313", "resolved.train_tokenizer.vocab_size": "1383",
        "resolved.model.vocab_size": "1383"}
    children = client.search_runs([got.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.run_id}'")
    assert sorted(r.info.run_name for r in children) == ["finetune-full-sst2", "train-tokenizer"]
    by_name = {r.info.run_name: r for r in children}
    assert by_name["finetune-full-sst2"].data.tags["gpt1.key"] == "task-key"
    tokenizer_run = by_name["train-tokenizer"]
    assert {k: tokenizer_run.data.tags[k] for k in ("gpt1.stage", "gpt1.cached", "gpt1.preset", "gpt1.key")} == {
        "gpt1.stage": "train-tokenizer", "gpt1.cached": "true", "gpt1.preset": "smoke",
        "gpt1.key": plan.ref("train-tokenizer").key}
    assert {d.dataset.name for d in tokenizer_run.inputs.dataset_inputs} == {"corpus", "train-tokenizer-output"}


def test_hub_data_is_logged_with_its_repo_config_split_and_revision(store):
    from gpt1.config import IngestConfig
    from gpt1.data.ingest.stage import Job as IngestJob
    from gpt1.finetune.train import log_task_data

    splits = {"train": {"rows": 10, "bad": {}, "excluded": {}, "sha256": "a" * 64},
              "dev": {"rows": 4, "bad": {"label": 1}, "excluded": {}, "sha256": "b" * 64}}
    run = logger.RunLogger("hub-data", experiment=EXPERIMENT, uri=store)
    log_task_data(run, tasks.get("mnli"), "hf:glue/mnli@bcdcba79", splits)
    key, source = IngestJob("hf:bookcorpus/bookcorpus@d2e5b3:train", "c" * 64, IngestConfig()).lineage_inputs()["source"]
    run.log_dataset("source", key, source)
    run.end()
    got = MlflowClient(store).get_run(run.run_id)
    sources = {d.dataset.name: (d.dataset.source_type, {k: v for k, v in json.loads(d.dataset.source).items() if v})
               for d in got.inputs.dataset_inputs}
    glue = {"path": "nyu-mll/glue", "config_name": "mnli", "revision": "bcdcba79"}
    assert sources == {
        "mnli/train": ("hugging_face", {**glue, "split": "train"}),
        "mnli/dev": ("hugging_face", {**glue, "split": "validation_matched+validation_mismatched"}),
        "source": ("hugging_face", {"path": "bookcorpus/bookcorpus", "split": "train", "revision": "d2e5b3"})}
    assert got.data.metrics["data/dev/malformed"] == 1 and got.data.metrics["data/train/rows"] == 10


def test_a_finetune_logged_while_the_server_was_down_is_replayed_with_its_model(work, store, sample_tasks,
                                                                                 checkpoint, monkeypatch):
    from gpt1 import cli
    from gpt1.runtime.processes import free_port

    spool = work / "spool"
    monkeypatch.setenv("GPT1_MLFLOW_SPOOL_DIR", str(spool))
    monkeypatch.setenv("GPT1_MLFLOW_FLUSH_TIMEOUT", "0")  # give up at once: everything goes to the spool
    result = finetune("sst2", sample_tasks / "SST-2", checkpoint, work / "offline", RECIPES[0],
                      tracking=TrackingConfig(tracking_uri=f"http://127.0.0.1:{free_port()}", experiment=EXPERIMENT),
                      run=FinetuneRun(name="offline/sst2", registered_model="test-models-offline"))
    assert result["run_id"] is None  # the server was never reached
    [path] = spool.glob("mlflow-undelivered-*.json")
    calls = [c["call"] for c in json.loads(path.read_text())["calls"]]
    assert {"log_model", "register_model", "log_inputs", "end"} <= set(calls)

    assert cli.main(["replay-spool", str(spool), "--tracking-uri", store]) == 0
    client = MlflowClient(store)
    [run] = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id],
                               "attributes.run_name = 'offline/sst2'")
    assert run.info.status == "FINISHED" and run.data.tags["gpt1.stage"] == "finetune"
    assert run.data.metrics["task/sst2/accuracy"] == pytest.approx(result["metrics"]["accuracy"])
    [output] = run.outputs.model_outputs
    assert client.get_logged_model(output.model_id).name == "sst2"
    [version] = client.search_model_versions("name='test-models-offline'")
    assert version.source == f"models:/{output.model_id}"
    assert client.get_registered_model("test-models-offline").aliases == {"champion": version.version}
