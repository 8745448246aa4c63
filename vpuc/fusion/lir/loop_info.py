"""Loop information: what each loop iterates and how it moves every data pointer.

A loop walks one master dim (``dim_idx``, counted from the innermost, 0 =
innermost) in steps of ``increment`` elements until ``work_amount`` elements
are done.  Its *ports* are where data crosses the loop boundary: ``entries``
are input ports inside the loop whose value comes from outside (after
insert-load-store: the pointer input of each Load), ``exits`` are output ports
whose value leaves the loop (the pointer output of each Store).

Per port (``LoopPort``), set by init-loops and refined by later passes:

- ``is_incremented``: False when the port's memory is broadcast along this dim
  (its extent there is 1), or when another port already moves the same pointer
  (clean-repeated-data-pointer-shifts);
- ``ptr_increment``: elements the pointer moves per element of work, i.e. the
  memory stride of the dim; after each iteration the emitter adds
  ``ptr_increment * increment * data_size`` bytes;
- ``finalization_offset``: elements added once after the last iteration
  (``-ptr_increment * work_amount`` brings the pointer back to where the loop
  found it); the emitter adds ``finalization_offset * data_size`` bytes;
- ``data_size``: bytes per element of the port's memory.

``kind`` says which iterations a loop runs after insert-specific-iterations:
``whole`` (all), ``main`` (the vector-wide ones) or ``tail`` (the last,
partial vector).  ``evaluate_once`` loops have no back edge.  A loop may run
zero times at run time (``may_be_empty``) when its work amount is a remainder
or a rounded-down quotient of a run-time dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from vpuc.fusion.lir.expression import ExpressionPort
from vpuc.fusion.lir.values import IntLike, Value


@dataclass
class LoopPort:
    port: ExpressionPort
    is_incremented: bool = True
    ptr_increment: Value = Value(0)
    finalization_offset: Value = Value(0)
    data_size: int = 0

    def with_port(self, port: ExpressionPort) -> "LoopPort":
        return replace(self, port=port)


@dataclass
class LoopInfo:
    id: int
    dim_idx: int
    work_amount: Value
    increment: Value
    entries: list[LoopPort] = field(default_factory=list)
    exits: list[LoopPort] = field(default_factory=list)
    kind: str = "whole"                 # whole, main or tail
    evaluate_once: bool = False
    initialized: bool = False           # init-loops filled the port shifts
    # When insert-reg-spills moves the trip counter to the stack: its byte offset in the
    # spill area (the emitter keeps it in memory and uses a temporary around LoopEnd).
    counter_slot: int | None = None

    def __post_init__(self) -> None:
        self.work_amount = Value.of(self.work_amount)
        self.increment = Value.of(self.increment)

    @property
    def ports(self) -> list[LoopPort]:
        return self.entries + self.exits

    @property
    def trip_count(self) -> Value:
        """Iterations: ``work_amount / increment`` (1 for a loop whose increment is its work)."""
        if self.work_amount == self.increment:
            return Value(1)
        inc = self.increment.static
        if inc is None:
            raise ValueError(f"loop {self.id}: run-time increment {self.increment} with work "
                             f"{self.work_amount}")
        return self.work_amount // inc

    @property
    def may_be_empty(self) -> bool:
        """Whether the work amount can be 0 at run time (the emitter guards the body)."""
        wa = self.work_amount
        if wa.static is not None:
            return wa.static == 0
        return any(atom.op != "sym" for mono, _ in wa.terms for atom in mono) or \
            any(c < 0 for _, c in wa.terms)

    def find(self, port: ExpressionPort) -> LoopPort | None:
        return next((p for p in self.ports if p.port == port), None)


class LoopManager:
    """The loops of one LIR by id; ids are never reused."""

    def __init__(self) -> None:
        self.loops: dict[int, LoopInfo] = {}
        self.next_id = 0

    def add(self, dim_idx: int, work_amount: IntLike, increment: IntLike,
            entries: Iterable[ExpressionPort] = (), exits: Iterable[ExpressionPort] = (),
            kind: str = "whole") -> LoopInfo:
        info = LoopInfo(self.next_id, dim_idx, Value.of(work_amount), Value.of(increment),
                        [LoopPort(p) for p in entries], [LoopPort(p) for p in exits], kind)
        self.loops[info.id] = info
        self.next_id += 1
        return info

    def add_info(self, info: LoopInfo) -> LoopInfo:
        info.id = self.next_id
        self.loops[info.id] = info
        self.next_id += 1
        return info

    def get(self, loop_id: int) -> LoopInfo:
        return self.loops[loop_id]

    def remove(self, loop_id: int) -> None:
        del self.loops[loop_id]

    def __iter__(self):
        return iter(sorted(self.loops.values(), key=lambda info: info.id))

    def __len__(self) -> int:
        return len(self.loops)

    def replace_port(self, old: ExpressionPort, new: list[ExpressionPort]) -> None:
        """Every loop port at ``old`` becomes ports at ``new``, keeping its shifts."""
        for info in self.loops.values():
            for ports in (info.entries, info.exits):
                for i, lp in enumerate(ports):
                    if lp.port == old:
                        ports[i:i + 1] = [lp.with_port(p) for p in new]
                        break
