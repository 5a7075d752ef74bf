"""MLflow logging that never stops training: run nesting, lineage, and buffered, retried writes.

Every stage logs through `RunLogger`. Each MLflow call is attempted once (short timeout, no long HTTP retry
loop); on failure it is queued and replayed in order on the next call or `flush()`, so an unreachable tracking
server costs nothing but a warning, and the run catches up when the server returns. Runs nest through the
`mlflow.parentRunId` tag (pipeline -> stage -> task) and can be re-attached by id (pre-training resume).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

# A down server must fail fast: MLflow's default is 7 retries with exponential backoff (minutes per call).
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_MAX_PARAM_LEN = 6000


def tracking_uri(uri: str | None = None) -> str:
    """Explicit uri, else $MLFLOW_TRACKING_URI, else a local SQLite store in the working directory."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('mlflow.db').resolve()}"


class RunLogger:
    """One MLflow run, written resiliently. Create with `start_run`, or directly to re-attach by `run_id`."""

    def __init__(
        self,
        name: str,
        *,
        experiment: str = "gpt1",
        uri: str | None = None,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        tags: dict[str, str] | None = None,
        enabled: bool = True,
    ):
        self.name = name
        self.experiment = experiment
        self.uri = tracking_uri(uri)
        self.parent_run_id = parent_run_id
        self.run_id = run_id
        self.tags = dict(tags or {})
        self.enabled = enabled
        self._pending: list[tuple[str, Callable[[], Any]]] = []
        self._client = None
        self._warned = False
        if enabled:
            self._ensure_run()

    # -- plumbing -------------------------------------------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _ensure_run(self) -> bool:
        if self.run_id is not None:
            return True
        try:
            exp = self.client.get_experiment_by_name(self.experiment)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(self.experiment)
            tags = dict(self.tags)
            if self.parent_run_id:
                tags["mlflow.parentRunId"] = self.parent_run_id
            run = self.client.create_run(exp_id, run_name=self.name, tags=tags)
            self.run_id = run.info.run_id
            return True
        except Exception as err:  # server down, bad uri: keep going, try again later
            self._warn(f"could not create MLflow run {self.name!r} at {self.uri}: {err}")
            return False

    def _warn(self, msg: str) -> None:
        if not self._warned:
            log.warning("%s (buffering; will retry)", msg)
            self._warned = True

    def _submit(self, what: str, fn: Callable[[], Any]) -> None:
        if not self.enabled:
            return
        self._pending.append((what, fn))
        self.flush()

    def flush(self) -> bool:
        """Replay queued calls in order; True when nothing is left pending."""
        if not self.enabled:
            return True
        if not self._ensure_run():
            return False
        while self._pending:
            what, fn = self._pending[0]
            try:
                fn()
            except Exception as err:
                self._warn(f"MLflow {what} failed: {err}")
                return False
            self._pending.pop(0)
            if self._warned:
                log.info("MLflow reachable again; flushed %s", what)
                self._warned = False
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- logging API ----------------------------------------------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Param

        items = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # the REST API caps a batch at 100 params
            chunk = items[i : i + 100]
            self._submit("log_params", lambda c=chunk: self.client.log_batch(self.run_id, params=c))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        if items:
            self._submit("log_metrics", lambda: self.client.log_batch(self.run_id, metrics=items))

    def set_tags(self, tags: dict[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in tags.items()]
        self._submit("set_tags", lambda: self.client.log_batch(self.run_id, tags=items))

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        path = str(path)
        if os.path.isdir(path):
            self._submit("log_artifacts", lambda: self.client.log_artifacts(self.run_id, path, artifact_path))
        else:
            self._submit("log_artifact", lambda: self.client.log_artifact(self.run_id, path, artifact_path))

    def log_text(self, text: str, artifact_file: str) -> None:
        self._submit("log_text", lambda: self.client.log_text(self.run_id, text, artifact_file))

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        self.log_text(text, artifact_file)

    def log_dataset(self, name: str, digest: str, source: str, context: str = "input") -> None:
        """Lineage: a dataset (corpus, shards, task files) this run read, identified by its content hash."""
        if not self.enabled:
            return
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(
            name=name, digest=digest[:36], source_type="local", source=json.dumps({"uri": str(source)})
        )
        inputs = [DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])]
        self._submit("log_inputs", lambda: self.client.log_inputs(self.run_id, datasets=inputs))

    def log_reference(self, name: str, path: str | os.PathLike, digest: str) -> None:
        """A large artifact (checkpoint) recorded by location and hash instead of uploaded."""
        self.set_tags({f"ref.{name}.uri": str(Path(path).resolve()), f"ref.{name}.sha256": digest})

    def end(self, status: str = "FINISHED") -> None:
        self._submit("end", lambda: self.client.set_terminated(self.run_id, status=status))
        if self._pending:
            log.warning("MLflow run %s: %d logging calls could not be delivered", self.name, len(self._pending))


@contextlib.contextmanager
def start_run(name: str, **kwargs: Any) -> Iterator[RunLogger]:
    """`with start_run("pretrain", parent_run_id=...) as run:`; FAILED if the block raises."""
    run = RunLogger(name, **kwargs)
    try:
        yield run
    except BaseException:
        run.end("FAILED")
        raise
    run.end("FINISHED")
