"""Deterministic offline sample data: a book-like corpus and every registered task in its official file layout.

`gpt1 sample-data --out DIR [--seed N]` (or `write_sample_data(DIR, seed)`) writes, in a few seconds:

    DIR/books/*.txt          ~2.5 MB of generated "books" (chapters of paragraphs, one paragraph per line)
    DIR/tasks/<TASK>/...     CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE snli_1.0 SciTailV1.1 RACE StoryCloze
    DIR/sample_data.json     what was written: example counts per split, the lexicon halves

The same seed gives byte-identical files. The smoke preset pre-trains and fine-tunes on this data, so it is built
to show the paper's central claim on a tiny model: pre-training on the books makes fine-tuning generalise.

Design: the meaning is in the books, the held-out words are in the dev sets
---------------------------------------------------------------------------
Every label follows from a property of words (`gpt1.sample_data.lexicon`): the polarity of an adjective, whether
a noun names an animal or a plant, whether a verb takes an object. Each word list is split once, by position, into
a *train* half and an *eval* half. Task train splits use only train-half words; dev and test splits only eval-half
words. A model fine-tuned from scratch has never seen an eval-half word with a label and has random embeddings for
it, so it stays near chance on dev. The books use both halves in the same consistent contexts, so a language model
trained on them places each eval word next to the train words that share its meaning, and the fine-tuned
classifier carries over:

* polarity: an adjective appears only beside reactions, outcomes and moods of its own polarity ("a dreadful mess.
  Sadly, she groaned.") -> SST-2, MRPC, QQP, STS-B, RACE, Story Cloze.
* kind: members of four categories (birds and fish are animals; trees and flowers are plants) with the actions,
  facts and care of their kind ("the heron flew", "a heron is a bird, and every bird is an animal", "she fed the
  heron", "she watered the oak") -> MNLI, SNLI, QNLI, RTE, SciTail, STS-B, RACE, Story Cloze.
* subcategorisation: intransitive verbs never take an object, transitive verbs always do -> CoLA (unacceptable =
  an intransitive verb with an object, a transitive one without, or a word of the wrong class in a slot).

Each task asks about one property, always in the same direction
--------------------------------------------------------------
A pair task could ask whether two words *agree* (is the heron in the hypothesis' category? do the two adjectives
share a polarity?). That is an interaction between two positions, and measured on this data it is out of reach of
the smoke budget: with a pre-trained model that knows every word's polarity, "does the hypothesis' verdict (good /
bad) match the premise's adjective" stayed at chance after 6 epochs, and category agreement over ten categories
was not even fitted on the train split in 3 epochs. So every task here asks about one word's property, in one
direction, and the other sentence only sets the scene: entailment asks whether the premise's noun is an *animal*
(the hypothesis always says "an animal"), paraphrase whether the restatement keeps the first sentence's praise
(MRPC, STS-B) or complaint (QQP), QA and Story Cloze for the option that names an animal or the ending that is
happy. A classifier then needs one direction in the pre-trained states, which held-out words share with train
words: measured at the smoke budget, 97-100% on dev across seeds when the language model has learnt the words.

Pairs are built so that surface form alone does not reveal the label: in NLI every frame holds both labels of its
scheme ("exist" frames: entailment / neutral; "only" frames: entailment / contradiction), and MNLI
dev_mismatched uses genres and frames that train never shows.

Design choices
--------------
* Labels are balanced (exactly, by construction) except CoLA (60% acceptable; real 70%), MRPC (60% paraphrase;
  real 68%) and QQP (40% duplicate; real 37%), which keep the real skew's direction, milder.
* The books are written one paragraph per line, as BooksCorpus is (no column wrapping).
* SNLI, SciTail and Story Cloze test files carry labels (as the official ones do); GLUE test files do not.
  Story Cloze "val" is the training file (train-half words) and "test" the evaluation file (eval-half words).
* Parse columns (MNLI, SNLI) are well-formed but naive: a right-branching binary parse and a flat tagged parse.
* Official quirks are kept: MRPC BOM, SST-2 trailing space before the TAB, CoLA dev / RACE / Story Cloze files
  without a final newline, SNLI rows with gold_label "-" (about 2%), STS-B scores formatted both "3.800" and "3.8".
* Re-running into the same directory overwrites the same file names; nothing else is removed.

Modules: `lexicon` (the words and their halves), `text` (template helpers), `books` (the corpus), `layouts`
(official-file helpers), `tasks` (one writer per task).
"""

from __future__ import annotations

import ast
import logging
import time
from pathlib import Path

from gpt1.io import stable_hash, write_json
from gpt1.sample_data import lexicon as lex
from gpt1.sample_data.books import write_books
from gpt1.sample_data.tasks import TaskWriter

log = logging.getLogger(__name__)


def _generator_version() -> str:
    """Hash of the generator's code: cached sample data is reused only while the code that wrote it is unchanged
    (the pipeline keys its sample stage by this). Its syntax tree, so that layout and comments do not count; the
    stage's own module (its job and command) writes nothing."""
    return stable_hash(
        [
            ast.dump(ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(Path(__file__).parent.glob("*.py"))
            if path.name != "stage.py"
        ]
    )


GENERATOR_VERSION = _generator_version()


def write_sample_data(out_dir: str | Path, seed: int = 0) -> dict:
    """Write the books and every registered task under `out_dir`; returns (and saves as sample_data.json) a summary."""
    out = Path(out_dir)
    start = time.perf_counter()
    books = write_books(out, seed)
    counts = TaskWriter(out, seed).write_all()
    summary = {
        "seed": seed,
        "generator_version": GENERATOR_VERSION,
        "books": books,
        "tasks": counts,
        "lexicon": {half: lexicon_summary(lex.vocabulary(half)) for half in ("train", "eval")},
    }
    write_json(out / "sample_data.json", summary)
    seconds = time.perf_counter() - start
    log.info(
        "sample data in %s: %d books (%.1f MB, %.1f MB/s), %d task examples, %.1f s",
        out,
        books["files"],
        books["bytes"] / 1e6,
        books["bytes"] / 1e6 / max(seconds, 1e-9),
        sum(sum(v.values()) for v in counts.values()),
        seconds,
    )
    return summary


def lexicon_summary(vocab: lex.Vocabulary) -> dict:
    return {
        "sentiment": vocab.sentiment,
        "members": vocab.members,
        "intransitive": vocab.intransitive,
        "transitive": vocab.transitive,
    }
