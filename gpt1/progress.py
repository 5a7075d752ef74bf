"""Progress lines for long loops. They are logged, not drawn: Prefect's, Slurm's and kubectl's logs keep lines,
and a terminal progress bar (tqdm) is off without a terminal."""

from __future__ import annotations

import time


def duration(seconds: float) -> str:
    """'45s', '3m20s', '2h05m': how long something took or will take."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Every:
    """`due()` is true at most once per `seconds`, the first time `seconds` after creation."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.next = time.monotonic() + seconds

    def due(self) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + self.seconds
        return True
