"""What keeps the first GPU run from failing or wasting GPU time, checked on a CPU: the CUDA guard of the GPU pools,
the versions a run logs, and the GPU settings of the cluster assets. The guard in a real pre-training worker
process: tests/integration/test_cuda_guard_worker.py."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from gpt1.runtime import cuda
from tests.conftest import REPO

INFRA = REPO / "infra"
GPU_POOLS = ("gpt1-gpu", "gpt1-gpu-node")


@pytest.fixture
def cuda_required(monkeypatch):
    """A GPU pool's environment on this CPU-only torch."""
    if torch.cuda.is_available():
        pytest.skip("CUDA works here: the guard has nothing to stop")
    monkeypatch.setenv(cuda.REQUIRE_CUDA, "1")
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)  # as on a GPU pod: DeepSpeed picks its accelerator itself
    cuda.cuda_problem.cache_clear()
    yield
    cuda.cuda_problem.cache_clear()


def test_without_the_requirement_a_cpu_host_trains_on_its_cpu(monkeypatch):
    monkeypatch.delenv(cuda.REQUIRE_CUDA, raising=False)
    assert cuda.training_device("fine-tuning") == ("cuda" if torch.cuda.is_available() else "cpu")


def test_required_cuda_names_torch_its_cuda_build_and_the_driver(cuda_required, monkeypatch, tmp_path):
    version_file = tmp_path / "version"
    version_file.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build\n"
                            "GCC version:  gcc version 12.2.0\n")
    monkeypatch.setattr(cuda, "DRIVER_VERSION_FILE", version_file)
    with pytest.raises(cuda.CudaUnavailable) as raised:
        cuda.training_device("fine-tuning")
    message = str(raised.value)
    assert message.startswith(f"fine-tuning needs CUDA ({cuda.REQUIRE_CUDA}=1) but ")
    assert f"torch {torch.__version__}" in message and "NVIDIA driver 535.104.05" in message
    assert "\n" not in message


def test_a_driver_below_the_floor_of_torch_s_cuda_is_named_as_the_reason(cuda_required, monkeypatch, tmp_path):
    (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Release Build\n")
    monkeypatch.setattr(cuda, "DRIVER_VERSION_FILE", tmp_path / "version")
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # the lock's CUDA build, on a node with an R550 driver
    with pytest.raises(cuda.CudaUnavailable, match=r"driver 550.54.15 is older than 580.65.06, the oldest that runs "
                                                   r"CUDA 13.x builds"):
        cuda.training_device("pre-training")


@pytest.mark.parametrize("build, driver, too_old", [
    ("13.0", "580.65.06", False), ("13.0", "575.57.08", True), ("12.8", "525.60.13", False),
    ("12.1", "520.61.05", True), ("13.0", None, False), (None, "400.1", False), ("12.4", "not-a-version", False)])
def test_driver_floor_per_cuda_major(build, driver, too_old):
    assert (cuda.driver_below_floor(build, driver) is not None) == too_old


@pytest.mark.parametrize("text, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n", "550.54.15"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build\n", "570.86.15"),
])
def test_driver_version_is_read_from_the_kernel_module(text, version, monkeypatch, tmp_path):
    (tmp_path / "version").write_text(text)
    monkeypatch.setattr(cuda, "DRIVER_VERSION_FILE", tmp_path / "version")
    assert cuda.driver_version() == version


def test_a_deepspeed_accelerator_other_than_cuda_is_refused_when_cuda_is_required(cuda_required, monkeypatch):
    from gpt1.pretrain.distributed import device_type

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    with pytest.raises(cuda.CudaUnavailable, match="DS_ACCELERATOR=cpu"):
        device_type()


def test_pretrain_stage_checks_cuda_before_it_reads_the_shards(cuda_required, tmp_path):
    from gpt1.config import load_config
    from gpt1.pretrain.stage import Job
    from gpt1.stages.base import Ref

    job = Job(Ref(tmp_path / "no-shards", "key"), None, load_config("smoke"))
    with pytest.raises(cuda.CudaUnavailable, match="pre-training needs CUDA"):
        job.check(tmp_path / "out")


def test_finetune_checks_cuda_before_it_reads_anything(cuda_required, tmp_path):
    from gpt1.finetune.train import FinetuneRun, finetune

    with pytest.raises(cuda.CudaUnavailable, match="fine-tuning needs CUDA"):
        finetune("sst2", tmp_path / "no-data", tmp_path / "no-checkpoint", tmp_path / "out", run=FinetuneRun(enabled=False))


def test_versions_name_torch_and_deepspeed_and_say_none_for_what_is_absent():
    found = cuda.versions()
    assert found["torch"] == torch.__version__
    from importlib.metadata import version

    assert found["deepspeed"] == version("deepspeed")
    if not torch.cuda.is_available():
        assert found["gpu_count"] == 0 and found["nccl"] is None and found["gpu"] is None


# -- the cluster assets ---------------------------------------------------------------------------------------------
def pool_env(name: str) -> dict[str, str]:
    pool = json.loads((INFRA / "k8s/work-pools" / f"{name}.json").read_text())
    return pool["variables"]["properties"]["env"]["default"]


@pytest.mark.parametrize("name", GPU_POOLS)
def test_gpu_pools_require_cuda_and_keep_compile_caches_on_the_cache_volume(name):
    env = pool_env(name)
    assert env[cuda.REQUIRE_CUDA] == "1"
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith("/cache/") and env["TRITON_CACHE_DIR"].startswith("/cache/")


def test_the_cpu_pool_does_not_require_cuda():
    assert cuda.REQUIRE_CUDA not in pool_env("gpt1-cpu")


def test_multinode_assets_require_cuda_and_share_compile_caches():
    _, job = yaml.safe_load_all((INFRA / "multinode/k8s/pretrain-job.yaml").read_text())
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[cuda.REQUIRE_CUDA] == "1" and env["TORCHINDUCTOR_CACHE_DIR"].startswith("/cache/")
    sbatch = (INFRA / "multinode/slurm/pretrain.sbatch").read_text()
    assert "export GPT1_REQUIRE_CUDA=${GPT1_REQUIRE_CUDA:-1}" in sbatch
    assert "TORCHINDUCTOR_CACHE_DIR=" in sbatch and "TRITON_CACHE_DIR=" in sbatch


def test_the_cluster_preset_acts_by_the_clock_and_the_rehearsal_by_updates():
    from gpt1.config import load_config

    cluster, rehearse = load_config("cluster").pretrain, load_config("rehearse").pretrain
    assert cluster.save_every_minutes and cluster.eval_every_minutes and cluster.probe_every_minutes
    assert (rehearse.save_every_minutes, rehearse.eval_every_minutes, rehearse.probe_every_minutes) == (None,) * 3
