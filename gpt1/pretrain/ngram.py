"""N-gram baselines for the pre-training validation loss: is the LM better than counting?

A validation loss in nats/token means little on its own (it depends on the vocabulary and the corpus). Beside it
we put two models fitted on the same training tokens and scored on the same validation blocks, the same way the
LM is (a packed block predicts targets block[1:] from inputs block[:-1]; pairs never cross a block boundary):
- unigram: add-one (Laplace) smoothed target-token frequencies over the vocabulary V of the manifest;
- interpolated bigram: p(b|a) = w c(a,b)/c(a) + (1-w) p_unigram(b), or p_unigram(b) for a context a never seen.

The weight w is chosen on held-out *training* blocks (every HOLDOUT_EVERY-th block in stored order, block 0
first), never on validation, by a bounded scalar search of the held-out cross-entropy (convex in w). Counts come
from the other blocks. Pairs are counted as sorted int64 codes a*V+b (run lengths of a sort, looked up with
searchsorted): memory grows with the tokens counted, never with V^2 (dense counts at V=40,481 would not fit).

`max_fit_pairs` caps the work: blocks are taken in stored order, every HOLDOUT_EVERY-th held out, until the fit
blocks hold max_fit_pairs target tokens (the block that reaches the cap is the last one). Memory: a copy of the
fit tokens, their int64 codes (8 bytes a pair, sorted in place), and the distinct pairs' codes and counts.

    base = ngram_baselines(train_blocks, val_blocks, vocab_size)     # arrays (n, n_ctx+1), or iterables of them
    base = baselines_for_shards("shards", val_blocks=4096)           # the first 4096 val blocks, stored order
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

HOLDOUT_EVERY = 20  # blocks 0, 20, 40, ... of the train split tune the bigram weight
MAX_FIT_PAIRS = 50_000_000


@dataclass(frozen=True)
class Baselines:
    """Cross-entropies in nats per scored target token; token counts are target tokens (one per pair)."""

    unigram_loss: float
    bigram_loss: float
    bigram_weight: float
    fit_tokens: int
    heldout_tokens: int
    scored_tokens: int

    def as_dict(self) -> dict:
        return asdict(self)


def _chunks(blocks: np.ndarray | Iterable[np.ndarray], vocab_size: int) -> Iterable[np.ndarray]:
    """The (rows, n_ctx+1) arrays of `blocks` (one array or an iterable of them), checked, in order."""
    chunks = [blocks] if isinstance(blocks, np.ndarray) else blocks
    width = None
    for chunk in chunks:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] < 2 or not np.issubdtype(chunk.dtype, np.integer):
            raise ValueError(
                f"expected integer blocks of shape (n, n_ctx+1), got {chunk.dtype} {chunk.shape}"
            )
        if width is not None and chunk.shape[1] != width:
            raise ValueError(f"blocks of {chunk.shape[1]} tokens after blocks of {width}")
        width = chunk.shape[1]
        if chunk.size and (chunk.min() < 0 or chunk.max() >= vocab_size):
            raise ValueError(
                f"token id {int(chunk.max()) if chunk.max() >= vocab_size else int(chunk.min())} "
                f"outside the vocabulary [0, {vocab_size})"
            )
        yield chunk


def _split_train(
    train_blocks, vocab_size: int, max_fit_pairs: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(fit, held-out) block arrays: stored order, every HOLDOUT_EVERY-th held out, until the fit cap."""
    fit, held, seen, fit_pairs = [], [], 0, 0
    for chunk in _chunks(train_blocks, vocab_size):
        is_held = (np.arange(seen, seen + len(chunk)) % HOLDOUT_EVERY) == 0
        # fit blocks still wanted (ceiling)
        need = -(-(max_fit_pairs - fit_pairs) // (chunk.shape[1] - 1))
        fit_count = np.cumsum(~is_held)
        done = bool(len(chunk)) and fit_count[-1] >= need
        if done:  # keep rows up to the one completing the cap
            cut = int(np.searchsorted(fit_count, need)) + 1
            chunk, is_held = chunk[:cut], is_held[:cut]
        seen += len(chunk)
        held.append(chunk[is_held])
        fit.append(chunk[~is_held])
        fit_pairs += fit[-1].shape[0] * (chunk.shape[1] - 1)
        if done:
            break
    return fit, held


class _Counts:
    """Unigram and bigram counts of the fit blocks' (input, target) pairs."""

    def __init__(self, fit: list[np.ndarray], vocab_size: int):
        self.V = vocab_size
        n_pairs = sum(block.shape[0] * (block.shape[1] - 1) for block in fit)
        if n_pairs == 0:
            raise ValueError(
                f"no train blocks left to fit after holding out every {HOLDOUT_EVERY}th block "
                "(at least 2 train blocks are needed)"
            )
        codes = np.empty(n_pairs, np.int64)
        self.targets = np.zeros(vocab_size, np.int64)  # c(b) over targets: the unigram
        # c(a) over inputs: the bigram's denominators
        self.contexts = np.zeros(vocab_size, np.int64)
        at = 0
        for block in fit:
            inputs, targets = block[:, :-1].ravel(), block[:, 1:].ravel()
            self.targets += np.bincount(targets, minlength=vocab_size)
            self.contexts += np.bincount(inputs, minlength=vocab_size)
            codes[at : at + len(inputs)] = inputs.astype(np.int64) * vocab_size + targets
            at += len(inputs)
        codes.sort()  # in place: no second copy of the largest array
        starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
        self.pairs = codes[starts]  # distinct a*V+b, ascending
        self.pair_counts = np.diff(np.append(starts, n_pairs))
        self.n_pairs = n_pairs
        self.unigram = (self.targets + 1) / (n_pairs + vocab_size)  # add-one smoothing

    def features(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per scored pair: c(a,b)/c(a) (0 where c(a)=0), p_unigram(b), and whether c(a) > 0."""
        inputs, targets = block[:, :-1].ravel().astype(np.int64), block[:, 1:].ravel()
        codes = inputs * self.V + targets
        at = np.minimum(np.searchsorted(self.pairs, codes), len(self.pairs) - 1)
        pair = np.where(self.pairs[at] == codes, self.pair_counts[at], 0)
        context = self.contexts[inputs]
        seen = context > 0
        return pair / np.maximum(context, 1), self.unigram[targets], seen


def _nll(bigram: np.ndarray, unigram: np.ndarray, seen: np.ndarray, w: float) -> np.ndarray:
    return -np.log(np.where(seen, w * bigram + (1 - w) * unigram, unigram))


def _tune_weight(held: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """The w in (0, 1) minimising the held-out cross-entropy (convex in w: a bounded search finds the minimum)."""
    from scipy.optimize import minimize_scalar

    if not held[2].any():  # no held-out context was seen in fitting: w changes nothing
        return 0.5
    found = minimize_scalar(
        lambda w: _nll(*held, w).mean(),
        bounds=(1e-6, 1 - 1e-6),
        method="bounded",
        options={"xatol": 1e-5},
    )
    return float(found.x)


def ngram_baselines(
    train_blocks: np.ndarray | Iterable[np.ndarray],
    val_blocks: np.ndarray | Iterable[np.ndarray],
    vocab_size: int,
    *,
    max_fit_pairs: int = MAX_FIT_PAIRS,
) -> Baselines:
    """Unigram and interpolated-bigram cross-entropy of `val_blocks`, fitted on `train_blocks` (module docstring).

    Both are arrays (n, n_ctx+1) of token ids (uint16/int32/...) or iterables of such arrays, in stored order.
    """
    if max_fit_pairs < 1:
        raise ValueError(f"max_fit_pairs must be positive, got {max_fit_pairs}")
    fit, held = _split_train(train_blocks, vocab_size, max_fit_pairs)
    counts = _Counts(fit, vocab_size)
    held_features = [counts.features(block) for block in held if len(block)]
    held_bigram, held_unigram, held_seen = (np.concatenate(parts) for parts in zip(*held_features))
    weight = _tune_weight((held_bigram, held_unigram, held_seen))
    unigram_sum = bigram_sum = 0.0
    scored = 0
    for chunk in _chunks(val_blocks, vocab_size):
        bigram, unigram, seen = counts.features(chunk)
        unigram_sum += float(-np.log(unigram).sum())
        bigram_sum += float(_nll(bigram, unigram, seen, weight).sum())
        scored += len(unigram)
    if scored == 0:
        raise ValueError("no validation blocks to score")
    return Baselines(
        unigram_loss=unigram_sum / scored,
        bigram_loss=bigram_sum / scored,
        bigram_weight=weight,
        fit_tokens=counts.n_pairs,
        heldout_tokens=sum(len(f[0]) for f in held_features),
        scored_tokens=scored,
    )


def baselines_for_shards(
    shards_dir: str | Path, val_blocks: int, *, max_fit_pairs: int = MAX_FIT_PAIRS
) -> Baselines:
    """`ngram_baselines` of a `gpt1 tokenize` output: fitted on its train split, scored on the first `val_blocks`
    blocks of its val split in stored order (the blocks pre-training's validation loss averages over)."""
    from gpt1.data.tokenize.read import BlockReader

    train = BlockReader(shards_dir, "train", shuffle=False)
    val = BlockReader(shards_dir, "val", shuffle=False)
    if not 0 < val_blocks <= len(val):
        raise ValueError(
            f"{shards_dir}: cannot score {val_blocks} val blocks, the split has {len(val)}"
        )

    def first_val_blocks():
        left = val_blocks
        for shard in val.shards():
            if left <= 0:
                return
            yield shard[:left]
            left -= len(shard)

    return ngram_baselines(
        train.shards(), first_val_blocks(), train.vocab_size, max_fit_pairs=max_fit_pairs
    )


def language_model_summary(val_loss: float, baselines: Baselines) -> dict:
    """The LM's validation loss beside the baselines (training.json's `language_model`)."""
    base = baselines.as_dict()
    return {"val_loss": val_loss, **base, "beats_bigram_by": base["bigram_loss"] - val_loss}


def describe(summary: dict) -> str:
    """One line: how far the LM's validation loss is below (or above) each baseline."""

    def versus(name: str, loss: float) -> str:
        gap = loss - summary["val_loss"]
        return f"{abs(gap):.2f} {'below' if gap >= 0 else 'above'} {name} ({loss:.2f})"

    return (
        f"validation loss {summary['val_loss']:.2f} nats/token: "
        f"{versus('an interpolated bigram', summary['bigram_loss'])}, "
        f"{versus('a unigram', summary['unigram_loss'])}"
    )
