"""Zero-shot probes of a language model during pre-training (paper section 5, Fig. 2 right).

The paper's heuristics, each a pure function of (model, tokenizer, examples) returning a score in percent; which
task each one probes, on which splits, is the task's `TaskSpec.probe` (`HEURISTICS` names them):

- "sentiment" `sentiment_probe` (the paper's SST-2 probe): append " very" to the sentence; predict positive
  (label 1) when the LM gives the word "positive" a higher probability than "negative" (accuracy).
- "acceptability" `acceptability_probe` (CoLA): a sentence's score is its average token log-probability; the
  acceptability threshold is fitted on the first split's examples (best MCC) and applied to the second's
  (Matthews correlation).
- "answer_likelihood" `choice_probe` (RACE, Story Cloze): pick the answer with the highest average token
  log-probability conditioned on the document (+ question) (accuracy).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from gpt1 import tasks
from gpt1.tasks import metrics

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
    WinogradItem(
        "the bag would not fit in the box because the _ was too large .", ("bag", "box"), 0
    ),
    WinogradItem(
        "the bag would not fit in the box because the _ was too small .", ("bag", "box"), 1
    ),
    WinogradItem("the man could not lift his son because the _ was so weak .", ("man", "son"), 0),
    WinogradItem("the man could not lift his son because the _ was so heavy .", ("man", "son"), 1),
    WinogradItem(
        "the lawyer asked the witness a question , but the _ was reluctant to ask it again .",
        ("lawyer", "witness"),
        0,
    ),
    WinogradItem(
        "the lawyer asked the witness a question , but the _ was reluctant to answer it .",
        ("lawyer", "witness"),
        1,
    ),
    WinogradItem(
        "the cat chased the mouse until the _ was too tired to run after it .", ("cat", "mouse"), 0
    ),
    WinogradItem(
        "the cat chased the mouse until the _ was too tired to run away .", ("cat", "mouse"), 1
    ),
    WinogradItem(
        "the sculpture fell off the shelf because the _ was not anchored .",
        ("sculpture", "shelf"),
        0,
    ),
    WinogradItem(
        "the sculpture fell off the shelf because the _ was not level .", ("sculpture", "shelf"), 1
    ),
    WinogradItem(
        "the teacher praised the student because the _ wanted to reward good work .",
        ("teacher", "student"),
        0,
    ),
    WinogradItem(
        "the teacher praised the student because the _ had done good work .",
        ("teacher", "student"),
        1,
    ),
    WinogradItem(
        "the doctor called the patient because the _ had the test results .",
        ("doctor", "patient"),
        0,
    ),
    WinogradItem(
        "the doctor called the patient because the _ was waiting for the test results .",
        ("doctor", "patient"),
        1,
    ),
    WinogradItem(
        "the horse kicked the farmer , so the _ was led back to the stable .",
        ("horse", "farmer"),
        0,
    ),
    WinogradItem(
        "the horse kicked the farmer , so the _ was taken to the doctor .", ("horse", "farmer"), 1
    ),
)


# ----------------------------------------------------------------------------------------------- scoring


@torch.no_grad()
def continuation_logprobs(
    model, pairs: Sequence[tuple[list[int], list[int]]]
) -> list[tuple[float, int]]:
    """For each (context ids, continuation ids): (sum of log P(continuation | context), tokens scored)."""
    n_ctx = model.config.n_ctx
    device = next(model.parameters()).device
    rows = []
    for context, continuation in pairs:
        if not context:
            raise ValueError(
                "a scored continuation needs at least one context token (e.g. _start_)"
            )
        continuation = continuation[-(n_ctx - 1) :]  # keep at least one context token in the window
        sequence = (context + continuation)[-n_ctx:]
        rows.append((sequence, len(sequence) - len(continuation)))
    if not rows:
        return []
    results: list[tuple[float, int]] = [(0.0, 0)] * len(rows)
    batches: list[list[int]] = [[]]
    for i in sorted(
        range(len(rows)), key=lambda i: len(rows[i][0])
    ):  # similar lengths share a batch
        if (
            batches[-1]
            and (len(batches[-1]) + 1) * len(rows[i][0]) * model.config.vocab_size > _LOGIT_BUDGET
        ):
            batches.append([])
        batches[-1].append(i)
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            width = max(len(rows[i][0]) for i in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            # positions whose token is scored
            scored = torch.zeros(len(batch), width, dtype=torch.bool)
            for j, i in enumerate(batch):
                sequence, first = rows[i]
                ids[j, : len(sequence)] = torch.tensor(sequence)
                scored[j, first : len(sequence)] = True
            ids, scored = ids.to(device), scored.to(device)
            logits = model(ids).logits[:, :-1]  # position t predicts token t + 1
            targets, mask = ids[:, 1:], scored[:, 1:]
            logp = (
                torch.log_softmax(logits[mask].float(), dim=-1)
                .gather(1, targets[mask].unsqueeze(1))
                .squeeze(1)
            )
            per_row = torch.zeros(len(batch), device=device).index_add_(
                0, mask.nonzero()[:, 0], logp
            )
            counts = mask.sum(dim=1)
            for j, i in enumerate(batch):
                results[i] = (float(per_row[j]), int(counts[j]))
    finally:
        model.train(was_training)
    return results


def _mean_logprobs(model, pairs) -> list[float]:
    return [total / max(count, 1) for total, count in continuation_logprobs(model, pairs)]


# ------------------------------------------------------------------------------------------------ probes


def sentiment_probe(model, tokenizer, examples: Sequence) -> float:
    """Accuracy (%) of "positive" vs "negative" after the sentence + " very". Labels: 1 = positive."""
    positive, negative = tokenizer.encode("positive"), tokenizer.encode("negative")
    pairs = []
    for ex in examples:
        context = [tokenizer.start_id, *tokenizer.encode(f"{ex.text} very")]
        pairs += [(context, positive), (context, negative)]
    scores = [total for total, _ in continuation_logprobs(model, pairs)]  # whole-word log-probs
    predictions = [int(scores[2 * i] > scores[2 * i + 1]) for i in range(len(examples))]
    return _accuracy([ex.label for ex in examples], predictions)


def acceptability_probe(model, tokenizer, train: Sequence, dev: Sequence) -> float:
    """MCC (%) on `dev` of thresholding the average token log-prob, threshold fitted on `train`. 1 = acceptable."""

    def scores(examples):
        return _mean_logprobs(
            model, [([tokenizer.start_id], tokenizer.encode(ex.text)) for ex in examples]
        )

    threshold = fit_threshold(scores(train), [ex.label for ex in train])
    predictions = [int(s > threshold) for s in scores(dev)]
    return metrics.mcc([ex.label for ex in dev], predictions) * 100


def fit_threshold(scores: Sequence[float], labels: Sequence[int]) -> float:
    """The cut between consecutive sorted scores with the best MCC of `score > cut` -> 1 (ties: the lowest cut)."""
    ordered = sorted(set(scores))
    cuts = [ordered[0] - 1.0] + [(a + b) / 2 for a, b in zip(ordered, ordered[1:])]
    best = max(cuts, key=lambda cut: (metrics.mcc(labels, [int(s > cut) for s in scores]), -cut))
    return best


def choice_probe(model, tokenizer, examples: Sequence) -> float:
    """Accuracy (%) of picking the answer with the best average token log-prob given context (+ question)."""
    pairs: list[tuple[list[int], list[int]]] = []  # (context, option) token ids
    offsets: list[int] = []
    for ex in examples:
        context = [
            tokenizer.start_id,
            *tokenizer.encode(" ".join(p for p in (ex.context, ex.question) if p)),
        ]
        offsets.append(len(pairs))
        pairs += [(context, tokenizer.encode(option)) for option in ex.options]
    scores = _mean_logprobs(model, pairs)
    predictions = [_argmax(scores[o : o + len(ex.options)]) for o, ex in zip(offsets, examples)]
    return _accuracy([ex.label for ex in examples], predictions)


def winograd_probe(model, tokenizer, items: Sequence[WinogradItem] = WINOGRAD) -> float:
    """Accuracy (%) of the candidate under which the rest of the sentence is more likely (average log-prob)."""
    pairs = []
    for item in items:
        before, after = item.sentence.split("_", 1)
        for option in item.options:
            pairs.append(
                (
                    [tokenizer.start_id, *tokenizer.encode(f"{before}{option}")],
                    tokenizer.encode(after),
                )
            )
    scores = _mean_logprobs(model, pairs)
    predictions = [_argmax(scores[2 * i : 2 * i + 2]) for i in range(len(items))]
    return _accuracy([item.label for item in items], predictions)


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)


def _accuracy(labels: Sequence, predictions: Sequence) -> float:
    return 100.0 * sum(int(y == p) for y, p in zip(labels, predictions)) / len(labels)


# ------------------------------------------------------------------------------------------ data and runner

# heuristic -> (probe function taking one examples list per split, the metric it reports)
HEURISTICS: dict[str, tuple[Callable[..., float], str]] = {
    "sentiment": (sentiment_probe, "accuracy"),
    "acceptability": (acceptability_probe, "mcc"),
    "answer_likelihood": (choice_probe, "accuracy"),
}


def probed_tasks() -> list:
    """The specs of the tasks with a zero-shot probe, in registry order."""
    return [spec for spec in tasks.REGISTRY.values() if spec.probe is not None]


def task_path(source: str | Path, task: str) -> str | Path:
    """Where `task` lives for `finetune.data`-style sources: 'hf' -> its hub id, else FOLDER/<official folder>."""
    spec = tasks.get(task)
    if str(source) == "hf":
        return spec.hf_id
    return Path(source) / spec.folder


def spread(examples: Sequence, limit: int) -> list:
    """At most `limit` examples, evenly spaced through the split (deterministic)."""
    if len(examples) <= limit:
        return list(examples)
    return [examples[math.floor(i * len(examples) / limit)] for i in range(limit)]


def load_probe_data(
    source: str | Path | None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    task_data: dict[str, str] | None = None,
) -> dict[str, list]:
    """{task: [examples per probe split]} for every probed task whose data is found (`task_data`: a task's own
    location, as finetune.task_data); the others are logged and skipped: a probe is a diagnostic, never a reason
    for pre-training to stop."""
    data: dict[str, list] = {}
    task_data = task_data or {}
    if source is None and not task_data:
        log.info("zero-shot probes: no task data given; only the built-in Winograd probe runs")
        return data
    for spec in probed_tasks():
        given = task_data.get(spec.name)
        if given:
            path: str | Path = given
        elif source is not None:
            path = task_path(source, spec.name)
        else:
            continue
        if str(path).startswith("hf:") and spec.hf_manual:
            log.warning(
                "zero-shot probe %s skipped: no downloadable hub copy (%s)",
                spec.name,
                spec.hf_manual,
            )
            continue
        try:
            data[spec.name] = [
                spread(tasks.load(spec.name, path, split), max_examples)
                for split in spec.probe.splits
            ]
        except Exception as err:  # noqa: BLE001 - any failure to read (hub, files) skips this probe only
            log.warning("zero-shot probe %s skipped: %s: %s", spec.name, type(err).__name__, err)
            continue
        if any(ex.label is None for split in data[spec.name] for ex in split):
            log.warning("zero-shot probe %s skipped: %s has unlabelled examples", spec.name, path)
            del data[spec.name]
    return data


def run_probes(model, tokenizer, data: dict[str, list]) -> dict[str, float]:
    """Every probe with data, plus Winograd: {"probe/<task>_<metric>": ..., "probe/winograd_accuracy": ...}."""
    results = {}
    for spec in probed_tasks():
        if spec.name in data:
            probe, metric = HEURISTICS[spec.probe.heuristic]
            results[f"probe/{spec.name}_{metric}"] = probe(model, tokenizer, *data[spec.name])
    results["probe/winograd_accuracy"] = winograd_probe(model, tokenizer)
    return results
