"""The team stack for real (tests/conftest.py `team_stack`: PostgreSQL, the S3 server, Prefect with API auth, MLflow
with basic auth and S3 artifacts, the worker, the deployments): the README's "The team stack" commands as written,
`gpt1/smoke` by its deployment and `make rehearse` among them; then what the run left where a team looks for it:
runs and params in PostgreSQL (queried), artifacts and registered models in the bucket (listed), the `champion`
model for an authenticated client only, and no secret in anything the project wrote or logged (searched)."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gpt1.config import load_config
from tests.conftest import REPO, fresh_shell_env
from tests.team_stack import TINY_SMOKE

pytestmark = pytest.mark.slow


def readme_stack_block() -> list[str]:
    section = (REPO / "README.md").read_text(encoding="utf-8").split("## The team stack", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    return [line for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def readme_run(team_stack, tmp_path_factory):
    """The README block in a fresh shell, pointed at the session's stack (its state, env file and ports instead
    of .stack/ and infra/compose/.env), `gpt1/smoke` at the tiny size (tests/team_stack.py); its last line,
    `make stack-down`, is left to the fixture's end."""
    commands = readme_stack_block()
    assert commands[0].startswith("make stack") and commands[-1].startswith("make stack-down"), commands
    state = tmp_path_factory.mktemp("rehearse-state")
    env = {**fresh_shell_env(), **{k: v for k, v in team_stack.process_env.items() if k.startswith("GPT1_STACK_")},
           "GPT1_STACK_STATE": str(team_stack.state), "GPT1_STACK_ENV_FILE": str(team_stack.env_file),
           "GPT1_STATE": str(state), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    tiny = shlex.quote(json.dumps({"overrides": TINY_SMOKE}))
    lines = [line.replace(".stack/env", "$GPT1_STACK_STATE/env").replace("watch_run.py gpt1/smoke",
                                                                      f"watch_run.py gpt1/smoke --params {tiny}")
             for line in commands[:-1]]
    script = "set -e\n" + "".join(f"echo '+++ {i}'\n{line}\n" for i, line in enumerate(lines))
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    said = dict(zip(commands, re.split(r"^\+\+\+ \d+$", done.stdout, flags=re.M)[1:]))
    return done, {command.split("#")[0].strip(): text for command, text in said.items()}, state


def test_the_readme_commands_run_smoke_and_the_rehearsal_on_the_stack(readme_run):
    done, said, _ = readme_run
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "preflight: ok" in said["gpt1 preflight --preset smoke"]
    smoke = said["python scripts/watch_run.py gpt1/smoke"]
    assert re.search(r"flow run \S+: Completed", smoke), smoke[-3000:]
    assert "rehearse: all checks passed" in said["make rehearse"], said["make rehearse"][-3000:]


def test_runs_and_params_are_in_postgres_and_flow_runs_in_prefects_database(readme_run, team_stack):
    done, said, _ = readme_run
    [[experiment_id]] = team_stack.psql("mlflow", "select experiment_id from experiments where name = 'gpt1-smoke'")
    [[runs]] = team_stack.psql("mlflow", f"select count(*) from runs where experiment_id = {experiment_id}")
    [[params]] = team_stack.psql("mlflow", "select count(*) from params p join runs r on p.run_uuid = r.run_uuid "
                                           f"where r.experiment_id = {experiment_id}")
    smoke = load_config("smoke")  # a run per fine-tune of each variant, per stage, and the parent
    assert int(runs) > len(smoke.finetune.tasks) * (1 + len(smoke.orchestration.ablations)), runs
    assert int(params) > int(runs), (runs, params)
    name = re.search(r"flow run (\S+): Completed", said["python scripts/watch_run.py gpt1/smoke"])[1]
    assert team_stack.psql("prefect", f"select state_type from flow_run where name = '{name}'") == [["COMPLETED"]]


def test_artifacts_and_registered_models_are_in_the_bucket(readme_run, team_stack):
    from mlflow.tracking import MlflowClient

    objects = team_stack.bucket()
    [[experiment_id]] = team_stack.psql("mlflow", "select experiment_id from experiments where name = 'gpt1-smoke'")
    mine = [key for key in objects if key.startswith(f"{experiment_id}/")]
    assert len(mine) > 100, len(mine)
    client = MlflowClient(team_stack.client_env["MLFLOW_TRACKING_URI"])
    with credentials(team_stack):
        models = client.search_registered_models(filter_string="name LIKE 'gpt1-smoke-%'")
        smoke = load_config("smoke")  # a model per task and variant: the full recipe and each ablation
        wanted = len(smoke.finetune.tasks) * (1 + len(smoke.orchestration.ablations))
        assert len(models) == wanted, [m.name for m in models]
        for model in models:
            champion = client.get_model_version_by_alias(model.name, "champion")
            source = champion.source  # a logged model's URI (models:/m-...) stands for its artifact location
            if source.startswith("models:/"):
                source = client.get_logged_model(source.removeprefix("models:/")).artifact_location
            prefix = source.split("mlflow-artifacts:/", 1)[-1].lstrip("/")
            assert any(key.startswith(prefix) for key in objects), (model.name, champion.source)


def test_the_champion_loads_with_credentials_and_is_refused_without(readme_run, team_stack):
    script = ("import mlflow, pandas\n"
              "m = mlflow.pyfunc.load_model('models:/gpt1-smoke-sst2@champion')\n"
              "print(m.predict(pandas.DataFrame([{'sentence': 'what a delightful film !'}])))\n")
    env = {**os.environ, **team_stack.client_env}
    loaded = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert loaded.returncode == 0 and re.search(r"\b(positive|negative)\b", loaded.stdout), loaded.stderr[-2000:]
    anonymous = {k: v for k, v in env.items() if not k.startswith(("MLFLOW_TRACKING_USERNAME",
                                                                      "MLFLOW_TRACKING_PASSWORD"))}
    refused = subprocess.run([sys.executable, "-c", script], env=anonymous, capture_output=True, text=True,
                             timeout=600)
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr[-2000:]


def test_no_secret_in_anything_logged_or_written(readme_run, team_stack):
    """Every secret of the env file, searched in MLflow's params, tags and model metadata, Prefect's logs, flow
    run parameters, deployments and artifacts, every object of the bucket, the work folders of the smoke run and
    the rehearsal, and the MLflow server's auth config file."""
    done, said, rehearse_state = readme_run
    secrets = team_stack.secrets
    found: dict[str, list[str]] = {}

    def search(where: str, text: str) -> None:
        for name, secret in secrets.items():
            if secret in text:
                found.setdefault(name, []).append(where)

    for where, text in mlflow_metadata(team_stack):
        search(where, text)
    for where, text in prefect_records(team_stack):
        search(where, text)
    for key, names in team_stack.bucket(search=secrets).items():
        for name in names:
            found.setdefault(name, []).append(f"s3://mlflow-artifacts/{key}")
    for root in (Path(team_stack.client_env["GPT1_WORK_DIR"]), rehearse_state):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                search(str(path), path.read_bytes().decode("latin-1"))
    config = auth_config_file(team_stack.ports["mlflow"])
    search(str(config), config.read_text())
    assert found == {}, found


# -- helpers ----------------------------------------------------------------------------------------------------------
class credentials:
    """The stack's MLflow login in this process's environment for a block (MlflowClient reads it per request)."""

    def __init__(self, team_stack) -> None:
        self.values = {k: v for k, v in team_stack.client_env.items() if k.startswith("MLFLOW_TRACKING_")}

    def __enter__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def mlflow_metadata(team_stack):
    """(where, text) of every run's params and tags and every registered model's and version's metadata."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(team_stack.client_env["MLFLOW_TRACKING_URI"])
    with credentials(team_stack):
        experiments = client.search_experiments()
        for run in client.search_runs([e.experiment_id for e in experiments], max_results=5000):
            yield f"run {run.info.run_name} params", json.dumps(run.data.params)
            yield f"run {run.info.run_name} tags", json.dumps(run.data.tags)
        for model in client.search_registered_models():
            yield f"model {model.name}", json.dumps([model.description, model.tags])
            for version in client.search_model_versions(f"name = '{model.name}'"):
                yield f"model {model.name} v{version.version}", json.dumps(
                    [version.description, version.tags, version.source, version.run_link])


def prefect_records(team_stack):
    """(where, text) of every flow run's parameters, every deployment, every log record and every artifact."""
    api = team_stack.client_env["PREFECT_API_URL"]
    auth = "Basic " + base64.b64encode(team_stack.client_env["PREFECT_API_AUTH_STRING"].encode()).decode()

    def post(path: str, body: dict) -> list:
        request = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", "Authorization": auth})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    for path, what in (("/flow_runs/filter", "flow run"), ("/deployments/filter", "deployment"),
                       ("/artifacts/filter", "artifact"), ("/logs/filter", "log")):
        offset = 0
        while page := post(path, {"limit": 200, "offset": offset}):
            for item in page:
                yield f"prefect {what} {item.get('name') or item.get('key') or item.get('id')}", json.dumps(item)
            offset += len(page)


def auth_config_file(port: int) -> Path:
    """The auth config file the MLflow server on `port` was started with (its MLFLOW_AUTH_CONFIG_PATH)."""
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"basic-auth" in cmdline and f"\0{port}\0".encode() in cmdline:
            for item in environ:
                if item.startswith(b"MLFLOW_AUTH_CONFIG_PATH="):
                    return Path(item.split(b"=", 1)[1].decode())
    raise AssertionError(f"no MLflow server with basic auth runs on port {port}")


# What a team gets wrong, each as the environment of a new shell: (what changes, words the one line must hold).
WRONG_SETTINGS = {
    "mlflow password wrong": ({"MLFLOW_TRACKING_PASSWORD": "not-the-password"}, "MLFLOW_TRACKING_PASSWORD"),
    "mlflow login missing": ({"MLFLOW_TRACKING_USERNAME": None, "MLFLOW_TRACKING_PASSWORD": None},
                             "MLFLOW_TRACKING_USERNAME"),
    "prefect auth wrong": ({"PREFECT_API_AUTH_STRING": "admin:not-the-password"}, "PREFECT_API_AUTH_STRING"),
    "prefect auth missing": ({"PREFECT_API_AUTH_STRING": None}, "PREFECT_API_AUTH_STRING: none"),
    "mlflow unreachable": ({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, "MLFLOW_TRACKING_URI"),
    "prefect unreachable": ({"PREFECT_API_URL": "http://127.0.0.1:9/api"}, "PREFECT_API_URL"),
}


def preflight(team_stack, tmp_path, changes: dict) -> subprocess.CompletedProcess:
    env = {**fresh_shell_env(), **team_stack.client_env, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(["gpt1", "preflight", "--preset", "smoke", "--work", str(tmp_path / "work")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


@pytest.mark.parametrize("case", sorted(WRONG_SETTINGS))
def test_preflight_names_the_server_and_the_setting_to_fix(team_stack, tmp_path, case):
    changes, words = WRONG_SETTINGS[case]
    done = preflight(team_stack, tmp_path, changes)
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert done.returncode == 2 and len(problems) == 1, done.stdout + done.stderr
    assert words in problems[0] and "127.0.0.1:" in problems[0], problems
    assert "Traceback" not in done.stdout + done.stderr


def test_preflight_names_a_bucket_that_does_not_exist(team_stack, tmp_path):
    """The S3 server up without the bucket (its recording moved aside), then with it again."""
    recording = team_stack.state / "volumes" / "minio" / "recording.jsonl"
    aside = recording.with_suffix(".aside")
    team_stack.run("stop", "minio")
    recording.rename(aside)
    try:
        team_stack.run("start", "minio")
        done = preflight(team_stack, tmp_path, {})
    finally:
        team_stack.run("stop", "minio")
        aside.replace(recording)
        team_stack.run("start", "minio")
    assert done.returncode == 2 and "could not store an artifact" in done.stdout, done.stdout + done.stderr
    assert "MLFLOW_ARTIFACTS_DESTINATION" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert preflight(team_stack, tmp_path, {}).returncode == 0
