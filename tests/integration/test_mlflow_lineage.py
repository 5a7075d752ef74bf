"""MLflow lineage of a real ingestion with task text and the leak check: the ingest child run names each task's train
text, and its output's profile says what the corpus is made of. The other MLflow checks on the pipeline's runs:
tests/unit/test_mlflow_models.py."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from gpt1 import recipe
from gpt1.config import load_config
from gpt1.pipeline.lineage import log_step
from gpt1.tracking import runs
from tests.unit.test_mlflow_models import EXPERIMENT, store, work  # noqa: F401 (store, work: fixtures)


def test_the_corpus_lineage_names_each_tasks_train_text_and_what_the_corpus_is_made_of(work, store, sample_tasks):
    cfg = load_config("smoke", ["finetune.tasks=[sst2,rte]", f"finetune.data={sample_tasks}",
                                "ingest.task_text=true", "ingest.leak_check=true", f"ingest.source={sample_tasks.parent}/books",
                                f"tracking.tracking_uri={store}", f"tracking.experiment={EXPERIMENT}"])
    plan = recipe.plan(cfg, work / "lineage")
    parent = runs.start_pipeline_run(cfg, flow="gpt1", flow_run="lineage-run")
    result = plan.steps["ingest"].job.run(plan.dir("ingest"), wait=False)
    log_step(plan, plan.steps["ingest"], result, parent.run_id)
    parent.end()
    client = MlflowClient(store)
    [child] = client.search_runs([client.get_run(parent.run_id).info.experiment_id],
                                 f"tags.mlflow.parentRunId = '{parent.run_id}'")
    datasets = {d.dataset.name: d.dataset for d in child.inputs.dataset_inputs}
    assert set(datasets) == {"source", "task_text.sst2", "task_text.rte", "ingest-output"}
    assert json.loads(datasets["task_text.sst2"].source)["uri"].endswith("SST-2")
    profile = json.loads(datasets["ingest-output"].profile)
    stats = result.marker["stats"]
    assert profile["task_text_records"] == stats["origins"]["task_text"]["records"] > 0
    assert profile["leak_check_removed_corpus"] == stats["leak_check"]["sentences_removed"]["corpus"]
