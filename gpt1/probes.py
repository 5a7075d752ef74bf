"""Zero-shot probes of a language model during pre-training (paper section 5, Fig. 2 right).

The paper's heuristics, each a pure function of (model, tokenizer, examples) returning a score in percent:

- SST-2 `sst2_probe`: append " very" to the sentence; predict positive when the LM gives the word "positive" a
  higher probability than "negative" (accuracy).
- CoLA `cola_probe`: a sentence's score is its average token log-probability; the acceptability threshold is
  fitted on train examples (best MCC) and applied to dev (Matthews correlation).
- RACE / Story Cloze `choice_probe`: pick the answer with the highest average token log-probability conditioned
  on the document (+ question) (accuracy).
- Winograd `winograd_probe`: substitute each candidate for the pronoun and pick the one under which the rest of
  the sentence gets the higher average token log-probability ("partial" scoring, Trinh & Le 2018). No Winograd
  data ships with the pipeline, so `WINOGRAD` is a small built-in set of twin sentences written for this probe
  (each twin flips the answer with one word, so chance is exactly 50%).

Every sequence starts with `_start_`, as pre-training documents do. Contexts longer than the model's window are
cut from the left, keeping the scored tokens. `load_probe_data` reads the task files once, capped per probe
(`DEFAULT_MAX_EXAMPLES`, an evenly spread subset so a cap does not pick one file or one RACE level).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

log = logging.getLogger(__name__)

DEFAULT_MAX_EXAMPLES = 200
_LOGIT_BUDGET = 1 << 25  # logits (batch x time x vocab) held at once: 128 MB of fp32


@dataclass(frozen=True)
class WinogradItem:
    sentence: str  # "_" marks the pronoun being resolved
    options: tuple[str, str]
    label: int  # index of the right option


# Twin pairs: the same frame, one word changed, the other candidate right.
WINOGRAD: tuple[WinogradItem, ...] = (
    WinogradItem("the bag would not fit in the box because the _ was too large .", ("bag", "box"), 0),
    WinogradItem("the bag would not fit in the box because the _ was too small .", ("bag", "box"), 1),
    WinogradItem("the man could not lift his son because the _ was so weak .", ("man", "son"), 0),
    WinogradItem("the man could not lift his son because the _ was so heavy .", ("man", "son"), 1),
    WinogradItem("the lawyer asked the witness a question , but the _ was reluctant to ask it again .",
                 ("lawyer", "witness"), 0),
    WinogradItem("the lawyer asked the witness a question , but the _ was reluctant to answer it .",
                 ("lawyer", "witness"), 1),
    WinogradItem("the cat chased the mouse until the _ was too tired to run after it .", ("cat", "mouse"), 0),
    WinogradItem("the cat chased the mouse until the _ was too tired to run away .", ("cat", "mouse"), 1),
    WinogradItem("the sculpture fell off the shelf because the _ was not anchored .", ("sculpture", "shelf"), 0),
    WinogradItem("the sculpture fell off the shelf because the _ was not level .", ("sculpture", "shelf"), 1),
    WinogradItem("the teacher praised the student because the _ wanted to reward good work .",
                 ("teacher", "student"), 0),
    WinogradItem("the teacher praised the student because the _ had done good work .", ("teacher", "student"), 1),
    WinogradItem("the doctor called the patient because the _ had the test results .", ("doctor", "patient"), 0),
    WinogradItem("the doctor called the patient because the _ was waiting for the test results .",
                 ("doctor", "patient"), 1),
    WinogradItem("the horse kicked the farmer , so the _ was led back to the stable .", ("horse", "farmer"), 0),
    WinogradItem("the horse kicked the farmer , so the _ was taken to the doctor .", ("horse", "farmer"), 1),
)


# ----------------------------------------------------------------------------------------------- scoring


@torch.no_grad()
def continuation_logprobs(model, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, int]]:
    """For each (context ids, continuation ids): (sum of log P(continuation | context), tokens scored)."""
    n_ctx = model.config.n_ctx
    device = next(model.parameters()).device
    rows = []
    for context, continuation in pairs:
        if not context:
            raise ValueError("a scored continuation needs at least one context token (e.g. _start_)")
        continuation = continuation[-(n_ctx - 1):]  # keep at least one context token in the window
        sequence = (context + continuation)[-n_ctx:]
        rows.append((sequence, len(sequence) - len(continuation)))
    if not rows:
        return []
    results: list[tuple[float, int]] = [(0.0, 0)] * len(rows)
    batches: list[list[int]] = [[]]
    for i in sorted(range(len(rows)), key=lambda i: len(rows[i][0])):  # similar lengths share a batch
        if batches[-1] and (len(batches[-1]) + 1) * len(rows[i][0]) * model.config.vocab_size > _LOGIT_BUDGET:
            batches.append([])
        batches[-1].append(i)
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            width = max(len(rows[i][0]) for i in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            scored = torch.zeros(len(batch), width, dtype=torch.bool)  # positions whose token is scored
            for j, i in enumerate(batch):
                sequence, first = rows[i]
                ids[j, :len(sequence)] = torch.tensor(sequence)
                scored[j, first:len(sequence)] = True
            ids, scored = ids.to(device), scored.to(device)
            logits = model(ids).logits[:, :-1]  # position t predicts token t + 1
            targets, mask = ids[:, 1:], scored[:, 1:]
            logp = torch.log_softmax(logits[mask].float(), dim=-1).gather(1, targets[mask].unsqueeze(1)).squeeze(1)
            per_row = torch.zeros(len(batch), device=device).index_add_(0, mask.nonzero()[:, 0], logp)
            counts = mask.sum(dim=1)
            for j, i in enumerate(batch):
                results[i] = (float(per_row[j]), int(counts[j]))
    finally:
        model.train(was_training)
    return results


def _mean_logprobs(model, pairs) -> list[float]:
    return [total / max(count, 1) for total, count in continuation_logprobs(model, pairs)]


# ------------------------------------------------------------------------------------------------ probes


def sst2_probe(model, tokenizer, examples: Sequence) -> float:
    """Accuracy (%) of "positive" vs "negative" after the sentence + " very". Labels: 1 = positive."""
    positive, negative = tokenizer.encode("positive"), tokenizer.encode("negative")
    pairs = []
    for ex in examples:
        context = [tokenizer.start_id, *tokenizer.encode(f"{ex.text} very")]
        pairs += [(context, positive), (context, negative)]
    scores = [total for total, _ in continuation_logprobs(model, pairs)]  # whole-word log-probs
    predictions = [int(scores[2 * i] > scores[2 * i + 1]) for i in range(len(examples))]
    return _accuracy([ex.label for ex in examples], predictions)


def cola_probe(model, tokenizer, train: Sequence, dev: Sequence) -> float:
    """MCC (%) on `dev` of thresholding the average token log-prob, threshold fitted on `train`. 1 = acceptable."""
    from gpt1.tasks import metrics

    def scores(examples):
        return _mean_logprobs(model, [([tokenizer.start_id], tokenizer.encode(ex.text)) for ex in examples])

    threshold = fit_threshold(scores(train), [ex.label for ex in train])
    predictions = [int(s > threshold) for s in scores(dev)]
    return metrics.mcc([ex.label for ex in dev], predictions) * 100


def fit_threshold(scores: Sequence[float], labels: Sequence[int]) -> float:
    """The cut between consecutive sorted scores with the best MCC of `score > cut` -> 1 (ties: the lowest cut)."""
    from gpt1.tasks import metrics

    ordered = sorted(set(scores))
    cuts = [ordered[0] - 1.0] + [(a + b) / 2 for a, b in zip(ordered, ordered[1:])]
    best = max(cuts, key=lambda cut: (metrics.mcc(labels, [int(s > cut) for s in scores]), -cut))
    return best


def choice_probe(model, tokenizer, examples: Sequence) -> float:
    """Accuracy (%) of picking the answer with the best average token log-prob given context (+ question)."""
    pairs, offsets = [], []
    for ex in examples:
        context = [tokenizer.start_id, *tokenizer.encode(" ".join(p for p in (ex.context, ex.question) if p))]
        offsets.append(len(pairs))
        pairs += [(context, tokenizer.encode(option)) for option in ex.options]
    scores = _mean_logprobs(model, pairs)
    predictions = [_argmax(scores[o:o + len(ex.options)]) for o, ex in zip(offsets, examples)]
    return _accuracy([ex.label for ex in examples], predictions)


def winograd_probe(model, tokenizer, items: Sequence[WinogradItem] = WINOGRAD) -> float:
    """Accuracy (%) of the candidate under which the rest of the sentence is more likely (average log-prob)."""
    pairs = []
    for item in items:
        before, after = item.sentence.split("_", 1)
        for option in item.options:
            pairs.append(([tokenizer.start_id, *tokenizer.encode(f"{before}{option}")], tokenizer.encode(after)))
    scores = _mean_logprobs(model, pairs)
    predictions = [_argmax(scores[2 * i:2 * i + 2]) for i in range(len(items))]
    return _accuracy([item.label for item in items], predictions)


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)


def _accuracy(labels: Sequence, predictions: Sequence) -> float:
    return 100.0 * sum(int(y == p) for y, p in zip(labels, predictions)) / len(labels)


# ------------------------------------------------------------------------------------------ data and runner

# probe -> (task, splits): CoLA fits its threshold on train; Story Cloze's labelled validation file is `train`.
PROBE_SPLITS = {"sst2": ("sst2", ("dev",)), "cola": ("cola", ("train", "dev")), "race": ("race", ("dev",)),
                "storycloze": ("storycloze", ("train",))}


def task_path(source: str | Path, task: str) -> str | Path:
    """Where `task` lives for `finetune.data`-style sources: 'hf' -> its hub id, else FOLDER/<official folder>."""
    from gpt1 import tasks

    spec = tasks.get(task)
    if str(source) == "hf":
        return spec.hf_id
    return Path(source) / spec.folder


def spread(examples: Sequence, limit: int) -> list:
    """At most `limit` examples, evenly spaced through the split (deterministic)."""
    if len(examples) <= limit:
        return list(examples)
    return [examples[math.floor(i * len(examples) / limit)] for i in range(limit)]


def load_probe_data(source: str | Path | None, max_examples: int = DEFAULT_MAX_EXAMPLES) -> dict[str, list]:
    """{probe: [examples per split]} for every probe whose task data is found; the others are logged and skipped."""
    from gpt1 import tasks

    data: dict[str, list] = {}
    if source is None:
        log.info("zero-shot probes: no task data given; only the built-in Winograd probe runs")
        return data
    for probe, (task, splits) in PROBE_SPLITS.items():
        path = task_path(source, task)
        try:
            data[probe] = [spread(tasks.load(task, path, split), max_examples) for split in splits]
        except (FileNotFoundError, ValueError, OSError) as err:
            log.warning("zero-shot probe %s skipped: %s", probe, err)
            continue
        if any(ex.label is None for split in data[probe] for ex in split):
            log.warning("zero-shot probe %s skipped: %s has unlabelled examples", probe, path)
            del data[probe]
    return data


def run_probes(model, tokenizer, data: dict[str, list]) -> dict[str, float]:
    """Every probe with data, plus Winograd: {"probe/sst2_accuracy": ..., "probe/cola_mcc": ..., ...}."""
    results = {}
    if "sst2" in data:
        results["probe/sst2_accuracy"] = sst2_probe(model, tokenizer, data["sst2"][0])
    if "cola" in data:
        results["probe/cola_mcc"] = cola_probe(model, tokenizer, *data["cola"])
    for task in ("race", "storycloze"):
        if task in data:
            results[f"probe/{task}_accuracy"] = choice_probe(model, tokenizer, data[task][0])
    results["probe/winograd_accuracy"] = winograd_probe(model, tokenizer)
    return results
