"""gpt1.runtime.prefetch: made on a background thread, handed out in order, errors at their item."""

from __future__ import annotations

import threading
import time

import pytest

from gpt1.runtime.prefetch import prefetch


def test_items_come_in_order_made_on_another_thread_ahead_of_the_loop():
    made_on, started = [], []

    def make(i):
        made_on.append(threading.current_thread() is not threading.main_thread())
        started.append(i)
        time.sleep(0.005 * (i % 3))  # uneven work: the order must not follow completion
        return i * i

    got = []
    for square in prefetch(make, range(10), ahead=3):
        got.append(square)
        if len(got) == 1:  # the loop is busy: the thread works ahead meanwhile, no further than `ahead`
            deadline = time.monotonic() + 5
            while len(started) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.02)
            assert len(started) == 4  # the item handed out and the 3 ahead of it
    assert got == [i * i for i in range(10)] and all(made_on)


def test_an_error_is_raised_at_its_item_and_an_early_stop_makes_little_for_nothing():
    def make(i):
        if i == 4:
            raise ValueError("bad item 4")
        return i

    got = []
    with pytest.raises(ValueError, match="bad item 4"):
        for value in prefetch(make, range(10), ahead=2):
            got.append(value)
    assert got == [0, 1, 2, 3]

    made = []
    batches = prefetch(lambda i: made.append(i) or i, range(100), ahead=2)
    assert next(batches) == 0
    batches.close()  # a loop that stops early (a diverged fine-tune)
    assert len(made) <= 3  # the item handed out and the 2 ahead of it, at most


def test_ahead_must_be_positive():
    with pytest.raises(ValueError, match="ahead"):
        list(prefetch(str, range(3), ahead=0))
