"""The first thing to run on a new cluster: every rank all-reduces and broadcasts a few hundred MB, checks the
values it gets back, and rank 0 prints the bus bandwidth, with NCCL's log and torch's flight recorder on. A fabric,
driver, shared-memory or pod-security problem then shows in a minute, not an hour into pre-training.

    torchrun --nproc-per-node 8 -m gpt1.runtime.collectives            # one 8-GPU node (the smoke Job's command)
    torchrun --nproc-per-node 2 -m gpt1.runtime.collectives --megabytes 8 --backend gloo   # CPUs, as the tests do

NCCL on GPUs, else gloo. A collective that does not end within `--timeout-s` fails the process group; under NCCL
the flight recorder then writes each rank's last collectives to `TORCH_FR_DUMP_TEMP_FILE` (default
`/tmp/nccl_trace_rank_<rank>`; torch's `fr_trace` tool reads them). torch reads the recorder's settings when the
process group starts, so they are set here before it does, unless the environment gives them.

Bus bandwidth is nccl-tests' figure, comparable across world sizes: an all-reduce moves 2(n-1)/n of the buffer
through each rank's links, a broadcast the buffer once. Exit status 0 when every value is right on every rank; 2
with the rank, collective and value when one is not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from gpt1.errors import exit_code
from gpt1.runtime.cuda import training_device

FLIGHT_RECORDER = {
    "TORCH_FR_BUFFER_SIZE": "2000",  # collectives kept per rank (0 turns the recorder off)
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_FR_DUMP_TEMP_FILE": "/tmp/nccl_trace_rank_",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # a timed-out or failed collective tears the process down
    "NCCL_DEBUG": "INFO",  # transports, rings and the interface chosen, once per rank
}


def bus_bytes(collective: str, size: int, world: int) -> float:
    """Bytes each rank's links carry for one collective on a `size`-byte buffer (nccl-tests' bus bandwidth)."""
    return size * 2 * (world - 1) / world if collective == "all_reduce" else float(size)


def timed(run, device: torch.device, repeats: int) -> float:
    """Median seconds of `run()` over `repeats` calls, after one warm-up call (which sets up NCCL's channels)."""
    run()
    seconds = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def check(rank: int, world: int, megabytes: int, repeats: int, device: torch.device) -> list[str]:
    """Run each collective and verify its values on this rank. Returns rank 0's report lines; every rank learns
    whether any rank saw a wrong value (so none waits on a peer that has given up), and this rank's own error
    comes back as ValueError."""
    numel = megabytes * 2**20 // 4  # float32
    buffer = torch.empty(numel, dtype=torch.float32, device=device)

    def all_reduce() -> None:
        buffer.fill_(rank + 1)
        dist.all_reduce(buffer)

    def broadcast() -> None:
        buffer.fill_(rank + 1)
        dist.broadcast(buffer, src=0)

    expected = {"all_reduce": world * (world + 1) / 2, "broadcast": 1.0}
    lines, errors = [], []
    for name, run in (("all_reduce", all_reduce), ("broadcast", broadcast)):
        seconds = timed(run, device, repeats)
        low, high = buffer.min().item(), buffer.max().item()
        if low != expected[name] or high != expected[name]:
            errors.append(
                f"rank {rank}: {name} gave values in [{low}, {high}], expected {expected[name]}"
            )
        gbps = bus_bytes(name, numel * 4, world) / seconds / 1e9
        lines.append(
            f"{name:10s} {megabytes} MB x {world} ranks: {seconds * 1e3:.2f} ms, bus {gbps:.2f} GB/s"
        )
    failed = torch.tensor([len(errors)], device=device)
    dist.all_reduce(failed)
    if errors or failed.item():
        raise ValueError(
            "; ".join(errors) or f"rank {rank}: values right here, wrong on another rank"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=256, help="buffer size per collective")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per collective")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="a collective slower fails")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    args = parser.parse_args(argv)
    if args.megabytes < 1 or args.repeats < 1 or not args.timeout_s > 0:
        parser.error("--megabytes and --repeats must be >= 1 and --timeout-s > 0")
    return exit_code(lambda: run(args), prefix="collectives")


def run(args: argparse.Namespace) -> int:
    backend = args.backend
    if backend == "auto":  # with GPT1_REQUIRE_CUDA set, a node without working CUDA stops here
        backend = "nccl" if training_device("the collectives check") == "cuda" else "gloo"
    for name, value in FLIGHT_RECORDER.items():
        os.environ.setdefault(name, value)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        lines = check(
            rank, world, args.megabytes, args.repeats, device
        )  # a wrong value: ValueError, exit 2
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(f"collectives: {backend} on {world} ranks ({device.type})")
        print("\n".join(lines), flush=True)
        print("collectives: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
