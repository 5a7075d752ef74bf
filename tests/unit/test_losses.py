"""gpt1.losses: the chunked LM loss equals the plain cross-entropy over full logits, in value and gradients, for
every averaging and chunking; the task loss; the losses as the model and the training loops call them.

Tolerances: fp32 matches to 1e-5 relative (to each value, or for gradients to the largest entry: the same
arithmetic summed in another order). Under bf16 autocast both
paths round the matmul inputs to bf16; the chunked loss keeps its softmax and its embedding-gradient sum in fp32
where the plain path goes through bf16 gradients of the logits, so they agree to 2e-2 relative (bf16 has 8
significant bits: one rounding step is 0.4-0.8%).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpt1.config import ModelConfig
from gpt1.model.losses import lm_loss, task_loss
from gpt1.model.transformer import GPT1, GPT1ForTask

pytestmark = pytest.mark.usefixtures("one_thread")

B, T, D, V = 3, 9, 16, 50


def inputs(seed: int = 0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, D, generator=generator).to(dtype).requires_grad_()
    weight = torch.randn(V, D, generator=generator).to(dtype).requires_grad_()
    targets = torch.randint(0, V, (B, T), generator=generator)
    mask = torch.rand(B, T, generator=generator) > 0.3
    mask[0, :] = True
    mask[2, :] = False  # a sequence without a counted target
    return hidden, weight, targets, mask


def plain_loss(hidden, weight, targets, mask, average):
    """The textbook loss: full (B, T, V) logits, fp32 cross-entropy per token, then the average."""
    nll = F.cross_entropy((hidden @ weight.T).float().flatten(0, 1), targets.flatten(), reduction="none")
    nll = nll.view(targets.shape)
    counted = torch.ones_like(nll) if mask is None else mask.float()
    if average == "tokens":
        return (nll * counted).sum() / counted.sum()
    if average == "sum":
        return (nll * counted).sum()
    return ((nll * counted).sum(-1) / counted.sum(-1).clamp(min=1)).mean()


@pytest.mark.parametrize("average", ["tokens", "sequences", "sum"])
@pytest.mark.parametrize("chunk_rows", [1, 4, 27, None])
@pytest.mark.parametrize("masked", [True, False])
def test_chunked_loss_and_gradients_equal_the_plain_loss_fp32(average, chunk_rows, masked):
    hidden, weight, targets, mask = inputs()
    mask = mask if masked else None
    ours = lm_loss(hidden, weight, targets, mask, average, chunk_rows=chunk_rows)
    ours_grads = torch.autograd.grad(3.0 * ours, (hidden, weight))  # an upstream gradient other than 1
    plain = plain_loss(hidden, weight, targets, mask, average)
    plain_grads = torch.autograd.grad(3.0 * plain, (hidden, weight))
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-6)
    for got, expected in zip(ours_grads, plain_grads):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))


@pytest.mark.parametrize("weights_dtype", [torch.float32, torch.bfloat16])
def test_chunked_loss_under_bf16_agrees_with_the_plain_loss(weights_dtype):
    """bf16 autocast over fp32 weights (fine-tuning, plain pre-training) and bf16 weights (DeepSpeed bf16)."""
    hidden, weight, targets, mask = inputs(seed=1, dtype=weights_dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = lm_loss(hidden, weight, targets, mask, "sequences", chunk_rows=5)
        ours_grads = torch.autograd.grad(ours, (hidden, weight))
        plain = plain_loss(hidden, weight, targets, mask, "sequences")
        plain_grads = torch.autograd.grad(plain, (hidden, weight))
    assert ours.dtype == torch.float32
    assert [g.dtype for g in ours_grads] == [weights_dtype, weights_dtype]
    torch.testing.assert_close(ours, plain.float(), rtol=2e-2, atol=1e-3)
    for got, expected in zip(ours_grads, plain_grads):
        torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-3)


def test_uncounted_targets_change_nothing_and_frozen_inputs_get_no_gradient():
    hidden, weight, targets, mask = inputs(seed=2)
    other = torch.where(mask, targets, (targets + 7) % V)  # rewrite only the uncounted targets
    assert lm_loss(hidden, weight, other, mask).item() == lm_loss(hidden, weight, targets, mask).item()
    frozen = weight.detach()
    (grad,) = torch.autograd.grad(lm_loss(hidden, frozen, targets, mask), (hidden,))
    assert grad.shape == hidden.shape and grad[~mask].abs().max() == 0  # no gradient from uncounted positions
    with torch.no_grad():
        assert lm_loss(hidden, weight, targets, mask).requires_grad is False


def test_bad_shapes_and_averages_are_refused():
    hidden, weight, targets, mask = inputs()
    with pytest.raises(ValueError, match="disagree"):
        lm_loss(hidden, weight, targets[:, 1:])
    with pytest.raises(ValueError, match="mask"):
        lm_loss(hidden, weight, targets, mask[:, 1:])
    with pytest.raises(ValueError, match="average"):
        lm_loss(hidden, weight, targets, average="mean")


def test_task_loss_is_cross_entropy_or_mse():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([0, 1])
    assert task_loss(logits, labels).item() == pytest.approx(F.cross_entropy(logits, labels).item())
    scores = torch.tensor([[1.0], [3.0]])
    assert task_loss(scores, torch.tensor([2.0, 2.0]), regression=True).item() == pytest.approx(1.0)


TINY = ModelConfig(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, n_embd=16, d_ff=32, embd_pdrop=0.0,
                   attn_pdrop=0.0, resid_pdrop=0.0)


def test_model_loss_is_the_loss_of_its_logits():
    torch.manual_seed(0)
    model = GPT1(TINY)
    ids = torch.randint(0, 61, (2, 12))
    out = model(ids[:, :-1], targets=ids[:, 1:])
    assert out.logits is None
    expected = F.cross_entropy(model(ids[:, :-1]).logits.flatten(0, 1), ids[:, 1:].flatten())
    torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)
    total = model(ids[:, :-1], targets=ids[:, 1:], loss_average="sum").loss
    torch.testing.assert_close(total, expected * ids[:, 1:].numel(), rtol=1e-5, atol=1e-4)


def test_task_model_aux_loss_averages_real_targets_per_sequence():
    """The fine-tuning L1: targets are the next real tokens, padding excluded, mean per sequence then over all
    sequences (the K candidates of a multiple-choice example each count)."""
    torch.manual_seed(0)
    task = GPT1ForTask(GPT1(TINY), "multiple_choice", n_outputs=2, clf_pdrop=0.0)
    ids = torch.randint(0, 61, (3, 2, 10))
    lengths = torch.tensor([[10, 6], [4, 9], [7, 7]])
    mask = torch.arange(10) < lengths[..., None]
    pos = lengths - 1
    out = task(ids, pos, with_lm_logits=True, lm_mask=mask)
    nll = F.cross_entropy(out.lm_logits[..., :-1, :].flatten(0, 2), ids[..., 1:].flatten(), reduction="none")
    real = mask[..., 1:].flatten(0, 1).float()
    per_sequence = (nll.view(6, 9) * real).sum(1) / real.sum(1)
    torch.testing.assert_close(out.lm_loss, per_sequence.mean(), rtol=1e-5, atol=1e-6)
    padded = torch.where(mask, ids, torch.zeros_like(ids))  # what is beyond a sequence's end does not matter
    torch.testing.assert_close(task(padded, pos, lm_mask=mask).lm_loss, out.lm_loss, rtol=1e-5, atol=1e-6)
    assert task(ids, pos).lm_loss is None and task(ids, pos).lm_logits is None
