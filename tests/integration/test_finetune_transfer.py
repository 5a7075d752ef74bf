"""The paper's central claim in miniature, on the sample data: pre-training is what lets a fine-tune generalise
(a bare next-token loop on the sample books, about a minute on one core, then two QNLI fine-tunes)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gpt1.config import FinetuneConfig, ModelConfig
from gpt1.tokenizer import bpe
from gpt1.finetune.train import FinetuneRun, finetune
from gpt1.model.transformer import GPT1

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("transfer")


@pytest.fixture(scope="module")
def pretrained(work, sample_tasks) -> Path:
    """The paper's first stage in miniature: 1,500 updates of next-token prediction on the sample books (a bare
    loop; the real stage is gpt1.pretrain), ~70 s on one core. The sample tasks' dev/test words appear with a
    label only in the books."""
    books = [p.read_text(encoding="utf-8") for p in sorted((sample_tasks.parent / "books").glob("*.txt"))]
    tok = bpe.train([book[:150_000] for book in books], merges=800, show_progress=False)
    ids: list[int] = []
    for book in books:
        for paragraph in tok.encode_batch(book.split("\n\n")):
            ids += [tok.start_id, *paragraph]
    ctx, steps = 64, 1500
    blocks = torch.tensor(ids[: len(ids) // (ctx + 1) * (ctx + 1)]).view(-1, ctx + 1)
    torch.manual_seed(0)
    model = GPT1(ModelConfig(vocab_size=tok.vocab_size, n_ctx=ctx, n_layer=2, n_head=4, n_embd=64, d_ff=256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    order = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = blocks[torch.randint(len(blocks), (16,), generator=order)]
        loss = F.cross_entropy(model(batch[:, :-1]).logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    assert loss.item() < 2.5  # far below uniform guessing (ln V ~ 7): the books were learned
    path = work / "pretrained"
    model.save_pretrained(path)
    tok.save(path)
    return path


def test_pre_training_is_what_lets_fine_tuning_generalise(work, sample_tasks, pretrained):
    """The paper's central claim on the sample data: QNLI's dev questions are about nouns the train split never
    shows; only the model whose embeddings learnt from the books which nouns name animals gets them right. (The
    smoke pipeline shows the same for all twelve tasks with a larger model: README, "Known limits".)"""
    cfg = FinetuneConfig(lr=3e-4, batch_size=8, epochs=7, max_train_examples=500, warmup_fraction=0.05)
    scores = {}
    for scratch in (False, True):
        result = finetune("qnli", sample_tasks / "QNLI", pretrained, work / "claim" / str(scratch),
                          cfg.model_copy(update={"from_scratch": scratch}), run=FinetuneRun(enabled=False))
        scores[scratch] = result["metrics"]["primary"]
    majority = result["majority"]["primary"]
    assert scores[False] >= 80 and scores[True] <= majority + 15, (scores, majority)
