"""The native team stack (infra/compose/stack.py) reads what compose reads: a service, an environment variable, a
lock, an entrypoint or a health check added to or changed in docker-compose.yaml or an image's Dockerfile is what
`make stack` runs, or these checks fail. The stack running for real: tests/e2e/test_team_stack*.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.integration.test_infra_tools import GOOD_SECRETS, compose_tool
from tests.team_stack import load_stack_module
from tests.unit.test_infra_assets import COMPOSE, pins

stack_module = load_stack_module()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    compose_tool()  # skips where there is no Docker Compose to render the file
    root = tmp_path_factory.mktemp("stack-static")
    env_file = root / "stack.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in GOOD_SECRETS.items()))
    return stack_module.Stack(root / "state", env_file)


def test_every_compose_service_has_a_stand_in_started_after_what_it_depends_on(stack):
    order = stack.order()
    assert sorted(order) == sorted(stack.rendered["services"])
    for name, service in stack.services.items():
        for dep in service.spec.get("depends_on") or {}:
            assert order.index(dep) < order.index(name), (dep, name)


def test_each_service_gets_composes_environment_with_its_addresses_on_loopback(stack):
    for name, service in stack.services.items():
        env = service.env()
        for key, value in (service.spec.get("environment") or {}).items():
            assert env[key] == service.local(str(value)), (name, key)
            assert not re.search(r"(?<![\w.-])(postgres|minio|mlflow|prefect-server):\d+\b", env[key]), (name, key, env[key])


def test_the_images_own_parts_run_natively(stack):
    mlflow = stack.services["mlflow"]
    built = stack_module.dockerfile(COMPOSE / "mlflow" / "Dockerfile")
    copied = {Path(dest).name: src for dest, src in built["copies"].items()}
    command = mlflow.command()
    assert command[:2] == ["sh", str(copied[built["entrypoint"][0]])]  # the image's ENTRYPOINT, from the Dockerfile
    assert command[command.index("--host") + 1] == "127.0.0.1"
    health = mlflow.healthcheck()
    assert health[1] == str(copied["mlflow-healthcheck"]) and health[2] == f"http://127.0.0.1:{mlflow.port}"
    assert "requirements.lock" in copied and Path(mlflow.spec["build"]["context"], "requirements.lock").exists()
    # Prefect's image is the version the venv (cpu.lock) runs
    tag = stack.services["prefect-server"].spec["image"].split(":")[1].split("-")[0]
    assert pins(REPO / "requirements/cpu.lock")["prefect"] == tag
    # the gpt1 image's ENV, its folders on the stack's volumes
    worker = stack.services["worker"].env()
    image_env = stack_module.dockerfile(REPO / "infra" / "Dockerfile")["env"]
    assert worker["GPT1_WORK_DIR"] == str(stack.state / "volumes" / image_env["GPT1_WORK_DIR"].lstrip("/"))
    assert worker["HF_HUB_OFFLINE"] == image_env["HF_HUB_OFFLINE"] == "1"


def test_database_uris_name_a_driver_their_image_installs_and_hold_no_password(stack):
    """The class of `No module named 'psycopg'`: each URI's SQLAlchemy driver is in the lock of what runs it."""
    locks = {"mlflow": pins(COMPOSE / "mlflow" / "requirements.lock"),
             "prefect-server": pins(REPO / "requirements/cpu.lock")}
    drivers = {"psycopg2": "psycopg2-binary", "asyncpg": "asyncpg"}
    uris = 0
    for name, service in stack.services.items():
        for key, value in (service.spec.get("environment") or {}).items():
            if match := re.match(r"^postgresql(\+(\w+))?://([^@/]*)@", str(value)):
                uris += 1
                assert match[2] in drivers, f"{name} {key}: name the driver (postgresql+DRIVER://)"
                assert drivers[match[2]] in locks[name], f"{name} {key}: {drivers[match[2]]} not in its lock"
                assert ":" not in match[3], f"{name} {key}: a password in the URI (give it as PGPASSWORD)"
                assert "PGPASSWORD" in service.spec["environment"], name
    assert uris == 3


def test_the_deploy_step_deploys_the_local_pools_deployments():
    rendered = yaml.safe_load((COMPOSE / "docker-compose.yaml").read_text())
    command = rendered["services"]["deploy"]["command"]
    named = [command[i + 1] for i, arg in enumerate(command) if arg == "-n"]
    spec = yaml.safe_load((REPO / "pipelines.yaml").read_text())
    local = spec["definitions"]["work_pools"]["local"]["name"]
    assert named == [d["name"] for d in spec["deployments"] if d["work_pool"]["name"] == local]
    services_sh = (REPO / "scripts" / "services.sh").read_text()
    assert re.search(r"LOCAL_DEPLOYMENTS=\((.*?)\)", services_sh)[1].split() == named


def test_the_mlflow_entrypoint_refuses_a_password_inside_the_auth_uri(tmp_path):
    env = {"PATH": os.environ["PATH"], "MLFLOW_AUTH_ADMIN_PASSWORD": "x" * 16,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": "y" * 16,
           "MLFLOW_AUTH_DATABASE_URI": "postgresql+psycopg2://gpt1:hunter2hunter2@db:5432/mlflow_auth"}
    done = subprocess.run(["sh", str(COMPOSE / "mlflow" / "entrypoint.sh")], env=env, capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 2 and "PGPASSWORD" in done.stderr and "hunter2" not in done.stderr, done.stderr


def test_the_native_stack_refuses_what_it_cannot_run(stack, tmp_path):
    spec = {"image": "redis:7"}
    with pytest.raises(stack_module.StackError, match="no native stand-in for image 'redis:7'"):
        stack_module.image_kind(spec)
    missing = tmp_path / "absent.env"
    done = subprocess.run([sys.executable, str(COMPOSE / "stack.py"), "status", "--env-file", str(missing)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and str(missing) in done.stderr
