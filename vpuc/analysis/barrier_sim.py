"""Replay the task lists against physical barriers, as the NPU runtime would.

A physical barrier is programmed with one virtual barrier at a time, in the
order ``module.barriers`` lists them.  Its producer count drops as producers
finish; at zero the barrier has *fired* and its consumers may start; when every
consumer has started (been released) the runtime reprograms it with the next
virtual barrier on the same id.  A unit may start only when its FIFO lets it,
every barrier it waits on is the one currently programmed and has fired, and
every barrier it updates is the one currently programmed.

Time is abstract (a unit starts and ends at once), so the replay decides only
*whether* the program can always finish: a state where no queue head can start
is a deadlock, reported with every blocked unit and what it waits for.  This is
the real compiler's "barrier simulator"; ``assign-physical-barriers`` runs it
to prove its assignment, and the simulator uses the same rule with real time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.analysis.schedule import Schedule
from vpuc.ir.module import Module


@dataclass
class PhysicalBarrierState:
    """The virtual barriers one physical id serves, and where it is in that list."""

    queue: list[str] = field(default_factory=list)
    current: int = 0

    @property
    def active(self) -> str | None:
        return self.queue[self.current] if self.current < len(self.queue) else None


class BarrierReplay:
    def __init__(self, module: Module, schedule: Schedule) -> None:
        self.schedule = schedule
        self.physical_of: dict[str, int] = {}
        self.states: dict[int, PhysicalBarrierState] = {}
        for barrier in module.barriers:
            pid = barrier.physical
            if pid is None:
                raise ValueError(f"barrier %{barrier.name} has no physical id")
            self.physical_of[barrier.name] = pid
            self.states.setdefault(pid, PhysicalBarrierState()).queue.append(barrier.name)
        self.producers_left = {b.name: len(schedule.producers.get(b.name, ())) for b in module.barriers}
        self.consumers_left = {b.name: len(schedule.consumers.get(b.name, ())) for b in module.barriers}

    def _is_active(self, barrier: str) -> bool:
        return self.states[self.physical_of[barrier]].active == barrier

    def can_start(self, unit_index: int) -> bool:
        unit = self.schedule.units[unit_index]
        for b in unit.waits:
            if not self._is_active(b) or self.producers_left[b] > 0:
                return False
        return all(self._is_active(b) for b in unit.updates)

    def run_unit(self, unit_index: int) -> None:
        """Start and finish a unit: release what it waits on, signal what it updates."""
        unit = self.schedule.units[unit_index]
        for b in unit.waits:
            self.consumers_left[b] -= 1
            self._maybe_advance(b)
        for b in unit.updates:
            self.producers_left[b] -= 1
            self._maybe_advance(b)

    def _maybe_advance(self, barrier: str) -> None:
        state = self.states[self.physical_of[barrier]]
        # Reprogram the id while its active virtual barrier is fully used up.
        while state.active is not None and self.producers_left[state.active] == 0 \
                and self.consumers_left[state.active] == 0:
            state.current += 1

    def blocked_reason(self, unit_index: int) -> str:
        unit = self.schedule.units[unit_index]
        reasons = []
        for b in unit.waits:
            active = self.states[self.physical_of[b]].active
            if active != b:
                reasons.append(f"waits %{b}, but physical barrier {self.physical_of[b]} still "
                               f"serves %{active}")
            elif self.producers_left[b]:
                reasons.append(f"waits %{b} ({self.producers_left[b]} producer(s) left)")
        for b in unit.updates:
            active = self.states[self.physical_of[b]].active
            if active != b:
                reasons.append(f"updates %{b}, but physical barrier {self.physical_of[b]} still "
                               f"serves %{active}")
        return "; ".join(reasons) or "waits for the task ahead of it in its FIFO"


def replay(module: Module, schedule: Schedule) -> list[str]:
    """Run every queue to completion; returns [] or one line per blocked unit."""
    state = BarrierReplay(module, schedule)
    heads = [0] * len(schedule.queues)
    # Sweep the queues, advancing each as far as it can, until a sweep makes no
    # progress: at most one sweep per unit, each costing O(queues).
    progress = True
    while progress:
        progress = False
        for q in range(len(schedule.queues)):
            units = schedule.queues[q].units
            while heads[q] < len(units) and state.can_start(units[heads[q]]):
                state.run_unit(units[heads[q]])
                heads[q] += 1
                progress = True
    blocked = []
    for q, queue in enumerate(schedule.queues):
        if heads[q] < len(queue.units):
            unit = schedule.units[queue.units[heads[q]]]
            blocked.append(f"{unit.name} ({queue}): {state.blocked_reason(unit.index)}")
    return blocked
