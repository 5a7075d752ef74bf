"""Checkpoint save/load time for the GPT-1 shape, against writing/reading the same bytes raw and a plain torch.save.

One process, DeepSpeed engine for the paper model (117M parameters; ZeRO stage and precision as given), one
training step on a short batch so the AdamW moments exist. Timed, best of --repeats:

    save          gpt1.pretrain.checkpoint.CheckpointManager.save: DeepSpeed files + RNG/meta JSON + COMPLETE marker
    load          CheckpointManager.load into the same engine (module, optimizer, scheduler, RNG)
    consolidate   fp32 state dict gathered from the engine + GPT1.save_pretrained (what OUT/final gets)
    peer          torch.save({"model", "optimizer"}) of the same state: the floor for "pickle it all"
    limit         the same number of bytes written / read as one raw file (page cache included, as for the others)

    python benchmarks/bench_checkpoint.py --repeats 3
    python benchmarks/bench_checkpoint.py --zero-stage 1 --precision bf16
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from results import record


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3))
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", help="where to write (default: a temporary folder)")
    args = parser.parse_args()

    import deepspeed

    from gpt1.pretrain.checkpoint import CheckpointManager, consolidated_state_dict
    from gpt1.config import load_config
    from gpt1.pretrain.distributed import deepspeed_config, init_world
    from gpt1.model.transformer import GPT1
    from gpt1.model.optim import param_groups

    init_world()
    cfg = load_config("paper", [f"pretrain.zero_stage={args.zero_stage}", f"pretrain.precision={args.precision}",
                                "pretrain.global_batch_size=1"])
    torch.manual_seed(0)
    model = GPT1(cfg.model)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=param_groups(model, 0.01),
                                      config=deepspeed_config(cfg.pretrain, 1, "cpu"))
    tokens = torch.randint(0, cfg.model.vocab_size, (1, 33))
    engine.backward(engine(tokens[:, :-1], targets=tokens[:, 1:]).loss)
    engine.step()

    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-ckpt-"))
    manager = CheckpointManager(root / "checkpoints", keep_last=1)
    meta = {"reader": {}, "tokens_seen": 0, "run_id": None, "model": cfg.model.model_dump()}
    report: dict = {"parameters": model.num_parameters(), "zero_stage": args.zero_stage,
                    "precision": args.precision, "repeats": args.repeats}

    report["save_s"] = best_of(args.repeats, lambda: manager.save(engine, 1, meta))
    checkpoint = manager.latest_complete()
    size = tree_bytes(checkpoint)
    report["checkpoint_bytes"] = size
    report["load_s"] = best_of(args.repeats, lambda: manager.load(engine, checkpoint))
    report["consolidate_s"] = best_of(args.repeats, lambda: _as_model(
        cfg, consolidated_state_dict(engine)).save_pretrained(root / "final"))

    peer = root / "peer.pt"
    state = {"model": engine.module.state_dict(), "optimizer": engine.optimizer.state_dict()}
    report["peer_torch_save_s"] = best_of(args.repeats, lambda: torch.save(state, peer))
    report["peer_torch_load_s"] = best_of(args.repeats, lambda: torch.load(peer, weights_only=True))

    raw = root / "raw.bin"
    blob = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    report["limit_write_s"] = best_of(args.repeats, lambda: blob.tofile(raw))
    report["limit_read_s"] = best_of(args.repeats, lambda: np.fromfile(raw, dtype=np.uint8))
    report["save_vs_raw_write"] = report["save_s"] / report["limit_write_s"]
    report["load_vs_raw_read"] = report["load_s"] / report["limit_read_s"]
    report["save_vs_torch_save"] = report["save_s"] / report["peer_torch_save_s"]
    report["save_MB_per_s"] = size / report["save_s"] / 1e6
    print(json.dumps(report, indent=2))
    record({k: report[k] for k in ("zero_stage", "precision", "checkpoint_bytes", "save_s", "load_s", "consolidate_s",
                                  "save_vs_raw_write", "load_vs_raw_read", "save_vs_torch_save")})
    if not args.dir:
        shutil.rmtree(root)


def _as_model(cfg, state):
    from gpt1.model.transformer import GPT1

    with torch.device("meta"):
        model = GPT1(cfg.model)
    model.load_checked_state_dict(state, source="benchmark")
    return model


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    main()
