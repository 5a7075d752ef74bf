"""Training-step throughput of `gpt1.model.GPT1`, eager and compiled, vs HF `transformers.OpenAIGPTLMHeadModel` and
the machine's peak, in one run.

One forward + backward + AdamW step on random tokens, train mode (dropout on), same config, same weights (ours
exported into HF's layout), same batch and fused AdamW, in one process. Ours runs as pre-training runs it: the
loss through `GPT1(input_ids, targets=...)` (`gpt1.model.losses.lm_loss`, chunked), eagerly and with `model.compile=true`
(the transformer blocks compiled by torch.compile; the compile happens in the untimed warm-up step and its time
is printed). HF computes its logits and the same fp32 cross-entropy. Steps of the models alternate, so load from
other processes on a shared machine hits all alike. Precision: fp32, and bf16 autocast over fp32 weights (mixed
precision).

The limit: on a CPU, a large square matmul timed in the same run, per dtype (best of before and after the steps);
on a GPU, the device's datasheet peak (`gpt1.model.mfu.GPU_PEAK_TFLOPS`), so the printed share is MFU as llm-foundry
and PaLM define it. Achieved FLOP/s count `gpt1.model.transformer.flops_per_token` (6N + attention) at the measured sequence
length. Besides wall-clock tokens/s it prints tokens per CPU-second of this process, which moves less with other
load on a shared CPU.

    python benchmarks/bench_model.py --shape gpt1 --threads 2 --precision fp32   # batch 2 x 512, 3 timed steps
    python benchmarks/bench_model.py --shape smoke --threads 2 --precision fp32 --vocab 1383
    python benchmarks/bench_model.py --shape gpt1 --profile                      # where the time goes (ours)
    python benchmarks/bench_model.py --shape gpt1 --compare-attention             # ours only: sdpa vs manual
    python benchmarks/bench_model.py --shape gpt1 --precision bf16                # on a GPU: batch 16 x 512, MFU
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from gpt1.config import ModelConfig, load_config
from gpt1.model.convert import hf_config_dict, to_hf_state_dict
from gpt1.model.mfu import gpu_peak_flops
from gpt1.model.transformer import GPT1, flops_per_token
from results import record

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best-of FLOP/s of an n x n matmul: the practical ceiling for this dtype on this CPU."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b  # warm up kernels and allocator
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


class Trainer:
    """One model + fused AdamW; `step()` runs one training step and, when timed, adds its wall and CPU time."""

    def __init__(self, name: str, model: torch.nn.Module, precision: str, tokens: torch.Tensor):
        self.name, self.model, self.precision, self.tokens = name, model.train(), precision, tokens
        self.ours = isinstance(model, GPT1)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=2.5e-4, weight_decay=0.01, fused=True)
        self.elapsed, self.cpu_elapsed, self.steps, self.first_step = 0.0, 0.0, 0, 0.0

    def loss(self) -> torch.Tensor:
        inputs, targets = self.tokens[:, :-1], self.tokens[:, 1:]
        with torch.autocast(self.tokens.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            if self.ours:
                return self.model(inputs, targets=targets).loss
            logits = self.model(inputs).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def step(self, timed: bool = True) -> None:
        sync()
        start, cpu_start = time.perf_counter(), time.process_time()
        self.loss().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sync()
        if timed:
            self.elapsed += time.perf_counter() - start
            self.cpu_elapsed += time.process_time() - cpu_start
            self.steps += 1
        elif not self.first_step:
            self.first_step = time.perf_counter() - start  # includes compiling, for the compiled model

    def tokens_per_second(self) -> float:
        return self.steps * self.tokens[:, :-1].numel() / self.elapsed

    def tokens_per_cpu_second(self) -> float:
        """Per second of this process's CPU time (all threads): steadier than wall time on a shared machine."""
        return self.steps * self.tokens[:, :-1].numel() / self.cpu_elapsed


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def hf_model(ours: GPT1) -> torch.nn.Module:
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    model = OpenAIGPTLMHeadModel(OpenAIGPTConfig(**hf_config_dict(ours.config)))
    model.load_state_dict(to_hf_state_dict(ours))
    return model.to(ours.tokens_embed.weight.device)


def build_models(cfg: ModelConfig, compare_attention: bool, device: torch.device) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    if compare_attention:
        return {f"ours[{mode}]": GPT1(cfg.model_copy(update={"attention": mode})).to(device)
                for mode in ("sdpa", "manual")}
    eager = GPT1(cfg).to(device)
    compiled = GPT1(cfg.model_copy(update={"compile": True})).to(device)
    compiled.load_state_dict(eager.state_dict())
    compiled.compile_for(device.type)
    return {"ours eager": eager, "ours compiled": compiled, "hf": hf_model(eager)}


def race(trainers: list[Trainer], steps: int) -> None:
    for trainer in trainers:
        trainer.step(timed=False)  # warm-up: compile, allocator, kernel selection, optimizer state
        trainer.step(timed=False)  # the compiled model's backward graph is also ready now
    for _ in range(steps):
        for trainer in trainers:  # alternate, so background load is shared fairly
            trainer.step()


def profile(trainer: Trainer, rows: int = 18) -> None:
    """One more step under torch.profiler: where this model's step time goes, by operator (self time)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=activities) as prof:
        trainer.step(timed=False)
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    print(f"--- {trainer.name}: top operators by {key}")
    print(prof.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=48))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("gpt1", "smoke"), default="gpt1")
    parser.add_argument("--batch", type=int, default=None, help="default: 2 (gpt1), 8 (smoke); 16 on a GPU")
    parser.add_argument("--seq", type=int, default=None, help="default: the shape's n_ctx")
    parser.add_argument("--vocab", type=int, default=None, help="default: the preset's (40,481; a smoke tokenizer "
                                                                "has about 1,400)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per model; default: 3 (gpt1), 5 (smoke)")
    parser.add_argument("--precision", choices=("bf16", "fp32", "both"), default="both")
    parser.add_argument("--compare-attention", action="store_true",
                        help="time our model with attention=sdpa vs manual instead of ours vs HF")
    parser.add_argument("--profile", action="store_true", help="also print an operator profile of our models")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    cfg: ModelConfig = load_config("paper" if args.shape == "gpt1" else "smoke").model
    if args.vocab:
        cfg = cfg.model_copy(update={"vocab_size": args.vocab})
    batch = args.batch or (16 if gpu else 2 if args.shape == "gpt1" else 8)
    seq = args.seq or cfg.n_ctx
    steps = args.steps or (3 if args.shape == "gpt1" else 5)
    flops = flops_per_token(cfg.model_copy(update={"n_ctx": seq}))
    precisions = ("bf16", "fp32") if args.precision == "both" else (args.precision,)
    where = torch.cuda.get_device_name() if gpu else f"cpu, threads={torch.get_num_threads()}"
    print(f"shape={args.shape} ({cfg.n_layer}L d={cfg.n_embd} V={cfg.vocab_size}) batch={batch} seq={seq} "
          f"steps={steps} {where} flops/token={flops / 1e9:.3f} G")

    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
    figures: dict[str, dict] = {}
    for precision in precisions:
        models = build_models(cfg, args.compare_attention, device)
        trainers = [Trainer(name, model, precision, tokens.to(device)) for name, model in models.items()]
        del models
        if gpu:
            peak, limit = gpu_peak_flops(torch.cuda.get_device_name(), precision), "datasheet peak (MFU)"
        else:
            peak, limit = matmul_peak(DTYPES[precision]), "matmul peak"
        race(trainers, steps)
        if not gpu:  # best of before/after: load from others comes and goes
            peak = max(peak, matmul_peak(DTYPES[precision]))
        print(f"[{precision}] {limit} " + (f"{peak / 1e12:.3f} TFLOP/s" if peak else "unknown for this GPU"))
        figures[precision] = {"peak_tflops": peak / 1e12 if peak else None}
        for t in trainers:
            rate = t.tokens_per_second()
            figures[precision][t.name] = {"tokens_per_s": rate,
                                          "pct_of_peak": 100 * rate * flops / peak if peak else None}
            share = f"= {100 * rate * flops / peak:5.1f}% of {limit}" if peak else ""
            print(f"[{precision}] {t.name:>13}: {rate:9.1f} tokens/s  {rate * flops / 1e12:.3f} TFLOP/s  {share}  "
                  f"({t.tokens_per_cpu_second():.1f} tokens per CPU-second; first step {t.first_step:.1f} s)")
        reference = trainers[-1]
        for t in trainers[:-1]:
            figures[precision][t.name][f"vs_{reference.name}"] = t.tokens_per_second() / reference.tokens_per_second()
            print(f"[{precision}] ratio {t.name}/{reference.name}: "
                  f"{t.tokens_per_second() / reference.tokens_per_second():.2f}x wall, "
                  f"{t.tokens_per_cpu_second() / reference.tokens_per_cpu_second():.2f}x CPU time")
        if args.profile:
            for t in trainers:
                if t.ours:
                    profile(t)
        del trainers
    record(figures)


if __name__ == "__main__":
    main()
