"""The transformers hand-off on real text: AutoTokenizer of a folder exported with the original vocabulary gives our
ids on paragraphs sampled from every shared book, once ftfy has done what our encoder does. The hand-off on tiny
text: tests/unit/test_hf_handoff.py."""

from __future__ import annotations

import ftfy
import pytest

from conftest import shared_path
from gpt1_oracle import book_paragraphs
from tests.unit.test_hf_handoff import original_export  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_auto_tokenizer_on_book_paragraphs(original_export):
    """Real text: our ids wherever ftfy does only what the export does; ftfy first closes the rest of the gap."""
    ours, hf = original_export
    paragraphs = [p for book in sorted(shared_path("books").glob("*.txt")) for p in book_paragraphs(book)[::100]]
    expected = ours.encode_batch(paragraphs)
    plain = hf(paragraphs, add_special_tokens=False)["input_ids"]
    fixed = hf([ftfy.fix_text(p) for p in paragraphs], add_special_tokens=False)["input_ids"]
    assert fixed == expected
    different = [p for p, a, b in zip(paragraphs, plain, expected) if a != b]
    assert len(different) <= 0.005 * len(paragraphs), different[:3]
    curly = [p for p in paragraphs if "\u201c" in p or "\u2019" in p]
    assert len(curly) > 0.2 * len(paragraphs)  # the export's own quote fix is what makes these agree
