"""Fine-tuning and evaluation throughput (examples/s) of `gpt1.finetune`, vs HF transformers and this machine's peak.

Ours: the real `gpt1.finetune.train` loop (collate, GPT1ForTask, task loss + aux LM loss, clipping, fused AdamW,
schedule) over synthetic classification examples of a fixed length, then its evaluation pass (`predict_logits`:
no LM projection, length-sorted batches). Peers, from HF transformers with the same config and weights, timed as
bare loops over pre-built tensors (they pay no data handling): fine-tuning `OpenAIGPTDoubleHeadsModel` (LM +
classification heads, one candidate per example, LM loss + lambda, the same AdamW and clipping), evaluation
`OpenAIGPTForSequenceClassification` (no LM head, like ours). Ours and the peers run in alternating rounds so
background load on a shared machine hits both alike; each round is a fresh fine-tune of --steps updates for
both (new optimizer, so short rounds include the optimizer-state allocation on both sides). Limit: the best square-matmul FLOP/s measured during the run
(`gpt1.model.mfu.measure_matmul_flops`, before, between and after the rounds). Achieved FLOP/s count
`gpt1.model.transformer.flops_per_token` (6N + attention, LM head included) for fine-tuning and the forward pass without the
LM head (2N' + attention) for evaluation, at the measured length.

    python benchmarks/bench_finetune.py --shape smoke
    python benchmarks/bench_finetune.py --shape gpt1 --batch 8 --seq 128 --steps 2 --rounds 2
"""

from __future__ import annotations

import argparse
import logging
import time

import torch

from gpt1 import tasks
from gpt1.config import FinetuneConfig, load_config
from gpt1.model.convert import hf_config_dict, to_hf_state_dict
from gpt1.model import optim
from gpt1.finetune.train import Split, train
from gpt1.model.mfu import measure_matmul_flops
from gpt1.model.transformer import GPT1, GPT1ForTask, flops_per_token
from gpt1.tasks import Encoded, TextExample
from gpt1.tracking.logger import RunLogger
from results import record


def synthetic_ids(n: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    """(n, seq) random token ids framed as `_start_ ... _classify_` (the last 3 ids are the specials)."""
    ids = torch.randint(0, vocab - 3, (n, seq), generator=torch.Generator().manual_seed(seed))
    ids[:, 0], ids[:, -1] = vocab - 3, vocab - 1
    return ids


def synthetic_split(name: str, n: int, seq: int, vocab: int, seed: int) -> Split:
    """n SST-2-shaped examples of exactly `seq` tokens, labels alternating."""
    encoded = [Encoded([row.tolist()], [seq - 1], single=True) for row in synthetic_ids(n, seq, vocab, seed)]
    examples = [TextExample(str(i), "", label=i % 2) for i in range(n)]
    return Split(name, examples, encoded, report={}, digest="", all_labels=[e.label for e in examples],
                 contents=frozenset())


class Peer:
    """HF transformers: OpenAIGPTDoubleHeadsModel fine-tuned, OpenAIGPTForSequenceClassification evaluated."""

    def __init__(self, ours: GPT1ForTask, batch: int, seq: int, cfg: FinetuneConfig):
        from transformers import OpenAIGPTConfig, OpenAIGPTDoubleHeadsModel, OpenAIGPTForSequenceClassification

        config = OpenAIGPTConfig(**hf_config_dict(ours.transformer.config), num_labels=2, pad_token_id=0)
        weights = {k.removeprefix("transformer."): v for k, v in to_hf_state_dict(ours.transformer).items()
                   if k.startswith("transformer.")}
        self.model = OpenAIGPTDoubleHeadsModel(config)
        self.classifier = OpenAIGPTForSequenceClassification(config).eval()
        for model in (self.model, self.classifier):
            model.transformer.load_state_dict(weights)
        self.cfg = cfg
        self.input_ids = synthetic_ids(batch, seq, ours.transformer.config.vocab_size, seed=1).unsqueeze(1)  # (B,1,T)
        self.mc_token_ids = torch.full((batch, 1), seq - 1)
        self.train_seconds = self.eval_seconds = 0.0
        self.train_examples = self.eval_examples = 0

    def train_steps(self, steps: int) -> None:
        """A fresh fine-tune of `steps` updates, as each call of ours is (optimizer state starts empty)."""
        self.model.train()
        started = time.perf_counter()
        c = self.cfg
        self.optimizer = optim.adamw(self.model, lr=c.lr, weight_decay=c.weight_decay, betas=c.adam_betas,
                                     eps=c.adam_eps)
        for _ in range(steps):
            out = self.model(self.input_ids, mc_token_ids=self.mc_token_ids, labels=self.input_ids,
                             mc_labels=torch.zeros(len(self.input_ids), dtype=torch.long))
            loss = out.mc_loss + self.cfg.aux_lm_weight * out.loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            self.optimizer.step()
        self.train_seconds += time.perf_counter() - started
        self.train_examples += steps * len(self.input_ids)

    @torch.no_grad()
    def eval_batches(self, batches: int) -> None:
        started = time.perf_counter()
        for _ in range(batches):
            self.classifier(self.input_ids[:, 0])
        self.eval_seconds += time.perf_counter() - started
        self.eval_examples += batches * len(self.input_ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("smoke", "gpt1"), default="smoke")
    parser.add_argument("--batch", type=int, help="examples per update (default: smoke 16, gpt1 8)")
    parser.add_argument("--seq", type=int, help="tokens per example (default: smoke 64, gpt1 128)")
    parser.add_argument("--steps", type=int, help="updates per round (default: smoke 8, gpt1 2)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of ours and the peer")
    parser.add_argument("--vocab", type=int, help="vocabulary size (default: the preset's model.vocab_size)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    smoke = args.shape == "smoke"
    batch, seq = args.batch or (16 if smoke else 8), args.seq or (64 if smoke else 128)
    steps = args.steps or (8 if smoke else 2)

    model_cfg = load_config("smoke" if smoke else "paper").model
    if args.vocab:
        model_cfg = model_cfg.model_copy(update={"vocab_size": args.vocab})
    cfg = FinetuneConfig(batch_size=batch, eval_batch_size=batch, epochs=1, precision=args.precision,
                         warmup_fraction=0.0)
    spec = tasks.get("sst2")
    torch.manual_seed(0)
    ours = GPT1ForTask(GPT1(model_cfg), spec.head, spec.n_outputs, cfg.clf_pdrop)
    peer = Peer(ours, batch, seq, cfg)
    log = RunLogger("bench", enabled=False)
    train_split = synthetic_split("train", batch * steps, seq, model_cfg.vocab_size, seed=0)
    eval_split = synthetic_split("dev", batch * steps, seq, model_cfg.vocab_size, seed=2)

    flops = flops_per_token(model_cfg.model_copy(update={"n_ctx": seq}))
    eval_flops = (flops - 6 * model_cfg.vocab_size * model_cfg.n_embd) / 3  # forward only, no LM head
    print(f"shape={args.shape} ({model_cfg.n_layer}L d={model_cfg.n_embd} V={model_cfg.vocab_size}) batch={batch} "
          f"seq={seq} steps/round={steps} rounds={args.rounds} precision={args.precision} "
          f"threads={torch.get_num_threads()} train flops/token={flops / 1e9:.3f} G")
    peak = measure_matmul_flops(args.precision, seconds=1.0)
    warm = synthetic_split("warm", batch, seq, model_cfg.vocab_size, 3)
    train(ours, spec, warm, {}, cfg, torch.device("cpu"), log, "dev")
    peer.train_steps(1)  # warm-up both: allocator, kernels, optimizer state
    peer.train_seconds, peer.train_examples = 0.0, 0

    seconds = {"train": 0.0, "eval": 0.0}
    for _ in range(args.rounds):
        stats, _ = train(ours, spec, train_split, {"dev": eval_split}, cfg, torch.device("cpu"), log, "dev")
        seconds["train"] += stats["seconds"]
        seconds["eval"] += len(eval_split.examples) / stats["eval_examples_per_s"]
        peer.train_steps(steps)
        peer.eval_batches(steps)
        peak = max(peak, measure_matmul_flops(args.precision, seconds=1.0))  # others' load comes and goes

    n = args.rounds * batch * steps
    rows = {"ours": (n / seconds["train"], n / seconds["eval"]),
            "hf": (peer.train_examples / peer.train_seconds, peer.eval_examples / peer.eval_seconds)}
    print(f"{args.precision} matmul peak {peak / 1e12:.3f} TFLOP/s")
    for name, (train_rate, eval_rate) in rows.items():
        train_util = train_rate * seq * flops / peak
        eval_util = eval_rate * seq * eval_flops / peak
        print(f"{name:>5}: fine-tune {train_rate:8.2f} examples/s ({100 * train_util:5.1f}% of peak)   "
              f"eval {eval_rate:8.2f} examples/s ({100 * eval_util:5.1f}% of peak)")
    print(f"ratio ours/hf: fine-tune {rows['ours'][0] / rows['hf'][0]:.2f}x, eval {rows['ours'][1] / rows['hf'][1]:.2f}x")
    record({"finetune_vs_hf": rows["ours"][0] / rows["hf"][0], "eval_vs_hf": rows["ours"][1] / rows["hf"][1],
            "ours_finetune_examples_per_s": rows["ours"][0], "ours_eval_examples_per_s": rows["ours"][1],
            "matmul_peak_tflops": peak / 1e12, "threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
