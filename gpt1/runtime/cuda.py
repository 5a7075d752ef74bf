"""The CUDA side of a run: which device trains, the guard that keeps a GPU job off the CPU, and the versions.

    device = training_device("fine-tuning")    # "cuda" or "cpu"; with GPT1_REQUIRE_CUDA=1 only "cuda"
    run.log_params(versions())                  # torch, CUDA, cuDNN, NVIDIA driver, NCCL, DeepSpeed, GPU

A GPU pod whose CUDA is unusable (an NVIDIA driver too old for torch's CUDA build, a node without its GPUs
mounted, a CPU-only torch) would otherwise train on the host's CPUs while its GPUs idle. The GPU work pools and
the multi-node assets set `GPT1_REQUIRE_CUDA=1`: there, choosing a device raises `CudaUnavailable` at once, one
line naming torch, its CUDA build and the driver (and, when the driver is older than the floor of torch's CUDA
release, saying so).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

REQUIRE_CUDA = "GPT1_REQUIRE_CUDA"
# the loaded NVIDIA kernel module's version
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


# The oldest Linux driver that runs any build of a CUDA major release (NVIDIA's minor-version compatibility, from
# the CUDA toolkit release notes). Below it torch cannot start CUDA; the message says so instead of leaving the user
# to decode torch's warning.
DRIVER_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


class CudaUnavailable(OSError):
    """CUDA was required (GPT1_REQUIRE_CUDA) but cannot be used. An OSError, so gpt1.errors reports it as the
    environment's problem: one line, exit 2."""


def cuda_required() -> bool:
    return os.environ.get(REQUIRE_CUDA, "").strip().lower() in ("1", "true", "yes")


def driver_version() -> str | None:
    """The NVIDIA driver's version, read without CUDA (which may be what is broken); None without a driver."""
    try:
        found = re.search(
            r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", DRIVER_VERSION_FILE.read_text()
        )
        if found:
            return found[1]
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def driver_below_floor(cuda_build: str | None, driver: str | None) -> str | None:
    """Why `driver` cannot run torch's CUDA `cuda_build` (e.g. "13.0"), or None when it can or either is unknown."""
    if not cuda_build or not driver:
        return None
    floor = DRIVER_FLOOR.get(int(cuda_build.split(".")[0]))
    try:
        too_old = floor is not None and _version(driver) < _version(floor)
    except ValueError:
        return None
    if not too_old:
        return None
    return (
        f"the NVIDIA driver {driver} is older than {floor}, the oldest that runs CUDA "
        f"{cuda_build.split('.')[0]}.x builds: upgrade the node's driver, or use an image whose torch is built "
        "for the CUDA the driver supports"
    )


@functools.cache  # torch warns why CUDA failed to start only on the first try
def cuda_problem() -> str | None:
    """Why this process cannot compute on CUDA, or None when it can."""
    import torch

    if torch.version.cuda is None:
        return "this torch is a CPU-only build"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if available:
        return None
    too_old = driver_below_floor(torch.version.cuda, driver_version())
    if too_old:
        return too_old
    said = " ".join(str(caught[0].message).split()) if caught else ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (
        "torch.cuda.is_available() is False"
        + (f" ({said})" if said else "")
        + (f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
    )


def require_cuda(what: str, problem: str | None = None) -> None:
    """With GPT1_REQUIRE_CUDA set, raise CudaUnavailable when `problem` (default: cuda_problem()) says why CUDA
    cannot be used."""
    if not cuda_required():
        return
    problem = problem or cuda_problem()
    if problem is None:
        return
    import torch

    raise CudaUnavailable(
        f"{what} needs CUDA ({REQUIRE_CUDA}=1) but {problem} (torch {torch.__version__}, CUDA "
        f"build {torch.version.cuda or 'none'}, NVIDIA driver {driver_version() or 'not found'})"
    )


def training_device(what: str) -> str:
    """'cuda' when this process can train there, else 'cpu' (unless CUDA is required: see require_cuda)."""
    require_cuda(what)
    return "cpu" if cuda_problem() else "cuda"


def use_tf32_matmuls() -> None:
    """Run fp32 matmuls on CUDA as TF32, on the tensor cores. Through torch's process-wide switch on purpose:
    torch.compile's inductor reads it back (`torch.get_float32_matmul_precision()`), which raises once only the
    CUDA backend's own switch was set."""
    import torch

    torch.set_float32_matmul_precision("high")


def versions() -> dict[str, str | int | None]:
    """What a GPU run's numbers depend on, for its logs: torch, CUDA, cuDNN, driver, NCCL, DeepSpeed, the GPUs."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        deepspeed = version("deepspeed")
    except PackageNotFoundError:
        deepspeed = None
    found: dict[str, str | int | None] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "deepspeed": deepspeed,
        "cudnn": None,
        "nccl": None,
        "driver": driver_version(),
        "gpu": None,
        "gpu_count": 0,
    }
    if cuda_problem() is None:
        found["cudnn"] = str(torch.backends.cudnn.version())
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        found["gpu"] = torch.cuda.get_device_name()
        found["gpu_count"] = torch.cuda.device_count()
    return found
