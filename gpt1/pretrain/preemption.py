"""Stopping pre-training when asked, losing at most a logging window: SIGTERM (what Kubernetes sends on eviction,
and Slurm with `--signal`) makes every rank agree on the update to stop at, write a resumable checkpoint there and
exit with gpt1.errors.PREEMPTED (75), which the launcher reports as a run to resume (`--resume auto`), not a failure.

    stop = StopRequest.install()                  # in each worker, before training
    if stop.agreed(device):                       # at each logging boundary: one all-reduce of a flag
        path = save(); write_notice(out, step, path); raise Preempted(...)   # exit 75

The ranks may receive the signal at different moments (torchrun forwards it to each, a node may be evicted alone),
so each only notes it, and at the next boundary the flags are combined: any rank asked means all stop, at the same
update, which is what a collective checkpoint needs. How long that may take is `pretrain.stop_grace_seconds`: the
launcher gives torchrun that long before it kills the workers, and the cluster's pods the same grace.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import torch

from gpt1.io import read_json, write_json

NOTICE = "preempted.json"  # in the output folder: the update stopped at and its checkpoint, for the launcher
STOP_SIGNALS = (signal.SIGTERM,)


class StopRequest:
    """Whether this process was asked to stop (a signal handler that only notes it), and the ranks' agreement."""

    def __init__(self) -> None:
        self.received: int | None = None

    @classmethod
    def install(cls) -> StopRequest:
        request = cls()
        for signum in STOP_SIGNALS:
            signal.signal(signum, request._note)
        return request

    def _note(self, signum: int, frame: object) -> None:
        self.received = signum  # nothing else here: the training loop acts at its next boundary

    def agreed(self, device: torch.device) -> bool:
        """True on every rank when any rank was asked to stop (a collective: every rank calls it together)."""
        flag = torch.tensor([int(self.received is not None)], device=device)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())


def write_notice(out: Path, step: int, checkpoint: Path) -> None:
    write_json(out / NOTICE, {"step": step, "checkpoint": str(checkpoint), "time": time.time()})


def read_notice(out: Path, since: float) -> dict | None:
    """The stop a worker recorded in `out` after `since` (a Unix time), else None."""
    try:
        notice = read_json(out / NOTICE)
    except (OSError, ValueError):
        return None
    recent = isinstance(notice, dict) and isinstance(notice.get("time"), (int, float))
    return notice if recent and notice["time"] >= since else None
