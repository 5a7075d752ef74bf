"""Zero-shot probes (paper Fig. 2 right): scoring against a brute-force oracle, each heuristic's decision rule on a
model whose preferences are known, and the task-data plumbing on the generated sample tasks. Probe data that cannot
be read: tests/integration/test_probe_data.py."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from gpt1.pretrain import probes
from gpt1.config import ModelConfig
from gpt1.model.transformer import GPT1
from gpt1.tasks import ChoiceExample, TextExample


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sample(sample_tasks):
    """The session's sample data (seed 0, read only) and a tokenizer trained on its first book."""
    from gpt1.tokenizer import bpe

    text = (sample_tasks.parent / "books" / "book-00.txt").read_text(encoding="utf-8")[:200_000]
    tok = bpe.train([p for p in text.split("\n\n") if p.strip()], merges=300, show_progress=False)
    return SimpleNamespace(tasks=sample_tasks, tokenizer=tok)


class Prefers(torch.nn.Module):
    """A 'language model' with the same next-token distribution everywhere: +5 logits on `favoured` ids."""

    def __init__(self, vocab_size: int, favoured: list[int], n_ctx: int = 64):
        super().__init__()
        self.config = SimpleNamespace(n_ctx=n_ctx, vocab_size=vocab_size)
        self.bias = torch.nn.Parameter(torch.zeros(vocab_size))
        with torch.no_grad():
            self.bias[favoured] = 5.0

    def forward(self, ids):
        return SimpleNamespace(logits=self.bias.expand(*ids.shape, -1))


def brute_force(model, context, continuation):
    sequence = (context + continuation)[-model.config.n_ctx:]
    first = len(sequence) - len(continuation)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([sequence])).logits[0].float(), -1)
    return sum(float(logp[t - 1, sequence[t]]) for t in range(first, len(sequence)))


def test_continuation_logprobs_match_one_sequence_at_a_time(monkeypatch):
    torch.manual_seed(0)
    model = GPT1(ModelConfig(vocab_size=40, n_ctx=12, n_layer=1, n_head=2, n_embd=16, d_ff=64))
    rng = random.Random(0)
    draw = lambda n: [rng.randrange(40) for _ in range(n)]  # noqa: E731
    # Some longer than n_ctx=12: the context is cut from the left, the continuation kept.
    pairs = [(draw(rng.randint(1, 15)), draw(rng.randint(1, 5))) for _ in range(9)]
    expected = [brute_force(model.eval(), c, x) for c, x in pairs]
    monkeypatch.setattr(probes, "_LOGIT_BUDGET", 40 * 12 * 3)  # force several batches
    got = probes.continuation_logprobs(model.train(), pairs)
    assert [n for _, n in got] == [len(c) for _, c in pairs]
    assert [s for s, _ in got] == pytest.approx(expected, abs=1e-4)  # scored without dropout
    assert model.training  # the caller's mode is restored


def test_fit_threshold_separates_when_possible():
    cut = probes.fit_threshold([-3.0, -2.5, -1.0, -0.5], [0, 0, 1, 1])
    assert -2.5 < cut < -1.0


def test_probe_decision_rules_follow_the_model(sample):
    tok = sample.tokenizer
    model = Prefers(tok.vocab_size, tok.encode("positive"))
    texts = [TextExample(str(i), f"the film was {w}", label=i % 2) for i, w in enumerate(["dull", "fine"] * 5)]
    texts.append(TextExample("x", "a film", label=1))
    # Always "positive": right exactly on the positive examples.
    assert probes.sentiment_probe(model, tok, texts) == pytest.approx(100 * 6 / 11)

    options = [("negative", "positive"), ("positive", "negative", "dull"), ("dull", "fine", "positive")]
    choices = [ChoiceExample(str(i), "the film was", "how was it ?", opts, label=opts.index("positive"))
               for i, opts in enumerate(options)]
    assert probes.choice_probe(model, tok, choices) == 100.0

    # Acceptable sentences are the ones the model likes (they say "positive" a lot): perfect MCC.
    good = [TextExample(f"g{i}", "positive positive " * (i + 1), label=1) for i in range(4)]
    bad = [TextExample(f"b{i}", "the dull film " * (i + 1), label=0) for i in range(4)]
    assert probes.acceptability_probe(model, tok, good[:2] + bad[:2], good[2:] + bad[2:]) == pytest.approx(100.0)


def test_winograd_twins_are_balanced_and_scored(sample):
    assert sum(item.label for item in probes.WINOGRAD) == len(probes.WINOGRAD) // 2
    for twin_a, twin_b in zip(probes.WINOGRAD[::2], probes.WINOGRAD[1::2]):
        assert twin_a.options == twin_b.options and twin_a.label != twin_b.label
    tok = sample.tokenizer
    # A model that likes the word "bag" resolves both bag/box twins to "bag": one right, one wrong.
    model = Prefers(tok.vocab_size, tok.encode("bag"))
    assert probes.winograd_probe(model, tok, probes.WINOGRAD[:2]) == 50.0


def test_probe_data_from_task_folders_and_a_full_run(sample):
    data = probes.load_probe_data(sample.tasks, max_examples=12)
    assert sorted(data) == ["cola", "race", "sst2", "storycloze"]
    assert [len(split) for split in data["cola"]] == [12, 12]
    assert all(ex.label is not None for split in data["race"] for ex in split)
    assert len({ex.group for ex in data["race"][0]}) == 2  # the cap spreads over RACE middle and high
    torch.manual_seed(0)
    model = GPT1(ModelConfig(vocab_size=sample.tokenizer.vocab_size, n_ctx=64, n_layer=1, n_head=2, n_embd=16,
                             d_ff=64))
    results = probes.run_probes(model, sample.tokenizer, data)
    assert sorted(results) == ["probe/cola_mcc", "probe/race_accuracy", "probe/sst2_accuracy",
                               "probe/storycloze_accuracy", "probe/winograd_accuracy"]
    assert all(-100 <= v <= 100 for v in results.values())


def test_missing_task_data_skips_probes(tmp_path, caplog):
    assert probes.load_probe_data(None) == {}
    assert probes.load_probe_data(tmp_path, max_examples=5) == {}
    assert "zero-shot probe sst2 skipped" in caplog.text
