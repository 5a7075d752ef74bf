"""Pre-training step time on one GPU, and where it goes: the GPT-1 shape against the GPU's measured matmul peak.

    python benchmarks/bench_pretrain_gpu.py                      # a CUDA host: GPT-1 shape, micro-batches 8 and 64
    python benchmarks/bench_pretrain_gpu.py --cpu --tiny         # the same code on a CPU at a tiny shape (a dry run)

In one process, on the same random batch, each variant trains `--steps` timed updates after 3 warm-up ones
(median step time, the device synchronised around each step):

- `plain`:      GPT1 under bf16 autocast over fp32 weights, torch's fused AdamW, `clip_grad_norm_`: the floor an
                engine adds to;
- `plain-ce`:   the same with the LM loss as one `F.cross_entropy` over the full logits instead of the chunked
                `gpt1.model.losses.lm_loss` (how much the chunking costs);
- `engine`:     the DeepSpeed engine from our generated config (`pretrain.precision=bf16`, ZeRO-1): what
                `gpt1 pretrain` runs;
- `engine-zero0`, `engine-overflow-check`: the same config at ZeRO stage 0, and with DeepSpeed's per-tensor bf16
                overflow check on (ENGINE_VARIANTS): what each costs on one GPU.

For the engine at each micro-batch it also times forward, backward and step apart, and prints torch.profiler's top
operators by self CPU time and by self device time over 3 updates. First, the LM loss's three matmuls alone, at
GPT-1's vocabulary and padded to a multiple of 64 (gpt1.model.losses pads it: cuBLAS's fast kernels need the
alignment). The limit is the best bf16 matmul throughput
this process reaches (8192^3, median of 10), measured first; MFU is given against it and against the datasheet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from gpt1.config import load_config
from gpt1.model.mfu import gpu_peak_flops
from gpt1.model.optim import param_groups
from gpt1.model.transformer import GPT1, flops_per_token
from results import record


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: str, size: int, repeats: int = 10) -> float:
    """Best sustained bf16 matmul FLOP/s of this device (median of `repeats` timed products after 3 warm-ups)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    times = []
    for i in range(repeats + 3):
        synchronize(device)
        started = time.perf_counter()
        a @ b
        synchronize(device)
        if i >= 3:
            times.append(time.perf_counter() - started)
    return 2 * size**3 / statistics.median(times)


def timed(step, device: str, steps: int) -> float:
    """Median seconds of `step()` over `steps` calls after 3 warm-up ones."""
    times = []
    for i in range(steps + 3):
        synchronize(device)
        started = time.perf_counter()
        step()
        synchronize(device)
        if i >= 3:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def lm_head_matmuls(device: str, rows: int, dim: int, vocab: int, steps: int) -> dict:
    """Milliseconds of the chunked LM loss's three matmuls at `vocab` and at `vocab` padded to a multiple of 64
    (what gpt1.model.losses does): logits, the hidden states' gradient, the weight's gradient (fp32 out)."""
    from gpt1.model.losses import add_product_fp32

    result = {}
    for name, size in (("unpadded", vocab), ("padded", vocab + (-vocab) % 64)):
        h = torch.randn(rows, dim, device=device, dtype=torch.bfloat16)
        w = torch.randn(size, dim, device=device, dtype=torch.bfloat16)
        g = torch.randn(rows, size, device=device, dtype=torch.bfloat16)
        result[name] = {"vocab": size,
                        "logits_ms": 1e3 * timed(lambda: h @ w.T, device, steps),
                        "grad_hidden_ms": 1e3 * timed(lambda: g @ w, device, steps),
                        "grad_weight_fp32_ms": 1e3 * timed(lambda: add_product_fp32(None, g.T, h), device, steps),
                        "grad_weight_bf16_ms": 1e3 * timed(lambda: g.T @ h, device, steps)}
    return result


def plain_trainer(cfg, device: str, full_logits: bool):
    torch.manual_seed(0)
    model = GPT1(cfg.model).to(device).train()
    p = cfg.pretrain
    optimizer = torch.optim.AdamW(param_groups(model, p.weight_decay), lr=p.lr, betas=p.adam_betas, eps=p.adam_eps,
                                  fused=True)

    def step(inputs, targets):
        with torch.autocast(device, dtype=torch.bfloat16):
            if full_logits:
                hidden = model.hidden_states(inputs)
                logits = hidden @ model.tokens_embed.weight.T
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            else:
                loss = model(inputs, targets=targets).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


# Changes to our generated DeepSpeed config, each compared with it (a stage-0 engine is a comparison only: our config
# refuses it with bf16, since the final consolidation reads ZeRO's files)
ENGINE_VARIANTS = {
    "engine-zero0": lambda config: config["zero_optimization"].update(stage=0),
    "engine-overflow-check": lambda config: config["bf16"].update(check_grad_overflow=True),
}


def engine_trainer(cfg, device: str, change=None):
    """The engine from our generated config, `change(config)` applied to it first."""
    import deepspeed

    from gpt1.pretrain.distributed import deepspeed_config

    torch.manual_seed(0)
    model = GPT1(cfg.model)
    config = deepspeed_config(cfg.pretrain, 1, device)
    if change is not None:
        change(config)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=param_groups(model, cfg.pretrain.weight_decay),
                                      config=config)
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "step": []}

    def step(inputs, targets, split: bool = False):
        marks = [time.perf_counter()]
        loss = engine(inputs, targets=targets).loss
        if split:
            synchronize(device)
            marks.append(time.perf_counter())
        engine.backward(loss)
        if split:
            synchronize(device)
            marks.append(time.perf_counter())
        engine.step()
        if split:
            synchronize(device)
            marks.append(time.perf_counter())
            for name, begin, end in zip(phases, marks, marks[1:]):
                phases[name].append(end - begin)

    return step, phases


def profile_table(step, device: str, rows: int = 15) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(3):
            step()
        synchronize(device)
    averages = prof.key_averages()
    tables = [averages.table(sort_by="self_cpu_time_total", row_limit=rows)]
    if device == "cuda":
        tables.append(averages.table(sort_by="self_device_time_total", row_limit=rows))
    return "\n".join(tables)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (a dry run of this script)")
    parser.add_argument("--tiny", action="store_true", help="a 2 x 64 model, ctx 64, vocab 1,000, micro 2 and 4")
    parser.add_argument("--micro", type=int, nargs="+", help="micro-batches (default: 8 64; tiny: 2 4)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no usable CUDA device (use --cpu for the dry run)")
    os.environ.setdefault("DS_ACCELERATOR", device)
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)
    from gpt1.pretrain.distributed import init_world

    init_world()
    shape = ["model.n_layer=2", "model.n_embd=64", "model.n_head=2", "model.d_ff=256", "model.n_ctx=64",
             "model.vocab_size=1000"] if args.tiny else []
    micro_batches = args.micro or ([2, 4] if args.tiny else [8, 64])

    peak = matmul_peak(device, 1024 if args.tiny or device == "cpu" else 8192)
    datasheet = gpu_peak_flops(torch.cuda.get_device_name(), "bf16") if device == "cuda" else None
    report: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                    "torch": torch.__version__, "matmul_peak_tflops": peak / 1e12,
                    "datasheet_tflops": datasheet / 1e12 if datasheet else None, "runs": {}}
    print(f"matmul peak {peak / 1e12:.0f} TFLOP/s (datasheet {report['datasheet_tflops']})", flush=True)
    if not args.tiny:
        from gpt1.model.losses import default_chunk_rows

        vocab = load_config("paper").model.vocab_size
        rows = default_chunk_rows(torch.empty(vocab, 1, device=device))
        report["lm_head"] = lm_head_matmuls(device, rows, 768, vocab, args.steps)
        print(f"lm head matmuls, {rows} rows: {json.dumps(report['lm_head'])}", flush=True)
    for micro in micro_batches:
        cfg = load_config("paper", [*shape, "pretrain.precision=bf16", "pretrain.zero_stage=1", "model.compile=false",
                                    f"pretrain.global_batch_size={micro}", f"pretrain.micro_batch_size={micro}"])
        n_ctx, vocab = cfg.model.n_ctx, cfg.model.vocab_size
        tokens = torch.randint(0, vocab, (micro, n_ctx + 1), generator=torch.Generator().manual_seed(0)).to(device)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        per_token = flops_per_token(cfg.model)
        runs: dict = {}
        for name in ("plain", "plain-ce"):
            plain_step = plain_trainer(cfg, device, full_logits=name == "plain-ce")
            runs[name] = timed(lambda: plain_step(inputs, targets), device, args.steps)
        for name, change in ENGINE_VARIANTS.items():
            variant_step, _ = engine_trainer(cfg, device, change)
            runs[name] = timed(lambda: variant_step(inputs, targets), device, args.steps)
        engine_step, phases = engine_trainer(cfg, device)
        runs["engine"] = timed(lambda: engine_step(inputs, targets), device, args.steps)
        timed(lambda: engine_step(inputs, targets, split=True), device, args.steps)
        result = {}
        for name, seconds in runs.items():
            tokens_per_s = micro * n_ctx / seconds
            result[name] = {"step_s": seconds, "tokens_per_s": tokens_per_s,
                            "mfu_vs_matmul_peak": tokens_per_s * per_token / peak,
                            "mfu_vs_datasheet": tokens_per_s * per_token / datasheet if datasheet else None}
            print(f"micro {micro:3d} {name:21s} {seconds * 1e3:8.1f} ms/update {tokens_per_s:10,.0f} tokens/s "
                  f"MFU {100 * result[name]['mfu_vs_matmul_peak']:.1f}% of the matmul peak", flush=True)
        result["engine_phases_ms"] = {k: 1e3 * statistics.median(v) for k, v in phases.items()}
        print(f"micro {micro:3d} engine phases (ms, synchronised): "
              + ", ".join(f"{k} {v:.1f}" for k, v in result["engine_phases_ms"].items()), flush=True)
        if not args.no_profile:
            print(profile_table(lambda: engine_step(inputs, targets), device), flush=True)
        report["runs"][micro] = result
    print(json.dumps(report, indent=2))
    record(report, benchmark="bench_pretrain_gpu")


if __name__ == "__main__":
    main()
