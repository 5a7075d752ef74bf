"""The optimizer and learning-rate schedules of both stages (paper section 4.1, settings from gpt1.config).

- AdamW with decoupled weight decay on every parameter with 2+ dimensions (matmul weights and embeddings) and
  none on biases and LayerNorm gains, as the original code's `vector_l2=False`.
- Schedule: linear warmup over `warmup` updates, then cosine (pre-training) or linear (fine-tuning) decay to 0 at
  `total`: update s (0-based) gets lr x f(s), f = (s+1)/warmup during warmup, then 0.5(1 + cos(pi p)) or 1 - p
  with p = (s - warmup)/(total - warmup). The linear one is a continuous version of the release's
  `warmup_linear`.
"""

from __future__ import annotations

import math

import torch


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on weights (2+ dims: matmuls, embeddings), none on biases and LayerNorm gains."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def adamw(
    model: torch.nn.Module,
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
) -> torch.optim.AdamW:
    """torch's AdamW over `param_groups`; fused (one kernel per tensor) where torch has the kernel."""
    groups = param_groups(model, weight_decay)
    device = next(model.parameters()).device.type
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=device in ("cpu", "cuda"))


def lr_factor(step: int, *, warmup_steps: int, total_steps: int, schedule: str = "cosine") -> float:
    """Multiplier of the peak lr for update `step` (0-based): linear warmup, then cosine/linear decay to 0."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(total_steps - step, 0) / max(total_steps - warmup_steps, 1)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def scheduler(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, total_steps: int, schedule: str
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over `lr_factor`, stepped once per update (and checkpointed with the optimizer)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_factor(
            s, warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule
        ),
    )
