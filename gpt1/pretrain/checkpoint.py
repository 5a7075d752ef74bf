"""Resumable pre-training checkpoints, and the consolidated fp32 weights at the end.

A checkpoint is everything a bit-exact resume needs. Layout under OUT/checkpoints/ (a volume every node sees):

    step-00000100/                       one DeepSpeed checkpoint tag, written by every rank
      *model_states.pt, *optim_states.pt   DeepSpeed: module, optimizer (ZeRO partitions), LR scheduler
      rank-00000.json ...                  per rank: RNG states (python, numpy, torch, cuda)
      meta.json                            step, data-reader position, tokens seen, MLflow run id, world size
      COMPLETE                             written last, once every rank has finished: the commit marker

Only directories with COMPLETE are resumed (`latest_complete`); one killed while being written is ignored and
later removed. The newest `keep_last` complete checkpoints are kept.

Choices where the spec is silent:
- Our extras are JSON (RNG states as lists/base64), never pickles: reading them cannot execute code. DeepSpeed's
  own files (module, optimizer and scheduler state) are read through DeepSpeed with `torch.load(weights_only=True)`
  and an explicit allow-list of the three DeepSpeed types its ZeRO optimizer state holds (`WeightsOnlyLoads`):
  a file planted on a shared checkpoint volume cannot run code on resume, it is refused with its name.
- The data-reader state is global (epoch, position in the world-size-independent sample order; see
  gpt1.data.tokenize), so it lives once in meta.json. Resuming needs the same world size all the same: per-rank
  RNG streams and ZeRO partitions are per rank.
- Consolidation: ZeRO 1-3 checkpoints go through DeepSpeed's `get_fp32_state_dict_from_zero_checkpoint` (the
  fp32 master partitions of every rank); stage 0 (fp32 only, see gpt1.pretrain.distributed) holds the full fp32 module on
  every rank, so its state dict is the answer.
"""

from __future__ import annotations

import base64
import logging
import pickle
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from gpt1.io import InputError, read_json, write_json, write_text

log = logging.getLogger(__name__)

COMPLETE = "COMPLETE"
META = "meta.json"
_TAG = re.compile(r"^step-(\d{8})$")


def tag_for(step: int) -> str:
    return f"step-{step:08d}"


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.json"


# --------------------------------------------------------------------------------------------- RNG states


def _bytes_to_text(t: torch.Tensor) -> str:
    return base64.b64encode(t.cpu().numpy().tobytes()).decode("ascii")


def _text_to_bytes(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8)


def rng_state() -> dict:
    """This process's python, numpy, torch (and CUDA) RNG states, as JSON-able values."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": _bytes_to_text(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_bytes_to_text(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_text_to_bytes(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_text_to_bytes(s) for s in state["cuda"]])


# ---------------------------------------------------------------------------------------------- the manager


class CheckpointManager:
    """Save/find/load/prune checkpoints under `root` for one rank of a `world_size` job.

    `save` and `load` are collective (every rank calls them, as DeepSpeed's own calls are).
    """

    def __init__(self, root: str | Path, *, rank: int = 0, world_size: int = 1, keep_last: int = 3):
        self.root, self.rank, self.world_size, self.keep_last = Path(root), rank, world_size, keep_last

    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        return [p for p in self._tagged() if (p / COMPLETE).exists()]

    def latest_complete(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def _tagged(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir() and _TAG.match(p.name))

    def save(self, engine, step: int, meta: dict) -> Path:
        """Write checkpoint `step` (every rank), commit it with COMPLETE (rank 0), then prune old ones."""
        import deepspeed.comm as dist

        tag = tag_for(step)
        path = self.root / tag
        if self.rank == 0 and path.exists():  # leftovers of a run killed while writing this very step
            (path / COMPLETE).unlink(missing_ok=True)
        dist.barrier()
        engine.save_checkpoint(str(self.root), tag=tag, save_latest=False)
        write_json(path / rank_file(self.rank), {"rank": self.rank, "rng": rng_state()})
        dist.barrier()  # every rank's files are in place before the commit marker
        if self.rank == 0:
            write_json(path / META, {**meta, "step": step, "world_size": self.world_size})
            write_text(path / COMPLETE, f"{step}\n")
            self.prune()
        dist.barrier()
        return path

    def load(self, engine, path: Path) -> dict:
        """Restore engine (module, optimizer, scheduler) and this rank's RNG; returns meta.json."""
        if not (path / COMPLETE).exists():
            raise ValueError(f"{path} is not a complete checkpoint (no {COMPLETE} marker)")
        meta = read_json(path / META)
        if meta["world_size"] != self.world_size:
            raise ValueError(f"{path} was written by {meta['world_size']} processes; resume with the same number "
                             f"(this job has {self.world_size})")
        if not isinstance(engine.checkpoint_engine, WeightsOnlyLoads):
            engine.checkpoint_engine = WeightsOnlyLoads(engine.checkpoint_engine)
        loaded, _ = engine.load_checkpoint(str(path.parent), tag=path.name, load_optimizer_states=True,
                                           load_lr_scheduler_states=True)
        if loaded is None:
            raise ValueError(f"DeepSpeed could not load the checkpoint in {path}")
        set_rng_state(read_json(path / rank_file(self.rank))["rng"])
        return meta

    def prune(self) -> None:
        """Remove incomplete checkpoints and all but the newest `keep_last` complete ones."""
        done = self.complete()
        stale = done[: max(0, len(done) - self.keep_last)]
        stale += [p for p in self._tagged() if not (p / COMPLETE).exists()]
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed checkpoint %s", path.name)


class WeightsOnlyLoads:
    """DeepSpeed's checkpoint engine, except that `load` unpickles with `torch.load(weights_only=True)`: tensors,
    containers and plain values, plus the DeepSpeed types its ZeRO optimizer state is made of, never arbitrary
    objects (whose unpickling can run code)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def load(self, path: str, map_location=None):
        from deepspeed.runtime.fp16.loss_scaler import LossScaler
        from deepspeed.runtime.zero.config import ZeroStageEnum
        from deepspeed.utils.tensor_fragment import fragment_address

        try:
            with torch.serialization.safe_globals([ZeroStageEnum, LossScaler, fragment_address]):
                return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err:
            why = next((line.strip().rstrip(".") for line in str(err).splitlines() if "GLOBAL" in line), "")
            raise InputError(f"refused to load it: it holds objects a weights-only load does not allow ({why}); "
                             "was it written by gpt1 pretrain?", file=path) from None


def consolidated_state_dict(engine, checkpoint: Path, zero_stage: int) -> dict[str, torch.Tensor]:
    """Full fp32 weights (CPU) of the model in `checkpoint` (a complete tag directory). Call on one rank."""
    if zero_stage == 0:
        return {k: v.detach().float().cpu().clone() for k, v in engine.module.state_dict().items()}
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(checkpoint.parent), tag=checkpoint.name)
