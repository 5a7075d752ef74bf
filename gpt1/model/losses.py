"""The objectives of both stages: the language-modelling loss L1 and the task loss L2 (paper sections 3.1-3.2).

    loss = lm_loss(hidden, model.tokens_embed.weight, targets)                          # pre-training
    loss = lm_loss(hidden, weight, targets, mask, average="sequences")                  # fine-tuning's aux L1
    loss = task_loss(logits, labels, regression=spec.regression)                         # fine-tuning's L2

`lm_loss` is the next-token cross-entropy of hidden states through the tied LM head (logits = hidden @ W_e^T),
computed a chunk of rows at a time: the (tokens x vocabulary) logits of a whole batch, in fp32 the largest tensor
of a GPT-1 step (a 32 x 512 micro-batch over 40,481 entries is 2.6 GB), never exist at once. Each chunk's
gradient with respect to its logits, softmax - one_hot scaled by the token's weight, is turned into the
gradients of the hidden states and of the embedding during the forward pass, so backward only scales them by the
incoming gradient: the same matmuls as the plain loss, no recomputation, and a peak of one chunk of logits.

Averaging (what one target token weighs):
- "tokens": mean over every counted target of the batch (pre-training).
- "sequences": mean over each sequence's counted targets, then over sequences, as the release's fine-tuning
  auxiliary loss (a sequence with no counted target contributes 0 and still counts in the outer mean).
- "sum": the plain sum (validation totals).

Speed: the vocabulary dimension of the matmuls is padded with zero rows to a multiple of 64 (their logits are -inf,
so they carry no probability and get no gradient). GPT-1's 40,481 entries leave every row of the logits and of the
weight misaligned for cuBLAS's fast GPU kernels, which then fall back to much slower generic ones; on a GPU the
chunks are also larger and a multiple of 64 rows.

Numerics: log-sum-exp and the softmax are fp32 whatever the input dtype; the matmuls run in the autocast dtype
when autocast is on (as the plain `F.linear` would), else in the inputs' dtype. The embedding gradient is
accumulated in fp32 across chunks (on CUDA straight out of the bf16 matmul, `add_product_fp32`) and returned in
the weight's dtype.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

Average = Literal["tokens", "sequences", "sum"]

# Logits per chunk, in fp32: 128 MB on a CPU (a few chunks per micro-batch), 1 GB on a GPU (large matmuls).
CHUNK_LOGITS = {"cpu": 2**25, "cuda": 2**28}
ALIGN = 64  # rows of the weight (columns of the logits) and GPU chunk rows: a multiple of this


def lm_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor | None = None,
    average: Average = "tokens",
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Cross-entropy of `targets` (..., T) under logits `hidden (..., T, D) @ weight (V, D)^T`, an fp32 scalar.

    mask (..., T), optional: which targets count (1/True) and which do not (padding). The leading dimensions
    are sequences ((B,), or (B, K) for K candidates each). chunk_rows: rows of logits built at once (default:
    CHUNK_LOGITS // V).
    """
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} and targets {tuple(targets.shape)} disagree"
        )
    if mask is not None and mask.shape != targets.shape:
        raise ValueError(f"mask {tuple(mask.shape)} and targets {tuple(targets.shape)} disagree")
    T = targets.size(-1)
    counted = (
        torch.ones_like(targets, dtype=torch.float32) if mask is None else mask.float()
    ).reshape(-1, T)
    if average == "tokens":
        token_weights = counted / counted.sum().clamp(min=1)
    elif average == "sequences":
        token_weights = counted / (counted.sum(1, keepdim=True).clamp(min=1) * counted.size(0))
    elif average == "sum":
        token_weights = counted
    else:
        raise ValueError(f"average must be 'tokens', 'sequences' or 'sum', got {average!r}")
    rows = chunk_rows or default_chunk_rows(weight)
    return _LinearCrossEntropy.apply(
        hidden.reshape(-1, hidden.size(-1)),
        weight,
        targets.reshape(-1),
        token_weights.reshape(-1),
        rows,
    )


def default_chunk_rows(weight: torch.Tensor) -> int:
    vocab = weight.size(0) + (-weight.size(0)) % ALIGN
    rows = CHUNK_LOGITS.get(weight.device.type, CHUNK_LOGITS["cpu"]) // vocab
    if weight.device.type == "cuda":
        return max(ALIGN, rows // ALIGN * ALIGN)
    return max(1, rows)


def task_loss(logits: torch.Tensor, labels: torch.Tensor, regression: bool = False) -> torch.Tensor:
    """L2: cross-entropy over classes or candidates; mean squared error for a regression (STS-B)."""
    if regression:
        return F.mse_loss(logits.float().squeeze(-1), labels.float())
    return F.cross_entropy(logits.float(), labels)


def add_product_fp32(total: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`total + a @ b` (just `a @ b` when total is None) as fp32, whatever the inputs' dtype. On CUDA cuBLAS writes
    the fp32 product of bf16/fp16 inputs directly; elsewhere there is no such matmul, so the product is made in the
    inputs' dtype and converted."""
    if a.dtype == torch.float32:
        return a @ b if total is None else total.addmm_(a, b)
    if a.device.type == "cuda":
        return (
            torch.mm(a, b, out_dtype=torch.float32)
            if total is None
            else torch.addmm(total, a, b, out_dtype=torch.float32)
        )
    product = (a @ b).float()
    return product if total is None else total.add_(product)


class _LinearCrossEntropy(torch.autograd.Function):
    """sum_i w_i * (logsumexp(h_i W^T) - h_i . W[t_i]), chunked over rows i; gradients made in forward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, token_weights, chunk_rows):
        device = hidden.device.type
        dtype = (
            torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        )
        with torch.autocast(device, enabled=False):  # dtypes are chosen explicitly below
            return _LinearCrossEntropy._chunks(
                ctx, hidden, weight, targets, token_weights, chunk_rows, dtype
            )

    @staticmethod
    def _chunks(ctx, hidden, weight, targets, token_weights, chunk_rows, dtype):
        h, w = hidden.to(dtype), weight.to(dtype)
        vocab = w.size(0)
        # zero rows up to an aligned size (module docstring)
        w = F.pad(w, (0, 0, 0, (-vocab) % ALIGN))
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = None  # fp32 sum over chunks
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, h.size(0), chunk_rows):
            rows = slice(start, start + chunk_rows)
            # (n, V + pad): the only large tensor, one chunk at a time
            logits = (h[rows] @ w.T).float()
            logits[:, vocab:] = float("-inf")  # the padding: no probability, so no gradient
            scale, target = token_weights[rows], targets[rows]
            log_z = torch.logsumexp(logits, dim=-1)
            loss += (scale * (log_z - logits.gather(1, target[:, None]).squeeze(1))).sum()
            if not (want_hidden or want_weight):
                continue
            # d loss / d logits = scale * (softmax - one_hot), built in place of the logits; the scale goes
            # into the exponent (log 0 = -inf gives exactly 0 for uncounted rows), saving a pass.
            grad_logits = logits.sub_((log_z - scale.log())[:, None]).exp_()
            grad_logits[torch.arange(len(target), device=target.device), target] -= scale
            grad_logits = grad_logits.to(dtype)
            if want_hidden:
                torch.mm(
                    grad_logits, w, out=grad_hidden[rows]
                ) if dtype == hidden.dtype else grad_hidden[rows].copy_(grad_logits @ w)
            if want_weight:
                grad_weight = add_product_fp32(grad_weight, grad_logits.T, h[rows])
        ctx.save_for_backward(
            grad_hidden, None if grad_weight is None else grad_weight[:vocab].to(weight.dtype)
        )
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        # Mostly called with d out / d loss = 1: on the CPU, skip two passes over the gradients (a GPU would
        # have to synchronise to know, and the passes cost it next to nothing).
        if grad_loss.device.type != "cpu" or grad_loss.item() != 1.0:
            grad_hidden = (
                None if grad_hidden is None else grad_hidden * grad_loss.to(grad_hidden.dtype)
            )
            grad_weight = (
                None if grad_weight is None else grad_weight * grad_loss.to(grad_weight.dtype)
            )
        return grad_hidden, grad_weight, None, None, None
