"""The team stack (infra/compose/stack.py) as the tests use it: started once per session on free loopback ports with
its own env file of fresh secrets, its services stopped and started by the fault tests, its database queried and its
bucket listed by the checks."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from gpt1.runtime.processes import free_port
from tests.conftest import REPO

STACK = REPO / "infra" / "compose" / "stack.py"
# The smoke recipe at a size where a run takes a few minutes on two cores, every stage, task and variant kept: the
# checks on the stack are about where a run's records land, not its scores (those are `make demo`'s, tests/e2e).
TINY_SMOKE = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=64", "train_tokenizer.merges=200",
              "pretrain.max_steps=40", "pretrain.global_batch_size=4", "pretrain.eval_every=20",
              "pretrain.probe_every=40", "pretrain.probe_max_examples=4", "pretrain.save_every=20",
              "finetune.max_train_examples=32", "finetune.max_eval_examples=16", "finetune.epochs=1"]


def load_stack_module():
    """infra/compose/stack.py, a script, as a module."""
    if "stack" not in sys.modules:
        spec = importlib.util.spec_from_file_location("stack", STACK)
        module = importlib.util.module_from_spec(spec)
        sys.modules["stack"] = module  # its dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules["stack"]

SECRET_NAMES = ("POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "MLFLOW_ADMIN_PASSWORD", "MLFLOW_FLASK_SECRET_KEY",
                "PREFECT_API_AUTH_STRING")


def read_env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")
    return {k.strip(): v.strip() for k, v in pairs}


class TeamStack:
    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.env_file = root / "stack.env"
        self.ports = {name: free_port() for name in ("postgres", "minio", "mlflow", "prefect-server", "worker")}
        port_env = {f"GPT1_STACK_{n.upper().replace('-', '_')}_PORT": str(p) for n, p in self.ports.items()}
        # the scheduler looks for due runs every 5 s (Prefect: 60) and the workers poll every 2 s (10), so a
        # schedule's firings and every run start within seconds
        self.process_env = {**os.environ, **port_env, "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
                            "PREFECT_WORKER_QUERY_SECONDS": "2"}

    def run(self, action: str, *services: str, timeout: float = 900) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, str(STACK), action, *services, "--state", str(self.state),
                               "--env-file", str(self.env_file)], env=self.process_env, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    @property
    def prefect(self) -> PrefectAPI:
        env = self.client_env
        return PrefectAPI(env["PREFECT_API_URL"], env["PREFECT_API_AUTH_STRING"])

    @property
    def secrets(self) -> dict[str, str]:
        """The env file's secrets; for `user:password` values, the password."""
        values = read_env_file(self.env_file)
        return {name: values[name].rpartition(":")[2] for name in SECRET_NAMES}

    @property
    def client_env(self) -> dict[str, str]:
        """What `source STATE/env` gives a shell: the servers' URLs, credentials and the worker's work dir."""
        text = (self.state / "env").read_text()
        found = {}
        for line in text.splitlines():
            if line.startswith("export ") and "PATH=" not in line:
                key, _, value = line.removeprefix("export ").partition("=")
                found[key] = value.strip("'")
        return found

    def services_env(self, scratch: Path) -> dict[str, str]:
        """The environment scripts/services.sh runs extra workers and `make rehearse` with, on this stack."""
        env = {k: v for k, v in self.process_env.items() if not k.startswith(("PREFECT_API", "MLFLOW_TRACKING"))}
        env.update(self.client_env)
        env.pop("GPT1_WORK_DIR", None)
        env.update({"GPT1_STATE": str(scratch), "GPT1_VENV": sys.prefix, "GPT1_KEEP_SERVERS": "1",
                    "GPT1_PREFECT_PORT": str(self.ports["prefect-server"]),
                    "GPT1_MLFLOW_PORT": str(self.ports["mlflow"])})
        return env

    def psql(self, database: str, sql: str) -> list[list[str]]:
        """Rows of `sql` on the stack's PostgreSQL, as the compose user."""
        values = read_env_file(self.env_file)
        done = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.ports["postgres"]), "-U",
                               values.get("POSTGRES_USER", "gpt1"), "-d", database, "-AtF", "\t", "-c", sql],
                              env={**os.environ, "PGPASSWORD": values["POSTGRES_PASSWORD"]}, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def bucket(self, search: dict[str, str] | None = None) -> dict:
        """Every object of the artifact bucket, {key: size}; with `search` ({name: text}), {key: [names]} of the
        objects whose bytes hold one of the texts (read in the S3 client's process, not sent back)."""
        stack = load_stack_module()
        python = stack.venv_folder("s3-standin", stack.S3_STANDIN_LOCK) / "bin" / "python"
        script = (
            "import json, sys, boto3\n"
            "s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id='t',"
            " aws_secret_access_key='t')\n"
            "search = json.loads(sys.argv[2])\n"
            "found = {}\n"
            "for page in s3.get_paginator('list_objects_v2').paginate(Bucket='mlflow-artifacts'):\n"
            "    for o in page.get('Contents', []):\n"
            "        if search is None:\n"
            "            found[o['Key']] = o['Size']\n"
            "            continue\n"
            "        body = s3.get_object(Bucket='mlflow-artifacts', Key=o['Key'])['Body'].read()\n"
            "        if hits := [n for n, text in search.items() if text.encode() in body]:\n"
            "            found[o['Key']] = hits\n"
            "print(json.dumps(found))\n"
        )
        done = subprocess.run([str(python), "-c", script, f"http://127.0.0.1:{self.ports['minio']}",
                               json.dumps(search)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)


class PrefectAPI:
    """The stack's Prefect REST API, with its auth string; reads retried while the server restarts."""

    def __init__(self, url: str, auth: str) -> None:
        self.url = url.rstrip("/")
        self.auth = "Basic " + base64.b64encode(auth.encode()).decode()

    def call(self, method: str, path: str, body: dict | None = None, retry_for: float = 120):
        deadline = time.monotonic() + retry_for
        while True:
            request = urllib.request.Request(f"{self.url}{path}", method=method,
                                             data=None if body is None else json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json",
                                                      "Authorization": self.auth})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return json.load(response)
            except (urllib.error.URLError, ConnectionError) as err:
                status = getattr(err, "code", None)
                if (status is not None and status < 500) or time.monotonic() > deadline:
                    raise
                time.sleep(2)

    def deployment(self, name: str) -> dict:
        flow, deployment = name.split("/")
        return self.call("GET", f"/deployments/name/{flow}/{deployment}")

    def flow_runs(self, deployment: str) -> list[dict]:
        found = self.call("POST", "/flow_runs/filter", {"deployments": {"id": {"any_": [self.deployment(deployment)
                                                                                      ["id"]]}},
                                                       "sort": "EXPECTED_START_TIME_ASC", "limit": 200})
        return found

    def run_deployment(self, deployment: str, parameters: dict) -> dict:
        """A new flow run of `deployment`, its parameters merged over the deployment's."""
        spec = self.deployment(deployment)
        return self.call("POST", f"/deployments/{spec['id']}/create_flow_run",
                         {"parameters": {**spec["parameters"], **parameters}})

    def wait_for_task(self, flow_run_id: str, name: str, timeout: float = 900) -> dict:
        """The task run `name` of the flow run once it runs (or ran)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.call("POST", "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}},
                                                           "task_runs": {"name": {"any_": [name]}}})
            if [r for r in runs if r["state_type"] in ("RUNNING", "COMPLETED")]:
                return runs[0]
            time.sleep(1)
        raise AssertionError(f"task run {name} of flow run {flow_run_id} did not start in {timeout:.0f} s")

    def wait_for_end(self, flow_run_id: str, timeout: float = 1200) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.call("GET", f"/flow_runs/{flow_run_id}")
            if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                return run
            time.sleep(2)
        raise AssertionError(f"flow run {flow_run_id} still {run['state_type']} after {timeout:.0f} s")
