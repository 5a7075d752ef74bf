"""What pre-training on the sample books taught: do held-out words land next to the words that share their meaning?

The sample tasks (gpt1.data.sample) train on one half of the lexicon and evaluate on the other, so fine-tuning can
only generalise if pre-training already placed the held-out words by meaning. This measures that directly, for a
checkpoint and, in the same run, for a randomly initialised model of the same shape (the no-pre-training peer):

  category   last-layer state of a hyponym in "There was a {w} there.", classified by the nearest category centroid
             of the train-half hyponyms (10 categories: chance 10%)
  sentiment  the same for adjectives in "It was {w} .", positive vs negative centroids (chance 50%)
  synonyms   for each eval-half synonym-set member, is its nearest eval-half neighbour (same part of speech, cosine)
             a member of its own set (chance: about 1 / number of other words)

    python benchmarks/bench_lexicon.py --checkpoint RUN/pretrain/KEY/final
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from gpt1 import tokenizer as tokenization
from gpt1.data import sample_lexicon as lex
from gpt1.model import GPT1


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


def synonym_neighbour_accuracy(model, tok, vocab: lex.Vocabulary) -> tuple[float, float]:
    """(accuracy, chance) of 'nearest other word is a set-mate' over the eval half."""
    right = total = 0
    chance = 0.0
    for sets in vocab.synonyms.values():
        words = [(w, i) for i, s in enumerate(sets) for w in s.forms("base")]
        states = word_states(model, tok, "They said {w} .", [w for w, _ in words])
        similarity = states @ states.T
        similarity.fill_diagonal_(-2.0)
        for j, (_, own) in enumerate(words):
            right += words[int(similarity[j].argmax())][1] == own
            mates = sum(1 for _, i in words if i == own) - 1
            chance += mates / (len(words) - 1)
            total += 1
    return 100 * right / total, 100 * chance / total


def measure(model: GPT1, tok) -> dict[str, float]:
    train, held_out = lex.vocabulary("train"), lex.vocabulary("eval")
    names = [c.name for c in lex.CATEGORIES]
    polarities = ("positive", "negative")
    synonyms, chance = synonym_neighbour_accuracy(model, tok, held_out)
    return {
        "category": centroid_accuracy(model, tok, "There was a {w} there.", [train.members[n] for n in names],
                                      [held_out.members[n] for n in names]),
        "sentiment": centroid_accuracy(model, tok, "It was {w} .", [train.sentiment[p] for p in polarities],
                                       [held_out.sentiment[p] for p in polarities]),
        "synonyms": synonyms,
        "synonyms_chance": chance,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=Path, help="a pre-training final/ (or step) folder")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer.json (default: the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random-init peer")
    args = parser.parse_args()

    tok = tokenization.load(args.tokenizer or args.checkpoint / "tokenizer.json")
    pretrained = GPT1.from_pretrained(args.checkpoint).eval()
    torch.manual_seed(args.seed)
    scratch = GPT1(pretrained.config).eval()
    ours, peer = measure(pretrained, tok), measure(scratch, tok)
    print(f"held-out words placed by meaning ({args.checkpoint}):")
    print(f"  {'probe':10s} {'pre-trained':>12s} {'random init':>12s} {'chance':>8s}")
    for name, chance in (("category", 10.0), ("sentiment", 50.0), ("synonyms", ours["synonyms_chance"])):
        print(f"  {name:10s} {ours[name]:11.1f}% {peer[name]:11.1f}% {chance:7.1f}%")


if __name__ == "__main__":
    main()
