"""MLflow logging that never stops training: run nesting, lineage, and buffered, retried writes.

Every stage logs through `RunLogger`. Each MLflow call is attempted once (short timeout, no long HTTP retry
loop); on failure it is queued and replayed in order on a later call or `flush()`, so an unreachable tracking
server costs nothing but a warning, and the run catches up when the server returns. While the server is down,
logging calls only queue (a retry at most every 1, 2, 4 ... 30 s), so a server that hangs cannot slow training.
Runs nest through the `mlflow.parentRunId` tag (pipeline -> stage -> task) and can be re-attached by id
(pre-training resume).

Ending a run (`end()`), and the exit of a process that still holds undelivered calls, keep retrying with backoff
for up to `flush_timeout` seconds (argument, else $GPT1_MLFLOW_FLUSH_TIMEOUT, else 120; once one wait for a server
has run out, later ones in the same process try once). What still cannot be delivered is written as JSON (every
queued call's params, metrics with step and timestamp, tags, artifact paths, status) to `spool_dir` (argument,
else $GPT1_MLFLOW_SPOOL_DIR) when one is set, and reported in a warning either way.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

# A down server must fail fast: MLflow's default is 7 retries with exponential backoff (minutes per call).
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_MAX_PARAM_LEN = 6000
FLUSH_TIMEOUT_ENV = "GPT1_MLFLOW_FLUSH_TIMEOUT"
SPOOL_DIR_ENV = "GPT1_MLFLOW_SPOOL_DIR"
DEFAULT_FLUSH_TIMEOUT = 120.0
_MAX_RETRY_DELAY = 30.0  # seconds between attempts while a server stays down

# Process-wide: loggers holding undelivered calls (drained at exit), and servers a bounded wait already gave up on.
_UNDELIVERED: set["RunLogger"] = set()
_GAVE_UP: set[str] = set()


def flush_timeout() -> float:
    """Seconds `end()` keeps retrying undelivered calls: $GPT1_MLFLOW_FLUSH_TIMEOUT, default 120."""
    raw = os.environ.get(FLUSH_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_FLUSH_TIMEOUT
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %.0f", FLUSH_TIMEOUT_ENV, raw, DEFAULT_FLUSH_TIMEOUT)
        return DEFAULT_FLUSH_TIMEOUT


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
        spool_dir: str | os.PathLike | None = None,
        flush_timeout: float | None = None,
    ):
        self.name = name
        self.experiment = experiment
        self.uri = tracking_uri(uri)
        self.parent_run_id = parent_run_id
        self.run_id = run_id
        self.tags = dict(tags or {})
        self.enabled = enabled
        self.spool_dir = spool_dir or os.environ.get(SPOOL_DIR_ENV) or None
        self.flush_timeout = flush_timeout  # None: $GPT1_MLFLOW_FLUSH_TIMEOUT, else 120 s (read when needed)
        # (what, call, JSON record of what it logs: written to the spool file if it can never be delivered)
        self._pending: list[tuple[str, Callable[[], Any], dict]] = []
        self._client = None
        self._warned = False
        self._retry_at = 0.0  # monotonic time before which logging calls only queue (server known to be down)
        self._retry_delay = 1.0
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
            self._back_off()
            return False

    def _warn(self, msg: str) -> None:
        if not self._warned:
            log.warning("%s (buffering; will retry)", msg)
            self._warned = True

    def _back_off(self) -> None:
        self._retry_at = time.monotonic() + self._retry_delay
        self._retry_delay = min(2 * self._retry_delay, _MAX_RETRY_DELAY)

    def _submit(self, what: str, fn: Callable[[], Any], record: dict | None = None) -> None:
        if not self.enabled:
            return
        self._pending.append((what, fn, record or {}))
        if time.monotonic() >= self._retry_at:
            self._flush_once()
        else:
            _UNDELIVERED.add(self)

    def _flush_once(self) -> bool:
        """One pass: replay queued calls in order until one fails."""
        if not self._ensure_run():
            _UNDELIVERED.add(self)
            return False
        while self._pending:
            what, fn, _ = self._pending[0]
            try:
                fn()
            except Exception as err:
                self._warn(f"MLflow {what} failed: {err}")
                self._back_off()
                _UNDELIVERED.add(self)
                return False
            self._pending.pop(0)
        if self._warned:
            log.info("MLflow reachable again at %s: run %s is up to date", self.uri, self.name)
            self._warned = False
        self._retry_at, self._retry_delay = 0.0, 1.0
        _UNDELIVERED.discard(self)
        _GAVE_UP.discard(self.uri)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Replay queued calls in order; True when nothing is left pending.

        `timeout`: keep retrying with backoff (1, 2, 4 ... 30 s) for up to this many seconds; only one attempt
        when a bounded wait for the same server already ran out in this process."""
        if not self.enabled:
            return True
        if self._flush_once():
            return True
        if not timeout or self.uri in _GAVE_UP:
            return False
        deadline, delay = time.monotonic() + timeout, 1.0
        log.warning("MLflow run %s: %d logging call(s) not delivered to %s yet; retrying for up to %.0fs",
                    self.name, len(self._pending), self.uri, timeout)
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(delay, remaining))
            delay = min(2 * delay, _MAX_RETRY_DELAY)
            if self._flush_once():
                return True
        _GAVE_UP.add(self.uri)
        return False

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
            self._submit("log_params", lambda c=chunk: self.client.log_batch(self.run_id, params=c),
                         {"params": {p.key: p.value for p in chunk}})

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        if items:
            self._submit("log_metrics", lambda: self.client.log_batch(self.run_id, metrics=items),
                         {"metrics": {m.key: m.value for m in items}, "step": step or 0, "timestamp": now})

    def set_tags(self, tags: dict[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in tags.items()]
        self._submit("set_tags", lambda: self.client.log_batch(self.run_id, tags=items),
                     {"tags": {t.key: t.value for t in items}})

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        path = str(path)
        record = {"path": os.path.abspath(path), "artifact_path": artifact_path}
        if os.path.isdir(path):
            self._submit("log_artifacts", lambda: self.client.log_artifacts(self.run_id, path, artifact_path), record)
        else:
            self._submit("log_artifact", lambda: self.client.log_artifact(self.run_id, path, artifact_path), record)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._submit("log_text", lambda: self.client.log_text(self.run_id, text, artifact_file),
                     {"artifact_file": artifact_file, "text": text})

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
        self._submit("log_inputs", lambda: self.client.log_inputs(self.run_id, datasets=inputs),
                     {"dataset": name, "digest": digest, "source": str(source), "context": context})

    def log_reference(self, name: str, path: str | os.PathLike, digest: str) -> None:
        """A large artifact (checkpoint) recorded by location and hash instead of uploaded."""
        self.set_tags({f"ref.{name}.uri": str(Path(path).resolve()), f"ref.{name}.sha256": digest})

    def register_model(self, name: str, artifact_path: str, tags: dict[str, Any] | None = None) -> None:
        """A new version of Model Registry entry `name` (created on first use) from this run's `artifact_path`."""
        if not self.enabled:
            return

        def register() -> None:
            from mlflow.exceptions import MlflowException

            try:
                self.client.create_registered_model(name)
            except MlflowException as err:
                if err.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
            source = f"{self.client.get_run(self.run_id).info.artifact_uri}/{artifact_path}"
            self.client.create_model_version(name, source, run_id=self.run_id,
                                             tags={k: str(v) for k, v in (tags or {}).items()})

        self._submit("register_model", register, {"model_name": name, "artifact_path": artifact_path})

    def end(self, status: str = "FINISHED") -> None:
        """Terminate the run; undelivered calls are retried for up to `flush_timeout()` seconds, then spooled."""
        if not self.enabled:
            return
        self._submit("end", lambda: self.client.set_terminated(self.run_id, status=status), {"status": status})
        if not self.flush(timeout=self._end_timeout()):
            self._give_up()

    def _end_timeout(self) -> float:
        return flush_timeout() if self.flush_timeout is None else max(0.0, self.flush_timeout)

    def _give_up(self) -> Path | None:
        """Out of retries: write what is still queued to the spool directory (if any) and say so."""
        _UNDELIVERED.discard(self)
        path = None
        if self.spool_dir:
            try:
                path = self._spool(Path(self.spool_dir))
            except OSError as err:
                log.warning("MLflow run %s: could not write the undelivered calls to %s: %s", self.name,
                            self.spool_dir, err)
        log.warning("MLflow run %s: %d logging call(s) could not be delivered to %s%s", self.name,
                    len(self._pending), self.uri, f"; written to {path}" if path else "")
        if path is not None:
            self._pending.clear()  # the spool file is now their record: never deliver them twice
        return path

    def _spool(self, directory: Path) -> Path:
        from gpt1.io import write_json

        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name)
        path = directory / f"mlflow-undelivered-{safe}-{self.run_id or 'no-run'}-{os.getpid()}-{time.time_ns()}.json"
        write_json(path, {
            "tracking_uri": self.uri, "experiment": self.experiment, "run_name": self.name, "run_id": self.run_id,
            "parent_run_id": self.parent_run_id, "tags": self.tags, "written": time.time(),
            "calls": [{"call": what, **record} for what, _, record in self._pending],
        })
        return path


def _drain_at_exit() -> None:
    """A process ending with undelivered calls (a run attached by id and only flushed, say): last bounded try."""
    for run in list(_UNDELIVERED):
        if run.pending and not run.flush(timeout=run._end_timeout()):
            run._give_up()


atexit.register(_drain_at_exit)


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
