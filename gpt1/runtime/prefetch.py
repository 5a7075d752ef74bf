"""Work done a few items ahead on a background thread, handed out in order.

    for batch in prefetch(collate, batches, ahead=2):   # collate(batches[i + 2]) runs while batch i computes
        ...

A training loop that pads its batches in Python between two GPU steps keeps the GPU waiting for the interpreter;
done on a thread, the padding overlaps the device's work (torch releases the GIL while its kernels run, and a GPU
step returns before the GPU finishes it). The results and their order are exactly those of calling `make` inline:
one worker thread takes the items in turn. An exception raised by `make` is raised by the iteration at that item;
a loop that stops early leaves at most `ahead` items made for nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Made = TypeVar("Made")


def prefetch(make: Callable[[Item], Made], items: Iterable[Item], ahead: int = 2) -> Iterator[Made]:
    """`make(item)` for each item, in order, made on one background thread up to `ahead` items early."""
    if ahead < 1:
        raise ValueError(f"ahead must be >= 1, got {ahead}")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") as pool:
        queued: deque[Future[Made]] = deque()
        try:
            for item in items:
                queued.append(pool.submit(make, item))
                if len(queued) > ahead:
                    yield queued.popleft().result()
            while queued:
                yield queued.popleft().result()
        finally:  # stopped early: what has not started never will
            for future in queued:
                future.cancel()
