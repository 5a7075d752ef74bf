"""The infra/ assets against real servers: the README's work-pool command on a Prefect server, and the MLflow server
image's entrypoint with basic auth, started on loopback. The static checks: tests/unit/test_infra_assets.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.integration.test_flows import stop_group, wait_http
from tests.integration.test_infra_tools import GOOD_SECRETS, rendered  # noqa: F401 (rendered: a fixture)
from tests.unit.test_infra_assets import COMPOSE, POOLS


def test_pools_are_created_by_the_readme_command_on_a_real_server(tmp_path):
    """`prefect work-pool create NAME --type kubernetes --base-job-template FILE --overwrite`, twice (idempotent)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.cli import invoke_and_assert
    from prefect.testing.utilities import prefect_test_harness

    async def read(name: str):
        async with get_client() as client:
            return await client.read_work_pool(name)

    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: tmp_path}), prefect_test_harness(server_startup_timeout=180):
        for _ in range(2):
            for pool in POOLS:
                invoke_and_assert(["work-pool", "create", pool.stem, "--type", "kubernetes", "--base-job-template",
                                   str(pool), "--overwrite"], expected_code=0, echo=False)
        for pool in POOLS:
            created = asyncio.run(read(pool.stem))
            assert created.type == "kubernetes"
            assert created.base_job_template == json.loads(pool.read_text())


def test_mlflow_entrypoint_serves_basic_auth_to_the_compose_worker_host(rendered, tmp_path):
    from gpt1.runtime.processes import free_port

    port, password = free_port(), GOOD_SECRETS["MLFLOW_ADMIN_PASSWORD"]
    compose_env = rendered["services"]["mlflow"]["environment"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "MLFLOW_AUTH_DATABASE_URI": f"sqlite:///{tmp_path / 'auth.db'}",
           "MLFLOW_ARTIFACTS_DESTINATION": str(tmp_path / "artifacts"),
           "MLFLOW_AUTH_ADMIN_USERNAME": compose_env["MLFLOW_AUTH_ADMIN_USERNAME"],
           "MLFLOW_AUTH_ADMIN_PASSWORD": compose_env["MLFLOW_AUTH_ADMIN_PASSWORD"],
           "MLFLOW_FLASK_SERVER_SECRET_KEY": compose_env["MLFLOW_FLASK_SERVER_SECRET_KEY"],
           "MLFLOW_SERVER_ALLOWED_HOSTS": f"{compose_env['MLFLOW_SERVER_ALLOWED_HOSTS']},127.0.0.1:{port}",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = tmp_path / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(["sh", str(COMPOSE / "mlflow/entrypoint.sh"), "--host", "127.0.0.1", "--port",
                                 str(port), "--workers", "1"], env=env, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", proc, log)  # unauthenticated, for the healthcheck

        def status(host: str, user: str | None) -> int:
            request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/search?max_results=1",
                                             headers={"Host": host})
            if user:
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                request.add_header("Authorization", f"Basic {token}")
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status
            except urllib.error.HTTPError as e:
                return e.code

        admin = compose_env["MLFLOW_AUTH_ADMIN_USERNAME"]
        worker_host = urllib.parse.urlsplit(rendered["services"]["worker"]["environment"]["MLFLOW_TRACKING_URI"])
        assert status(worker_host.netloc, None) == 401
        assert status(worker_host.netloc, admin) == 200
        assert status("attacker.example:5000", admin) == 403  # DNS rebinding guard still on

        client_env = {"MLFLOW_TRACKING_USERNAME": admin, "MLFLOW_TRACKING_PASSWORD": password}
        script = ("import mlflow; mlflow.set_tracking_uri(%r); mlflow.set_experiment('auth-check');\n"
                  "with mlflow.start_run(): mlflow.log_metric('x', 1.0)") % base
        logged = subprocess.run([sys.executable, "-c", script], env={**env, **client_env},
                                capture_output=True, text=True, timeout=120)
        assert logged.returncode == 0, logged.stderr[-2000:]
        anonymous = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                   timeout=120)
        assert anonymous.returncode != 0 and "401" in anonymous.stderr
        assert "Created admin user" in log.read_text()
    finally:
        stop_group(proc)
