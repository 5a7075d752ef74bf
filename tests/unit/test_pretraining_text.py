"""What pre-training reads beside the books: the tasks' train text, the leak check against their held-out files,
books cut into documents, and blocks that start where fine-tuning's sequences start. Real ingestions of the sample
books, and shards tokenized from them: tests/integration/test_pretraining_text_ingest.py."""

from __future__ import annotations

import numpy as np

from gpt1.config import load_config
from gpt1.data.ingest.documents import cut_documents
from gpt1.data.ingest.leaks import MIN_WORDS, LeakIndex, normalize, sentences
from gpt1.data.ingest.task_text import held_out_splits, texts
from gpt1.data.tokenize.write import _block_order
from gpt1 import recipe


# -- the leak check ----------------------------------------------------------------------------------------------
def test_sentences_compare_by_their_words_whatever_the_punctuation_and_case():
    assert normalize("It's a Charming,  often -- affecting journey!") == "it s a charming often affecting journey"
    text = 'He said: "It ends here." Then he left.\nA new line'
    assert [text[a:b] for a, b in sentences(text)] == ['He said: "It ends here."', "Then he left.", "A new line"]


def test_only_sentences_of_enough_words_are_removed_with_the_space_after_them():
    long = "it 's a charming and often affecting journey ."
    index = LeakIndex.from_texts([long, "too short to count ."])
    assert len(index) == 1 and len(normalize(long).split()) == MIN_WORDS  # "'s" is the word "s", "." none
    book = "First. It's a charming and often affecting journey. Too short to count. Last."
    assert index.remove(book) == ("First. Too short to count. Last.", 1)
    assert index.remove("It is a charming and often affecting journey.") == (
        "It is a charming and often affecting journey.", 0)  # another sentence: kept


def test_the_held_out_splits_are_every_split_but_train():
    assert held_out_splits("sst2") == ("dev", "test")
    assert set(held_out_splits("mnli")) >= {"dev_matched", "dev_mismatched"}


# -- documents ---------------------------------------------------------------------------------------------------
def test_books_are_cut_at_paragraphs_within_the_bound():
    paragraphs = [" ".join(f"w{p}x{i}." for i in range(n)) for p, n in enumerate([5, 40, 3, 200, 8])]
    text = "\n\n".join(paragraphs)
    pieces = list(cut_documents(text, 120))
    assert all(len(piece) <= 120 for piece in pieces)
    assert " ".join(" ".join(pieces).split()) == " ".join(text.split())  # every word once, in order
    assert paragraphs[0] in pieces[0] and paragraphs[2] in "".join(pieces)  # short paragraphs stay whole
    assert list(cut_documents("short", 120)) == ["short"]


# -- task text in the corpus ---------------------------------------------------------------------------------------
def test_the_run_reads_its_own_tasks_files_and_its_key_says_so(tmp_path):
    plain = recipe.plan(load_config("smoke"), tmp_path)
    mixed = recipe.plan(load_config("smoke", ["ingest.task_text=true", "ingest.leak_check=true",
                                            "finetune.tasks=[sst2,rte]"]), tmp_path)
    job = mixed.steps["ingest"].job
    assert [t.task for t in job.tasks] == ["sst2", "rte"] and plain.steps["ingest"].job.tasks == ()
    assert job.tasks[0].where == mixed.task_source("sst2") and job.key() != plain.steps["ingest"].job.key()
    assert "ingest" in mixed.needs["ingest"] or "sample-data" in mixed.needs["ingest"]


# -- blocks that start a document ----------------------------------------------------------------------------------
def test_block_order_starts_each_block_with_a_document_where_it_can():
    lengths = [3, 4, 2, 10, 1]
    order = _block_order(lengths, 4)
    assert sorted(order.tolist()) == list(range(sum(lengths)))  # every token once
    starts = set(np.cumsum([0] + lengths[:-1]).tolist())
    blocks = order.reshape(-1, 4)
    assert [int(b[0]) in starts for b in blocks] == [True, True, True, True, False]  # the last: a long one's middle
