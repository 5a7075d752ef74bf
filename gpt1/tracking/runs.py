"""What a pipeline run carries in MLflow beyond the values it logs: the stage tags, Hugging Face dataset sources,
system metrics, the pipeline's parent run and its saved runs-table view. Everything here sends through a
`gpt1.tracking.logger.RunLogger`, so an outage queues, retries and spools it like any other call; logged models and the
Model Registry are gpt1.tracking.models.

Design choices:
- Stage runs are tagged by `stage_tags`: `gpt1.stage`, `gpt1.key` (the stage's content key), `gpt1.preset`,
  `gpt1.cached`.
- Datasets are `mlflow.data` sources: a local path, or `hub_dataset_source` for Hugging Face hub data (id, config,
  split, revision).
- `monitor_system` samples MLflow's system metrics monitors (CPU, memory, disk, network; GPU when pynvml finds
  one) and sends them through the run, so an outage queues them like any metric (MLflow's own monitor loop stops
  for good on its first failed request).
- The runs table of MLflow 3 opens with no metric columns; the pipeline's parent run saves a view that shows the
  headline metrics of every variant side by side (`runs_view`, `headline_columns`) and links it from the run and
  the experiment's description. Once the report is written, the parent's description (the overview page's
  markdown) is the results table with the registered task models (`describe_pipeline_run`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from gpt1.config import PipelineConfig, flatten
from gpt1.io import stable_hash
from gpt1.tracking.errors import classify
from gpt1.tracking.logger import RunLogger, tag_experiment

if TYPE_CHECKING:
    from mlflow.data.dataset_source import DatasetSource

log = logging.getLogger(__name__)

TAG_STAGE, TAG_KEY, TAG_PRESET, TAG_CACHED = "gpt1.stage", "gpt1.key", "gpt1.preset", "gpt1.cached"
SYSTEM_METRICS_ENV = (
    "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"  # MLflow's switch; "false" turns `monitor_system` off
)


# -- tags and dataset sources ---------------------------------------------------------------------------------
def stage_tags(
    stage: str, *, key: str | None = None, preset: str | None = None, cached: bool = False
) -> dict[str, str]:
    """The tags of a stage's run: which stage, its content key, the preset, and whether it was done already."""
    tags = {TAG_STAGE: stage, TAG_CACHED: str(cached).lower()}
    if key:
        tags[TAG_KEY] = key
    if preset:
        tags[TAG_PRESET] = preset
    return tags


def hub_dataset_source(
    path: str, *, config: str | None = None, split: str | None = None, revision: str | None = None
) -> DatasetSource:
    """An `mlflow.data` source for Hugging Face hub data (what `datasets.load_dataset` would be given)."""
    from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource

    return HuggingFaceDatasetSource(path, config_name=config, split=split, revision=revision)


# -- system metrics -------------------------------------------------------------------------------------------
def monitor_system(run: RunLogger) -> None:
    """Log system metrics (`system/*`) on the run every MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL seconds (default
    10) until `run.end()`, and once more at the end; nothing when MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING is false. A
    re-attached run (resumed training) continues the earlier steps."""
    if not run.enabled or run.system_metrics is not None:
        return
    if os.environ.get(SYSTEM_METRICS_ENV, "").strip().lower() in ("false", "0"):
        return
    try:
        sampler = SystemMetrics(run)
        sampler.start()
    except Exception as err:  # a broken monitor (e.g. a GPU library) must never stop training
        log.warning("MLflow run %s: no system metrics: %s", run.name, err)
        return
    run.system_metrics = sampler


class SystemMetrics:
    """MLflow's system metrics monitor (its CPU, memory, disk and network monitors, and the GPU one when pynvml
    finds a GPU; its sampling settings MLFLOW_SYSTEM_METRICS_*), with a sampling thread of its own that logs through
    a RunLogger: MLflow's loop polls the run's status over HTTP every sample and stops for good on the first
    failure, so an outage would end system metrics for the rest of training."""

    def __init__(self, run: RunLogger):
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self.monitor = SystemMetricsMonitor(
            run.run_id, resume_logging=run.reattached, tracking_uri=run.uri
        )
        self.run = run
        self.prefix = "system/" + (f"{self.monitor.node_id}/" if self.monitor.node_id else "")
        self.samples = 0
        self.step = self.monitor._logging_step  # 0, or after the resumed run's last system step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpt1-system-metrics", daemon=True)

    def start(self) -> None:
        import psutil

        psutil.cpu_percent()  # the first reading then covers the time since this call, not since boot
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.monitor.sampling_interval):
            self._sample()

    def _sample(self) -> None:
        try:
            self.monitor.collect_metrics()
        except (
            Exception
        ) as err:  # a monitor failing (e.g. a GPU gone) skips a sample, never stops training
            log.warning("system metrics: a sample failed: %s", err)
            return
        self.samples += 1
        if self.samples >= self.monitor.samples_before_logging:
            self._publish()

    def _publish(self) -> None:
        metrics = self.monitor.aggregate_metrics()
        for monitor in self.monitor.monitors:
            monitor.clear_metrics()
        self.samples = 0
        self.run.log_metrics({self.prefix + k: v for k, v in metrics.items()}, step=self.step)
        self.step += 1

    def finish(self) -> None:
        """Stop sampling; a last sample covers the time since the previous one (a run shorter than the interval
        still gets one)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._sample()
        if self.samples:
            self._publish()


# -- the pipeline's parent run and its runs view ----------------------------------------------------------------
RUNS_VIEW_TAG = (
    "mlflow.sharedViewState."  # + key: a saved runs-table view of the MLflow UI (columns, sort)
)
_VIEW_NOTE = (
    "[Runs table with the headline metrics]"  # starts the experiment description written here
)


def runs_view(client, experiment_id: str, name: str, columns: list[str]) -> str:
    """Save a runs-table view of `experiment_id` named `name` showing `columns` (e.g. "metrics.`glue_score`",
    "tags.`gpt1.preset`"), newest runs first; returns its link (relative to the tracking server's UI).

    MLflow 3.17 has no per-experiment default columns: the table's columns live in the browser (local storage) and
    start at Source/Models/Dataset. Its saved views are experiment tags `mlflow.sharedViewState.<key>` holding
    {name, createdAt, updatedAt, state} (state: the view as JSON, which the UI also reads uncompressed); they are
    listed under "Views" on the runs page, and `#/experiments/<id>/runs?viewStateShareKey=<key>` opens one. The
    key hashes the view, so saving the same view again replaces it rather than adding another."""
    state = _view_state(columns)
    now = int(time.time() * 1000)
    tag_experiment(
        client,
        experiment_id,
        RUNS_VIEW_TAG + stable_hash(state),
        json.dumps({"name": name, "createdAt": now, "updatedAt": now, "state": json.dumps(state)}),
    )
    return runs_view_link(experiment_id, columns)


def runs_view_link(experiment_id: str, columns: list[str]) -> str:
    """The link of the view `runs_view` saves for `columns`."""
    return (
        f"#/experiments/{experiment_id}/runs?viewStateShareKey={stable_hash(_view_state(columns))}"
    )


def _view_state(columns: list[str]) -> dict:
    return {"orderByKey": "attributes.start_time", "orderByAsc": False, "selectedColumns": columns}


def headline_columns(cfg: PipelineConfig) -> list[str]:
    """The saved view's columns: the preset, then the GLUE score and each task's primary metric, every variant
    side by side (the report logs an ablation's as `<variant>/glue_score`, `<variant>/task/<task>/primary`)."""
    prefixes = ["", *(f"{variant}/" for variant in cfg.orchestration.ablations)]
    names = ["glue_score", *(f"task/{task}/primary" for task in cfg.finetune.tasks)]
    return [
        "tags.`gpt1.preset`",
        *(f"metrics.`{prefix}{name}`" for name in names for prefix in prefixes),
    ]


def runs_view_name(cfg: PipelineConfig) -> str:
    return f"headline metrics: {' vs '.join(['full', *cfg.orchestration.ablations])}"[:100]


def start_pipeline_run(
    cfg: PipelineConfig,
    *,
    flow: str,
    deployment: str | None = None,
    flow_run: str | None = None,
    flow_run_id: str | None = None,
) -> RunLogger:
    """The MLflow parent run of one pipeline flow run, named after the Prefect deployment and flow run
    (`gpt1/smoke · crimson-falcon`; without a deployment `gpt1 [smoke] · crimson-falcon`), tagged with their ids,
    the preset and the code version; its params are the config as asked (the stages add `resolved.*` params, the
    values actually used, once known). The experiment gets a saved runs-table view with the headline metrics
    (`runs_view`): its link is the parent's tag `gpt1.runs_view` and the experiment's description, unless someone
    else wrote that."""
    where = f"{flow}/{deployment}" if deployment else f"{flow} [{cfg.preset}]"
    name = f"{where} · {flow_run}" if flow_run else where
    tags = {
        "prefect.flow": flow,
        "prefect.deployment": deployment or "(none)",
        "gpt1.preset": cfg.preset,
    }
    if flow_run:
        tags["prefect.flow_run_name"] = flow_run
    if flow_run_id:
        tags["prefect.flow_run_id"] = flow_run_id
    run = RunLogger(
        name, experiment=cfg.tracking.experiment, uri=cfg.tracking.tracking_uri, tags=tags
    )
    run.log_params(flatten(cfg.model_dump(mode="json")))
    publish_runs_view(run, runs_view_name(cfg), headline_columns(cfg))
    return run


# MLflow keeps at most this many characters of a run's description (its note tag)
NOTE_LIMIT = 8000


def describe_pipeline_run(
    run: RunLogger, cfg: PipelineConfig, results_markdown: str, models: list[str]
) -> None:
    """The parent run's description, which its overview page shows as markdown: the registered task models (linked
    to the Model Registry), the experiment's runs view (`start_pipeline_run`), then the results. The links come
    first and the results are cut to what MLflow keeps, pointing to the whole file among the run's artifacts."""
    if not run.enabled:
        return
    head = []
    if models:
        head += [
            "Registered task models (alias `champion`: the best version): "
            + ", ".join(f"[{name}](#/models/{name})" for name in models),
            "",
        ]
    link = runs_view_link(run.experiment_id, headline_columns(cfg))
    head += [f"[Every run of this experiment with its headline metrics]({link})", ""]
    results = results_markdown.rstrip()
    room = NOTE_LIMIT - len("\n".join(head)) - 200
    if len(results) > room:
        cut = results[:room].rsplit("\n", 1)[0]
        results = (
            cut
            + "\n\n(cut here: the whole results.md is among this run's artifacts, under report/)"
        )
    run.set_tags({"mlflow.note.content": "\n".join([*head, results]) + "\n"})


def end_running_children(run: RunLogger, status: str) -> None:
    """End the child runs of `run` still RUNNING with `status` (KILLED: stages stopped mid-way, whose processes
    could not end their own runs). Best effort: with the server out of reach they stay RUNNING, with a warning."""
    if not run.enabled:
        return
    try:
        running = run.client.search_runs(
            [run.experiment_id],
            filter_string=(
                f"tags.mlflow.parentRunId = '{run.run_id}' and attributes.status = 'RUNNING'"
            ),
        )
        for child in running:
            run.client.set_terminated(child.info.run_id, status=status)
    except Exception as err:  # noqa: BLE001 - the parent still ends; these runs stay RUNNING
        log.warning(
            "MLflow: could not end the child runs of %s as %s: %s",
            run.name,
            status,
            classify(err, run.uri),
        )


def publish_runs_view(run: RunLogger, name: str, columns: list[str]) -> None:
    """`runs_view` of the run's experiment, linked from the run (tag `gpt1.runs_view`) and from the experiment's
    description (when it has none, or one written here before)."""

    def publish() -> None:
        link = runs_view(run.client, run.experiment_id, name, columns)
        run.client.set_tag(run.run_id, "gpt1.runs_view", link)
        note = run.client.get_experiment(run.experiment_id).tags.get("mlflow.note.content")
        if note is None or note.startswith(_VIEW_NOTE):
            tag_experiment(
                run.client,
                run.experiment_id,
                "mlflow.note.content",
                f"{_VIEW_NOTE}({link}): the pipeline runs with their headline metrics.",
            )

    run.submit("runs_view", publish, {"name": name, "columns": columns})
