"""MLflow logging that never stops training: run nesting, lineage, and buffered, retried writes.

This module is the delivery; what runs carry (logged models and the Registry: gpt1.tracking.models; stage tags,
datasets, system metrics, the parent run: gpt1.tracking.runs) logs through `RunLogger`, as every stage does.

Metrics are buffered: `log_metrics` only appends to the run's buffer, and a background thread sends the buffer as
one `log_batch` request (at most 1000 metrics each) once its oldest metric is `metrics_interval` seconds old
(argument, default `METRICS_INTERVAL` = 2 s; 0 sends every call at once) or it holds 1000 metrics. Any other
call (params, tags, artifacts, datasets, models, end) and `flush()` send the buffer first, so the store receives
everything in the order it was logged, with the steps and timestamps of the original `log_metrics` calls.

Each MLflow request is attempted once (short timeout, no long HTTP retry loop); on failure it is queued and replayed
in order on a later call or `flush()`, so an unreachable tracking server costs nothing but a warning, and the run
catches up when the server returns. While the server is down, logging calls only queue (a retry at most every 1, 2,
4 ... 30 s), so a server that hangs cannot slow training. Runs nest through the `mlflow.parentRunId` tag
(pipeline -> stage -> task) and can be re-attached by id (pre-training resume). A run that could not be created yet
(server down) is created, or found, once the server answers, and every call made meanwhile goes to it; finding
comes first, so that a create whose answer was lost is not repeated and an attempt that resumes an interrupted
step (its checkpoint written before the run existed) continues that step's run (`RunLogger`). A logger may be
shared by threads.

Ending a run (`end()`), and the exit of a process that still holds undelivered calls or buffered metrics, keep
retrying with backoff for up to `flush_timeout` seconds (argument, else $GPT1_MLFLOW_FLUSH_TIMEOUT, else 120; once
one wait for a server has run out, later ones in the same process try once). What still cannot be delivered is
written as JSON (every undelivered call's params, metrics with step and timestamp, tags, artifact paths, status; one
entry per `log_metrics` call, buffered ones included; the run's id, or, when it was never created, its run key,
name, parent and tags, by which a replay finds or creates it) to `spool_dir` (argument, else
$GPT1_MLFLOW_SPOOL_DIR) when one is set, and reported in a warning either way; `gpt1 replay-spool DIR`
(gpt1.pipeline.replay) delivers such files later.

Design choices:
- Every run created here is tagged with the code that ran (`code_version`): `gpt1.version`, and when the package is a
  tracked folder of a git checkout, the commit as `mlflow.source.git.commit` (the tag MLflow's UI shows) and
  `gpt1.git.dirty`; an installed copy gets no commit tag rather than a guessed one.
- A model is logged by `log_model`, which queues the function that builds it (gpt1.finetune.serving for task models,
  gpt1.tracking.models for a folder of files) like any other call.
- MLflow's own asynchronous logging (MLFLOW_ENABLE_ASYNC_LOGGING) is not used: it sends from up to 10 threads in
  no fixed order and drops a batch that fails; the buffered sender here replays after an outage and delivers
  sooner in fewer requests (benchmarks/bench_tracking.py).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import re
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpt1.redact import REDACTED, redact
from gpt1.tracking.errors import TrackingFailure, classify

if TYPE_CHECKING:
    from mlflow.data.dataset_source import DatasetSource

log = logging.getLogger(__name__)

# A down server must fail fast: MLflow's default is 7 retries with exponential backoff (minutes per call).
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_MAX_PARAM_LEN = 6000
FLUSH_TIMEOUT_ENV = "GPT1_MLFLOW_FLUSH_TIMEOUT"
SPOOL_DIR_ENV = "GPT1_MLFLOW_SPOOL_DIR"
DEFAULT_FLUSH_TIMEOUT = 120.0
METRICS_INTERVAL = 2.0  # seconds a logged metric may wait in the buffer before it is sent
# MLflow's log_batch limits: MAX_METRICS_PER_BATCH and MAX_ENTITIES_PER_BATCH (metrics-only requests count only
# metrics). 1000 metrics with keys at MLflow's 250-character maximum stay far below its 1 MB request size limit.
METRICS_PER_REQUEST = 1000
_MAX_RETRY_DELAY = 30.0  # seconds between attempts while a server stays down
_BUSY_RETRY = 0.5  # seconds the background sender waits when another thread is delivering the same run's calls
_MAX_DIGEST_LEN = 36  # MLflow's limit on a dataset digest

# Finding the run a logger's calls belong to before creating one (`RunLogger._existing_run`):
RUN_KEY_TAG = "gpt1.run_key"  # a key each created run is tagged with, chosen before the create request is sent
# What makes runs the same step of one flow run, beside their name and parent: gpt1.tracking.runs' stage tags
STEP_TAGS = ("gpt1.stage", "gpt1.key", "gpt1.cached")
# The statuses of an earlier attempt's run that a new attempt of the step continues: it was interrupted (stopped
# to be resumed: KILLED; or its process died: RUNNING). A FINISHED or FAILED run is a result of its own.
INTERRUPTED = frozenset({"RUNNING", "KILLED"})
ANY_STATUS = frozenset({"RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"})

# Process-wide: loggers holding undelivered calls or buffered metrics (drained at exit), and servers a bounded wait
# already gave up on.
_UNDELIVERED: set[RunLogger] = set()
_GAVE_UP: set[str] = set()


def flush_timeout() -> float:
    """Seconds `end()` keeps retrying undelivered calls: $GPT1_MLFLOW_FLUSH_TIMEOUT, default 120."""
    raw = os.environ.get(FLUSH_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_FLUSH_TIMEOUT
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.warning(
            "%s=%r is not a number of seconds; using %.0f",
            FLUSH_TIMEOUT_ENV,
            raw,
            DEFAULT_FLUSH_TIMEOUT,
        )
        return DEFAULT_FLUSH_TIMEOUT


def experiment_id(client, name: str) -> str:
    """The id of experiment `name`, created when missing. Two runs starting together (a schedule's firing beside a
    manual run, two rehearsal flows) both find none and both create it: the loser takes the winner's."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception as err:
        if getattr(err, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
            raise
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def tag_experiment(client, experiment: str, key: str, value: str) -> None:
    """Set an experiment tag. Processes that start together write the same one (each flow's preflight, each
    report's runs view): on PostgreSQL, MLflow inserts a new tag, and the second of two concurrent inserts fails on
    the table's key; written again, it updates the row the first made."""
    try:
        client.set_experiment_tag(experiment, key, value)
    except Exception as err:
        if "UniqueViolation" not in str(err):
            raise
        client.set_experiment_tag(experiment, key, value)


def tracking_uri(uri: str | None = None) -> str:
    """Explicit uri, else $MLFLOW_TRACKING_URI, else a local SQLite store in the working directory.

    A uri written with its credentials redacted (in a config file, a spool file, a Prefect parameter) stands for
    $MLFLOW_TRACKING_URI when that is the same URI with them: a secret comes from this process's environment,
    never from a file. A URI MLflow can never use (its file store, no host, a query) is a ValueError naming the
    setting it came from."""
    from gpt1.config import tracking_uri_problem

    environment = os.environ.get("MLFLOW_TRACKING_URI") or None
    if uri and REDACTED in uri:
        if environment is None or redact(environment) != uri:
            raise ValueError(
                f"tracking.tracking_uri {uri}: its credentials were left out where it was written; set "
                "MLFLOW_TRACKING_URI to the full URI in this process's environment"
            )
        return environment
    if uri:
        if problem := tracking_uri_problem(uri):
            raise ValueError(f"tracking.tracking_uri: {problem}")
        return uri
    if environment:
        if problem := tracking_uri_problem(environment):
            raise ValueError(f"MLFLOW_TRACKING_URI={problem}")
        return environment
    return f"sqlite:///{Path('mlflow.db').resolve()}"


@functools.cache
def code_version() -> dict[str, str]:
    """Tags naming the code that runs: `gpt1.version`; the git commit and whether tracked files differ from it,
    only when this very file is tracked by a git checkout (an installed copy inside some other repository's tree
    must not borrow that repository's commit)."""
    import gpt1

    tags = {"gpt1.version": gpt1.__version__}
    here = Path(__file__).resolve()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(here.parent), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()

    try:
        git("ls-files", "--error-unmatch", here.name)
        tags["mlflow.source.git.commit"] = git("rev-parse", "HEAD")
        tags["gpt1.git.dirty"] = str(
            bool(git("status", "--porcelain", "--untracked-files=no"))
        ).lower()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


class _Finishing(Protocol):
    """Something `RunLogger.end()` stops before the run ends."""

    def finish(self) -> None: ...


@dataclass
class _Call:
    """One MLflow request waiting to be delivered."""

    what: str
    send: Callable[[], Any]
    # What it logs, one entry per logging call it carries (a metrics batch carries many `log_metrics` calls):
    # written to the spool file if it can never be delivered.
    records: list[dict]


class _MetricSender:
    """The process's background thread that sends buffered metrics when they are due.

    It runs only while some run has buffered metrics, and ends when none is left, so an idle process (or one about
    to fork) has no extra thread."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._runs: set[RunLogger] = set()  # runs whose buffer may hold metrics
        self._thread: threading.Thread | None = None

    def schedule(self, run: RunLogger) -> bool:
        """`run` has a newly started or full buffer: (re)compute when to send it. False when no thread can be
        started (interpreter shutdown): the caller sends the buffer itself."""
        with self._wake:
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(
                    target=self._loop, name="gpt1-mlflow-metrics", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:  # "can't create new thread at interpreter shutdown"
                    return False
                self._thread = thread
            self._runs.add(run)
            self._wake.notify()
            return True

    def _loop(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due_at = {}
                for run in list(self._runs):
                    at = run._metrics_due_at()
                    if (
                        at is None
                    ):  # sent (by this thread or by a call of the run): nothing to wait for
                        self._runs.discard(run)
                    else:
                        due_at[run] = at
                if not due_at:
                    self._thread = (
                        None  # under the lock: `schedule` starts a new thread from here on
                    )
                    return
                ready = [run for run, at in due_at.items() if at <= now]
                if not ready:
                    self._wake.wait(min(due_at.values()) - now)
                    continue
            for run in (
                ready
            ):  # outside the lock: a slow server must not block `schedule` (training threads)
                try:
                    run._send_buffered_metrics()
                except (
                    Exception
                ) as err:  # never fatal, and this thread must keep serving the other runs
                    log.warning(
                        "MLflow run %s: sending buffered metrics failed: %s",
                        run.name,
                        redact(str(err)),
                    )


_SENDER = _MetricSender()


class RunLogger:
    """One MLflow run, written resiliently. Create with `start_run`, or directly to re-attach by `run_id`.

    `metrics_interval`: seconds a logged metric may wait in the buffer (default `METRICS_INTERVAL`); 0 sends each
    `log_metrics` call as its own request, in the calling thread. A run created here is tagged with `code_version()`
    unless `code_tags` is False (a replay, whose tags already name the code that logged).

    Without `run_id`, the run is found or created when the server first answers (until then every call queues), in
    this order (`_existing_run`):
    - the run tagged `gpt1.run_key` = `run_key` (default: a new key; a replay passes the spool's): a create request
      whose answer was lost (a server killed or timing out after it stored the run) made it, and is not repeated;
    - for a stage run (a parent and a `gpt1.key` tag) of a step that resumes (`continues`: the statuses of an
      earlier attempt's run to go on with; pre-training passes `INTERRUPTED`, a stage that restarts passes none),
      the newest run of the same step: same name, parent and stage tags (`STEP_TAGS`). An attempt that resumes the
      step (a Prefect task retry of pre-training, whose checkpoint was written before the run existed) thus
      continues the run the interrupted attempt logged to, instead of starting a second run of the same step;
    - else a new run.
    A continued run keeps what it has: params it already holds are not sent again, and one whose value changed
    is sent as a tag of the same name (MLflow refuses to change a logged param).

    Everything it writes (params, tags, texts, dataset sources, log lines, the spool file) has its credentials
    redacted (gpt1.redact). A failure that retrying cannot mend (gpt1.tracking.errors: refused credentials, an
    unknown run, a store MLflow refuses) stops delivery at once and is said once; the calls wait for the spool."""

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
        metrics_interval: float | None = None,
        code_tags: bool = True,
        run_key: str | None = None,
        continues: Collection[str] = (),
    ):
        self.name = name
        self.experiment = experiment
        self.uri = tracking_uri(uri) if enabled else uri or ""
        self.where = redact(self.uri)  # the URI as messages and files show it
        self.parent_run_id = parent_run_id
        self.run_id = run_id
        self.tags = {
            **(code_version() if code_tags and enabled and run_id is None else {}),
            **(tags or {}),
        }
        self.enabled = enabled
        self.spool_dir = spool_dir or os.environ.get(SPOOL_DIR_ENV) or None
        self.flush_timeout = (
            flush_timeout  # None: $GPT1_MLFLOW_FLUSH_TIMEOUT, else 120 s (read when needed)
        )
        self.metrics_interval = (
            METRICS_INTERVAL if metrics_interval is None else max(0.0, metrics_interval)
        )
        # Two locks so that logging never waits for the network: `_lock` guards the queue and the metric buffer
        # for a moment (appends, swaps); `_send_lock` is held while requests are made (one delivery at a time,
        # by the calling thread or the background sender). Order: `_send_lock`, then `_lock`.
        self._lock = threading.Lock()
        self._send_lock = threading.RLock()
        self._pending: deque[_Call] = deque()  # requests not delivered yet, in order
        # (metrics, record) per buffered `log_metrics` call, and how many metrics they hold
        self._buffer: list[tuple[list, dict]] = []
        self._buffered_metrics = 0
        self._buffer_since = 0.0  # monotonic time the oldest buffered metric was logged
        self._background_not_before = (
            0.0  # the background sender found another delivery running: wait a moment
        )
        self._client = None
        self._warned = False
        self._retry_at = (
            0.0  # monotonic time before which logging calls only queue (server known to be down)
        )
        self._retry_delay = 1.0
        self._stopped: TrackingFailure | None = None  # a permanent failure: nothing more is sent
        self._experiment_id: str | None = None
        self.model_ids: dict[str, str] = {}  # logged model name -> MLflow model id, once delivered
        # an existing run continued (resumed training), not a new one
        self.reattached = run_id is not None
        # tags the run this logger creates (`_existing_run`)
        self.run_key = run_key or uuid.uuid4().hex
        # the store may hold a run with this key: a replay's, or once a create request has been sent
        self._key_used = run_key is not None
        self.continues = frozenset(continues)
        self._logged_params: dict[str, str] = {}  # the params a continued run already holds
        # Stopped by `end()` before the run is terminated: gpt1.tracking.runs' system metrics sampler, set by its
        # `monitor_system`.
        self.system_metrics: _Finishing | None = None
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
        """True once the run is known: found in the store or created (see the class docstring). Calls made before
        only queue, and are sent to that run."""
        if self.run_id is not None:
            return True
        try:
            exp_id = experiment_id(self.client, self.experiment)
            run = self._existing_run(exp_id) or self._create_run(exp_id)
        # a server down or refusing the credentials: keep going, without the run for now
        except Exception as err:
            self._failed(err, f"could not create MLflow run {self.name!r}")
            return False
        self.run_id, self._experiment_id = run.info.run_id, exp_id
        return True

    def _create_run(self, exp_id: str):
        tags = redact(dict(self.tags))
        tags[RUN_KEY_TAG] = self.run_key
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        # from here on the run may exist even when this request seems to fail: look for it before creating again
        self._key_used = True
        return self.client.create_run(exp_id, run_name=self.name, tags=tags)

    def _existing_run(self, exp_id: str):
        """The run this logger's calls belong to when the store already has it (None: create one): the one with
        this logger's run key, else an interrupted run of the same step, which this attempt continues."""
        if self._key_used and (ours := self._search(exp_id, {RUN_KEY_TAG: self.run_key})):
            return ours[0]
        step = {key: redact(str(self.tags[key])) for key in STEP_TAGS if key in self.tags}
        if not self.parent_run_id or "gpt1.key" not in step or not self.continues:
            return None  # not a stage run: no step to continue
        for run in self._search(exp_id, {"mlflow.parentRunId": self.parent_run_id, **step}):
            if run.info.run_name == self.name and run.info.status in self.continues:
                self._continue(run)
                return run
        return None

    def _search(self, exp_id: str, tags: dict[str, str]) -> list:
        """The experiment's runs with these tag values, newest first."""
        clauses = []
        for key, value in tags.items():
            quote = '"' if "'" in value else "'"
            # MLflow's filter syntax has no escapes: such a value cannot be matched
            if quote in value:
                return []
            clauses.append(f"tags.`{key}` = {quote}{value}{quote}")
        return list(
            self.client.search_runs(
                [exp_id], " and ".join(clauses), order_by=["attributes.start_time DESC"]
            )
        )

    def _continue(self, run) -> None:
        """Log on to an earlier attempt's run of this step; what it holds stays."""
        log.info(
            "MLflow run %s: continuing run %s of this step (left %s by an earlier attempt)",
            self.name,
            run.info.run_id,
            run.info.status,
        )
        self.reattached = True
        self._logged_params = dict(run.data.params)

    @property
    def experiment_id(self) -> str:
        """The run's experiment (asked from the server for a run attached by id); only inside a queued call."""
        if self._experiment_id is None:
            self._experiment_id = self.client.get_run(self.run_id).info.experiment_id
        return self._experiment_id

    def _warn(self, msg: str) -> None:
        if not self._warned:
            log.warning("%s (buffering; will retry)", msg)
            self._warned = True

    def _failed(self, err: Exception, what: str) -> None:
        """A request failed. A transient failure (gpt1.tracking.errors) is retried later, warned about once per
        outage; a permanent one stops delivery for good, said once: its calls stay queued for the spool."""
        failure = classify(err, self.uri)
        if failure.transient:
            self._warn(f"{what}: {failure}")
            self._back_off()
            return
        self._stopped = failure
        log.warning(
            "MLflow run %s: %s: %s; not retried, its calls stay undelivered",
            self.name,
            what,
            failure,
        )

    def _back_off(self) -> None:
        self._retry_at = time.monotonic() + self._retry_delay
        self._retry_delay = min(2 * self._retry_delay, _MAX_RETRY_DELAY)

    def submit(self, what: str, fn: Callable[[], Any], record: dict | None = None) -> None:
        """Queue `fn`, one MLflow request (or a few), to be delivered in order with the run's other calls and
        retried like them; `record` (JSON) describes it for the spool file, `what` names it (gpt1.pipeline.replay)."""
        if not self.enabled:
            return
        with self._lock:
            self._queue_buffered_metrics()  # metrics logged before this call are delivered before it
            self._pending.append(_Call(what, fn, [record or {}]))
            _UNDELIVERED.add(self)
        if time.monotonic() >= self._retry_at:
            self._flush_once()

    def _queue_buffered_metrics(self) -> None:
        """Move the metric buffer to the end of the queue as `log_batch` requests of at most METRICS_PER_REQUEST
        metrics. A `log_metrics` call is split across requests only when it alone holds more. Caller holds `_lock`."""
        if not self._buffer:
            return
        batch: list = []
        records: list[dict] = []

        def close_batch() -> None:
            nonlocal batch, records
            if batch:
                self._pending.append(_Call("log_metrics", self._metrics_request(batch), records))
                batch, records = [], []

        for items, record in self._buffer:
            if len(batch) + len(items) > METRICS_PER_REQUEST:
                close_batch()
            if len(items) <= METRICS_PER_REQUEST:
                batch.extend(items)
                records.append(record)
                continue
            for start in range(0, len(items), METRICS_PER_REQUEST):
                part = items[start : start + METRICS_PER_REQUEST]
                batch, records = part, [{**record, "metrics": {m.key: m.value for m in part}}]
                close_batch()
        close_batch()
        self._buffer, self._buffered_metrics = [], 0

    def _metrics_request(self, items: list) -> Callable[[], Any]:
        return lambda: self.client.log_batch(self.run_id, metrics=items)

    def _params_request(self, items: list) -> Callable[[], Any]:
        from mlflow.entities import RunTag

        def send() -> None:
            # decided when sent: only then is it known whether the run is a continued one (`_continue`)
            logged = self._logged_params
            new = [p for p in items if p.key not in logged]
            changed = [
                RunTag(p.key, p.value) for p in items if logged.get(p.key, p.value) != p.value
            ]
            if new:
                self.client.log_batch(self.run_id, params=new)
            if changed:  # MLflow refuses to change a logged param, and would stop the run's delivery for good
                self.client.log_batch(self.run_id, tags=changed)

        return send

    def _flush_once(self) -> bool:
        """One pass: send the metric buffer, then replay queued calls in order until one fails."""
        with self._send_lock:
            with self._lock:
                self._queue_buffered_metrics()
            if self._stopped is not None or not self._ensure_run():
                return False
            while True:
                with self._lock:
                    if not self._pending:
                        break
                    call = self._pending[0]
                try:
                    call.send()
                except Exception as err:
                    self._failed(err, f"MLflow {call.what} failed")
                    return False
                with self._lock:
                    self._pending.popleft()  # only the holder of `_send_lock` removes calls: still the head
            if self._warned:
                log.info(
                    "MLflow reachable again at %s: run %s is up to date", self.where, self.name
                )
                self._warned = False
            self._retry_at, self._retry_delay = 0.0, 1.0
            with self._lock:
                if (
                    not self._pending and not self._buffer
                ):  # another thread may have logged meanwhile
                    _UNDELIVERED.discard(self)
            _GAVE_UP.discard(self.uri)
            return True

    def _metrics_due_at(self) -> float | None:
        """Monotonic time the buffer should be sent (None: empty); for the background sender."""
        with self._lock:
            # nothing to send, or nothing will be sent
            if not self._buffer or self._stopped is not None:
                return None
            full = self._buffered_metrics >= METRICS_PER_REQUEST
            at = 0.0 if full else self._buffer_since + self.metrics_interval
            # a down server: wait for the next retry
            return max(at, self._retry_at, self._background_not_before)

    def _send_buffered_metrics(self) -> None:
        """From the background sender: deliver the buffer (and whatever is queued before it)."""
        if time.monotonic() < self._retry_at:
            return  # the server went down meanwhile: the buffer stays and is rescheduled for the next retry
        if not self._send_lock.acquire(blocking=False):
            # another thread is delivering this run's calls: never queue up behind a slow server, come back soon
            self._background_not_before = time.monotonic() + min(self.metrics_interval, _BUSY_RETRY)
            return
        try:
            self._flush_once()
        finally:
            self._send_lock.release()

    def flush(self, timeout: float | None = None) -> bool:
        """Send buffered metrics and replay queued calls in order; True when nothing is left pending.

        `timeout`: keep retrying with backoff (1, 2, 4 ... 30 s) for up to this many seconds; only one attempt
        when a bounded wait for the same server already ran out in this process."""
        if not self.enabled:
            return True
        if self._flush_once():
            return True
        if not timeout or self.uri in _GAVE_UP or self._stopped is not None:
            return False
        deadline, delay = time.monotonic() + timeout, 1.0
        log.warning(
            "MLflow run %s: %d logging call(s) not delivered to %s yet; retrying for up to %.0fs",
            self.name,
            self.pending,
            self.where,
            timeout,
        )
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(delay, remaining))  # no lock held: other threads keep logging meanwhile
            delay = min(2 * delay, _MAX_RETRY_DELAY)
            if self._flush_once():
                return True
        _GAVE_UP.add(self.uri)
        return False

    @property
    def pending(self) -> int:
        """Logging calls not delivered yet: queued after a failure, or metrics still in the buffer (each
        `log_metrics` call counts once)."""
        with self._lock:
            return sum(len(call.records) for call in self._pending) + len(self._buffer)

    # -- logging API ----------------------------------------------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Param

        items = [Param(k, redact(str(v))[:_MAX_PARAM_LEN]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # the REST API caps a batch at 100 params
            chunk = items[i : i + 100]
            self.submit(
                "log_params",
                self._params_request(chunk),
                {"params": {p.key: p.value for p in chunk}},
            )

    def log_metrics(
        self,
        metrics: Mapping[str, float | None],
        step: int | None = None,
        *,
        timestamp: int | None = None,
    ) -> None:
        """Buffered (see the module docstring); at `step` (default 0), timestamped now (or `timestamp`, in ms);
        a None value is left out."""
        if not self.enabled:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000) if timestamp is None else timestamp
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        if not items:
            return
        record = {"metrics": {m.key: m.value for m in items}, "step": step or 0, "timestamp": now}
        if self.metrics_interval <= 0:
            self.submit("log_metrics", self._metrics_request(items), record)
            return
        with self._lock:
            started = not self._buffer
            if started:
                self._buffer_since = time.monotonic()
                _UNDELIVERED.add(self)  # a process exiting with a full buffer still delivers it
            before = self._buffered_metrics
            self._buffer.append((items, record))
            self._buffered_metrics += len(items)
            filled = before < METRICS_PER_REQUEST <= self._buffered_metrics
        # outside `_lock`: the sender takes its own lock, then ours
        if (
            (started or filled)
            and not _SENDER.schedule(self)
            and time.monotonic() >= self._retry_at
        ):
            self._flush_once()

    def set_tags(self, tags: dict[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        items = [RunTag(k, redact(str(v))) for k, v in tags.items()]
        self.submit(
            "set_tags",
            lambda: self.client.log_batch(self.run_id, tags=items),
            {"tags": {t.key: t.value for t in items}},
        )

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        path = str(path)
        record = {"path": os.path.abspath(path), "artifact_path": artifact_path}
        if os.path.isdir(path):
            self.submit(
                "log_artifacts",
                lambda: self.client.log_artifacts(self.run_id, path, artifact_path),
                record,
            )
        else:
            self.submit(
                "log_artifact",
                lambda: self.client.log_artifact(self.run_id, path, artifact_path),
                record,
            )

    def log_text(self, text: str, artifact_file: str) -> None:
        text = redact(text)
        self.submit(
            "log_text",
            lambda: self.client.log_text(self.run_id, text, artifact_file),
            {"artifact_file": artifact_file, "text": text},
        )

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        self.log_text(text, artifact_file)

    def log_dataset(
        self,
        name: str,
        digest: str,
        source: str | os.PathLike | DatasetSource,
        context: str = "input",
        profile: dict[str, Any] | None = None,
    ) -> None:
        """Lineage: a dataset (corpus, shards, task files) this run read or wrote, identified by its content hash.
        `source`: a local path, or an `mlflow.data` source (`hub_dataset_source` for hub data); `profile`: a few
        numbers MLflow shows beside it (e.g. rows)."""
        if not self.enabled:
            return
        # MLflow defines this class at import time, from its artifact repositories: its stubs cannot name it
        from mlflow.data.sources import LocalArtifactDatasetSource  # type: ignore[attr-defined]
        from mlflow.entities import Dataset, DatasetInput, InputTag

        origin: DatasetSource = (
            LocalArtifactDatasetSource(str(source))
            if isinstance(source, (str, os.PathLike))
            else source
        )
        dataset = Dataset(
            name=name,
            digest=digest[:_MAX_DIGEST_LEN],
            source_type=origin._get_source_type(),
            source=redact(origin.to_json()),
            profile=json.dumps(profile) if profile else None,
        )
        inputs = [DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])]
        self.submit(
            "log_inputs",
            lambda: self.client.log_inputs(self.run_id, datasets=inputs),
            {
                "dataset": name,
                "digest": digest,
                "source_type": dataset.source_type,
                "source": dataset.source,
                "context": context,
                "profile": profile,
            },
        )

    def log_reference(self, name: str, path: str | os.PathLike, digest: str) -> None:
        """A large artifact (checkpoint) recorded by location and hash instead of uploaded."""
        self.set_tags({f"ref.{name}.uri": str(Path(path).resolve()), f"ref.{name}.sha256": digest})

    # -- MLflow 3 logged models ------------------------------------------------------------------------------
    def log_model(
        self, name: str, make: Callable[[RunLogger, dict], str], record: dict[str, Any]
    ) -> None:
        """A logged model of this run, named `name`, made by `make(run, attempt)` when the queue reaches the call;
        `make` returns the model id. `attempt` is kept across retries: `make` stores the model id there as soon as
        the model exists, so a retry after a failure completes that model instead of creating another. `record`
        (JSON) says how to make it again, for the spool file (gpt1.pipeline.replay)."""
        if not self.enabled:
            return
        attempt: dict = {}

        def send() -> None:
            self.model_ids[name] = make(self, attempt)

        self.submit("log_model", send, {"model": name, **record})

    def end(
        self, status: str = "FINISHED", *, unless_ended_after: float | None = None
    ) -> Path | None:
        """Terminate the run; undelivered calls are retried for up to `flush_timeout()` seconds, then spooled
        (`deliver`). `unless_ended_after` (a replay: when the spooled end was recorded, epoch seconds): leave the
        run as it is if it ended after that, since a later attempt of its step ended it then."""
        if not self.enabled:
            return None
        if self.system_metrics is not None:
            self.system_metrics.finish()
            self.system_metrics = None
        record: dict[str, Any] = {"status": status}
        if unless_ended_after is not None:  # a replay that is spooled again keeps the time
            record["unless_ended_after"] = unless_ended_after
        self.submit("end", lambda: self._terminate(status, unless_ended_after), record)
        return self.deliver()

    def _terminate(self, status: str, unless_ended_after: float | None) -> None:
        if unless_ended_after is not None:
            ended = self.client.get_run(self.run_id).info.end_time  # ms; None while it runs
            if ended is not None and ended / 1000 > unless_ended_after:
                log.info(
                    "MLflow run %s: left as it is, not %s: it ended after this end was recorded",
                    self.name,
                    status,
                )
                return
        self.client.set_terminated(self.run_id, status=status)

    def deliver(self) -> Path | None:
        """Everything logged so far delivered, retrying for up to `flush_timeout()` seconds; what is still left is
        written to the spool directory: returns that file (None when all was delivered or nothing was written)."""
        if self.flush(timeout=self._end_timeout()):
            return None
        return self._give_up()

    def _end_timeout(self) -> float:
        return flush_timeout() if self.flush_timeout is None else max(0.0, self.flush_timeout)

    def _give_up(self) -> Path | None:
        """Out of retries: write what is still queued or buffered to the spool directory (if any) and say so."""
        with (
            self._send_lock
        ):  # no delivery may run meanwhile: a call both delivered and spooled would count twice
            with self._lock:
                self._queue_buffered_metrics()
                calls = list(self._pending)
                _UNDELIVERED.discard(self)
            count = sum(len(call.records) for call in calls)
            path = None
            if self.spool_dir:
                try:
                    path = self._spool(Path(self.spool_dir), calls)
                except OSError as err:
                    log.warning(
                        "MLflow run %s: could not write the undelivered calls to %s: %s",
                        self.name,
                        self.spool_dir,
                        err,
                    )
            log.warning(
                "MLflow run %s: %d logging call(s) could not be delivered to %s%s",
                self.name,
                count,
                self.where,
                f"; written to {path}" if path else "",
            )
            if path is not None:
                with self._lock:  # the spool file is now their record: never deliver them twice
                    for _ in calls:
                        self._pending.popleft()
            return path

    def _spool(self, directory: Path, calls: list[_Call]) -> Path:
        from gpt1.io import write_json

        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name)
        path = (
            directory
            / f"mlflow-undelivered-{safe}-{self.run_id or 'no-run'}-{os.getpid()}-{time.time_ns()}.json"
        )
        write_json(
            path,
            # credentials stay in the environment: a replay takes them from there (tracking_uri)
            redact(
                {
                    "tracking_uri": self.uri,
                    "experiment": self.experiment,
                    "run_name": self.name,
                    "run_id": self.run_id,
                    # with the name, parent and tags: how a replay finds the run when `run_id` is None
                    "run_key": self.run_key,
                    "parent_run_id": self.parent_run_id,
                    "tags": self.tags,
                    "model_ids": self.model_ids,
                    "written": time.time(),
                    "calls": [
                        {"call": call.what, **record} for call in calls for record in call.records
                    ],
                }
            ),
        )
        return path


def _drain_at_exit() -> None:
    """A process ending with undelivered calls or buffered metrics (a run attached by id and only flushed, a run
    that raised before `end()`): last bounded try."""
    for run in list(_UNDELIVERED):
        if run.pending:
            run.deliver()


atexit.register(_drain_at_exit)


@contextlib.contextmanager
def as_own_process() -> Iterator[None]:
    """Run a job in a reused process (the fine-tune workers) with the tracking state a fresh process would have:
    no server given up on at the start, and what is left undelivered at the end drained as at a process exit
    (multiprocessing workers never run atexit handlers)."""
    _GAVE_UP.clear()
    try:
        yield
    finally:
        _drain_at_exit()


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
