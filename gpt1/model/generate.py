"""Text continuation with a GPT-1 checkpoint: greedy, top-k and temperature sampling; `gpt1 generate`.

    ids = generate(model, prompt_ids, max_new_tokens=40, top_k=40, temperature=0.8, generator=g)
    text = continue_text(model, tokenizer, "the old man said", max_new_tokens=40)

Design choices:
- A prompt is encoded after `_start_`, as every pre-training document begins (gpt1.data.tokenize), and generation
  stops early when the model starts a new document (emits `_start_` again).
- temperature 0 (or top_k 1) is greedy decoding. Sampling draws from an explicit `torch.Generator` when given,
  so samples logged during training never touch the training RNG (resume stays exact) and repeat across evals.
- The context is the last n_ctx tokens (a sliding window) once the sequence outgrows the model.
- Tokenizer for a checkpoint: `--tokenizer`, else the `tokenizer.json` pre-training copies into `OUT/final/`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from gpt1.io import positive_int


@torch.no_grad()
def generate(
    model,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    stop_id: int | None = None,
    generator: torch.Generator | None = None,
) -> list[int]:
    """The new token ids continuing `prompt_ids` (the prompt itself is not returned)."""
    if not prompt_ids:
        raise ValueError("generate needs at least one prompt token")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    n_ctx = model.config.n_ctx
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(ids[:, -n_ctx:]).logits[0, -1].float()
        if temperature == 0 or top_k == 1:
            token = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.numel():
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
        if token == stop_id:
            break
        new.append(token)
        ids = torch.cat([ids, torch.tensor([[token]], device=device)], dim=1)
    return new


def continue_text(
    model,
    tokenizer,
    prompt: str,
    max_new_tokens: int = 40,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> str:
    """Decoded continuation of `prompt` (encoded after `_start_`; stops if the model starts a new document)."""
    was_training = model.training
    model.eval()
    try:
        new = generate(
            model,
            [tokenizer.start_id, *tokenizer.encode(prompt)],
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            stop_id=tokenizer.start_id,
            generator=generator,
        )
    finally:
        model.train(was_training)
    return tokenizer.decode(new)


# ------------------------------------------------------------------------------------------------------- CLI


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="model folder (gpt1.safetensors + gpt1_config.json), e.g. pretrain OUT/final",
    )
    parser.add_argument("--prompt", required=True, help="text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument(
        "--top-k", type=positive_int, default=None, help="sample among the k most likely tokens"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument(
        "--tokenizer", help="folder or tokenizer.json (default: CHECKPOINT/tokenizer.json)"
    )


def run_cli(args: argparse.Namespace) -> int:
    from gpt1.model.transformer import GPT1, missing_model_files
    from gpt1.tokenizer import bpe

    checkpoint = Path(args.checkpoint)
    if not checkpoint.is_dir():
        raise FileNotFoundError(
            f"--checkpoint {checkpoint}: no such folder (a model folder, e.g. pretrain OUT/final)"
        )
    problem = missing_model_files(checkpoint)  # before its tokenizer: the model is what was named
    if problem:
        raise FileNotFoundError(f"--checkpoint {checkpoint}: {problem}")
    tokenizer_path = Path(args.tokenizer) if args.tokenizer else checkpoint / "tokenizer.json"
    if not tokenizer_path.exists():
        raise FileNotFoundError(
            f"{tokenizer_path} not found: pass --tokenizer DIR (the train-tokenizer output)"
        )
    if args.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    tokenizer = bpe.load(tokenizer_path)
    bpe.check_matches(tokenizer, checkpoint, f"tokenizer {tokenizer_path}")
    model = GPT1.from_pretrained(checkpoint)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"tokenizer {tokenizer_path} has {tokenizer.vocab_size} ids, the model only "
            f"{model.config.vocab_size}: not the tokenizer this checkpoint was trained with"
        )
    generator = torch.Generator().manual_seed(args.seed)
    text = continue_text(
        model,
        tokenizer,
        args.prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        generator=generator,
    )
    print(args.prompt + " " + text if text else args.prompt)
    return 0
