"""What pre-training reads beside the books: the tasks' train text, the leak check against their held-out files,
books cut into documents, and blocks that start where fine-tuning's sequences start."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpt1 import tasks
from gpt1.config import load_config
from gpt1.data.ingest import corpus
from gpt1.data.ingest.documents import cut_documents
from gpt1.data.ingest.ingest import ingest
from gpt1.data.ingest.leaks import MIN_WORDS, LeakIndex, normalize, sentences
from gpt1.data.ingest.task_text import held_out_splits, texts
from gpt1.data.tokenize import tokenize_corpus
from gpt1.data.tokenize.write import _block_order
from gpt1.tokenizer import bpe
from gpt1 import recipe
from tests.conftest import shared_path

TEXT_TASKS = ("sst2", "rte", "race")  # one of each example shape: a text, a pair, a multiple choice


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
@pytest.fixture
def books_and_tasks(tmp_path, sample_tasks):
    books = tmp_path / "books"
    shutil.copytree(sample_tasks.parent / "books", books)
    return books, {task: str(sample_tasks / tasks.get(task).folder) for task in TEXT_TASKS}


def test_task_rows_join_the_corpus_without_their_labels_and_are_counted(tmp_path, books_and_tasks):
    books, where = books_and_tasks
    stats = ingest(str(books), tmp_path / "corpus", task_text=list(where.items()), show_progress=False)
    rows = {task: tasks.load(task, path, "train") for task, path in where.items()}
    documents = [d for split in corpus.SPLITS for d in read_documents(tmp_path / "corpus", split)]
    from_tasks = [d for d in documents if corpus.origin_of(d["source"]) == corpus.TASK_TEXT_ORIGIN]
    sst2 = [d for d in from_tasks if d["source"].startswith("task:sst2:")]
    assert len(sst2) == len({ex.text.strip() for ex in rows["sst2"]})  # one per row, repeats dropped as duplicates
    assert {d["text"] for d in sst2} <= {ex.text.strip() for ex in rows["sst2"]}  # the sentence alone: no label
    rte = {d["text"] for d in from_tasks if d["source"].startswith("task:rte:")}
    assert f"{rows['rte'][0].text_a}\n{rows['rte'][0].text_b}".strip() in rte  # a pair: one line each
    race = {d["text"] for d in from_tasks if d["source"].startswith("task:race:")}
    assert {ex.context.strip() for ex in rows["race"]} <= race  # each article once, beside its questions
    assert stats["origins"]["task_text"]["records"] == len(from_tasks)
    assert stats["origins"]["corpus"]["records"] == len(list(books.glob("*.txt")))
    assert stats["settings"]["task_text"] == list(TEXT_TASKS)


def test_a_planted_dev_sentence_is_removed_from_books_and_task_text_and_counted(tmp_path, books_and_tasks):
    books, where = books_and_tasks
    dev = next(ex.text for ex in tasks.load("sst2", where["sst2"], "dev") if len(ex.text.split()) > MIN_WORDS + 1)
    book = sorted(books.glob("*.txt"))[0]
    book.write_text(book.read_text(encoding="utf-8") + f"\n\nA first line. {dev}\nA last line.\n", encoding="utf-8")
    stats = ingest(str(books), tmp_path / "corpus", task_text=[("sst2", where["sst2"])],
                   leak_check=[("sst2", where["sst2"])], show_progress=False)
    leak = stats["leak_check"]
    assert leak["sentences_removed"]["corpus"] >= 1 and leak["held_out"]["sst2"]["rows"]["dev"] > 0
    everything = " ".join(d["text"] for s in corpus.SPLITS for d in read_documents(tmp_path / "corpus", s))
    assert normalize(dev) not in normalize(everything) and "A first line. A last line." in everything


def test_the_leak_check_on_real_files_removes_a_dev_sentence_planted_in_a_real_book(tmp_path):
    glue = shared_path("glue-full", "SST-2")
    books = tmp_path / "books"
    books.mkdir()
    source = sorted(shared_path("books").glob("*.txt"))[0]
    dev = next(ex.text for ex in tasks.load("sst2", glue, "dev") if len(ex.text.split()) > 12)
    raw = source.read_bytes()
    # inside the body (what follows the Gutenberg footer goes anyway), at a paragraph break
    middle = len(raw) // 2 + re.search(rb"\r?\n\r?\n", raw[len(raw) // 2:]).start()
    (books / source.name).write_bytes(raw[:middle] + f"\n\nPlanted here. {dev}\n".encode() + raw[middle:])
    stats = ingest(str(books), tmp_path / "corpus", leak_check=[("sst2", str(glue))], show_progress=False)
    assert stats["leak_check"]["sentences_removed"] == {"corpus": 1, "task_text": 0}
    assert stats["leak_check"]["held_out"]["sst2"]["rows"] == {"dev": 872, "test": 1821}
    text = " ".join(corpus.iter_texts(tmp_path / "corpus", "train")) + " ".join(corpus.iter_texts(tmp_path / "corpus",
                                                                                                   "val"))
    assert normalize(dev) not in normalize(text) and "Planted here." in text


def test_a_book_is_held_out_whole_before_it_is_cut_into_documents(tmp_path, books_and_tasks):
    books, _ = books_and_tasks
    stats = ingest(str(books), tmp_path / "corpus", val_fraction=0.3, max_doc_chars=300, show_progress=False)
    sources = {split: {d["source"] for d in read_documents(tmp_path / "corpus", split)} for split in corpus.SPLITS}
    assert sources["train"] and sources["val"] and not sources["train"] & sources["val"]
    lengths = [len(d["text"]) for s in corpus.SPLITS for d in read_documents(tmp_path / "corpus", s)]
    assert max(lengths) <= 300 and sum(stats["documents"].values()) > len(list(books.glob("*.txt")))


def test_the_run_reads_its_own_tasks_files_and_its_key_says_so(tmp_path):
    plain = recipe.plan(load_config("smoke"), tmp_path)
    mixed = recipe.plan(load_config("smoke", ["ingest.task_text=true", "ingest.leak_check=true",
                                            "finetune.tasks=[sst2,rte]"]), tmp_path)
    job = mixed.steps["ingest"].job
    assert [t.task for t in job.tasks] == ["sst2", "rte"] and plain.steps["ingest"].job.tasks == ()
    assert job.tasks[0].where == mixed.task_source("sst2") and job.key() != plain.steps["ingest"].job.key()
    assert "ingest" in mixed.needs["ingest"] or "sample-data" in mixed.needs["ingest"]


def read_documents(root: Path, split: str) -> list[dict]:
    import pyarrow.parquet as pq

    return [row for path in corpus.split_files(root, split) for row in pq.read_table(path).to_pylist()]


# -- blocks that start a document ----------------------------------------------------------------------------------
def test_block_order_starts_each_block_with_a_document_where_it_can():
    lengths = [3, 4, 2, 10, 1]
    order = _block_order(lengths, 4)
    assert sorted(order.tolist()) == list(range(sum(lengths)))  # every token once
    starts = set(np.cumsum([0] + lengths[:-1]).tolist())
    blocks = order.reshape(-1, 4)
    assert [int(b[0]) in starts for b in blocks] == [True, True, True, True, False]  # the last: a long one's middle


def test_aligned_shards_hold_every_token_and_most_blocks_start_a_document(tmp_path, books_and_tasks):
    books, where = books_and_tasks
    ingest(str(books), tmp_path / "corpus", task_text=list(where.items()), max_doc_chars=200, show_progress=False)
    tok = bpe.train(list(corpus.iter_texts(tmp_path / "corpus", "train")), merges=300, show_progress=False)
    plain = tokenize_corpus(tmp_path / "corpus", tok, tmp_path / "plain", n_ctx=127, shard_rows=64,
                            show_progress=False)
    aligned = tokenize_corpus(tmp_path / "corpus", tok, tmp_path / "aligned", n_ctx=127, shard_rows=64,
                              show_progress=False, align_documents=True)
    assert aligned["key"] != plain["key"]
    for split in corpus.SPLITS:
        ours, theirs = aligned["splits"][split], plain["splits"][split]
        assert ours["stream_tokens"] == theirs["stream_tokens"] and ours["origin_tokens"] == theirs["origin_tokens"]
        assert sum(ours["origin_tokens"].values()) == ours["stream_tokens"]
    train = aligned["splits"]["train"]
    assert train["blocks_starting_a_document"] > 0.6 * train["rows"] > plain["splits"]["train"][
        "blocks_starting_a_document"]
    mix = aligned["composition"]
    assert mix["train_tokens"]["task_text"] > 0 and mix["task_text_tasks"] == list(TEXT_TASKS)
    assert mix["blocks_starting_a_document"] == pytest.approx(train["blocks_starting_a_document"] / train["rows"],
                                                              abs=1e-4)
