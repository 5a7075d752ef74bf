"""Shared fixtures. Real data from ../shared/data is used when present and skipped cleanly otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# Tests that point MLflow at a dead server must not wait out the production flush timeout (120 s) at every run end.
os.environ.setdefault("GPT1_MLFLOW_FLUSH_TIMEOUT", "3")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test when that data is not on this machine."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


@pytest.fixture
def shared_books() -> Path:
    return shared_path("books")


@pytest.fixture
def shared_tasks() -> Path:
    return shared_path("tasks")


@pytest.fixture
def openai_vocab() -> Path:
    return shared_path("openai-gpt1")


@pytest.fixture(scope="session")
def sample_tasks(tmp_path_factory) -> Path:
    """The generated sample data (seed 0), written once per session: its tasks folder, with the books beside it.
    Tests read it and never write into it."""
    from gpt1.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("sample")
    write_sample_data(root, seed=0)
    return root / "tasks"


@pytest.fixture(scope="session")
def empty_mlflow_db(tmp_path_factory) -> Path:
    """An MLflow SQLite store with its tables created and nothing logged. Creating the tables costs seconds: a test's
    own store starts as a copy of this file (`shutil.copy`) and is then used like a new one."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-empty") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()  # the first call creates the tables
    return path


@pytest.fixture
def one_thread():
    """Tiny models on a shared 2-core machine: thread hand-offs cost more than the maths."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def services(tmp_path_factory):
    """One Prefect server and one MLflow server (scripts/services.sh, free loopback ports, state in a temp dir)
    for every end-to-end check of the session (the demo, the rehearsal, the mini recipe): each reuses them, runs
    its own workers, and leaves them up; they are stopped here at the end."""
    import socket
    import subprocess
    import sys

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    state = tmp_path_factory.mktemp("services")
    env = {**os.environ, "GPT1_STATE": str(state), "GPT1_VENV": sys.prefix, "GPT1_KEEP_SERVERS": "1",
           "GPT1_PREFECT_PORT": str(free_port()), "GPT1_MLFLOW_PORT": str(free_port())}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "GPT1_DEMO_OVERRIDES", "GPT1_WORK_DIR"):
        env.pop(name, None)
    services_sh = REPO / "scripts" / "services.sh"
    up = subprocess.run(["bash", "-c", f"source {services_sh} && servers_up"], cwd=REPO, env=env, text=True,
                        capture_output=True, timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield env
    finally:
        subprocess.run(["bash", "-c", f"source {services_sh} && stop_group mlflow-server TERM && "
                                      "stop_group prefect-server TERM"], cwd=REPO, env=env, capture_output=True,
                       timeout=120)


def fresh_shell_env() -> dict[str, str]:
    """The environment of a new login shell on this machine: this process's, less what the project, its venv, a
    test or the `make test` around it set (GPT1_*, PREFECT_*, MLFLOW_*, DS_ACCELERATOR, VIRTUAL_ENV, PYTHONPATH,
    make's MAKELEVEL and flags, a venv's bin on PATH). What the machine itself sets (proxies, CA certificates, pip's
    configuration) stays."""
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPT1_", "PREFECT_", "MLFLOW_", "PYTEST_"))
           and k not in ("DS_ACCELERATOR", "VIRTUAL_ENV", "PYTHONPATH", "MAKELEVEL", "MAKEFLAGS", "MFLAGS",
                         "MAKEOVERRIDES")}
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin)
    return env


@pytest.fixture(scope="session")
def fresh_demo(tmp_path_factory):
    """`make demo` as a newcomer runs it: in a fresh clone of this repository's committed HEAD (its own .venv and
    .demo/), from a fresh shell (`fresh_shell_env`; free ports, so a demo already running on this machine is left
    alone). Yields (the finished `make demo`, the clone, its environment); `make down` at the end."""
    import socket
    import subprocess

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    clone = tmp_path_factory.mktemp("fresh") / "gpt1-pipeline"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {**fresh_shell_env(), "GPT1_PREFECT_PORT": str(free_port()), "GPT1_MLFLOW_PORT": str(free_port())}
    try:
        yield subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True,
                             timeout=3600), clone, env
    finally:
        subprocess.run(["make", "down"], cwd=clone, env=env, capture_output=True, timeout=300)
