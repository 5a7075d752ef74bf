"""N-gram baselines of the pre-training validation loss (gpt1.pretrain.ngram): unigram and interpolated bigram."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from gpt1.data.tokenize.write import write_random_shards
from gpt1.pretrain.ngram import HOLDOUT_EVERY, baselines_for_shards, describe, language_model_summary, ngram_baselines


def markov_stream(transitions: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n tokens of the first-order Markov chain with row-stochastic `transitions`."""
    cumulative = np.cumsum(transitions, axis=1)
    draws = rng.random(n)
    out = np.empty(n, np.int32)
    state = 0
    for i in range(n):
        state = min(int(np.searchsorted(cumulative[state], draws[i], side="right")), len(transitions) - 1)
        out[i] = state
    return out


def entropy_rate(transitions: np.ndarray) -> float:
    """sum_a pi(a) H(P(.|a)) in nats, pi the stationary distribution."""
    values, vectors = np.linalg.eig(transitions.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    pi /= pi.sum()
    logs = np.log(np.where(transitions > 0, transitions, 1))
    return float(-(pi[:, None] * transitions * logs).sum())


def as_blocks(stream: np.ndarray, n_ctx: int) -> np.ndarray:
    width = n_ctx + 1
    return stream[:len(stream) // width * width].reshape(-1, width)


def test_bigram_recovers_a_markov_chains_entropy_rate():
    rng = np.random.default_rng(0)
    V = 12
    transitions = rng.dirichlet(np.full(V, 0.2), size=V)
    train = as_blocks(markov_stream(transitions, 200_000, rng), 64)
    val = as_blocks(markov_stream(transitions, 50_000, rng), 64)
    base = ngram_baselines(train, val, V)
    assert base.bigram_loss == pytest.approx(entropy_rate(transitions), abs=0.03)
    assert base.unigram_loss - base.bigram_loss > 0.5  # the chain's tokens depend strongly on the previous one
    assert base.bigram_weight > 0.95  # plenty of counts per context: trust the bigram
    assert base.scored_tokens == val.size - len(val)


def test_iid_tokens_get_a_small_weight_and_no_gain():
    rng = np.random.default_rng(1)
    V = 60
    probs = 1 / np.arange(1, V + 1)
    probs /= probs.sum()
    train = rng.choice(V, size=(1600, 65), p=probs).astype(np.uint16)
    val = rng.choice(V, size=(200, 65), p=probs).astype(np.uint16)
    base = ngram_baselines(train, val, V)
    assert base.bigram_weight < 0.2  # the bigram counts carry only noise
    assert base.bigram_loss == pytest.approx(base.unigram_loss, abs=0.01)
    entropy = float(-(probs * np.log(probs)).sum())
    assert base.unigram_loss == pytest.approx(entropy, abs=0.02)


def test_unigram_is_add_one_smoothed_over_the_fit_targets():
    # block 0 is held out (tunes the weight only); the fit targets are those of block 1: 1, 1, 2
    train = np.array([[4, 4, 4, 4], [0, 1, 1, 2]], np.int32)
    val = np.array([[3, 1, 2]], np.int32)  # targets 1 and 2
    base = ngram_baselines(train, val, vocab_size=5)
    # p(b) = (c(b) + 1) / (3 + 5): p(1) = 3/8, p(2) = 2/8
    assert base.unigram_loss == pytest.approx(-(math.log(3 / 8) + math.log(2 / 8)) / 2, rel=1e-12)
    assert (base.fit_tokens, base.heldout_tokens, base.scored_tokens) == (3, 3, 2)
    # context 3 was never seen (unigram alone); context 1 was, twice, once before 2: p(2|1) = w/2 + (1-w) 2/8
    w = base.bigram_weight
    assert base.bigram_loss == pytest.approx(-(math.log(3 / 8) + math.log(w / 2 + (1 - w) * 2 / 8)) / 2, rel=1e-12)


def test_weight_is_tuned_on_held_out_train_blocks_only():
    rng = np.random.default_rng(2)
    V = 8
    transitions = rng.dirichlet(np.full(V, 0.5), size=V)
    train = as_blocks(markov_stream(transitions, 20 * 2 * 17, rng), 16)  # 40 blocks, 2 held out
    val = as_blocks(markov_stream(transitions, 10 * 17, rng), 16)
    noise = rng.integers(0, V, size=val.shape)
    base = ngram_baselines(train, val, V)
    other = ngram_baselines(train, noise, V)
    assert other.bigram_weight == base.bigram_weight  # validation never tunes anything
    assert other.bigram_loss != base.bigram_loss
    changed = train.copy()
    changed[::HOLDOUT_EVERY] = rng.integers(0, V, size=changed[::HOLDOUT_EVERY].shape)  # only the held-out blocks
    assert ngram_baselines(changed, val, V).bigram_weight < base.bigram_weight


def test_fit_cap_takes_the_first_blocks_in_stored_order():
    rng = np.random.default_rng(3)
    train = rng.integers(0, 10, size=(100, 9))
    val = rng.integers(0, 10, size=(4, 9))
    chunks = [train[:7], train[7:30], train[30:]]
    capped = ngram_baselines(iter(chunks), val, 10, max_fit_pairs=8 * 25)
    # blocks 0 and 20 held out, then 25 fit blocks: blocks 0..26
    assert (capped.fit_tokens, capped.heldout_tokens) == (8 * 25, 8 * 2)
    assert capped == ngram_baselines(train[:27], val, 10)
    assert ngram_baselines(train[:27], val, 10, max_fit_pairs=8 * 24 + 1) == capped  # a started block is whole


def test_pair_counts_never_allocate_vocab_squared():
    V = 40_481  # GPT-1's vocabulary: V^2 int64 counts would take 13 GB
    rng = np.random.default_rng(4)
    train = rng.integers(0, V, size=(40, 33)).astype(np.uint16)
    train[:, 1::2] = V - 1  # a frequent pair (x, V-1) for every x, from the far end of the code range
    val = rng.integers(0, V, size=(5, 33)).astype(np.uint16)
    tracemalloc.start()
    try:
        base = ngram_baselines(train, val, V)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20
    assert math.isfinite(base.bigram_loss) and math.isfinite(base.unigram_loss)
    assert base.unigram_loss < math.log(V) + 1  # a proper distribution over the whole vocabulary


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ngram_baselines(np.full((4, 5), 9), np.zeros((1, 5), int), vocab_size=9)
    with pytest.raises(ValueError, match="at least 2 train blocks"):
        ngram_baselines(np.zeros((1, 5), int), np.zeros((1, 5), int), vocab_size=9)
    with pytest.raises(ValueError, match="shape"):
        ngram_baselines(np.zeros(5, int), np.zeros((1, 5), int), vocab_size=9)


def test_baselines_for_shards_scores_the_first_val_blocks(tmp_path):
    from gpt1.data.tokenize import BlockReader

    n_ctx = 16
    write_random_shards(tmp_path, vocab_size=300, n_ctx=n_ctx, rows={"train": 50, "val": 20}, shard_rows=8)
    base = baselines_for_shards(tmp_path, val_blocks=12)
    assert base.scored_tokens == 12 * n_ctx
    assert base.fit_tokens == (50 - 3) * n_ctx and base.heldout_tokens == 3 * n_ctx
    train, val = (BlockReader(tmp_path, split, shuffle=False) for split in ("train", "val"))
    stored = [np.stack([reader[i].numpy() for i in range(len(reader))]) for reader in (train, val)]
    assert base.as_dict() == pytest.approx(ngram_baselines(stored[0], stored[1][:12], 300).as_dict(), rel=1e-12)
    with pytest.raises(ValueError, match="cannot score 21 val blocks"):
        baselines_for_shards(tmp_path, val_blocks=21)


def test_summary_and_its_line():
    base = ngram_baselines(np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]]), np.array([[0, 1, 2]]), 3)
    summary = language_model_summary(0.5, base)
    assert summary["beats_bigram_by"] == pytest.approx(base.bigram_loss - 0.5)
    assert {"val_loss", "unigram_loss", "bigram_loss", "bigram_weight", "fit_tokens", "scored_tokens"} <= set(summary)
    line = describe({**summary, "val_loss": 4.12, "bigram_loss": 4.93, "unigram_loss": 6.32})
    assert line == ("validation loss 4.12 nats/token: 0.81 below an interpolated bigram (4.93), "
                    "2.20 below a unigram (6.32)")


def test_worker_reports_the_final_val_loss_beside_the_baselines(tmp_path):
    """Pretraining.language_model: the val loss evaluate() recorded at the last update, baselines scored on the
    blocks validation averaged over (eval_batches whole global batches), MLflow metrics under lm/."""
    from types import SimpleNamespace

    from gpt1.io import read_json
    from gpt1.pretrain.worker import Pretraining

    shards, n_ctx = tmp_path / "shards", 16
    write_random_shards(shards, vocab_size=300, n_ctx=n_ctx, rows={"train": 50, "val": 20}, shard_rows=8)
    (tmp_path / "metrics.jsonl").write_text('{"step": 6, "val_loss": 9.0}\n{"step": 7, "loss": 5.0}\n'
                                            '{"step": 7, "val_loss": 5.5, "val_ppl": 244.7}\n')
    logged = []
    run = SimpleNamespace(log_metrics=lambda metrics, step: logged.append((step, metrics)))
    worker = SimpleNamespace(out=tmp_path, step=7, shards=shards, manifest=read_json(shards / "manifest.json"),
                             cfg=SimpleNamespace(pretrain=SimpleNamespace(eval_batches=2)),
                             layout=SimpleNamespace(global_batch=6), run=run, main_run=run)
    worker.validation_blocks = lambda available: Pretraining.validation_blocks(worker, available)
    summary = Pretraining.language_model(worker)
    assert summary["val_loss"] == 5.5 and summary["scored_tokens"] == 2 * 6 * n_ctx
    assert summary["beats_bigram_by"] == pytest.approx(summary["bigram_loss"] - 5.5)
    assert logged == [(7, {f"lm/{name}": summary[name] for name in
                           ("val_loss", "unigram_loss", "bigram_loss", "bigram_weight", "beats_bigram_by")})]
    worker.step = 8  # no evaluation recorded at the last update: skipped
    assert Pretraining.language_model(worker) is None
