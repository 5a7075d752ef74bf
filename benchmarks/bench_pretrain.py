"""Pre-training throughput: the DeepSpeed engine against the plain PyTorch step, and world size 1 against 2.

--part engine   In one process, the same GPT1 (same initial weights, same batch) is trained by
                (a) a plain loop: torch fused AdamW over `gpt1.pretrain.param_groups`, the LambdaLR schedule,
                    `clip_grad_norm_`, i.e. what the engine does, written by hand;
                (b) the DeepSpeed engine built from the same PretrainConfig (`gpt1.pretrain.distributed.deepspeed_config`).
                Steps alternate (a, b, a, b, ...) so load from other processes hits both alike; median step time.
                Overhead = median(b) / median(a) - 1; goal <= 5 %. Precision fp32 -> ZeRO stage 0 against plain
                fp32; bf16 -> ZeRO stage 1 bf16 (bf16 weights, fp32 masters) against bf16 autocast over fp32 weights,
                the closest plain equivalent.
--part scaling  `gpt1 pretrain` on existing shards with --nproc 1 and --nproc 2 (gloo on loopback), same global
                batch; tokens/s from each run's per-update times in OUT/metrics.jsonl (start-up excluded), median.
                Every rank gets --threads-per-rank threads (default 1), so the ideal ratio is 2 when the machine
                has two free cores; below that is the cost of data parallelism (gradient all-reduce, loss
                reduction) plus whatever else runs on the machine.

    python benchmarks/bench_pretrain.py --part engine --shape smoke --vocab 2048 --steps 20
    python benchmarks/bench_pretrain.py --part engine --shape gpt1 --batch 2 --steps 4 --precision bf16
    gpt1 sample-data --out S && gpt1 ingest --source S/books --out C && gpt1 train-tokenizer --corpus C --out T \
      --merges 2000 && gpt1 tokenize --corpus C --tokenizer T --out SH --ctx 128
    python benchmarks/bench_pretrain.py --part scaling --shards SH --steps 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from gpt1.config import load_config
from gpt1.model.transformer import GPT1
from gpt1.model.optim import lr_factor, param_groups
from results import record


def engine_overhead(shape: str, precision: str, batch: int, steps: int, seq: int | None, vocab: int | None) -> dict:
    import deepspeed

    from gpt1.pretrain.distributed import deepspeed_config, init_world

    init_world()
    cfg = load_config("smoke" if shape == "smoke" else "paper",
                      [f"pretrain.precision={precision}", f"pretrain.zero_stage={0 if precision == 'fp32' else 1}",
                       f"pretrain.global_batch_size={batch}", "pretrain.warmup_steps=2",
                       *([f"model.vocab_size={vocab}"] if vocab else [])])
    p, seq = cfg.pretrain, seq or cfg.model.n_ctx
    schedule = lambda s: lr_factor(s, warmup_steps=p.warmup_steps, total_steps=10 * steps)  # noqa: E731
    tokens = torch.randint(0, cfg.model.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    torch.manual_seed(0)
    plain = GPT1(cfg.model).train()
    engine_model = GPT1(cfg.model)
    engine_model.load_state_dict(plain.state_dict())
    optimizer = torch.optim.AdamW(param_groups(plain, p.weight_decay), lr=p.lr, betas=p.adam_betas, eps=p.adam_eps,
                                  fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    engine, *_ = deepspeed.initialize(
        model=engine_model, model_parameters=param_groups(engine_model, p.weight_decay),
        config=deepspeed_config(p, 1, "cpu"),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule))

    def plain_step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = plain(inputs, targets=targets).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), p.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    def engine_step() -> None:
        loss = engine(inputs, targets=targets).loss
        engine.backward(loss)
        engine.step()

    times: dict[str, list[float]] = {"plain": [], "deepspeed": []}
    cpu: dict[str, float] = {"plain": 0.0, "deepspeed": 0.0}
    for i in range(steps + 2):  # 2 warm-up rounds
        for name, step in (("plain", plain_step), ("deepspeed", engine_step)):
            wall, proc = time.perf_counter(), time.process_time()
            step()
            if i >= 2:
                times[name].append(time.perf_counter() - wall)
                cpu[name] += time.process_time() - proc
    per_step = batch * seq
    result = {"shape": shape, "precision": precision, "zero_stage": p.zero_stage, "batch": batch, "seq": seq,
              "vocab": cfg.model.vocab_size, "steps": steps, "threads": torch.get_num_threads()}
    for name in times:
        median = statistics.median(times[name])
        result[name] = {"median_step_s": median, "tokens_per_s": per_step / median,
                        "tokens_per_cpu_s": steps * per_step / cpu[name]}
    result["overhead_wall"] = result["deepspeed"]["median_step_s"] / result["plain"]["median_step_s"] - 1
    result["overhead_cpu"] = result["plain"]["tokens_per_cpu_s"] / result["deepspeed"]["tokens_per_cpu_s"] - 1
    return result


def scaling(shards: str, steps: int, batch: int, threads: int) -> dict:
    result = {"steps": steps, "global_batch": batch, "threads_per_rank": threads, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for nproc in (1, 2):
            out = Path(tmp) / f"nproc{nproc}"
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
            command = [sys.executable, "-m", "gpt1.cli", "pretrain", "--preset", "smoke", "--shards", shards,
                       "--out", str(out), "--nproc", str(nproc), "--max-steps", str(steps),
                       "--tracking-uri", f"sqlite:///{Path(tmp) / 'mlflow.db'}",
                       "--set", f"pretrain.global_batch_size={batch}", "--set", f"pretrain.eval_every={steps}",
                       "--set", f"pretrain.probe_every={steps}", "--set", f"pretrain.save_every={steps}"]
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            step_s = [r["seconds"] for r in records if "seconds" in r][2:]  # skip the first (warm-up) updates
            n_ctx = json.loads((out / "config.json").read_text())["model"]["n_ctx"]
            median = statistics.median(step_s)
            result["runs"][nproc] = {"median_step_s": median, "tokens_per_s": batch * n_ctx / median,
                                     "wall_s_including_startup": time.perf_counter() - started}
    result["speedup_2_vs_1"] = result["runs"][2]["tokens_per_s"] / result["runs"][1]["tokens_per_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("engine", "scaling"), required=True)
    parser.add_argument("--shape", choices=("smoke", "gpt1"), default="smoke")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (scaling: global batch)")
    parser.add_argument("--seq", type=int, help="tokens per sequence (default: the shape's n_ctx)")
    parser.add_argument("--vocab", type=int, help="vocabulary (default: the preset's, 40,481; a smoke tokenizer has "
                                                  "about 2,000)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--shards", help="scaling: a `gpt1 tokenize` output matching the smoke preset's n_ctx")
    parser.add_argument("--threads-per-rank", type=int, default=1, help="scaling: OMP threads of every rank")
    args = parser.parse_args()
    if args.part == "engine":
        report = engine_overhead(args.shape, args.precision, args.batch, args.steps, args.seq, args.vocab)
    else:
        if not args.shards:
            parser.error("--part scaling needs --shards")
        report = scaling(args.shards, args.steps, args.batch, args.threads_per_rank)
    print(json.dumps(report, indent=2))
    record(report, benchmark=f"bench_pretrain {args.part}")


if __name__ == "__main__":
    main()
