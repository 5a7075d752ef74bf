"""What a pipeline's MLflow parent run shows at a glance: the saved runs view with every variant's headline metrics
side by side, the results table and task models on the run's overview, and the stage runs a cancelled flow run
interrupted ended with it (`gpt1.tracking.runs`)."""

from __future__ import annotations

import shutil

import pytest
from mlflow.tracking import MlflowClient

from gpt1.config import load_config
from gpt1.tracking import runs
from gpt1.tracking.logger import RunLogger


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_db) -> str:
    root = tmp_path_factory.mktemp("overview")
    shutil.copy(empty_mlflow_db, root / "mlflow.db")  # its tables already created
    uri = f"sqlite:///{root / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("overview", artifact_location=(root / "artifacts").as_uri())
    return uri


def config(store: str, *more: str):
    return load_config("smoke", ["tracking.experiment=overview", f"tracking.tracking_uri={store}",
                                 "finetune.tasks=[cola,rte]", *more])


def test_the_view_puts_each_variants_metric_side_by_side_as_the_report_names_them():
    from gpt1.report.render import headline_metrics

    cfg = load_config("smoke", ["finetune.tasks=[cola,rte]", "orchestration.ablations=[no_pretrain,no_aux_lm]"])
    columns = runs.headline_columns(cfg)
    assert columns[0] == "tags.`gpt1.preset`"
    assert columns[1:4] == ["metrics.`glue_score`", "metrics.`no_pretrain/glue_score`",
                            "metrics.`no_aux_lm/glue_score`"]
    assert columns[4:7] == ["metrics.`task/cola/primary`", "metrics.`no_pretrain/task/cola/primary`",
                            "metrics.`no_aux_lm/task/cola/primary`"]
    # the names are the report's own: every column shows a metric the report logs on the parent
    logged = headline_metrics({"runs": {
        variant: {"glue_score": 50.0, "tasks": {t: {"metrics": {"primary": 1.0}} for t in ("cola", "rte")}}
        for variant in ("full", "no_pretrain", "no_aux_lm")}})
    assert {c.removeprefix("metrics.`").rstrip("`") for c in columns[1:]} == {
        k for k in logged if k.endswith(("glue_score", "/primary"))}


def test_the_parent_overview_carries_the_results_table_and_the_task_models(store):
    cfg = config(store)
    parent = runs.start_pipeline_run(cfg, flow="gpt1", deployment="smoke", flow_run="tidy-heron")
    table = "## GPT-1 results (sample data)\n\n| run | CoLA |\n|---|---|\n| ours: full | 89.6 |\n"
    runs.describe_pipeline_run(parent, cfg, table, ["overview-cola", "overview-rte"])
    parent.end()
    got = MlflowClient(store).get_run(parent.run_id)
    note = got.data.tags["mlflow.note.content"]  # the overview page's description, rendered as markdown
    assert note.rstrip().endswith(table.rstrip()) and "(cut here" not in note
    assert "[overview-cola](#/models/overview-cola)" in note and "[overview-rte](#/models/overview-rte)" in note
    assert f"({got.data.tags['gpt1.runs_view']})" in note  # the link to the saved view, as the run's tag has it


def test_a_long_results_table_is_cut_after_the_links_to_what_mlflow_keeps(store):
    cfg = config(store)
    parent = runs.start_pipeline_run(cfg, flow="gpt1", deployment="smoke", flow_run="long-heron")
    table = "## GPT-1 results\n\n" + "".join(f"| row {i} | {i}.0 |\n" for i in range(2000))
    runs.describe_pipeline_run(parent, cfg, table, ["overview-cola"])
    parent.end()
    note = MlflowClient(store).get_run(parent.run_id).data.tags["mlflow.note.content"]
    assert len(note) <= runs.NOTE_LIMIT
    assert note.index("[overview-cola]") < note.index("## GPT-1 results")  # the links survive the cut
    assert note.rstrip().endswith("under report/)") and "| row 1999 |" not in note


def test_a_cancelled_flows_running_stage_runs_end_killed_and_finished_ones_stay(store):
    parent = runs.start_pipeline_run(config(store), flow="gpt1", flow_run="stopped-owl")
    stopped = RunLogger("pretrain", experiment="overview", uri=store, parent_run_id=parent.run_id)
    finished = RunLogger("ingest", experiment="overview", uri=store, parent_run_id=parent.run_id)
    finished.end()
    assert stopped.flush() and stopped.run_id
    runs.end_running_children(parent, "KILLED")
    parent.end("KILLED")
    client = MlflowClient(store)
    assert client.get_run(stopped.run_id).info.status == "KILLED"
    assert client.get_run(finished.run_id).info.status == "FINISHED"
    assert client.get_run(parent.run_id).info.status == "KILLED"
