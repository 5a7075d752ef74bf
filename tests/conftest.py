"""Shared fixtures. Real data from ../shared/data is used when present and skipped cleanly otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# Tests that point MLflow at a dead server must not wait out the production flush timeout (120 s) at every run end.
os.environ.setdefault("GPT1_MLFLOW_FLUSH_TIMEOUT", "3")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GPT1_SHARED_DATA", REPO.parent / "shared" / "data"))


# Fixtures started once per run whose tests must therefore share one pytest-xdist worker (`make test` runs two).
# In the order their groups are handed out: the longest first, so neither is the run's tail.
ONE_WORKER_FIXTURES = {"team_stack": "team-stack", "services": "team-stack", "fresh_demo": "fresh-demo"}
GROUP = pytest.StashKey[int]()  # an item's place in that order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test runs on the worker of its group (`--dist loadgroup`): the team stack's or the fresh demo's when it
    uses either, else its file's (so a file's module fixtures are built once). On xdist's workers those two groups
    come first."""
    groups = list(dict.fromkeys(ONE_WORKER_FIXTURES.values()))
    for item in items:
        group = next((name for fixture, name in ONE_WORKER_FIXTURES.items() if fixture in item.fixturenames),
                     str(item.path.relative_to(REPO)))
        item.stash[GROUP] = groups.index(group) if group in groups else len(groups)
        if getattr(config.option, "loadgroup", False):  # set on xdist's workers by `--dist loadgroup`
            # xdist's scheduler groups tests by an `@group` suffix of their ids; xdist 3.8 writes it (for an
            # `xdist_group` mark) to `item._nodeid`, which pytest 9 no longer reads, so it is written here.
            item._id = NodeId.parse(f"{item.nodeid}@{group}")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.stash[GROUP])


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test when that data is not on this machine."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


def overriding(base: Iterable[str], change: Iterable[str]) -> list[str]:
    """`key=value` overrides: `base` with `change` in place of its settings of the same keys. Two overrides that set
    one key differently are refused naming both (gpt1.config), so a test's change replaces the base's setting of a
    key (or of a section holding it, or of a key inside it) rather than adding a second one."""
    from gpt1.config import Setting

    def keys(item: str) -> list[tuple]:
        """What the item sets: its key, or each key inside its mapping value."""
        def leaves(path: tuple, value) -> Iterator[tuple]:
            if isinstance(value, dict) and value:
                for key, inner in value.items():
                    yield from leaves((*path, str(key)), inner)
            else:
                yield path

        setting = Setting.parse(item)
        return list(leaves(tuple(setting.key.split(".")), setting.value))

    change = list(change)
    changed = [key for item in change for key in keys(item)]
    overlaps = lambda a, b: a[: len(b)] == b or b[: len(a)] == a  # noqa: E731
    kept = [item for item in base if not any(overlaps(a, b) for a in keys(item) for b in changed)]
    return [*kept, *change]


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
def team_stack(tmp_path_factory):
    """The team stack for every check that needs servers (the smoke deployment, the rehearsal, cancelling,
    schedules, faults, preflight): infra/compose/stack.py's PostgreSQL, S3 server, Prefect server with API auth,
    MLflow server with basic auth and S3 artifacts, worker and deployments, started once on free loopback ports
    with fresh secrets (tests/team_stack.py), stopped at the end."""
    from tests.team_stack import TeamStack

    stack = TeamStack(tmp_path_factory.mktemp("team-stack"))
    try:
        stack.run("up")
        yield stack
    finally:
        subprocess.run([sys.executable, str(REPO / "infra/compose/stack.py"), "down", "--state", str(stack.state),
                        "--env-file", str(stack.env_file)], env=stack.process_env, capture_output=True, timeout=300)


@pytest.fixture(scope="session")
def services(team_stack, tmp_path_factory):
    """The environment scripts/services.sh and its callers use the team stack's servers with: their URLs and
    credentials, a state folder for the workers a test starts itself, the servers kept up (GPT1_KEEP_SERVERS)."""
    return team_stack.services_env(tmp_path_factory.mktemp("services"))


def fresh_shell_env() -> dict[str, str]:
    """The environment of a new login shell on this machine: this process's, less what the project, its venv, a
    test or the `make test` around it set (GPT1_*, PREFECT_*, MLFLOW_*, DS_ACCELERATOR, VIRTUAL_ENV, PYTHONPATH,
    make's MAKELEVEL and flags, a venv's bin on PATH). What the machine itself sets (proxies, CA certificates, pip's
    configuration) stays."""
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
    from gpt1.runtime.processes import free_port

    clone = tmp_path_factory.mktemp("fresh") / "gpt1-pipeline"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {**fresh_shell_env(), "GPT1_PREFECT_PORT": str(free_port()), "GPT1_MLFLOW_PORT": str(free_port())}
    try:
        yield subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True,
                             timeout=3600), clone, env
    finally:
        subprocess.run(["make", "down"], cwd=clone, env=env, capture_output=True, timeout=300)
