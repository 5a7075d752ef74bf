"""MLflow 3 logged models and the Model Registry, queued through a `gpt1.tracking.logger.RunLogger` like any other
call (so an outage retries and spools them, and `gpt1 replay-spool` makes them again).

Design choices:
- Models are MLflow 3 logged models (the run's "Logged models", the experiment's Models tab, `models:/<model_id>`,
  `runs:/<run_id>/<name>`): task models come from gpt1.finetune.serving, a folder of files from `log_files_model` (the
  pre-trained HF export: uploaded, or recorded by location as an external model when large). Both are linked to the
  metrics the run logged at the model's step.
- `register_model` adds a Model Registry version of a logged model and moves the alias `champion` to the version
  with the highest headline metric (`update_champion`). MLflow reserves the alias `latest`
  (`_validate_model_alias_name_reserved`); `models:/<name>/latest` already names the newest version.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpt1.io import sha256_tree
from gpt1.tracking.logger import METRICS_PER_REQUEST, RunLogger

HEADLINE_TAG = (
    "gpt1.headline"  # a registered version's headline metric value (what `champion` is chosen by)
)
CHAMPION = "champion"

_PROCESS_URI_LOCK = threading.RLock()


@contextlib.contextmanager
def process_uri(uri: str) -> Iterator[None]:
    """MLflow's process-wide tracking URI set to `uri` for the block, one block at a time in the process. For the
    MLflow functions that ignore their client's URI: `Model.log` and its fluent helpers, and the SQL registry store
    resolving a `models:/<id>` source (it would otherwise open ./mlflow.db)."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    # MLflow's restore of "no URI set" also deletes $MLFLOW_TRACKING_URI from the environment; a reused process
    # (a fine-tune worker) would then log its next runs to ./mlflow.db. Put it back.
    with _PROCESS_URI_LOCK:
        env = os.environ.get("MLFLOW_TRACKING_URI")
        try:
            with _use_tracking_uri(uri):
                yield
        finally:
            if env is not None:
                os.environ["MLFLOW_TRACKING_URI"] = env


# -- logged models -----------------------------------------------------------------------------------------------
def log_files_model(
    run: RunLogger,
    name: str,
    folder: str | os.PathLike,
    *,
    upload: bool,
    model_type: str,
    params: dict[str, Any] | None = None,
    tags: dict[str, Any] | None = None,
    step: int = 0,
) -> None:
    """A folder of model files (not an MLflow-format model, e.g. a transformers export) as a logged model of
    `run`, linked to the metrics the run logged at `step` (as `Model.log` links them): uploaded when
    `upload`, else an external model (MLflow's `mlflow.model.isExternal`) whose tags `gpt1.location` and
    `gpt1.sha256` say where it is and what it holds."""
    folder = Path(folder).resolve()
    param_texts = {k: str(v) for k, v in (params or {}).items()}
    tag_texts = {k: str(v) for k, v in (tags or {}).items()}
    record = {
        "kind": "files",
        "folder": str(folder),
        "upload": upload,
        "model_type": model_type,
        "params": param_texts,
        "tags": tag_texts,
        "step": step,
    }

    def make(run: RunLogger, attempt: dict) -> str:
        from mlflow.entities import LoggedModelOutput, LoggedModelStatus
        from mlflow.models import Model
        from mlflow.models.utils import get_external_mlflow_model_spec
        from mlflow.utils.mlflow_tags import MLFLOW_MODEL_IS_EXTERNAL

        client = run.client
        if "model_id" not in attempt:
            model_tags = {
                **tag_texts,
                "gpt1.location": str(folder),
                "gpt1.sha256": sha256_tree(folder),
            }
            if not upload:
                model_tags[MLFLOW_MODEL_IS_EXTERNAL] = "true"
            attempt["model_id"] = client.create_logged_model(
                run.experiment_id,
                name=name,
                source_run_id=run.run_id,
                tags=model_tags,
                params=param_texts,
                model_type=model_type,
            ).model_id
        model_id = attempt["model_id"]
        if upload:
            client.log_model_artifacts(model_id, str(folder))
        else:  # MLflow's placeholder MLmodel of an external model, as `mlflow.create_external_model` writes
            spec: Model = get_external_mlflow_model_spec(client.get_logged_model(model_id))
            with tempfile.TemporaryDirectory() as tmp:
                spec.save(os.path.join(tmp, "MLmodel"))
                client.log_model_artifacts(model_id, tmp)
        client.finalize_logged_model(model_id, LoggedModelStatus.READY)
        client.log_outputs(run.run_id, [LoggedModelOutput(model_id, step)])
        link_metrics(run, model_id, step)
        return model_id

    run.log_model(name, make, record)


def link_metrics(run: RunLogger, model_id: str, step: int) -> None:
    """Link the metrics `run` logged at `step` to a logged model: the same points logged again with the
    model id, as `mlflow.models.Model.log` does (the store keeps one point per key, step, time and value, so
    the run's curves do not grow). System metrics are left out (their steps count samples, not updates). Only
    inside a queued call."""
    from mlflow.entities import Metric

    client = run.client
    keys = [k for k in client.get_run(run.run_id).data.metrics if not k.startswith("system/")]
    linked = [
        Metric(m.key, m.value, m.timestamp, m.step, model_id=model_id)
        for key in keys
        for m in client.get_metric_history(run.run_id, key)
        if m.step == step and m.model_id is None
    ]
    for i in range(0, len(linked), METRICS_PER_REQUEST):
        client.log_batch(run.run_id, metrics=linked[i : i + METRICS_PER_REQUEST])


# -- Model Registry ---------------------------------------------------------------------------------------------
def register_model(
    run: RunLogger,
    registered_name: str,
    model: str,
    *,
    tags: dict[str, Any] | None = None,
    headline: float | None = None,
) -> None:
    """A new version of Model Registry entry `registered_name` (created on first use) from the run's logged model
    `model`, tagged with `tags` and its `headline` metric; then `update_champion`."""
    if not run.enabled:
        return
    version_tags = {k: str(v) for k, v in (tags or {}).items()}
    if headline is not None:
        version_tags[HEADLINE_TAG] = repr(float(headline))

    def register() -> None:
        from mlflow.exceptions import MlflowException

        try:
            run.client.create_registered_model(registered_name)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        model_id = run.model_ids[model]
        with process_uri(run.uri):
            run.client.create_model_version(
                registered_name,
                f"models:/{model_id}",
                run_id=run.run_id,
                tags=version_tags,
                model_id=model_id,
            )
        update_champion(run.client, registered_name)

    run.submit(
        "register_model",
        register,
        {"registered_model": registered_name, "model": model, "tags": version_tags},
    )


def update_champion(client, registered_name: str) -> str | None:
    """Point the alias `champion` at the version of `registered_name` with the highest headline metric (tag
    `gpt1.headline`: the task's primary metric on its evaluation split, higher is better for every task); on a tie
    the earliest such version keeps it, so a re-run scoring the same does not take it over. Versions without the
    tag (registered by hand) are never chosen. Returns the champion's version."""
    quote = '"' if "'" in registered_name else "'"
    scored = []
    for version in client.search_model_versions(f"name={quote}{registered_name}{quote}"):
        try:
            value = float(version.tags[HEADLINE_TAG])
        except (KeyError, ValueError):
            continue
        if not math.isnan(value):
            scored.append((value, -int(version.version)))
    if not scored:
        return None
    best = str(-max(scored)[1])
    client.set_registered_model_alias(registered_name, CHAMPION, best)
    return best
