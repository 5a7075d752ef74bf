"""Model FLOPs utilisation: achieved training FLOP/s over the devices' peak.

    mfu = tokens_per_s * flops_per_token / (peak_flops_per_device * world_size)

`tokens_per_s` counts every token of an optimizer update (global batch x context, so gradient accumulation and data
parallelism are both in it) over the update's wall time; `flops_per_token` is
`gpt1.model.transformer.flops_per_token` (6N + attention: forward and backward, activation recomputation not
counted, as in the PaLM definition).

Peaks: GPUs from the vendors' dense (no sparsity) datasheet numbers; for a CPU there is no honest datasheet number
for one process, so the peak is measured at start-up as the best matmul throughput this process reaches with its
own thread count and the run's dtype. That makes CPU MFU "share of the matmul speed this process could get".
"""

from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger(__name__)

# Dense peak TFLOP/s per device. fp32 is the non-tensor-core rate (torch keeps TF32 off for matmuls by default).
# Checked in order: the first name contained in torch.cuda.get_device_name() wins, so variants come first.
GPU_PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),  # SXM
    ("A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
]

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def gpu_peak_flops(device_name: str, precision: str) -> float | None:
    for name, peaks in GPU_PEAK_TFLOPS:
        if name.lower() in device_name.lower():
            return peaks[precision] * 1e12
    return None


def measure_matmul_flops(precision: str, size: int = 512, seconds: float = 0.3) -> float:
    """Best observed FLOP/s of a (size x size) @ (size x size) matmul on this CPU process, in `precision`."""
    dtype = _DTYPES[precision]
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(0)).to(dtype)
    b = a.t().contiguous()
    torch.matmul(a, b)  # warm-up: allocator, kernel selection
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(4):
            torch.matmul(a, b)
        elapsed = time.perf_counter() - start
        best = max(best, 4 * 2 * size**3 / elapsed)
    return best


def device_peak_flops(device: str, precision: str) -> tuple[float | None, str]:
    """(peak FLOP/s of one device, where the number comes from). None when the GPU is not in the table."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        peak = gpu_peak_flops(name, precision)
        if peak is None:
            log.warning(
                "no peak FLOP/s for GPU %r in gpt1.model.mfu.GPU_PEAK_TFLOPS: MFU not reported",
                name,
            )
        return peak, f"datasheet:{name}"
    peak = measure_matmul_flops(precision)
    return peak, f"measured:cpu-matmul-{precision}-{torch.get_num_threads()}threads"


def mfu(
    tokens_per_s: float, flops_per_token: float, peak_per_device: float | None, world_size: int
) -> float | None:
    if not peak_per_device:
        return None
    return tokens_per_s * flops_per_token / (peak_per_device * world_size)
