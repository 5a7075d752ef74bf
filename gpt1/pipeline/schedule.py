"""Which step of a plan starts next on a machine with a few compute slots (the flows' local scheduling, without
Prefect).

    schedule = Schedule(plan.needs, order=list(plan.steps), slots=2, holds_slot=lambda name: ...)
    while not schedule.finished:
        ready = schedule.next_step()     # (name, holds a slot) or None: wait for a step to end
        schedule.start(*ready) ... schedule.finish(name, failure=None)

A step starts once every step it needs has ended, the first ready one in plan order first, or sooner when the
steps it still waits for are running and `available(name)` says what it reads of them is written already (a
curve point's fine-tune, once pre-training has written that model). A step that needs a failed step is settled as
"not run" (unless its stage runs after failures, as the report does). Compute steps (pre-training, fine-tunes)
hold one of `slots` while they run.

One slot is kept free for a compute step that waits only on steps now running that hold no slot: pre-training,
while its shards are written, must not find both slots taken by the from-scratch fine-tunes (ready since the
tokenizer). A step waiting on a running compute step keeps nothing: that step's own slot passes on when it ends,
so while pre-training runs the other slot goes on running from-scratch fine-tunes rather than idling for the
fine-tunes of the pre-trained model.

A step may hold several slots (`holds_slot` returns how many; True is one): pre-training with
`orchestration.pretrain_alone` holds them all, so it runs alone on every core and what could run beside it waits.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence


class Schedule:
    def __init__(
        self,
        needs: Mapping[str, Sequence[str]],
        order: Sequence[str],
        slots: int,
        holds_slot: Callable[[str], int],
        runs_after_failures: Callable[[str], bool] = lambda _: False,
        available: Callable[[str], bool] = lambda _: False,
    ):
        self.needs = needs
        self.available = available
        self.order = list(order)
        self.free = slots
        self.holds_slot = holds_slot
        self.runs_after_failures = runs_after_failures
        # step -> None when it succeeded, else why it failed
        self.outcome: dict[str, str | None] = {}
        self.running: dict[str, int] = {}  # step -> the slots it holds

    @property
    def finished(self) -> bool:
        return len(self.outcome) == len(self.order)

    def failures(self) -> dict[str, str]:
        return {name: failure for name, failure in self.outcome.items() if failure is not None}

    def next_step(self) -> tuple[str, int] | None:
        """The first step in plan order that can start now, and the slots it takes; steps whose needs failed are
        settled on the way."""
        for name in self.order:
            if name in self.outcome or name in self.running:
                continue
            needs = self.needs[name]
            waiting = [need for need in needs if need not in self.outcome]
            if waiting and not (
                all(need in self.running for need in waiting) and self.available(name)
            ):
                continue
            failed = [need for need in needs if self.outcome.get(need) is not None]
            if failed and not self.runs_after_failures(name):
                self.outcome[name] = f"not run: {failed[0]} failed"
                return self.next_step()
            holds = int(self.holds_slot(name))
            if holds and self.free - holds < self._reserved(before=name):
                continue
            return name, holds
        return None

    def _reserved(self, before: str) -> int:
        """Slots kept for compute steps ahead of `before` in plan order that wait only on running steps holding
        no slot (see the module docstring)."""
        ahead = self.order[: self.order.index(before)]
        return sum(
            int(self.holds_slot(other))
            for other in ahead
            if other not in self.outcome
            and other not in self.running
            and all(
                self.outcome.get(need, "pending") is None or self.running.get(need) == 0
                for need in self.needs[other]
            )
        )

    def start(self, name: str, holds: int) -> None:
        self.free -= holds
        self.running[name] = int(holds)

    def finish(self, name: str, failure: str | None) -> None:
        self.outcome[name] = failure
        self.free += self.running.pop(name, 0)


def batches(names: Sequence[str], key: Callable[[str], Hashable], size: int) -> list[list[str]]:
    """`names` (in plan order) cut into batches of at most `size` steps that share their `key`, each batch in
    plan order. Steps keyed alike (the same needs, the same inputs) become ready at one moment, so a batch can
    run as one unit (several fine-tunes in one pod of one GPU)."""
    open_batch: dict[Hashable, list[str]] = {}
    found: list[list[str]] = []
    for name in names:
        batch = open_batch.get(key(name))
        if batch is None or len(batch) >= size:
            batch = open_batch[key(name)] = []
            found.append(batch)
        batch.append(name)
    return found
