"""What pre-training on the sample books taught: do held-out words land next to the words that share their meaning?

The sample tasks (gpt1.sample_data) train on one half of the lexicon and evaluate on the other, so fine-tuning can
only generalise if pre-training already placed the held-out words by meaning. This measures that directly, for a
checkpoint and, in the same run, for a randomly initialised model of the same shape (the no-pre-training peer):

  kind         last-layer state of a noun in "There was a {w} there.", classified by the nearer of the animal and
               plant centroids of the train-half nouns (chance 50%)
  category     the same with the four category centroids (bird, fish, tree, flower: chance 25%)
  sentiment    the same for adjectives in "It was {w} .", positive vs negative centroids (chance 50%)
  fed/watered  zero-shot, no centroids: is the noun likelier after "Anna fed the" (animals) or after "Anna watered
               the" (plants)? (chance 50%)

    python benchmarks/bench_lexicon.py --checkpoint RUN/pretrain/KEY/final
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from gpt1.tokenizer import bpe
from gpt1.sample_data import lexicon as lex
from gpt1.model.transformer import GPT1
from results import record


def word_states(model: GPT1, tok, frame: str, words: list[str]) -> torch.Tensor:
    """Unit-length last-layer state at each word's (last) token in `frame`."""
    before = frame.split("{w}")[0]
    states = []
    for word in words:
        ids = [tok.start_id, *tok.encode(frame.format(w=word))]
        position = len(tok.encode(before + word))  # index of the word's last token, counting _start_ as 0
        with torch.no_grad():
            states.append(model.hidden_states(torch.tensor([ids]))[0, position])
    return F.normalize(torch.stack(states), dim=-1)


def centroid_accuracy(model, tok, frame: str, train_groups: list, eval_groups: list) -> float:
    means = [word_states(model, tok, frame, list(group)).mean(0) for group in train_groups]
    centroids = F.normalize(torch.stack(means), dim=-1)
    right = total = 0
    for label, group in enumerate(eval_groups):
        predicted = (word_states(model, tok, frame, list(group)) @ centroids.T).argmax(-1)
        right += int((predicted == label).sum())
        total += len(group)
    return 100 * right / total


def continuation_accuracy(model: GPT1, tok, groups: dict[str, tuple[str, ...]], frames: dict[str, str]) -> float:
    """Zero-shot: does the LM find a word likelier after its own group's frame ("Anna fed the {w}") than after the
    other group's ("Anna watered the {w}")? In percent of the words; chance is 50%."""
    def logprob(prefix: str, word: str) -> float:
        context = [tok.start_id, *tok.encode(prefix)]
        target = tok.encode(f"{prefix} {word}")[len(context) - 1:]
        ids = torch.tensor([context + target])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[:, :-1]).logits[0].float(), -1)
        return sum(float(logp[len(context) - 1 + i, t]) for i, t in enumerate(target))

    right = total = 0
    for group, words in groups.items():
        for word in words:
            scores = {g: logprob(frame, word) for g, frame in frames.items()}
            right += max(scores, key=scores.get) == group
            total += 1
    return 100 * right / total


def measure(model: GPT1, tok) -> dict[str, float]:
    train, held_out = lex.vocabulary("train"), lex.vocabulary("eval")
    names = [c.name for c in lex.CATEGORIES]
    kinds, polarities = ("animal", "plant"), ("positive", "negative")
    return {
        "kind": centroid_accuracy(model, tok, "There was a {w} there.", [train.nouns(k) for k in kinds],
                                  [held_out.nouns(k) for k in kinds]),
        "category": centroid_accuracy(model, tok, "There was a {w} there.", [train.members[n] for n in names],
                                      [held_out.members[n] for n in names]),
        "sentiment": centroid_accuracy(model, tok, "It was {w} .", [train.sentiment[p] for p in polarities],
                                       [held_out.sentiment[p] for p in polarities]),
        "fed/watered": continuation_accuracy(model, tok, {k: held_out.nouns(k) for k in kinds},
                                             {k: f"Anna {lex.KINDS[k].care} the" for k in kinds}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=Path, help="a pre-training final/ (or step) folder")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer.json (default: the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random-init peer")
    args = parser.parse_args()

    tok = bpe.load(args.tokenizer or args.checkpoint / "tokenizer.json")
    pretrained = GPT1.from_pretrained(args.checkpoint).eval()
    torch.manual_seed(args.seed)
    scratch = GPT1(pretrained.config).eval()
    ours, peer = measure(pretrained, tok), measure(scratch, tok)
    print(f"held-out words placed by meaning ({args.checkpoint}):")
    print(f"  {'probe':12s} {'pre-trained':>12s} {'random init':>12s} {'chance':>8s}")
    chances = {"kind": 50.0, "category": 100 / len(lex.CATEGORIES), "sentiment": 50.0, "fed/watered": 50.0}
    for name, chance in chances.items():
        print(f"  {name:12s} {ours[name]:11.1f}% {peer[name]:11.1f}% {chance:7.1f}%")
    record({name: {"pretrained_pct": ours[name], "random_init_pct": peer[name], "chance_pct": chance}
            for name, chance in chances.items()})


if __name__ == "__main__":
    main()
