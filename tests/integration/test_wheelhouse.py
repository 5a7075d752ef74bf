"""The air-gapped install (scripts/wheelhouse.py), rehearsed: a wheelhouse built for this machine's Python goes
into a fresh venv that has only torch, with no index and no network (its wheels carried in two folders, as over a
size-limited transfer), and the `gpt1` it installs pre-trains."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from gpt1.data.tokenize.write import write_random_shards
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "wheelhouse.py"
PYTHON_VERSION = "%d.%d" % sys.version_info[:2]
CACHE = REPO / ".cache" / "wheelhouse-test" / f"py{PYTHON_VERSION}"  # downloads kept between runs
NO_NETWORK = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",  # a closed port
              "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": "",
              "HF_HUB_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}


def host_torch(python: str) -> list[str]:
    """The command that gives the host venv the torch of this one, from where `make venv` took it (this machine's
    wheels, pip's find-links): uv, which `make venv` installs, links it from its cache in a second."""
    links = os.environ.get("PIP_FIND_LINKS") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True).stdout
    return [str(Path(sys.prefix) / "bin" / "uv"), "pip", "install", "--python", python, "-q",
            *(["--find-links", links.strip()] if links.strip() else []), f"torch=={version('torch')}"]


def wheelhouse(*args: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_host_provided_packages_are_left_out_and_the_rest_kept(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import wheelhouse as module
    finally:
        sys.path.remove(str(SCRIPT.parent))
    lock = tmp_path / "gpu.lock"
    digest = "ab" * 32
    lock.write_text(f"# comment\nnumpy==2.3.3 \\\n    --hash=sha256:{digest} \\\n    --hash=sha256:{'cd' * 32}\n"
                    "torch==2.13.0\ntriton==3.7.1\nnvidia-cublas==13.1.1.3\n"
                    "cuda-bindings==13.5.0\nmlflow[auth]==3.17.2\nsetuptools==84.2.1\n")
    assert module.pins(lock) == [f"numpy==2.3.3 --hash=sha256:{digest} --hash=sha256:{'cd' * 32}",
                                 "mlflow==3.17.2", "setuptools==84.2.1"]
    assert module.pins(lock, host=True) == ["torch==2.13.0", "triton==3.7.1", "nvidia-cublas==13.1.1.3",
                                            "cuda-bindings==13.5.0"]
    assert module.pins(lock, leave_out=("NumPy", "ml_flow")) == ["mlflow==3.17.2", "setuptools==84.2.1"]
    assert module.pins(lock, leave_out=("numpy", "MLflow")) == ["setuptools==84.2.1"]
    lock.write_text("numpy>=2\n")
    with pytest.raises(module.WheelhouseError, match=r"gpu.lock:1: not an exact pin"):
        module.pins(lock)
    lock.write_text("six==1.16.0\nnumpy==2.3.3 \\\n    --hash=md5:abc\n")  # the entry starts on line 2
    with pytest.raises(module.WheelhouseError, match=r"gpu.lock:2: not an exact pin"):
        module.pins(lock)
    real = module.pins(REPO / "requirements" / "gpu.lock")
    assert {"deepspeed", "prefect", "mlflow", "pydantic", "ftfy"} <= {p.split("==")[0] for p in real}
    assert not any(module.HOST_PROVIDED.match(p.split("==")[0]) for p in real)
    assert all(" --hash=sha256:" in p for p in real + module.pins(REPO / "requirements" / "gpu.lock", host=True))


def test_install_refuses_a_wheelhouse_for_another_python(tmp_path):
    (tmp_path / "wheelhouse.json").write_text(json.dumps({"python_version": "3.99"}))
    done = wheelhouse("install", "--wheelhouse", str(tmp_path))
    assert done.returncode == 2
    assert f"is for Python 3.99, {sys.executable} is {PYTHON_VERSION}" in done.stderr
    assert "make wheelhouse PYTHON_VERSION=" in done.stderr


@pytest.mark.slow
def test_a_fresh_venv_with_only_torch_gets_gpt1_from_the_wheelhouse_offline_and_pretrains(tmp_path):
    built = wheelhouse("build", "--python-version", PYTHON_VERSION, "--out", str(CACHE))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert json.loads((CACHE / "wheelhouse.json").read_text())["built_from_source"] == ["deepspeed==0.19.8"]
    assert not list(CACHE.glob("torch-*.whl")) and not list(CACHE.glob("nvidia_*.whl"))

    venv = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    torch_only = subprocess.run(host_torch(python), capture_output=True, text=True, timeout=1200)
    assert torch_only.returncode == 0, torch_only.stderr[-2000:]

    parts = [tmp_path / "part-1", tmp_path / "part-2"]
    for part in parts:
        part.mkdir()
    for name in ("requirements.txt", "wheelhouse.json"):
        shutil.copy2(CACHE / name, parts[0])
    for index, wheel in enumerate(sorted(CACHE.glob("*.whl"))):
        shutil.copy2(wheel, parts[index % 2])
    offline = {**os.environ, **NO_NETWORK}
    listed = (parts[0] / "requirements.txt").read_text().splitlines()
    assert all(re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in listed), listed[:3]

    # A wheel whose bytes changed after the build is refused, naming it, before anything is installed.
    tampered = tmp_path / "tampered"
    shutil.copytree(parts[1], tampered)
    victim = min(tampered.glob("*.whl"), key=lambda wheel: wheel.stat().st_size)
    victim.write_bytes(victim.read_bytes() + b"\0")
    refused = wheelhouse("install", "--wheelhouse", str(parts[0]), str(tampered), "--python", python, env=offline)
    assert refused.returncode == 2 and "HASHES" in refused.stdout + refused.stderr, refused.stderr[-2000:]
    assert victim.name.split("-")[0].replace("_", "-").lower() in (refused.stdout + refused.stderr).lower()

    installed = wheelhouse("install", "--wheelhouse", *map(str, parts), "--python", python, env=offline)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    where = subprocess.run([python, "-c", "import gpt1, torch; print(gpt1.__file__); print(torch.__version__)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
    package, torch_version = where.stdout.split()
    assert Path(package).is_relative_to(venv) and torch_version.startswith("2.13.0")

    gpt1 = str(venv / "bin" / "gpt1")
    usage = subprocess.run([gpt1, "--help"], capture_output=True, text=True, cwd=tmp_path, env=offline,
                           timeout=300)
    assert usage.returncode == 0 and "pretrain" in usage.stdout
    write_random_shards(tmp_path / "shards", vocab_size=64, n_ctx=16, rows={"train": 64, "val": 16})
    sets = ["model.n_ctx=16", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=128",
            "pretrain.global_batch_size=8", "pretrain.eval_batches=1", "pretrain.log_every=1"]
    argv = [gpt1, "pretrain", "--preset", "smoke", "--shards", str(tmp_path / "shards"), "--out",
            str(tmp_path / "run"), "--max-steps", "2", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    for item in sets:
        argv += ["--set", item]
    trained = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=900,
                             env={**offline, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"})
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert (tmp_path / "run" / "final" / "gpt1.safetensors").is_file()
