"""The cluster and team-install assets in infra/, checked as far as a machine without Docker daemon or cluster can.

- Locks: requirements/gpu.lock is cpu.lock plus torch's CUDA wheels; the MLflow server lock agrees with cpu.lock.
- Dockerfiles: pinned bases, non-root, the locks installed, the Kubernetes worker integration, no compiler needed.
- Compose: rendered by Docker Compose itself (`make venv` installs it), then its wiring checked: pinned images,
  healthchecks, restart policies, loopback ports, start order behind check-secrets, one set of secrets per side;
  check_secrets.py run the way the stack runs it; every PREFECT_*/MLFLOW_* name known to Prefect/MLflow.
- Kubernetes: every manifest validated against the Kubernetes JSON schemas offline (kubernetes-validate, strict:
  an unknown field fails), the kustomization rendered by kubectl, RBAC and secrets cross-checked.
- Work pools: each base job template rendered with real values through prefect-kubernetes' own job configuration
  code, validated by Prefect's server-side template check, then against the Kubernetes schemas.
The checks that run the assets' own tools (Docker Compose's rendering and the wiring checked on it, check_secrets.py
as the stack runs it, kubectl's kustomization, git's ignore rules): tests/integration/test_infra_tools.py; those that
start real servers: tests/integration/test_infra_servers.py.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

INFRA = REPO / "infra"
COMPOSE = INFRA / "compose"
K8S = INFRA / "k8s"
POOLS = sorted((K8S / "work-pools").glob("*.json"))
POOL_NAMES = {"gpt1-cpu", "gpt1-gpu-node", "gpt1-gpu"}
GPU_POOLS = {"gpt1-gpu-node": 8, "gpt1-gpu": 1}
IMAGE_UID = 1000
# a lock entry's first line: `name==version`, with ` \` when its hashes follow on the next lines
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\]+)(?: \\)?$")
# Kubernetes versions the manifests must validate against: an older supported release and the newest schemas.
K8S_VERSIONS = ("1.30", "1.37")
# prefect-kubernetes requires these in the pod spec of every Job template (its own default template has them);
# they are not PodSpec fields, so the API server drops them. Removed before schema validation, nothing else is.
PREFECT_POD_SPEC_EXTRAS = ("parallelism", "completions")


def pins(path: Path) -> dict[str, str]:
    return {m[1].lower(): m[2] for line in path.read_text().splitlines() if (m := PIN.match(line.strip()))}


def env_file(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def k8s_docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def validate_k8s(doc: dict, version: str) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = "/".join(str(p) for p in e.path)
        raise AssertionError(f"{doc['kind']} {doc['metadata'].get('name', '')}: {path}: {e.message}") from None


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


# -- locks --------------------------------------------------------------------------------------------------------
def test_gpu_lock_is_the_cpu_lock_plus_torch_cuda_wheels():
    cpu = pins(REPO / "requirements/cpu.lock")
    text = (REPO / "requirements/gpu.lock").read_text()
    from infra.locks import CPU_SECTION, CUDA_SECTION

    shared, added = text.split(CPU_SECTION)[1].split(CUDA_SECTION)
    as_pins = lambda block: {m[1].lower(): m[2] for line in block.splitlines() if (m := PIN.match(line.strip()))}
    assert as_pins(shared) == cpu, "requirements/gpu.lock is stale: run `python infra/locks.py`"
    cuda = as_pins(added)
    assert not set(cuda) & set(cpu)
    assert "triton" in cuda and any(name.startswith("nvidia-cuda-runtime") for name in cuda)
    runtime = next(v for name, v in cuda.items() if name.startswith("nvidia-cuda-runtime"))
    tag = "".join(runtime.split(".")[:2])
    assert f"https://download.pytorch.org/whl/cu{tag}" in text, "the header must name the CUDA build it pins"


@pytest.mark.parametrize("lock", [REPO / "requirements/gpu.lock", COMPOSE / "mlflow/requirements.lock"],
                         ids=["gpu", "mlflow"])
def test_image_locks_give_every_pin_the_hashes_of_its_files(lock):
    """Each entry of an image's lock is a pin and the sha256 of its release's files (pip's hash-checking mode
    refuses any other bytes); nothing else is in them."""
    entries = re.sub(r" \\\n\s+", " ", lock.read_text())
    listed = [line for line in entries.splitlines() if line.strip() and not line.startswith("#")]
    assert len(listed) == len(pins(lock)) > 0
    bad = [line[:80] for line in listed
           if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+( --hash=sha256:[0-9a-f]{64})+", line)]
    assert not bad, f"{lock.name}: entries without hashes (rerun `python infra/locks.py`): {bad[:3]}"


def test_mlflow_server_lock_has_its_drivers_at_the_ci_tested_pins():
    cpu = pins(REPO / "requirements/cpu.lock")
    server = pins(COMPOSE / "mlflow/requirements.lock")
    assert server["mlflow"] == cpu["mlflow"]
    assert {"psycopg2-binary", "boto3", "flask-wtf"} <= set(server)  # Postgres store, S3 artifacts, basic auth
    assert {name: v for name, v in server.items() if name in cpu and cpu[name] != v} == {}


# -- Dockerfiles --------------------------------------------------------------------------------------------------
def dockerfile(path: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def base_image(steps: list[tuple[str, str]]) -> str:
    args = dict(a.split("=", 1) for op, a in steps if op == "ARG" and "=" in a)
    image = next(a for op, a in steps if op == "FROM").split()[0]  # `FROM image AS stage`: the image
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], image)


@pytest.mark.parametrize("path", [INFRA / "Dockerfile", COMPOSE / "mlflow/Dockerfile"], ids=["gpt1", "mlflow"])
def test_dockerfile_base_is_pinned_and_it_runs_as_the_non_root_user(path):
    steps = dockerfile(path)
    image = base_image(steps)
    name, _, tag = image.partition(":")
    assert re.fullmatch(r"3\.11\.\d+-slim-bookworm", tag), f"{image}: pin the patch release of the locks' Python"
    users = [a for op, a in steps if op == "USER"]
    assert users and users[-1] == f"{IMAGE_UID}:{IMAGE_UID}", "run as the numeric non-root user (runAsNonRoot)"
    assert [op for op, _ in steps].index("USER") > max(i for i, (op, _) in enumerate(steps) if op == "RUN")


def test_gpt1_image_installs_the_gpu_lock_with_the_kubernetes_worker_and_no_compiler():
    steps = dockerfile(INFRA / "Dockerfile")
    runs = " && ".join(a for op, a in steps if op == "RUN")
    # torch's CUDA build at the lock's pins, the rest through the air-gapped path (tests/integration/test_wheelhouse.py)
    assert "scripts/wheelhouse.py host-requirements" in runs and "pip install --require-hashes --no-deps" in runs
    assert "scripts/wheelhouse.py build" in runs and "scripts/wheelhouse.py install --wheelhouse" in runs
    assert not re.search(r"apt-get|build-essential|\bgcc\b|nvcc|DS_BUILD", runs), "the image must need no compiler"
    assert "prefect-kubernetes" in pins(REPO / "requirements/gpu.lock")
    cmd = json.loads(next(a for op, a in steps if op == "CMD"))
    assert cmd[:3] == ["prefect", "worker", "start"] and cmd[cmd.index("--type") + 1] == "kubernetes"
    assert cmd[cmd.index("--pool") + 1] in POOL_NAMES
    # the worker type the command names is the one the pinned integration registers with Prefect
    from importlib.metadata import entry_points

    from prefect_kubernetes.worker import KubernetesWorker

    assert "prefect_kubernetes" in {e.name for e in entry_points(group="prefect.collections")}
    assert KubernetesWorker.type == "kubernetes"
    env = " ".join(a for op, a in steps if op == "ENV")
    assert "PREFECT_LOGGING_EXTRA_LOGGERS=gpt1" in env and "GPT1_WORK_DIR=/data/runs" in env
    assert "TORCH_EXTENSIONS_DIR=/cache/" in env
    assert re.search(r"chown -R 1000:1000 /data /cache", runs), "volumes start from the image's ownership"


def test_gpt1_image_context_holds_everything_it_copies():
    ignore = (INFRA / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore
    for op, args in dockerfile(INFRA / "Dockerfile"):
        if op == "COPY":
            for source in args.split()[:-1]:
                assert source.rstrip("/") in allowed, f"COPY {source}: excluded by Dockerfile.dockerignore"
                assert (REPO / source).exists()


def test_cuda_pretraining_uses_an_optimizer_that_needs_no_jit_build():
    """The image has no compiler: DeepSpeed's FusedAdam (built with nvcc at `deepspeed.initialize`) must not be chosen."""
    from gpt1.config import load_config
    from gpt1.pretrain.distributed import deepspeed_config

    pretrain = load_config("paper").pretrain
    ds = deepspeed_config(pretrain, world_size=8, device="cuda")
    assert ds["optimizer"]["params"]["torch_adam"] is True
    assert "offload_optimizer" not in ds["zero_optimization"]  # DeepSpeedCPUAdam would need a C++ compiler


def test_mlflow_image_starts_basic_auth_without_secrets_on_the_command_line():
    steps = dockerfile(COMPOSE / "mlflow/Dockerfile")
    assert "pip install --require-hashes --no-deps -r /tmp/requirements.lock" in " ".join(a for op, a in steps if op == "RUN")
    entrypoint = (COMPOSE / "mlflow/entrypoint.sh").read_text()
    assert 'exec mlflow server --app-name basic-auth "$@"' in entrypoint
    assert json.loads(next(a for op, a in steps if op == "ENTRYPOINT")) == ["mlflow-auth-server"]


# -- compose ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, reason", [
    ("", "is not set"), ("short123", "8 characters long"), ("my-change-me-password", "placeholder"),
    ("p@ss/word#with$symbols", "outside A-Z"), ("admin:tooshort", "8 characters long"),
])
def test_check_secrets_names_each_weak_secret(value, reason):
    spec = importlib.util.spec_from_file_location("check_secrets", COMPOSE / "check_secrets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = module.problems(["SECRET"], {"SECRET": value} if value else {}, {"SECRET": "change-me"})
    assert len(found) == 1 and found[0].startswith("SECRET ") and reason in found[0]


def prefect_setting_names(env: dict[str, str]) -> set[str]:
    """The PREFECT_* names of `env` that Prefect (or prefect-kubernetes) reads as settings."""
    from prefect.settings import Settings
    from prefect_kubernetes.settings import KubernetesSettings

    known = set()
    for name, value in env.items():
        if not name.startswith("PREFECT_"):
            continue
        with pytest.MonkeyPatch.context() as mp:
            for other in [k for k in os.environ if k.startswith("PREFECT_")]:
                mp.delenv(other)
            mp.setenv(name, value)
            model = KubernetesSettings() if name.startswith("PREFECT_INTEGRATIONS_KUBERNETES_") else Settings()
            if name in model.to_environment_variables(exclude_unset=True):
                known.add(name)
    return known


def mlflow_names() -> set[str]:
    import mlflow.environment_variables as ev
    from mlflow.cli import server

    names = {v.name for v in vars(ev).values() if isinstance(v, ev._EnvironmentVariable)}
    return names | {p.envvar for p in server.params if p.envvar} | {"MLFLOW_AUTH_DATABASE_URI"}  # entrypoint.sh's


# -- Kubernetes ---------------------------------------------------------------------------------------------------
def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def manifests() -> list[dict]:
    docs = [doc for resource in kustomization()["resources"] for doc in k8s_docs(K8S / resource)]
    jobs = ("pretrain-job.yaml", "nccl-smoke-job.yaml")
    return docs + [doc for job in jobs for doc in k8s_docs(INFRA / "multinode/k8s" / job)]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate_against_the_kubernetes_schemas(version):
    docs = manifests()
    assert {d["kind"] for d in docs} >= {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment",
                                         "Service", "PersistentVolumeClaim", "Job"}
    for doc in docs:
        validate_k8s(doc, version)


def test_k8s_schema_check_catches_a_misspelt_field():
    deployment = next(d for d in manifests() if d["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(AssertionError, match="volumeMount"):
        validate_k8s(broken, K8S_VERSIONS[-1])


def test_k8s_worker_role_grants_what_the_kubernetes_worker_does():
    role = next(d for d in manifests() if d["kind"] == "Role" and d["metadata"]["name"] == "gpt1-worker")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    # prefect-kubernetes: create/watch/delete the flow-run Job, find and follow its pod, stream its log;
    # its observer (kopf) lists and watches jobs and pods and posts events.
    needed = {("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete", "patch")}
    needed |= {("", "pods", v) for v in ("get", "list", "watch")} | {("", "pods/log", "get")}
    needed |= {("", "events", "create")}
    assert needed <= granted
    assert not any(r in {"secrets", "*"} or "*" in rule["verbs"] for rule in role["rules"] for r in rule["resources"])
    binding = next(d for d in manifests() if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == "gpt1-worker"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpt1-worker", "namespace": "gpt1"}]


def test_k8s_one_worker_per_pool_configured_for_a_namespaced_role_and_a_secret_auth_string(monkeypatch):
    from prefect_kubernetes.settings import KubernetesSettings

    workers = [d for d in manifests() if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("gpt1-worker")]
    pools = set()
    prefect_secret = env_file(K8S / "secrets/prefect.env.example")
    for worker in workers:
        pod = pod_spec(worker)
        container = pod["containers"][0]
        args = container["args"]
        assert args[args.index("--type") + 1] == "kubernetes" and "--with-healthcheck" in args
        pools.add(args[args.index("--pool") + 1])
        assert pod["serviceAccountName"] == "gpt1-worker"
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert prefect_setting_names(env | prefect_secret) == set(env | prefect_secret)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings = KubernetesSettings()
        assert settings.observer.namespaces == {"gpt1"}, "a cluster-wide watch would need a ClusterRole"
        assert settings.worker.api_auth_string_secret_name == container["envFrom"][0]["secretRef"]["name"]
        assert settings.worker.api_auth_string_secret_key in prefect_secret
    assert pools == {p.stem for p in POOLS} == POOL_NAMES


def test_k8s_mlflow_service_is_where_the_pools_send_their_runs():
    docs = manifests()
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "mlflow")
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow")
    container = pod_spec(deployment)["containers"][0]
    allowed = next(e["value"] for e in container["env"] if e["name"] == "MLFLOW_SERVER_ALLOWED_HOSTS").split(",")
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    port = service["spec"]["ports"][0]["port"]
    for pool in POOLS:
        uri = json.loads(pool.read_text())["variables"]["properties"]["env"]["default"]["MLFLOW_TRACKING_URI"]
        host = urllib.parse.urlsplit(uri)
        assert host.hostname == f"mlflow.{service['metadata'].get('namespace', 'gpt1')}.svc.cluster.local"
        assert host.port == port and host.netloc in allowed
    server_secret = env_file(K8S / "secrets/mlflow-server.env.example")
    assert set(server_secret) <= mlflow_names() | {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD"}
    assert {"MLFLOW_BACKEND_STORE_URI", "MLFLOW_AUTH_DATABASE_URI", "MLFLOW_AUTH_ADMIN_PASSWORD",
            "MLFLOW_FLASK_SERVER_SECRET_KEY", "MLFLOW_ARTIFACTS_DESTINATION"} <= set(server_secret)
    assert set(env_file(K8S / "secrets/mlflow-client.env.example")) == {"MLFLOW_TRACKING_USERNAME",
                                                                       "MLFLOW_TRACKING_PASSWORD"}


def test_k8s_pods_run_as_the_image_user_and_own_their_shared_volumes():
    pods = [(d["metadata"]["name"], pod_spec(d)) for d in manifests() if d["kind"] in ("Deployment", "Job")]
    pods += [(p.stem, pod_spec(json.loads(p.read_text())["job_configuration"]["job_manifest"])) for p in POOLS]
    for name, pod in pods:
        security = pod["securityContext"]
        assert security["runAsNonRoot"] and security["runAsUser"] == IMAGE_UID, name
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}}, name
        if any("persistentVolumeClaim" in v for v in pod.get("volumes", [])):
            assert security["fsGroup"] == IMAGE_UID and security["fsGroupChangePolicy"] == "OnRootMismatch", name
    assert len(pods) == 4 + 2 + len(POOLS)  # 3 workers + MLflow, the multi-node and NCCL smoke Jobs, the pools



HUB_OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_every_cluster_process_reads_the_hub_from_its_cache_only():
    """A pod or node that reaches for the hub mid-run waits on the network or fails late: the image, each pool's
    defaults, the multi-node Job and the Slurm script all set the offline switches (the cache is filled first:
    scripts/fill_hub_cache.py)."""
    image_env = " ".join(a for op, a in dockerfile(INFRA / "Dockerfile") if op == "ENV")
    places = {"image": dict(re.findall(r"(\w+)=(\S+)", image_env))}
    for pool in POOLS:
        places[pool.stem] = json.loads(pool.read_text())["variables"]["properties"]["env"]["default"]
    for doc in k8s_docs(INFRA / "multinode/k8s/pretrain-job.yaml"):
        if doc["kind"] == "Job":
            for container in pod_spec(doc)["containers"]:
                places[f"Job {container['name']}"] = {e["name"]: e["value"] for e in container.get("env", [])}
    sbatch = (INFRA / "multinode/slurm/pretrain.sbatch").read_text()
    places["slurm"] = dict(re.findall(r"\b(HF_\w+_OFFLINE)=(\S+)", sbatch))
    for where, env in places.items():
        assert {k: env.get(k) for k in HUB_OFFLINE} == HUB_OFFLINE, where
    assert len(places) == 1 + len(POOLS) + 1 + 1


def test_pretraining_pods_give_their_workers_the_stop_grace():
    """An evicted pre-training pod must live long enough for its ranks to agree, checkpoint and exit 75
    (gpt1.pretrain.preemption): torchrun waits `pretrain.stop_grace_seconds` before killing them, the pod's grace
    is longer, and a pod that exits 75 or is disrupted is replaced, not counted as the Job's failure."""
    from gpt1.config import load_config
    from gpt1.errors import PREEMPTED

    grace = load_config("cluster").pretrain.stop_grace_seconds
    (job,) = [d for d in k8s_docs(INFRA / "multinode/k8s/pretrain-job.yaml") if d["kind"] == "Job"]
    pod = pod_spec(job)
    assert pod["terminationGracePeriodSeconds"] > grace
    assert f"--shutdown-timeout={round(grace)}" in " ".join(pod["containers"][0]["args"])
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onExitCodes": {"containerName": pod["containers"][0]["name"], "operator": "In",
                                                "values": [PREEMPTED]}} in rules
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
    pool = json.loads((K8S / "work-pools/gpt1-gpu-node.json").read_text())
    assert pod_spec(pool["job_configuration"]["job_manifest"])["terminationGracePeriodSeconds"] > grace
    sbatch = (INFRA / "multinode/slurm/pretrain.sbatch").read_text()
    assert re.search(r"^#SBATCH --signal=TERM@\d+$", sbatch, re.M) and "--shutdown-timeout" in sbatch
    assert "scontrol requeue" in sbatch and f"exit {PREEMPTED}" in sbatch

# -- work pools ---------------------------------------------------------------------------------------------------
def render_pool(template: dict, values: dict) -> dict:
    """The Job a Kubernetes worker would submit for a flow run: prefect-kubernetes' own code, real values."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.server.schemas.actions import WorkPoolCreate
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    WorkPoolCreate(name="check", type="kubernetes", base_job_template=template)  # the server's template check
    config = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(template, values))
    config.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), name="brave-fox", flow_id=uuid.uuid4()))
    return config.job_manifest


@pytest.fixture
def api_env():
    """The worker's own API URL, which flow pods inherit (set, it also keeps Prefect from starting a server)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: "http://prefect.example.com/api"}):
        yield


def test_pools_are_the_three_named_pools():
    assert {p.stem for p in POOLS} == POOL_NAMES


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.stem)
def test_pool_template_renders_to_a_valid_job_with_real_values(pool, api_env):
    template = json.loads(pool.read_text())
    job = render_pool(template, {"image": "registry.example.com/gpt1:1.2.3", "memory": "96Gi",
                                 "env": {"GPT1_TASK_NOTE": "race"}})
    assert "{{" not in json.dumps(job), "a template variable was left unrendered"
    pod = pod_spec(job)
    for key in PREFECT_POD_SPEC_EXTRAS:
        pod.pop(key)
    for version in K8S_VERSIONS:
        validate_k8s(job, version)
    container = pod["containers"][0]
    assert container["image"] == "registry.example.com/gpt1:1.2.3"
    assert container["resources"]["limits"]["memory"] == "96Gi"  # a per-task job variable reaches the pod
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPT1_TASK_NOTE"] == "race", "a deployment's env must add to the pool's, not replace it"
    assert env["PREFECT_LOGGING_EXTRA_LOGGERS"] == "gpt1"
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.gpt1.svc.cluster.local:5000"
    assert env["GPT1_WORK_DIR"].startswith("/data/") and env["TORCH_EXTENSIONS_DIR"].startswith("/cache/")
    assert env["HF_HOME"].startswith("/cache/") and env["PREFECT_API_URL"] == "http://prefect.example.com/api"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims[mounts["/data"]] == "gpt1-data" and claims[mounts["/cache"]] == "gpt1-cache"
    assert container["envFrom"] == [{"secretRef": {"name": "gpt1-mlflow-client"}}]
    assert pod["serviceAccountName"] == "gpt1-job" and pod["automountServiceAccountToken"] is False
    assert job["spec"]["backoffLimit"] == 0  # Prefect retries flow runs; Kubernetes must not rerun them behind it
    gpus = GPU_POOLS.get(pool.stem)
    tolerates_gpu = any(t["key"] == "nvidia.com/gpu" for t in pod.get("tolerations", []))
    if gpus:
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus and tolerates_gpu
        assert "/dev/shm" in mounts
        assert template["variables"]["properties"]["pod_watch_timeout_seconds"]["default"] >= 900  # autoscaling
    else:
        assert "nvidia.com/gpu" not in json.dumps(container["resources"]) and not tolerates_gpu


@pytest.mark.parametrize("pool", POOLS[:1], ids=lambda p: p.stem)
def test_pool_template_check_catches_a_misspelt_variable(pool, api_env):
    from pydantic import ValidationError

    template = json.loads(pool.read_text())
    container = pod_spec(template["job_configuration"]["job_manifest"])["containers"][0]
    container["resources"]["limits"]["memory"] = "{{ memroy }}"
    with pytest.raises(ValidationError, match="memroy"):
        render_pool(template, {})
