"""Permanent tracking failures fail fast, transient ones are retried: the classifier (gpt1.tracking.errors) on what
real MLflow clients raise against a stand-in server answering each way (one line of ANSWERS each), and what a
RunLogger does with each class.

The stand-in answers by the first part of the request path, so one server plays them all:
`http://127.0.0.1:PORT/401` is a server refusing the credentials."""

from __future__ import annotations

import http.server
import json
import logging
import os
import shutil
import socket
import threading
import time
import uuid

import pytest
from mlflow.tracking import MlflowClient

from gpt1.config import ConfigError, load_config
from gpt1.redact import REDACTED
from gpt1.tracking import errors, logger
from gpt1.tracking.logger import RunLogger, tracking_uri

SECRET = "Plant3d-s3cret-7"

# what the server does -> (status, JSON error code or None for an HTML page, the class)
ANSWERS = {
    "401": (401, None, errors.UNAUTHORISED),
    "403": (403, None, errors.FORBIDDEN),
    "no-such-run": (404, "RESOURCE_DOES_NOT_EXIST", errors.NOT_FOUND),
    "not-mlflow": (404, None, errors.NOT_FOUND),
    "bad-request": (400, "INVALID_PARAMETER_VALUE", errors.INVALID),
    "500": (500, None, errors.SERVER_ERROR),
    "503": (503, None, errors.SERVER_ERROR),
    "429": (429, None, errors.SERVER_ERROR),
    "hang": (None, None, errors.TIMEOUT),
}


class StandIn(http.server.BaseHTTPRequestHandler):
    def answer(self) -> None:
        status, code, _ = ANSWERS[self.path.strip("/").split("/")[0]]
        if status is None:  # never answers within the client's timeout
            time.sleep(float(os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) + 1)
            return
        body = json.dumps({"error_code": code, "message": "from the stand-in"}) if code else "<html>no</html>"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = answer

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def raised(call) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("answer", ANSWERS)
def test_each_server_answer_is_classified_naming_the_server_without_its_credentials(answer, server, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    uri = f"http://alice:{SECRET}@{server}/{answer}"
    failure = errors.classify(raised(lambda: MlflowClient(uri).get_run("0" * 32)), uri)
    assert failure.kind == ANSWERS[answer][2]
    assert failure.transient == (failure.kind in errors.TRANSIENT)
    assert f"MLflow at http://{REDACTED}@{server}" in failure.message and SECRET not in failure.message
    assert str(failure) == failure.message


def test_the_client_side_failures_are_classified(empty_mlflow_db, tmp_path):
    from sqlalchemy.exc import OperationalError

    shutil.copy(empty_mlflow_db, tmp_path / "m.db")
    store = f"sqlite:///{tmp_path / 'm.db'}"
    cases = {
        errors.NOT_FOUND: raised(lambda: MlflowClient(store).get_run(uuid.uuid4().hex)),
        errors.REFUSED_STORE: raised(lambda: MlflowClient(f"file://{tmp_path}").get_experiment_by_name("x")),
        errors.UNREACHABLE: raised(lambda: MlflowClient("http://127.0.0.1:9").get_experiment_by_name("x")),
    }
    for kind, err in cases.items():
        assert errors.classify(err).kind == kind, (kind, err)
    down = OperationalError("connect", {}, Exception("connection refused"))
    refused = OperationalError("connect", {}, Exception('password authentication failed for user "gpt1"'))
    assert [errors.classify(e).kind for e in (down, refused)] == [errors.UNREACHABLE, errors.UNAUTHORISED]
    assert errors.classify(ModuleNotFoundError("No module named 'psycopg'")).kind == errors.REFUSED_STORE
    assert errors.classify(RuntimeError("?")).transient  # unknown: retried, as before


def test_a_permanent_failure_is_spooled_at_once_and_said_once(server, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    run = RunLogger("refused", uri=f"http://alice:{SECRET}@{server}/401", spool_dir=tmp_path, flush_timeout=120)
    run.log_params({"a": 1})
    run.log_metrics({"loss": 1.0}, step=1)
    assert run.end() is not None and time.monotonic() - started < 10  # not 120 s of retries
    said = [r.getMessage() for r in caplog.records if "refused the credentials" in r.getMessage()]
    assert len(said) == 1 and "MLFLOW_TRACKING_PASSWORD" in said[0]
    assert not [r for r in caplog.records if "retrying for up to" in r.getMessage()]
    assert run not in logger._UNDELIVERED


def test_a_run_id_the_store_does_not_have_stops_at_once(empty_mlflow_db, tmp_path, caplog):
    shutil.copy(empty_mlflow_db, tmp_path / "m.db")
    started = time.monotonic()
    run = RunLogger("gone", uri=f"sqlite:///{tmp_path / 'm.db'}", run_id=uuid.uuid4().hex, spool_dir=tmp_path,
                    flush_timeout=120)
    run.set_tags({"resumed_at_step": 3})
    assert run.end() is not None and time.monotonic() - started < 10
    assert "has no such run" in caplog.text


def test_a_transient_failure_is_still_retried(tmp_path, caplog):
    with socket.socket() as s:  # a port of its own: a server given up on earlier in the process is not retried
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    run = RunLogger("down", uri=f"http://127.0.0.1:{closed}", spool_dir=tmp_path, flush_timeout=0.3)
    run.log_params({"a": 1})
    assert run.end() is not None
    assert "retrying for up to" in caplog.text and "is not reachable" in caplog.text


# -- stores that can never work: refused by name before anything runs ----------------------------------------------
NEVER = ["file:///tmp/mlruns", "mlruns", "/srv/mlruns", "http://", "http://:5000", "http://host:port",
         "http:/host:5000", "http://host:5000/?token=x", "sqlite:///", "ftp://host", "http://host :5000"]


@pytest.mark.parametrize("uri", NEVER)
def test_a_store_that_can_never_work_is_refused_naming_the_setting(uri, monkeypatch):
    with pytest.raises(ConfigError, match="tracking.tracking_uri"):
        load_config("smoke", [f"tracking.tracking_uri={uri}"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI="):
        tracking_uri()
    assert RunLogger("off", enabled=False).uri == ""  # a run that logs nothing reads no store


@pytest.mark.parametrize("uri", ["databricks", "databricks://profile", "https://host/mlflow/",
                                 "http://alice:p%40ss@host:5000", "postgresql+psycopg2://u:p@host/db?sslmode=x",
                                 "sqlite:///mlflow.db", "sqlite:////abs/mlflow.db", "mysql://u@host/db"])
def test_valid_stores_are_kept(uri):
    assert load_config("smoke", [f"tracking.tracking_uri={uri}"]).tracking.tracking_uri == uri


def test_two_runs_creating_one_experiment_together_both_get_its_id():
    """Both found no experiment and both create it (two rehearsal flows' preflights on PostgreSQL): the store refuses
    the second with RESOURCE_ALREADY_EXISTS, which takes the first's id instead of failing as an invalid request."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import PERMISSION_DENIED, RESOURCE_ALREADY_EXISTS

    from gpt1.tracking.logger import experiment_id

    class RacingClient:
        def __init__(self) -> None:
            self.made: str | None = None

        def get_experiment_by_name(self, name):
            return None if self.made is None else type("Experiment", (), {"experiment_id": self.made})()

        def create_experiment(self, name):
            self.made = "7"  # the other run's create landed first
            raise MlflowException(f"Experiment(name={name}) already exists", error_code=RESOURCE_ALREADY_EXISTS)

    assert experiment_id(RacingClient(), "gpt1-rehearse") == "7"

    class RefusingClient(RacingClient):
        def create_experiment(self, name):
            raise MlflowException("no", error_code=PERMISSION_DENIED)

    with pytest.raises(MlflowException):
        experiment_id(RefusingClient(), "gpt1-rehearse")
