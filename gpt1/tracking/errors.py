"""What a failed tracking request means, decided in one place: permanent failures stop now and say what to fix,
transient ones are retried and then spooled (gpt1.tracking.logger).

    failure = classify(err, uri)      # a TrackingFailure
    if not failure.transient:
        print(failure.message)         # one sentence naming the server and what to fix; credentials redacted

| kind | transient | what it is |
|---|---|---|
| not found | no | a run, experiment or model the store lacks; or no MLflow API at the URI (404) |
| unauthorised | no | the server refused the credentials (401; a database refused the password) |
| forbidden | no | the user may not do this (403) |
| invalid request | no | the store refused the request itself (400 and the other 4xx) |
| refused store | no | a store MLflow will not open: its file store (3.17), an unknown scheme, a missing driver |
| unreachable | yes | connection refused or reset, no such host; a database server down |
| server error | yes | 5xx and 429 (MLflow's own retries are off: gpt1.tracking.logger) |
| timeout | yes | no answer within $MLFLOW_HTTP_REQUEST_TIMEOUT seconds |
| unknown | yes | anything else: retried, then spooled |
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from gpt1.redact import redact

NOT_FOUND, UNAUTHORISED, FORBIDDEN = "not found", "unauthorised", "forbidden"
INVALID, REFUSED_STORE = "invalid request", "refused store"
UNREACHABLE, SERVER_ERROR, TIMEOUT, UNKNOWN = "unreachable", "server error", "timeout", "unknown"
TRANSIENT = frozenset({UNREACHABLE, SERVER_ERROR, TIMEOUT, UNKNOWN})

# MLflow's error codes (mlflow.protos.databricks_pb2.ErrorCode names) by kind; the rest go by HTTP status
_BY_ERROR_CODE = {
    "UNAUTHENTICATED": UNAUTHORISED,
    "PERMISSION_DENIED": FORBIDDEN,
    "RESOURCE_DOES_NOT_EXIST": NOT_FOUND,
    "NOT_FOUND": NOT_FOUND,
    "ENDPOINT_NOT_FOUND": NOT_FOUND,
    "TEMPORARILY_UNAVAILABLE": SERVER_ERROR,
    "REQUEST_LIMIT_EXCEEDED": SERVER_ERROR,
}
# what MLflow says when it will not open a store at all (3.17's file store; a scheme it has no store for)
_REFUSED_STORE_WORDS = (
    "filesystem tracking backend",
    "unsupported uri",
    "could not find a registered",
)
_TIMEOUT_NAMES = {
    "Timeout",
    "ReadTimeout",
    "ConnectTimeout",
    "ReadTimeoutError",
    "ConnectTimeoutError",
}
_UNREACHABLE_NAMES = {
    "ConnectionError",
    "NewConnectionError",
    "NameResolutionError",
    "ProtocolError",
    "gaierror",
}


@dataclass(frozen=True)
class TrackingFailure:
    """A classified failure: `kind` (one of the kinds above), whether retrying can help, and `message`, one
    sentence naming the server (credentials redacted) and what to fix. `str()` is the message."""

    kind: str
    message: str

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT

    def __str__(self) -> str:
        return self.message


def classify(err: BaseException, uri: str | None = None) -> TrackingFailure:
    """What `err`, raised by an MLflow client call (MlflowClient, the fluent API, a store) against the tracking
    store `uri` (None: the message says "the tracking store"), means: a TrackingFailure whose `transient` says
    whether to retry and whose `message` says what to fix. Never raises; an error it does not know is transient."""
    where = f"MLflow at {redact(uri)}" if uri else "the MLflow tracking store"
    kind = _kind(err)
    return TrackingFailure(kind, _ADVICE[kind](where, _detail(err)))


def _kind(err: BaseException) -> str:
    text = str(err).lower()
    if isinstance(err, ImportError) or any(words in text for words in _REFUSED_STORE_WORDS):
        return REFUSED_STORE
    if _is_mlflow_error(err):
        return _mlflow_kind(err)
    if type(err).__module__.startswith("sqlalchemy") and type(err).__name__ == "OperationalError":
        return UNAUTHORISED if "authentication failed" in text else UNREACHABLE
    return _transport_kind(err) or UNKNOWN


def _is_mlflow_error(err: BaseException) -> bool:
    # only loaded when MLflow raised it: no import of mlflow (seconds) to classify other errors
    exceptions = sys.modules.get("mlflow.exceptions")
    return exceptions is not None and isinstance(err, exceptions.MlflowException)


def _mlflow_kind(err) -> str:
    if kind := _BY_ERROR_CODE.get(err.error_code):
        return kind
    if 400 <= err.get_http_status_code() < 500:
        return INVALID
    # MLflow reports a failed connection as INTERNAL_ERROR (500): what it wraps says which failure it was
    return _transport_kind(err) or SERVER_ERROR


def _transport_kind(err: BaseException) -> str | None:
    """A network failure found in `err` or what it wraps (MLflow raises its own error from the requests one,
    which wraps urllib3's, which wraps the socket's)."""
    chain = list(_chain(err))
    names = {
        type(e).__name__ for e in chain
    }  # exact names: urllib3's NewConnectionError subclasses a timeout
    if "RetryError" in names:
        return SERVER_ERROR  # requests gave up on a 5xx or 429 status
    if names & _TIMEOUT_NAMES or any(isinstance(e, TimeoutError) for e in chain):
        return TIMEOUT
    if names & _UNREACHABLE_NAMES or any(isinstance(e, ConnectionError) for e in chain):
        return UNREACHABLE
    return None


def _chain(err: BaseException):
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _detail(err: BaseException) -> str:
    """The error's first line, credentials redacted and cut short: the server's own words, for the sentence."""
    lines = str(err).strip().splitlines()
    first = lines[0] if lines else type(err).__name__
    return redact(first if len(first) <= 200 else first[:197] + "...")


_ADVICE = {
    NOT_FOUND: lambda where, detail: (
        f"{where} has no such run, experiment or model, or no MLflow API at that address ({detail}): "
        "a deleted run, another store than the one that made it, or a URI that is not the server's root"
    ),
    UNAUTHORISED: lambda where, detail: (
        f"{where} refused the credentials ({detail}): check MLFLOW_TRACKING_USERNAME / "
        "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN), or the database user and password"
    ),
    FORBIDDEN: lambda where, detail: (
        f"{where} does not allow this user the request ({detail}): grant the user the experiment's EDIT "
        "permission, or log in as another user"
    ),
    INVALID: lambda where, detail: (
        f"{where} refused the request as invalid ({detail}): retrying cannot help"
    ),
    REFUSED_STORE: lambda where, detail: (
        f"{where} cannot be used as a tracking store ({detail}): set tracking.tracking_uri or "
        "MLFLOW_TRACKING_URI to sqlite:///PATH.db or an http(s)://host:port server"
    ),
    UNREACHABLE: lambda where, detail: (
        f"{where} is not reachable ({detail}): start the server or fix the host and port"
    ),
    SERVER_ERROR: lambda where, detail: (
        f"{where} answered with a server error ({detail}): see the server's log"
    ),
    TIMEOUT: lambda where, detail: (
        f"{where} did not answer in time ({detail}): a busy or hung server "
        "($MLFLOW_HTTP_REQUEST_TIMEOUT sets the wait)"
    ),
    UNKNOWN: lambda where, detail: f"{where}: the request failed ({detail})",
}
