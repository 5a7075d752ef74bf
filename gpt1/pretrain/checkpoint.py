"""Resumable pre-training checkpoints, and the consolidated fp32 weights at the end.

A checkpoint is everything an exact resume needs. Layout under OUT/checkpoints/ (a volume every node sees):

    step-00000100/                       one DeepSpeed checkpoint tag, written by every rank
      *model_states.pt, *optim_states.pt   DeepSpeed: module, optimizer (ZeRO partitions), LR scheduler
      rank-00000.json ...                  per rank: RNG states (python, numpy, torch, cuda)
      meta.json                            step, data-reader position, tokens seen, MLflow run id, world size
      COMPLETE                             written last, once every rank has finished: the commit marker

Only directories with COMPLETE are resumed (`latest_complete`); one killed while being written is ignored and
later removed. The newest `keep_last` complete checkpoints are kept.

A shared checkpoint volume is writable by others, so nothing in it is trusted beyond what the run recorded:
- meta.json lists every file the run wrote into the tag (names from DeepSpeed's own naming, gathered from every
  rank), with its size and sha256. A resume refuses a tag holding any other file, missing one, or one whose bytes
  changed, naming it, before DeepSpeed opens anything. The tag folder is emptied before a save writes it, so a
  file planted under a predictable name never becomes part of the record.
- DeepSpeed's files are unpickled with `torch.load(weights_only=True)` and an explicit allow-list of the three
  DeepSpeed types its ZeRO optimizer state holds (`WeightsOnlyLoads`): even a file whose record was rewritten
  cannot run code, it is refused with its name. Our extras are JSON (RNG states as lists/base64), never pickles.
- The final weights are gathered from the engine in memory (`consolidated_state_dict`): no checkpoint file is
  read at the end of a run.

Design choices:
- The data-reader state is global (epoch, position in the world-size-independent sample order; see
  gpt1.data.tokenize), so it lives once in meta.json. Resuming on another world size (a requeue onto fewer
  GPUs) re-cuts the ZeRO partitions (`to_universal`, in a scratch copy under universal/) and starts each rank's
  dropout stream afresh: the weights, optimizer, schedule and data position go on exactly, the dropout masks
  cannot (they are per rank).
- Consolidation: at ZeRO stages 1-3 each parameter's fp32 master copy is assembled from the ranks' partitions
  (DeepSpeed's `safe_get_full_fp32_param`, a collective); stage 0 (fp32 only, see gpt1.pretrain.distributed) holds the
  full fp32 module on every rank.
- Verifying a resume hashes every file once: rank r hashes every world_size-th file, and the ranks agree on the
  outcome, so all of them stop with the same message.
"""

from __future__ import annotations

import argparse
import base64
import logging
import pickle
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from gpt1.io import (
    InputError,
    OutputError,
    read_json,
    sha256_file,
    write_error,
    write_json,
    write_text,
)

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
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # the legacy form, get_state's default
    name, keys, pos, has_gauss, cached = numpy_state
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
        self.root, self.rank, self.world_size, self.keep_last = (
            Path(root),
            rank,
            world_size,
            keep_last,
        )

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
        """Write checkpoint `step` (every rank), record its files and commit it with COMPLETE (rank 0), then prune
        old ones."""
        import deepspeed.comm as dist

        tag = tag_for(step)
        path = self.root / tag
        if (
            self.rank == 0 and path.exists()
        ):  # a killed run's half-written tag, or files planted under its name
            shutil.rmtree(path)
        dist.barrier()
        try:
            engine.save_checkpoint(str(self.root), tag=tag, save_latest=False)
            write_json(path / rank_file(self.rank), {"rank": self.rank, "rng": rng_state()})
        except (
            OSError,
            RuntimeError,
        ) as err:  # torch.save reports a failed write as a RuntimeError
            raise write_error(path, err) from err
        written: list = [None] * self.world_size  # filled by the gather: each rank's files
        dist.all_gather_object(written, _files_written(engine, self.root, tag, self.rank))
        if self.rank == 0:
            files = _record_files(path, sorted(set().union(*written)))
            write_json(
                path / META, {**meta, "step": step, "world_size": self.world_size, "files": files}
            )
            write_text(path / COMPLETE, f"{step}\n")
            self.prune()
        dist.barrier()
        return path

    def load(self, engine, path: Path, seed: int) -> dict:
        """Check the tag holds exactly the files its meta.json records, unchanged; then restore the engine (module,
        optimizer, scheduler) and this rank's RNG. Returns meta.json.

        Written by another number of processes, the ZeRO partitions (stages 1-2; stage 3 is refused) are
        re-cut first (`to_universal`; the engine must have been built with `checkpoint.load_universal`) and
        each rank's RNG is seeded from (`seed`, rank, step), as no saved stream belongs to it."""
        import deepspeed.comm as dist

        meta = read_meta(path)
        self._verify_files(path, meta["files"])
        if not isinstance(engine.checkpoint_engine, WeightsOnlyLoads):
            engine.checkpoint_engine = WeightsOnlyLoads(engine.checkpoint_engine)
        source = path
        if engine.load_universal_checkpoint():
            source = self.root / UNIVERSAL / path.name
            problem = None
            if self.rank == 0:
                shutil.rmtree(source.parent, ignore_errors=True)
                try:
                    to_universal(path, source)
                except InputError as err:
                    problem = str(err)
            problems: list = [None] * self.world_size
            dist.all_gather_object(problems, problem)  # every rank stops with rank 0's reason
            if problems[0]:
                raise InputError(problems[0])
        loaded, _ = engine.load_checkpoint(
            str(source.parent),
            tag=source.name,
            load_optimizer_states=True,
            load_lr_scheduler_states=True,
        )
        if source != path:
            dist.barrier()  # every rank has read it
            if self.rank == 0:
                shutil.rmtree(source.parent, ignore_errors=True)
        if loaded is None:
            raise InputError("DeepSpeed found no model states to load", file=path)
        if meta["world_size"] == self.world_size:
            set_rng_state(read_json(path / rank_file(self.rank))["rng"])
        else:
            log.warning(
                "%s was written by %d processes, this job has %d: resumed with its ZeRO partitions re-cut; "
                "each rank's dropout stream starts afresh",
                path.name,
                meta["world_size"],
                self.world_size,
            )
            torch.manual_seed(seed + self.rank + self.world_size * meta["step"])
        return meta

    def _verify_files(self, path: Path, recorded: dict) -> None:
        """Every rank: the same refusal when the tag's files are not exactly the recorded ones (module
        docstring)."""
        import deepspeed.comm as dist

        problem = files_problem(path, recorded, share=(self.rank, self.world_size))
        problems = [None] * self.world_size
        dist.all_gather_object(problems, problem)
        first = next((p for p in problems if p), None)
        if first:
            raise refusal(path, first)

    def prune(self) -> None:
        """Remove incomplete checkpoints and all but the newest `keep_last` complete ones."""
        done = self.complete()
        stale = done[: max(0, len(done) - self.keep_last)]
        stale += [p for p in self._tagged() if not (p / COMPLETE).exists()]
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed checkpoint %s", path.name)


_META_FIELDS = {"step": int, "world_size": int, "tokens_seen": int, "reader": dict, "files": dict}


def recut_needed(path: Path, world_size: int, zero_stage: int) -> bool:
    """Whether resuming checkpoint `path` on `world_size` processes re-cuts its ZeRO partitions (another world
    size at stages 1-2; stage 0 loads as it is). Another world size at stage 3 is refused: DeepSpeed's universal
    format did not bring its optimizer state back exactly (the updates after such a resume drifted by 1e-3)."""
    saved = read_meta(path)["world_size"]
    if saved == world_size:
        return False
    if zero_stage == 3:
        raise InputError(
            f"written by {saved} processes at ZeRO stage 3, which resumes only on the same number (this job "
            f"has {world_size}); at stages 0-2 another number works",
            file=path / META,
            field="world_size",
        )
    return zero_stage >= 1


def read_meta(path: Path) -> dict:
    """A complete checkpoint's meta.json, with every field a resume relies on checked (errors name the field)."""
    if not (path / COMPLETE).exists():
        raise InputError(f"not a complete checkpoint (no {COMPLETE} marker)", file=path)
    meta = read_json(path / META)
    if not isinstance(meta, dict):
        raise InputError(f"expected a JSON object, got {type(meta).__name__}", file=path / META)
    for name, kind in _META_FIELDS.items():
        if not isinstance(meta.get(name), kind) or isinstance(meta.get(name), bool):
            what = "missing" if name not in meta else f"not a {kind.__name__} ({meta[name]!r:.40})"
            hint = (
                " (written before gpt1 recorded a checkpoint's files: it cannot be verified)"
                if name == "files"
                else ""
            )
            raise InputError(f"{what}{hint}", file=path / META, field=name)
    return meta


def files_problem(path: Path, recorded: dict, share: tuple[int, int] = (0, 1)) -> str | None:
    """What is wrong with the files of tag `path` against `recorded` ({name: {bytes, sha256}}), or None. Names and
    sizes are checked in full; sha256 only for every `share[1]`-th file from `share[0]` (the rest are other
    ranks' share)."""
    present = {p.name for p in path.iterdir() if p.name not in (META, COMPLETE)}
    if present - set(recorded):
        return f"files not written by this run: {', '.join(sorted(present - set(recorded)))}"
    if set(recorded) - present:
        return f"recorded files missing: {', '.join(sorted(set(recorded) - present))}"
    for index, (name, record) in enumerate(sorted(recorded.items())):
        file = path / name
        if not isinstance(record, dict) or not {"bytes", "sha256"} <= set(record):
            return f"{META}: the record of {name} has no bytes/sha256"
        if file.stat().st_size != record["bytes"]:
            return f"{name} changed since it was written ({file.stat().st_size} bytes, recorded {record['bytes']})"
        if index % share[1] == share[0] and (digest := sha256_file(file)) != record["sha256"]:
            return f"{name} changed since it was written (sha256 {digest[:12]}, recorded {record['sha256'][:12]})"
    return None


def refusal(path: Path, problem: str) -> InputError:
    """The error of a resume from a tag whose files are not the recorded ones (`files_problem`)."""
    return InputError(
        f"{problem}; refused to resume from it (a checkpoint holds only the files the run recorded "
        "in meta.json)",
        file=path,
    )


def _files_written(engine, root: Path, tag: str, rank: int) -> list[str]:
    """The names this rank wrote into the tag: its RNG file and, by DeepSpeed's own naming, the module and ZeRO
    files DeepSpeed's save wrote on this rank."""
    names = [rank_file(rank)]
    if engine.save_non_zero_checkpoint:
        names.append(Path(engine._get_ckpt_name(str(root), tag)).name)
    if engine.save_zero_checkpoint:
        names.append(Path(engine._get_zero_ckpt_name(str(root), tag)).name)
    return names


def _record_files(path: Path, expected: list[str]) -> dict:
    """{name: {bytes, sha256}} of the tag's files, which must be exactly `expected` (what the ranks wrote)."""
    present = sorted(p.name for p in path.iterdir())
    if present != expected:
        raise OutputError(
            f"{path}: holds {present} but this run wrote {expected}: another process writes into "
            "the checkpoint folder; not committing it"
        )
    return {
        name: {"bytes": (path / name).stat().st_size, "sha256": sha256_file(path / name)}
        for name in present
    }


def safe_deepspeed_types() -> list:
    """The DeepSpeed types a weights-only load of its checkpoint files must allow (its ZeRO optimizer state)."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [ZeroStageEnum, LossScaler, fragment_address]


class WeightsOnlyLoads:
    """DeepSpeed's checkpoint engine, except that `load` unpickles with `torch.load(weights_only=True)`: tensors,
    containers and plain values, plus the DeepSpeed types its ZeRO optimizer state is made of, never arbitrary
    objects (whose unpickling can run code)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def load(self, path: str, map_location=None):
        try:
            with torch.serialization.safe_globals(safe_deepspeed_types()):
                return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err:
            why = next(
                (line.strip().rstrip(".") for line in str(err).splitlines() if "GLOBAL" in line), ""
            )
            raise InputError(
                f"refused to load it: it holds objects a weights-only load does not allow ({why}); "
                "was it written by gpt1 pretrain?",
                file=path,
            ) from None


def consolidated_state_dict(engine) -> dict[str, torch.Tensor]:
    """Full fp32 weights (CPU) of the engine's model, gathered in memory: from the ZeRO optimizer's fp32 master
    partitions at stages 1-3, from the module itself at stage 0. Collective: every rank calls it. Reads no file."""
    from deepspeed.utils import safe_get_full_fp32_param

    module = engine.module
    parameters = dict(module.named_parameters())
    state = {}
    for (
        name,
        value,
    ) in module.state_dict().items():  # the same names in the same order on every rank
        full = safe_get_full_fp32_param(parameters[name]) if name in parameters else None
        state[name] = (value if full is None else full).detach().float().cpu().clone()
    return state


# -------------------------------------------------------------------------------- another world size
# At ZeRO stages 1-3 each rank saves its own slice of the optimizer state, so a checkpoint of 8 processes cannot be
# loaded as it is by 4. DeepSpeed's `ds_to_universal` rewrites the slices as one file per parameter (fp32 weights,
# Adam moments, step), which an engine of any world size loads with `checkpoint.load_universal`. It unpickles with
# `weights_only=False`, so it runs in a child process (`python -m gpt1.pretrain.checkpoint TAG DEST`) in which every
# `torch.load` is weights-only with the allow-list above. Stage 0 needs none of this: its optimizer state is whole
# in the model-states file.

UNIVERSAL = "universal"  # the scratch folder under OUT/checkpoints/


def to_universal(tag: Path, dest: Path) -> None:
    """Convert checkpoint `tag` into DeepSpeed's universal format at `dest` (a folder of the same name as the tag
    for `engine.load_checkpoint`), in a child process; its failure is an InputError naming the tag."""
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(tag), str(dest)],
        capture_output=True,
        text=True,
        errors="replace",
    )
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        last = lines[-1].strip() if lines else f"exit status {done.returncode}"
        raise InputError(
            f"cannot re-cut its ZeRO partitions for another world size: {last}", file=tag
        )


def _weights_only(load):
    """`torch.load` that always unpickles weights-only, allowing DeepSpeed's checkpoint types."""

    def weights_only_load(f, *args, **kwargs):
        kwargs["weights_only"] = True
        with torch.serialization.safe_globals(safe_deepspeed_types()):
            return load(f, *args, **kwargs)

    return weights_only_load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpt1.pretrain.checkpoint", description=to_universal.__doc__
    )
    parser.add_argument("tag", type=Path, help="a complete, verified checkpoint tag folder")
    parser.add_argument("dest", type=Path, help="where the universal checkpoint is written")
    args = parser.parse_args(argv)

    from deepspeed.checkpoint import ds_to_universal

    torch.load = _weights_only(torch.load)
    ds_to_universal.main(
        argparse.Namespace(
            input_folder=str(args.tag),
            output_folder=str(args.dest),
            num_extract_workers=1,  # in this process: the weights-only load holds (no worker pool)
            num_merge_workers=1,
            keep_temp_folder=False,
            strict=True,
            inject_missing_state=True,  # gpt1's model carries no Megatron-style merge patterns
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
