"""Task text and the leak check in real ingestions of the sample books, and the shards tokenized from them: the
tasks' train rows join the corpus without their labels, a dev sentence planted in a book (generated or real) is
removed and counted, a book is held out whole before it is cut into documents, and aligned blocks start where
documents start. The pieces on their own: tests/unit/test_pretraining_text.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gpt1 import tasks
from gpt1.config import IngestConfig
from gpt1.data.ingest import corpus
from gpt1.data.ingest.ingest import ingest
from gpt1.data.ingest.leaks import MIN_WORDS, normalize
from gpt1.data.tokenize import tokenize_corpus
from gpt1.tokenizer import bpe
from tests.conftest import shared_path

TEXT_TASKS = ("sst2", "rte", "race")  # one of each example shape: a text, a pair, a multiple choice


# -- task text in the corpus ---------------------------------------------------------------------------------------
@pytest.fixture
def books_and_tasks(tmp_path, sample_tasks):
    books = tmp_path / "books"
    shutil.copytree(sample_tasks.parent / "books", books)
    return books, {task: str(sample_tasks / tasks.get(task).folder) for task in TEXT_TASKS}


def test_task_rows_join_the_corpus_without_their_labels_and_are_counted(tmp_path, books_and_tasks):
    books, where = books_and_tasks
    stats = ingest(IngestConfig(source=str(books), task_text=True), tmp_path / "corpus", task_files=list(where.items()),
                   show_progress=False)
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
    stats = ingest(IngestConfig(source=str(books), task_text=True, leak_check=True), tmp_path / "corpus",
                   task_files=[("sst2", where["sst2"])], show_progress=False)
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
    stats = ingest(IngestConfig(source=str(books), leak_check=True), tmp_path / "corpus", task_files=[("sst2", str(glue))],
                   show_progress=False)
    assert stats["leak_check"]["sentences_removed"] == {"corpus": 1, "task_text": 0}
    assert stats["leak_check"]["held_out"]["sst2"]["rows"] == {"dev": 872, "test": 1821}
    text = " ".join(corpus.iter_texts(tmp_path / "corpus", "train")) + " ".join(corpus.iter_texts(tmp_path / "corpus",
                                                                                                   "val"))
    assert normalize(dev) not in normalize(text) and "Planted here." in text


def test_a_book_is_held_out_whole_before_it_is_cut_into_documents(tmp_path, books_and_tasks):
    books, _ = books_and_tasks
    stats = ingest(IngestConfig(source=str(books), val_fraction=0.3, max_doc_chars=300), tmp_path / "corpus", show_progress=False)
    sources = {split: {d["source"] for d in read_documents(tmp_path / "corpus", split)} for split in corpus.SPLITS}
    assert sources["train"] and sources["val"] and not sources["train"] & sources["val"]
    lengths = [len(d["text"]) for s in corpus.SPLITS for d in read_documents(tmp_path / "corpus", s)]
    assert max(lengths) <= 300 and sum(stats["documents"].values()) > len(list(books.glob("*.txt")))


def read_documents(root: Path, split: str) -> list[dict]:
    import pyarrow.parquet as pq

    return [row for path in corpus.split_files(root, split) for row in pq.read_table(path).to_pylist()]


# -- blocks that start a document ----------------------------------------------------------------------------------
def test_aligned_shards_hold_every_token_and_most_blocks_start_a_document(tmp_path, books_and_tasks):
    books, where = books_and_tasks
    ingest(IngestConfig(source=str(books), task_text=True, max_doc_chars=200), tmp_path / "corpus",
           task_files=list(where.items()), show_progress=False)
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
