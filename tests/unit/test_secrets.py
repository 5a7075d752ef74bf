"""Secrets never leave the setting that holds them: one secret is planted in every form a user can give it (each a
line of FORMS), a run is made as the pipeline makes its parent run, and every output is searched for it.

The run meets a tracking server that is down (warnings, a spool file) and, in a second run, one that comes back
(a real SQLite store stands in for it behind the planted URI: params, tags, the config artifact are read back).
On the way it quotes its tracking settings carelessly, as a stage's message or artifact might: in a tag, in a text
artifact and in an error that reaches the user's terminal (gpt1.errors). A form the config refuses is searched for
in its refusal."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest
from mlflow.tracking import MlflowClient

from gpt1.config import ConfigError, load_config
from gpt1.errors import exit_code
from gpt1.redact import REDACTED, redact
from gpt1.tracking import logger
from gpt1.tracking.logger import tracking_uri
from gpt1.tracking.runs import start_pipeline_run

SECRET = "Plant3d-s3cret-7"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DOWN = f"127.0.0.1:{_closed_port()}"  # a tracking server that is not there


@dataclass(frozen=True)
class Form:
    """How the secret is given: a `--set tracking.tracking_uri=` value and environment variables ({s}: the secret,
    {server}: host and port); `refused`: the config check refuses the setting (its error line is the output)."""

    setting: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    refused: bool = False

    def fill(self, text: str) -> str:
        return text.format(s=SECRET, server=DOWN)


SERVER = {"MLFLOW_TRACKING_URI": "http://{server}"}
FORMS = {
    "userinfo in --set tracking.tracking_uri": Form(setting="http://alice:{s}@{server}"),
    "a ?token= query": Form(setting="http://{server}/?token={s}", refused=True),
    "an access_token query": Form(setting="http://{server}?x=1&access_token={s}", refused=True),
    "a sig query": Form(setting="https://{server}/?sig={s}", refused=True),
    "userinfo in MLFLOW_TRACKING_URI": Form(env={"MLFLOW_TRACKING_URI": "http://bob:{s}@{server}"}),
    "MLFLOW_TRACKING_PASSWORD": Form(
        env={**SERVER, "MLFLOW_TRACKING_USERNAME": "bob", "MLFLOW_TRACKING_PASSWORD": "{s}"}
    ),
    "MLFLOW_TRACKING_TOKEN": Form(env={**SERVER, "MLFLOW_TRACKING_TOKEN": "{s}"}),
    "PREFECT_API_KEY": Form(env={**SERVER, "PREFECT_API_KEY": "{s}"}),
    "userinfo in PREFECT_API_URL": Form(env={**SERVER, "PREFECT_API_URL": "http://carol:{s}@{server}/api"}),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_db) -> MlflowClient:
    """The store behind the server once it is back, its artifacts in a folder of their own."""
    root = tmp_path_factory.mktemp("secrets")
    shutil.copy(empty_mlflow_db, root / "mlflow.db")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    client.create_experiment("secrets", artifact_location=(root / "artifacts").as_uri())
    return client


@pytest.fixture
def planted(request, monkeypatch) -> tuple[Form, list[str]]:
    """The form's environment set; returns the form and its `--set` overrides."""
    form = FORMS[request.param]
    for name, value in form.env.items():
        monkeypatch.setenv(name, form.fill(value))
    if "MLFLOW_TRACKING_URI" not in form.env:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    overrides = [f"tracking.tracking_uri={form.fill(form.setting)}"] if form.setting else []
    return form, [*overrides, "tracking.experiment=secrets"]


def careless_quote(uri: str, form: Form) -> str:
    """What a careless message would say: the tracking URI in use and every value of the form's environment."""
    return " ".join([uri, *(form.fill(value) for value in form.env.values())])


def user_error_line(message: str, capsys) -> str:
    def fail() -> None:
        raise ValueError(message)

    assert exit_code(fail, prefix="gpt1 test") == 2
    return capsys.readouterr().err


def run_with_outage(cfg, form: Form, store: MlflowClient, spool: Path) -> tuple[dict[str, str], str]:
    """Two parent runs: one whose server never answers (spooled), one whose server comes back (the store).
    Returns the outputs by where they went, and the spooled tracking URI."""
    outputs: dict[str, str] = {}
    gone = start_pipeline_run(cfg, flow="gpt1", flow_run="gone")
    gone.set_tags({"careless": careless_quote(gone.uri, form)})
    gone.end()
    [spooled] = spool.glob("mlflow-undelivered-*.json")
    outputs["spool file"] = spooled.read_text()

    back = start_pipeline_run(cfg, flow="gpt1", flow_run="back")
    back._client, back._retry_at = store, 0.0  # the server answers again
    back.set_tags({"careless": careless_quote(back.uri, form)})
    back.log_dict(cfg.model_dump(mode="json"), "config.json")
    back.log_text(careless_quote(back.uri, form), "notes/careless.txt")
    back.end()
    assert back.run_id and back.pending == 0
    delivered = store.get_run(back.run_id)
    outputs["params"] = json.dumps(delivered.data.params)
    outputs["tags"] = json.dumps(delivered.data.tags)
    artifacts = Path(urlparse(delivered.info.artifact_uri).path)
    for artifact in ("config.json", "notes/careless.txt"):
        outputs[artifact] = (artifacts / artifact).read_text()
    return outputs, json.loads(outputs["spool file"])["tracking_uri"]


@pytest.mark.parametrize("planted", FORMS, indirect=True)
def test_a_planted_secret_reaches_no_output(planted, store, tmp_path, monkeypatch, caplog, capsys):
    form, overrides = planted
    monkeypatch.setenv(logger.SPOOL_DIR_ENV, str(tmp_path / "spool"))
    monkeypatch.setenv(logger.FLUSH_TIMEOUT_ENV, "0")
    caplog.set_level(logging.INFO)
    if form.refused:
        with pytest.raises(ConfigError) as refusal:
            load_config("smoke", overrides)
        line = user_error_line(str(refusal.value), capsys)
        assert "tracking.tracking_uri" in line and REDACTED in line
        outputs = {"refusal": line}
    else:
        cfg = load_config("smoke", overrides)
        outputs, spooled_uri = run_with_outage(cfg, form, store, tmp_path / "spool")
        full = tracking_uri(cfg.tracking.tracking_uri)
        outputs["user error"] = user_error_line(f"cannot use {careless_quote(full, form)}", capsys)
        assert DOWN in spooled_uri  # the server is named, without its credentials
        # replayable: the spooled URI stands for the environment's full one
        monkeypatch.setenv("MLFLOW_TRACKING_URI", full)
        assert tracking_uri(spooled_uri) == full
        outputs["log records"] = "\n".join(record.getMessage() for record in caplog.records)
        outputs["work folder"] = "\n".join(
            path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file()
        )
    assert all(outputs.values()), [where for where, text in outputs.items() if not text]
    leaked = [where for where, text in outputs.items() if SECRET in text]
    assert not leaked, f"{SECRET} in {leaked}"


def test_redaction_keeps_the_server_and_is_idempotent():
    once = redact(f"see http://alice:{SECRET}@mlflow.internal:5000/#/runs?sig={SECRET}&view=1")
    assert once == f"see http://{REDACTED}@mlflow.internal:5000/#/runs?sig={REDACTED}&view=1"
    assert redact(once) == once
    assert redact({"uri": [f"https://{SECRET}@h"], "n": 1}) == {"uri": [f"https://{REDACTED}@h"], "n": 1}
    assert redact(f"http://alice:x@{SECRET}@h:5000/") == f"http://{REDACTED}@h:5000/"  # an @ in the password
    # names that only contain a secret word, and variables that only look like one, are left alone
    assert redact("#/experiments/1/runs?viewStateShareKey=4b12") == "#/experiments/1/runs?viewStateShareKey=4b12"


def test_a_redacted_uri_without_its_credentials_in_the_environment_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.internal:5000")  # another URI: not its credentials
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI to the full URI"):
        tracking_uri(f"http://{REDACTED}@mlflow.internal:5000")
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://mlflow.internal:5000"


def replay_spool(*argv: str) -> int:
    """`gpt1 replay-spool ARGV` in this process, through the one error path every command has."""
    from gpt1.pipeline import replay

    parser = argparse.ArgumentParser(prog="gpt1 replay-spool")
    replay.add_cli_args(parser)
    return exit_code(lambda: replay.run_cli(parser.parse_args(argv)), prefix="gpt1 replay-spool")


def test_a_spool_without_credentials_replays_with_the_environment_s(tmp_path, monkeypatch, capsys):
    full = f"http://alice:{SECRET}@{DOWN}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    gone = logger.RunLogger("gone", uri=full, spool_dir=tmp_path / "spool", flush_timeout=0)
    gone.log_params({"a": 1})
    gone.end()
    [spooled] = (tmp_path / "spool").glob("mlflow-undelivered-*.json")
    assert SECRET not in spooled.read_text()
    assert replay_spool(str(tmp_path / "spool"), "--timeout", "0") == 2
    assert "set MLFLOW_TRACKING_URI to the full URI" in capsys.readouterr().err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", full)  # the secret where it lives: the environment
    assert replay_spool(str(tmp_path / "spool"), "--timeout", "0") == 2  # sent there: still down
    err = capsys.readouterr().err
    assert "not delivered" in err and SECRET not in err
