"""Training-step throughput of `gpt1.model.GPT1` vs HF `transformers.OpenAIGPTLMHeadModel`, and vs this machine's peak.

One forward + backward + AdamW step on random tokens, train mode (dropout on), same config, same weights (ours
exported into HF's layout), same batch, loss and optimizer, in one process. Steps of the two models alternate so
load from other processes on a shared machine hits both alike. Precision: fp32, and bf16 autocast over fp32
weights (mixed precision, as in pre-training). The limit is a large square matmul timed in the same run, per dtype;
achieved FLOP/s counts `gpt1.model.flops_per_token` (6N + attention) for the measured sequence length.
Besides wall-clock tokens/s it prints tokens per CPU-second of this process, which moves less with other load.
On an oversubscribed machine use `--threads 1`: a 2-thread OpenMP region stalls whenever one thread is preempted.

    python benchmarks/bench_model.py --shape gpt1                 # batch 2 x 512, 3 timed steps, bf16 and fp32
    python benchmarks/bench_model.py --shape smoke --threads 1
    python benchmarks/bench_model.py --shape gpt1 --compare-attention   # ours only: attention=sdpa vs manual
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from gpt1.config import ModelConfig, load_config
from gpt1.convert import hf_config_dict, to_hf_state_dict
from gpt1.model import GPT1, flops_per_token

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best-of FLOP/s of an n x n matmul: the practical ceiling for this dtype on this machine."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b  # warm up kernels and allocator
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


class Trainer:
    """One model + AdamW; `step()` runs one timed training step and returns its wall time."""

    def __init__(self, name: str, model: torch.nn.Module, precision: str, vocab: int, batch: int, seq: int):
        self.name, self.model, self.precision = name, model.train(), precision
        # fused: one pass over each tensor (on 2 CPU threads ~5x faster than the default foreach update)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=2.5e-4, weight_decay=0.01, fused=True)
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, vocab, (batch, seq + 1), generator=generator)
        self.elapsed, self.cpu_elapsed, self.steps = 0.0, 0.0, 0

    def step(self, timed: bool = True) -> None:
        inputs, targets = self.tokens[:, :-1], self.tokens[:, 1:]
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            logits = self.model(inputs).logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if timed:
            self.elapsed += time.perf_counter() - start
            self.cpu_elapsed += time.process_time() - cpu_start
            self.steps += 1

    def tokens_per_second(self) -> float:
        return self.steps * self.tokens[:, :-1].numel() / self.elapsed

    def tokens_per_cpu_second(self) -> float:
        """Per second of this process's CPU time (all threads): steadier than wall time on a shared machine."""
        return self.steps * self.tokens[:, :-1].numel() / self.cpu_elapsed


def hf_model(ours: GPT1) -> torch.nn.Module:
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    model = OpenAIGPTLMHeadModel(OpenAIGPTConfig(**hf_config_dict(ours.config)))
    model.load_state_dict(to_hf_state_dict(ours))
    return model


def race(trainers: list[Trainer], steps: int) -> None:
    for trainer in trainers:
        trainer.step(timed=False)  # warm-up: allocator, kernel selection, optimizer state
    for _ in range(steps):
        for trainer in trainers:  # alternate, so background load is shared fairly
            trainer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("gpt1", "smoke"), default="gpt1")
    parser.add_argument("--batch", type=int, default=None, help="default: 2 (gpt1), 8 (smoke)")
    parser.add_argument("--seq", type=int, default=None, help="default: the shape's n_ctx")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per model; default: 3 (gpt1), 5 (smoke)")
    parser.add_argument("--precision", choices=("bf16", "fp32", "both"), default="both")
    parser.add_argument("--compare-attention", action="store_true",
                        help="time our model with attention=sdpa vs manual instead of ours vs HF")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg: ModelConfig = load_config("paper" if args.shape == "gpt1" else "smoke").model
    batch = args.batch or (2 if args.shape == "gpt1" else 8)
    seq = args.seq or cfg.n_ctx
    steps = args.steps or (3 if args.shape == "gpt1" else 5)
    flops = flops_per_token(cfg.model_copy(update={"n_ctx": seq}))
    precisions = ("bf16", "fp32") if args.precision == "both" else (args.precision,)
    print(f"shape={args.shape} ({cfg.n_layer}L d={cfg.n_embd} V={cfg.vocab_size}) batch={batch} seq={seq} "
          f"steps={steps} threads={torch.get_num_threads()} flops/token={flops / 1e9:.3f} G")

    for precision in precisions:
        torch.manual_seed(0)
        if args.compare_attention:
            models = {f"ours[{mode}]": GPT1(cfg.model_copy(update={"attention": mode})) for mode in ("sdpa", "manual")}
        else:
            models = {"ours": GPT1(cfg)}
            models["hf"] = hf_model(models["ours"])
        trainers = [Trainer(name, model, precision, cfg.vocab_size, batch, seq) for name, model in models.items()]
        del models
        peak = matmul_peak(DTYPES[precision])
        race(trainers, steps)
        peak = max(peak, matmul_peak(DTYPES[precision]))  # best of before/after: load from others comes and goes
        print(f"[{precision}] matmul peak {peak / 1e12:.3f} TFLOP/s")
        for t in trainers:
            rate = t.tokens_per_second()
            print(f"[{precision}] {t.name:>12}: {rate:9.1f} tokens/s  {rate * flops / 1e12:.3f} TFLOP/s  "
                  f"= {100 * rate * flops / peak:5.1f}% of {precision} matmul peak   "
                  f"({t.tokens_per_cpu_second():.1f} tokens per CPU-second)")
        a, b = trainers
        print(f"[{precision}] ratio {a.name}/{b.name}: {a.tokens_per_second() / b.tokens_per_second():.2f}x wall, "
              f"{a.tokens_per_cpu_second() / b.tokens_per_cpu_second():.2f}x CPU time")
        del trainers


if __name__ == "__main__":
    main()
