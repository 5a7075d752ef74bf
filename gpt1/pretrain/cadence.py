"""When pre-training evaluates, probes and checkpoints: every N updates, or every M minutes instead.

    save = Cadence(updates=p.save_every, minutes=p.save_every_minutes)

Update counts suit a CPU, where an update takes seconds; at GPU speed 1,000 updates pass in seconds, and a
checkpoint of the 117M model (1.6 GB with its Adam moments) that often would spend the run writing to shared
storage. A cadence in minutes keeps the cost of each action a fixed share of the run on any hardware.

Every rank must take the same decision (a checkpoint and the validation loss are collective): rank 0's clock
decides, and `due_by_time` is only asked at the logging boundaries, where the loop already waits for the device
and the ranks exchange the flags (`Pretraining.due` in gpt1.pretrain.worker).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Cadence:
    updates: int
    minutes: float | None = None  # when set, replaces `updates`
    # when the action last ran (or the run started)
    last: float = field(default_factory=time.monotonic)

    @property
    def timed(self) -> bool:
        return self.minutes is not None

    def due_by_updates(self, step: int) -> bool:
        return not self.timed and step % self.updates == 0

    def due_by_time(self) -> bool:
        return self.minutes is not None and time.monotonic() - self.last >= 60 * self.minutes

    def ran(self) -> None:
        self.last = time.monotonic()
