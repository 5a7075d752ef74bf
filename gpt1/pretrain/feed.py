"""Training batches on the device one update ahead, each with the data reader's state after it.

    for blocks, reader_state in prefetched(reader.global_batches(64, 8), reader, device): ...

On CUDA the next batch is read from the shards into pinned host memory and its copy to the GPU is queued without
waiting, while the GPU still works through the current update's kernels (the loop does not wait for them). The
reader runs one batch ahead of training, so a checkpoint must record the state yielded with the last batch
trained, not the reader's own: that is what a resume continues from.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


def prefetched(
    batches: Iterator[torch.Tensor], reader, device: torch.device
) -> Iterator[tuple[torch.Tensor, dict]]:
    """(batch on `device`, reader.state_dict() right after that batch was read), with the next batch in flight."""
    pin = device.type == "cuda"

    def read_next() -> tuple[torch.Tensor, dict]:
        blocks = next(batches)
        state = reader.state_dict()
        if pin:
            blocks = blocks.pin_memory().to(device, non_blocking=True)
        return blocks, state

    ahead = read_next()
    while True:
        current, ahead = ahead, read_next()
        yield current
