"""The GPU probe: where a pre-training update's time and memory go on one GPU, one row at a time.

    python benchmarks/bench_pretrain_gpu.py --out OUT                 # a CUDA host: the GPT-1 shape, about 7 minutes
    python benchmarks/bench_pretrain_gpu.py --cpu --tiny --out OUT    # the same rows on a CPU at a tiny shape

Rows, in priority order. Each is appended to OUT/probe.jsonl (and printed) the moment it finishes, so a run cut
short still returns what it measured; a row that would start past --budget-s is written as skipped, and a row that
fails is written with its error while the next one runs.

    environment     torch, CUDA, cuDNN, NCCL, DeepSpeed, driver, GPU: what ran (a host's torch may not be the lock's)
    roofs           the bf16 matmul peak (8192^3, median of 10) and the memory bandwidth (a 1 GiB copy), measured
    step micro 64   the production update: the DeepSpeed engine of our generated config (bf16, ZeRO-1), as
    step micro 8    `gpt1 pretrain` runs it; tokens/s, MFU against the measured matmul peak and the datasheet
                    (FLOPs: gpt1.model.transformer.flops_per_token at the real vocabulary), forward, backward and
                    step apart. Micro-batch 8 on one GPU stands in for one rank of the paper's batch on 8 GPUs (an
                    8-GPU rate cannot be measured on one)
    profile         torch.profiler over 3 engine updates at micro-batch 64: the top operators by device time
    loss variants   a plain loop at micro-batch 64: the chunked LM loss (ours) against one F.cross_entropy over the
                    full logits; the LM loss's three matmuls at the vocabulary and padded to a multiple of 64
    attention       the same loop with attention by hand and with SDPA under each of its backends (flash,
                    memory-efficient, cuDNN, math): the measurement `model.attention` is chosen by
    compile         the plain loop at micro-batch 8: eager, torch.compile, and compile's reduce-overhead mode (CUDA
                    graphs, CUDA only); on a CPU only with --compile
    engine variants at micro-batch 8: ZeRO stage 0 and DeepSpeed's bf16 overflow check against our config (the
                    optimizer step's fixed cost)
    precision       bf16 against fp32 over 30 updates of the plain loop on the same batches (loss curves), then a
                    full-shape engine checkpoint: saved, one update, restored, the same update again (identical)
    memory          peak memory of an engine update at micro-batches 8 to 64, and of a RACE fine-tune update (32
                    questions x 4 answers x 512 tokens in micro-batches of finetune.forward_sequences)

A summary row goes to benchmarks/results.md with the GPU's name (an H200 reads higher than an H100 on
memory-bound work).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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


def plain_trainer(cfg, device: str, full_logits: bool, precision: str = "bf16", compile_mode: str | None = None):
    """An update of GPT1 without an engine (`precision` autocast over fp32 weights, torch's fused AdamW,
    `clip_grad_norm_`): the floor an engine adds to. `full_logits`: one F.cross_entropy over the whole logits
    instead of our chunked loss; `compile_mode`: the model under torch.compile in that mode. Returns the loss."""
    torch.manual_seed(0)
    model = GPT1(cfg.model).to(device).train()
    p = cfg.pretrain
    optimizer = torch.optim.AdamW(param_groups(model, p.weight_decay), lr=p.lr, betas=p.adam_betas, eps=p.adam_eps,
                                  fused=device == "cuda")
    forward = model if compile_mode is None else torch.compile(model, mode=compile_mode)

    def step(inputs, targets) -> torch.Tensor:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            if full_logits:
                hidden = model.hidden_states(inputs)
                logits = hidden @ model.tokens_embed.weight.T
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            else:
                loss = forward(inputs, targets=targets).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

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

    def step(inputs, targets, split: bool = False) -> torch.Tensor:
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
        return loss.detach()

    step.engine = engine  # type: ignore[attr-defined]  (the precision row saves and restores it)
    return step, phases


def bandwidth(device: str, mib: int) -> float:
    """Bytes per second a `mib`-MiB device-to-device copy moves (read + write; median of 10 after 3 warm-ups)."""
    a = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    return 2 * a.numel() / timed(lambda: b.copy_(a), device, 10)


def top_operators(step, device: str, rows: int = 12) -> list[dict]:
    """torch.profiler over 3 calls of `step`: the operators with the most self device time (CPU time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(3):
            step()
        synchronize(device)
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    ranked = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)[:rows]
    return [{"op": e.key, "ms_per_update": getattr(e, key) / 1e3 / 3, "calls": e.count // 3} for e in ranked]


def peak_memory_mb(device: str, step) -> float | None:
    """Peak memory of one call of `step`: allocated device memory on CUDA, the process's resident peak on a CPU."""
    from gpt1.runtime.processes import peak_rss_mb, reset_peak_rss

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    reset_peak_rss()
    step()
    return peak_rss_mb()


class Probe:
    """Rows written as they finish, within a time budget (module docstring)."""

    def __init__(self, out: Path, budget_s: float):
        self.path, self.budget_s, self.started = out / "probe.jsonl", budget_s, time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self.rows: dict[str, dict] = {}

    def row(self, name: str, measure: Callable[[], dict]) -> dict | None:
        elapsed = time.monotonic() - self.started
        if elapsed > self.budget_s:
            found: dict = {"skipped": f"over the {self.budget_s:.0f} s budget"}
        else:
            began = time.monotonic()
            try:
                found = measure()
            except Exception as err:  # noqa: BLE001 - a probe reports a failing row and goes on
                found = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}
            found["seconds"] = round(time.monotonic() - began, 2)
        found = {"row": name, **found}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(found) + "\n")
        print(json.dumps(found), flush=True)
        self.rows[name] = found
        return None if "skipped" in found or "error" in found else found


def paper_config(shape: list[str], micro: int, *extra: str):
    return load_config("paper", [*shape, "pretrain.precision=bf16", "pretrain.zero_stage=1", "model.compile=false",
                                 f"pretrain.global_batch_size={micro}", f"pretrain.micro_batch_size={micro}", *extra])


def batch(cfg, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    n_ctx, vocab = cfg.model.n_ctx, cfg.model.vocab_size
    micro = cfg.pretrain.micro_batch_size
    tokens = torch.randint(0, vocab, (micro, n_ctx + 1), generator=torch.Generator().manual_seed(seed)).to(device)
    return tokens[:, :-1], tokens[:, 1:]


def rates(cfg, seconds: float, peak: float, datasheet: float | None) -> dict:
    tokens_per_s = cfg.pretrain.micro_batch_size * cfg.model.n_ctx / seconds
    flops = flops_per_token(cfg.model)
    achieved = tokens_per_s * flops
    return {"step_ms": 1e3 * seconds, "tokens_per_s": tokens_per_s, "flops_per_token": flops,
            "mfu_vs_matmul_peak": achieved / peak,
            "mfu_vs_datasheet": achieved / datasheet if datasheet else None}


def production_step(cfg, device: str, steps: int, peak: float, datasheet: float | None) -> dict:
    inputs, targets = batch(cfg, device)
    step, phases = engine_trainer(cfg, device)
    found = rates(cfg, timed(lambda: step(inputs, targets), device, steps), peak, datasheet)
    timed(lambda: step(inputs, targets, split=True), device, steps)
    return {**found, "phases_ms": {k: 1e3 * statistics.median(v) for k, v in phases.items()}}


def compile_variants(cfg, device: str, steps: int, peak: float, datasheet: float | None) -> dict:
    inputs, targets = batch(cfg, device)
    found = {}
    modes = [("eager", None), ("compiled", "default")] + ([("reduce-overhead", "reduce-overhead")]
                                                            if device == "cuda" else [])
    for name, mode in modes:
        step = plain_trainer(cfg, device, full_logits=False, compile_mode=mode)
        found[name] = rates(cfg, timed(lambda: step(inputs, targets), device, steps), peak, datasheet)
    return found


def precision_and_resume(cfg, device: str, updates: int) -> dict:
    """bf16 against fp32 over `updates` updates of the plain loop on the same batches; then an engine checkpoint
    at this shape: saved, one update, restored, the same update again."""
    from gpt1.pretrain.checkpoint import rng_state, set_rng_state

    curves = {}
    for precision in ("fp32", "bf16"):
        step = plain_trainer(cfg, device, full_logits=False, precision=precision)
        curves[precision] = [float(step(*batch(cfg, device, seed=i))) for i in range(updates)]
    gap = [abs(a - b) for a, b in zip(curves["fp32"], curves["bf16"])]
    engine_step, _ = engine_trainer(cfg, device)
    engine = engine_step.engine
    inputs, targets = batch(cfg, device, seed=updates)
    engine_step(inputs, targets)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        started = time.perf_counter()
        engine.save_checkpoint(tmp, tag="probe")
        rng = rng_state()  # dropout's stream, as gpt1's checkpoints keep it beside DeepSpeed's files
        save_s = time.perf_counter() - started
        before = float(engine_step(inputs, targets))
        engine.load_checkpoint(tmp, tag="probe")
        set_rng_state(rng)
        after = float(engine_step(inputs, targets))
    return {"updates": updates, "fp32_final_loss": curves["fp32"][-1], "bf16_final_loss": curves["bf16"][-1],
            "max_abs_loss_gap": max(gap), "mean_abs_loss_gap": statistics.mean(gap),
            "resume_save_s": save_s, "resume_loss_before": before, "resume_loss_after": after,
            "resume_identical": before == after}


def memory_table(shape: list[str], device: str, micro_batches: list[int], race: tuple[int, int, int]) -> dict:
    """Peak memory (MB) of one engine update per micro-batch, and of one RACE fine-tune update."""
    from gpt1.model.losses import task_loss
    from gpt1.model.transformer import GPT1ForTask

    table = {}
    for micro in micro_batches:
        cfg = paper_config(shape, micro)
        inputs, targets = batch(cfg, device)
        step, _ = engine_trainer(cfg, device)
        step(inputs, targets)  # the optimizer state exists before the measured update
        table[f"engine_micro_{micro}_mb"] = peak_memory_mb(device, lambda: step(inputs, targets))
        del step
    questions, answers, length = race
    cfg = paper_config(shape, 8)
    per_forward = max(1, cfg.finetune.forward_sequences // answers)
    model = GPT1ForTask(GPT1(cfg.model), "multiple_choice", answers).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.finetune.lr)
    ids = torch.randint(0, cfg.model.vocab_size, (questions, answers, length), device=device)
    last = torch.full((questions, answers), length - 1, device=device)
    labels = torch.zeros(questions, dtype=torch.long, device=device)

    def finetune_update() -> None:
        for chunk in torch.arange(questions, device=device).split(per_forward):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                out = model(ids[chunk], last[chunk])
            (task_loss(out.logits, labels[chunk]) * len(chunk) / questions).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    finetune_update()
    table["race_finetune_mb"] = peak_memory_mb(device, finetune_update)
    table["race_shape"] = f"{questions} x {answers} x {length}, {per_forward} questions per forward"
    table["measured"] = "allocated device memory" if device == "cuda" else "the process's resident peak"
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build-artifacts/gpu-probe"), help="where probe.jsonl goes")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (a dry run of this script)")
    parser.add_argument("--tiny", action="store_true", help="a 2 x 64 model, ctx 64, vocab 1,000, micro 2 and 4")
    parser.add_argument("--steps", type=int, default=10, help="timed updates per measurement")
    parser.add_argument("--budget-s", type=float, default=420, help="no row starts after this many seconds")
    parser.add_argument("--compile", action="store_true", help="on a CPU, also the compile row (slow to start)")
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no usable CUDA device (use --cpu for the dry run)")
    os.environ.setdefault("DS_ACCELERATOR", device)
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)
    from gpt1.pretrain.distributed import init_world
    from gpt1.runtime.cuda import versions

    init_world()
    probe = Probe(args.out, args.budget_s)
    shape = ["model.n_layer=2", "model.n_embd=64", "model.n_head=2", "model.d_ff=256", "model.n_ctx=64",
             "model.vocab_size=1000"] if args.tiny else []
    big, small = (4, 2) if args.tiny else (64, 8)
    peak = matmul_peak(device, 1024 if args.tiny or device == "cpu" else 8192)
    datasheet = gpu_peak_flops(torch.cuda.get_device_name(), "bf16") if device == "cuda" else None

    probe.row("environment", lambda: {"device": device, **versions()})
    probe.row("roofs", lambda: {"matmul_peak_tflops": peak / 1e12,
                                "datasheet_tflops": datasheet / 1e12 if datasheet else None,
                                "bandwidth_gb_s": bandwidth(device, 64 if args.tiny else 1024) / 1e9})
    for micro in (big, small):
        probe.row(f"step micro {micro}",
                  lambda: production_step(paper_config(shape, micro), device, args.steps, peak, datasheet))

    def profile_row() -> dict:
        cfg = paper_config(shape, big)
        inputs, targets = batch(cfg, device)
        step, _ = engine_trainer(cfg, device)
        timed(lambda: step(inputs, targets), device, 1)
        return {"top_operators": top_operators(lambda: step(inputs, targets), device)}

    probe.row("profile", profile_row)

    def loss_row() -> dict:
        from gpt1.model.losses import default_chunk_rows

        cfg = paper_config(shape, big)
        inputs, targets = batch(cfg, device)
        found = {}
        for name in ("chunked", "full-logits"):
            step = plain_trainer(cfg, device, full_logits=name == "full-logits")
            found[name] = rates(cfg, timed(lambda: step(inputs, targets), device, args.steps), peak, datasheet)
        vocab = cfg.model.vocab_size
        rows = default_chunk_rows(torch.empty(vocab, 1, device=device))
        found["lm_head_matmuls"] = lm_head_matmuls(device, rows, cfg.model.n_embd, vocab, args.steps)
        return found

    probe.row("loss variants", loss_row)

    def attention_row() -> dict:
        """The plain loop at micro-batch 64 with each attention path: ours by hand, and SDPA under each of its
        backends this device has (`model.attention` chooses between the first two)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        found: dict = {}
        backends = ([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
                    if device == "cuda" else []) + [SDPBackend.MATH]
        for path in ("manual", "sdpa"):
            cfg = paper_config(shape, big, f"model.attention={path}")
            inputs, targets = batch(cfg, device)
            step = plain_trainer(cfg, device, full_logits=False)
            for backend in backends if path == "sdpa" else [None]:
                name = path if backend is None else f"sdpa-{backend.name.lower()}"
                try:
                    if backend is None:
                        seconds = timed(lambda: step(inputs, targets), device, args.steps)
                    else:
                        with sdpa_kernel(backend):
                            seconds = timed(lambda: step(inputs, targets), device, args.steps)
                    found[name] = rates(cfg, seconds, peak, datasheet)
                except RuntimeError as err:  # a backend this device or shape does not have
                    found[name] = {"unavailable": str(err).splitlines()[0][:200]}
        return found

    probe.row("attention", attention_row)
    if device == "cuda" or args.compile:
        probe.row("compile", lambda: compile_variants(paper_config(shape, small), device, args.steps, peak,
                                                       datasheet))

    def variants_row() -> dict:
        cfg = paper_config(shape, small)
        inputs, targets = batch(cfg, device)
        found = {}
        for name, change in {"engine": None, **ENGINE_VARIANTS}.items():
            step, _ = engine_trainer(cfg, device, change)
            found[name] = rates(cfg, timed(lambda: step(inputs, targets), device, args.steps), peak, datasheet)
        return found

    probe.row("engine variants", variants_row)
    probe.row("precision", lambda: precision_and_resume(paper_config(shape, small), device, 30))
    probe.row("memory", lambda: memory_table(shape, device, [small, 2 * small, big] if args.tiny
                                             else [8, 16, 32, 64], (4, 4, 64) if args.tiny else (32, 4, 512)))

    summary: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                     "flops": "gpt1.model.transformer.flops_per_token, real vocabulary", "torch": torch.__version__,
                     "rows": {name: ("skipped" if "skipped" in row else "error" if "error" in row else "ok")
                              for name, row in probe.rows.items()}}
    for micro in (big, small):
        found = probe.rows[f"step micro {micro}"]
        if "tokens_per_s" in found:
            summary[f"micro_{micro}"] = {k: found[k] for k in ("tokens_per_s", "mfu_vs_matmul_peak", "mfu_vs_datasheet")}
    if "matmul_peak_tflops" in probe.rows["roofs"]:
        summary["roofs"] = {k: probe.rows["roofs"][k] for k in ("matmul_peak_tflops", "bandwidth_gb_s")}
    print(f"rows in {probe.path}")
    record(summary, benchmark="bench_pretrain_gpu")


if __name__ == "__main__":
    main()
