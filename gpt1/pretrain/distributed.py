"""Where pre-training workers run and how DeepSpeed is told about them: world, batch layout, DeepSpeed config.

Three jobs, each derived from the pipeline config (the single source of truth) and the world size:

- `World`: this process's rank, local rank and world size as the launcher (torchrun, the deepspeed launcher, a
  Slurm/k8s wrapper) exported them. A bare `python -m gpt1.pretrain` gets single-process defaults, because
  DeepSpeed otherwise goes looking for mpi4py.
- `batch_layout`: micro batch and gradient accumulation from `pretrain.global_batch_size` and the world size;
  a layout that does not multiply out fails here, before any worker starts, with the numbers in the message.
- `deepspeed_config`: the DeepSpeed JSON (ZeRO stage, precision, batch layout, clipping, AdamW, offload). It is
  generated on every start and logged, never kept by hand.

Design choices:
- The optimizer is AdamW (decoupled weight decay) as torch's fused kernel, `torch.optim.AdamW(fused=True)`, on
  CPU and GPU alike: DeepSpeed's `torch_adam` option, which passes the config's other keys (`fused`) through to
  torch. Nothing is compiled at run time; DeepSpeed's own FusedAdam would be JIT-built from CUDA sources at the
  first step (it needs nvcc in the image). With CPU offload it is DeepSpeedCPUAdam, which ZeRO-Offload requires
  and DeepSpeed JIT-builds on first use (cached in TORCH_EXTENSIONS_DIR). Weight decay per parameter group comes
  from the parameter groups the engine is given; the config's value is only the default for groups that do not
  say.
- No DeepSpeed C++ op is built on the CPU path: DeepSpeed's torch backend builds its shared-memory all-reduce
  op (`deepspeed_shm_comm`, a C++ build on every fresh machine) whenever the process group starts on the CPU
  accelerator, to serve `inference_all_reduce` (tensor-parallel inference), which training never calls.
  `init_world` marks that op unavailable before it starts the group, as DeepSpeed itself does on a platform
  that cannot build it; gradients go through torch.distributed (gloo) as before.
- bf16/fp16 need ZeRO stage >= 1: at stage 0 DeepSpeed keeps the fp32 master weights inside its mixed-precision
  optimizer wrappers, out of reach of the fp32 consolidation at the end (it gathers ZeRO's fp32 partitions at
  stages 1-3). On one device stage 1 costs nothing extra.
- fp16 is GPU-only (the CPU accelerator has no fp16 kernels worth training with).
- Gradients are reduced across ranks in fp32 (`communication_data_type`): DeepSpeed's default is the training
  dtype, and a sum over many ranks in bf16 keeps 8 bits of mantissa. With ZeRO 2-3 micro-batch gradients are also
  accumulated in fp32 (`data_types.grad_accum_dtype`); at ZeRO-1 DeepSpeed would answer that setting with its
  separate BF16 optimizer, whose checkpoints its own `zero_to_fp32` cannot consolidate, and without it would sum a
  rank's micro-batches in bf16. So a bf16/fp16 layout that accumulates micro-batches (micro-batch x world size
  below the global batch) needs `zero_stage >= 2`: `batch_layout` refuses it at ZeRO 0-1, naming the numbers,
  rather than raising the stage itself, because the stage decides the checkpoint's layout and a run's checkpoints
  should not change format with the number of GPUs it lands on.
- DeepSpeed's bf16 overflow check is off (`bf16.check_grad_overflow`): it reduces every gradient tensor and waits
  for the device before each update, a fixed cost per update that dominates small per-rank batches on a GPU
  (benchmarks/bench_pretrain_gpu.py measures it). bf16 has fp32's range and no loss scale to adjust; a non-finite
  loss or gradient norm still stops the run, named by its update, at the next logging window (worker.py).
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from gpt1.config import PretrainConfig
from gpt1.runtime.cuda import require_cuda, training_device
from gpt1.runtime.processes import free_port, threads_per_process

LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_NEVER_PRINT = 10**9  # DeepSpeed's steps_per_print: we log progress ourselves


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class BatchLayout:
    """Sequences per optimizer update = micro_batch x grad_accum x world_size."""

    global_batch: int
    micro_batch: int
    grad_accum: int
    world_size: int


def prepare_env() -> None:
    """Environment a worker needs before `import deepspeed`: JIT-op cache, no telemetry, single-process defaults."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    # One cache per venv: DeepSpeed rebuilds its op when the cached build came from another interpreter, so venvs
    # sharing one directory would rebuild it in turn (minutes on 2 cores).
    venv_key = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    os.environ.setdefault(
        "TORCH_EXTENSIONS_DIR", str(cache / "gpt1" / "torch_extensions" / venv_key)
    )
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if (
        "RANK" not in os.environ and "WORLD_SIZE" not in os.environ
    ):  # a bare process is a world of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    missing = [k for k in LAUNCHER_ENV if k not in os.environ]
    if missing:
        raise ValueError(
            f"incomplete launcher environment: {missing} not set (RANK/LOCAL_RANK/WORLD_SIZE/"
            "MASTER_ADDR/MASTER_PORT must all be exported, or none for a single process)"
        )


def world_from_env() -> World:
    return World(
        int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    )


def device_type() -> str:
    """'cuda' when DeepSpeed will pick a GPU, else 'cpu' (decided without importing deepspeed: it is slow). With
    GPT1_REQUIRE_CUDA set, anything but 'cuda' raises CudaUnavailable (gpt1.runtime.cuda)."""
    wanted = os.environ.get("DS_ACCELERATOR")
    if wanted not in (None, "cuda"):
        require_cuda(
            "pre-training", f"DS_ACCELERATOR={wanted} asks DeepSpeed for another accelerator"
        )
        return "cpu"
    return training_device("pre-training")


def init_world(timeout_minutes: float = 15.0, trace_prefix: Path | None = None) -> World:
    """Join the process group (gloo on CPU, nccl on GPU) and pin this process to its local device.

    A collective that waits longer than `timeout_minutes` (a hung or lost peer) fails the step instead of holding
    the GPUs until the job's time runs out; under NCCL each rank then writes its flight recorder's last
    collectives to `trace_prefix<rank>` (torch's `fr_trace` reads them). Set here, before the group starts,
    unless the environment gives them."""
    # first: a GPU job without CUDA stops here, at once
    backend = "nccl" if device_type() == "cuda" else "gloo"
    prepare_env()
    if backend == "nccl":  # the flight recorder is NCCL's
        if trace_prefix is not None:
            trace_prefix.parent.mkdir(parents=True, exist_ok=True)
            os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(trace_prefix))
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # collectives kept per rank
        os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    from datetime import timedelta

    import deepspeed
    import torch

    world = world_from_env()
    if backend == "gloo":
        skip_shm_comm_op()
    deepspeed.init_distributed(
        dist_backend=backend,
        auto_mpi_discovery=False,
        verbose=False,
        timeout=timedelta(minutes=timeout_minutes),
    )
    if backend == "nccl":
        torch.cuda.set_device(world.local_rank)
    return world


def leave_world() -> None:
    """Destroy the process group before the interpreter shuts down. A gloo rank that exits with its group alive
    can abort (SIGABRT) in teardown, as its worker threads still hold tensors; the run's outputs were complete,
    yet the launcher sees a crashed rank and fails the run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def skip_shm_comm_op() -> None:
    """Keep DeepSpeed from JIT-building its CPU shared-memory all-reduce op when the process group starts
    (module docstring): its probe of which ops this machine can build is DeepSpeed's switch for that."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def batch_layout(pretrain: PretrainConfig, world_size: int) -> BatchLayout:
    """Micro batch and gradient accumulation; an inconsistent combination raises ValueError naming the fields."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    total = pretrain.global_batch_size
    if pretrain.micro_batch_size is None:
        if total % world_size:
            raise ValueError(
                f"pretrain.global_batch_size={total} is not divisible by the world size {world_size}; "
                "change the batch size or the number of processes"
            )
        return BatchLayout(total, total // world_size, 1, world_size)
    micro = pretrain.micro_batch_size
    per_update = micro * world_size
    if total % per_update:
        raise ValueError(
            f"pretrain.global_batch_size={total} is not a multiple of pretrain.micro_batch_size={micro}"
            f" x world size {world_size} = {per_update}; pick values with global = micro x "
            "gradient-accumulation steps x world size"
        )
    layout = BatchLayout(total, micro, total // per_update, world_size)
    if layout.grad_accum > 1 and pretrain.precision != "fp32" and pretrain.zero_stage < 2:
        raise ValueError(
            f"pretrain.precision={pretrain.precision} with pretrain.zero_stage={pretrain.zero_stage} would sum "
            f"{layout.grad_accum} micro-batch gradients per update in {pretrain.precision} (global batch {total} ="
            f" micro-batch {micro} x {layout.grad_accum} x world size {world_size}): set pretrain.zero_stage=2,"
            " which accumulates them in fp32, or a micro-batch that needs no accumulation"
        )
    return layout


def deepspeed_config(pretrain: PretrainConfig, world_size: int, device: str = "cpu") -> dict:
    """The DeepSpeed JSON for this run, derived from `pretrain` and the world size (see module docstring)."""
    layout = batch_layout(pretrain, world_size)
    stage, precision = pretrain.zero_stage, pretrain.precision
    if precision != "fp32" and stage == 0:
        raise ValueError(
            f"pretrain.precision={precision} needs pretrain.zero_stage >= 1 (stage 0 hides the fp32 "
            "master weights the final consolidation reads); use zero_stage=1, or precision=fp32"
        )
    if precision == "fp16" and device != "cuda":
        raise ValueError("pretrain.precision=fp16 needs a GPU; on CPU use bf16 or fp32")
    if pretrain.offload_optimizer and stage == 0:
        raise ValueError("pretrain.offload_optimizer=true needs pretrain.zero_stage >= 1")

    zero: dict = {"stage": stage}
    if pretrain.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": device == "cuda"}
    adamw = {
        "lr": pretrain.lr,
        "betas": list(pretrain.adam_betas),
        "eps": pretrain.adam_eps,
        "weight_decay": pretrain.weight_decay,
    }
    if not pretrain.offload_optimizer:  # ZeRO-Offload needs DeepSpeedCPUAdam (module docstring)
        adamw.update(torch_adam=True, fused=True)
    config = {
        "train_batch_size": layout.global_batch,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": layout.grad_accum,
        "gradient_clipping": pretrain.grad_clip,
        "optimizer": {"type": "AdamW", "params": adamw},
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16", "check_grad_overflow": False},  # module docstring
        "fp16": {"enabled": precision == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        "steps_per_print": _NEVER_PRINT,
        "wall_clock_breakdown": False,
        "communication_data_type": "fp32",  # gradients summed across ranks in fp32 (module docstring)
    }
    if precision != "fp32" and stage >= 2:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    return config


def worker_command(
    nproc: int, worker_args: list[str], stop_grace_seconds: float = 30.0
) -> tuple[list[str], dict[str, str]]:
    """Command + environment that start `python -m gpt1.pretrain worker_args` on `nproc` local processes.

    One process is started directly with the launcher variables set; more go through torchrun (standalone
    rendezvous on a free port). Multi-node runs call torchrun or the deepspeed launcher themselves
    (infra/multinode/).
    """
    env = dict(os.environ)
    for key in LAUNCHER_ENV + ("LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"):
        env.pop(key, None)  # never inherit a parent job's rank
    if nproc == 1:
        env.update(
            RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
        )
        return [sys.executable, "-m", "gpt1.pretrain", *worker_args], env
    env.setdefault("OMP_NUM_THREADS", threads_per_process(nproc))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        # on SIGTERM torchrun passes it on and kills what has not exited after this long: the workers' grace to
        # agree on a stop and checkpoint (gpt1.pretrain.preemption)
        f"--shutdown-timeout={max(1, round(stop_grace_seconds))}",
        "-m",
        "gpt1.pretrain",
        *worker_args,
    ]
    return command, env
