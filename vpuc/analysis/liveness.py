"""Buffer liveness from the barrier schedule, and the memory-overlap check.

A root buffer is *live* over the units that touch it (through itself or any of
its views).  Two buffers may share bytes only if every unit touching one
happens before every unit touching the other.

The overlap check is a painter's sweep: buffers are taken in order of first use
and "painted" over their byte range; each buffer only has to be ordered after
the buffers it paints over (the current occupants), because ordering is
transitive.  That keeps the check near-linear instead of comparing all pairs.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from vpuc.analysis.schedule import Schedule
from vpuc.ir.module import Buffer, BufferKind, Module
from vpuc.ir.symbols import SymbolTable, buffer_footprint
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask


def unit_operands(unit_task) -> list[str]:
    """Names of the buffers and views a task reads or writes."""
    if isinstance(unit_task, DmaTask):
        return [unit_task.src, unit_task.dst]
    if isinstance(unit_task, DpuTask):
        names = [*unit_task.inputs, unit_task.output, *unit_task.broadcast_outputs]
        names += [n for n in (unit_task.weights, unit_task.bias) if n is not None]
        if unit_task.quant is not None:
            names.append(unit_task.quant.scale)
        return names
    if isinstance(unit_task, SwKernelTask):
        return [b.buffer for b in unit_task.inputs + unit_task.outputs]
    return []


def users_by_root(schedule: Schedule, symbols: SymbolTable) -> dict[str, list[int]]:
    """Root buffer name → units touching it, in unit order, without repeats."""
    users: dict[str, list[int]] = {}
    for unit in schedule.units:
        for name in unit_operands(unit.task):
            region = symbols.region(name) if symbols.is_buffer_like(name) else None
            if region is None:
                continue
            bucket = users.setdefault(region.root.name, [])
            if not bucket or bucket[-1] != unit.index:
                bucket.append(unit.index)
    return users


@dataclass
class Lifetime:
    """The units that matter when ordering a buffer against another one."""

    first: list[int]   # the first user in each queue
    last: list[int]    # the last user in each serial queue, every user in the others
    start_pos: int     # topological position of the earliest start, for sorting

    @staticmethod
    def of(schedule: Schedule, units: list[int]) -> "Lifetime":
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        multi: list[int] = []
        for u in units:
            unit = schedule.units[u]
            first.setdefault(unit.queue, u)
            if schedule.queues[unit.queue].serial:
                last[unit.queue] = u
            else:
                multi.append(u)
        start_pos = min((schedule.topo_pos[2 * u] for u in units), default=0)
        return Lifetime(list(first.values()), list(last.values()) + multi, start_pos)


def ordered_before(schedule: Schedule, a: Lifetime, b: Lifetime) -> bool:
    """Whether every user of ``a`` ends before every user of ``b`` starts."""
    return all(schedule.happens_before(x, y) for x in a.last for y in b.first)


@dataclass
class Conflict:
    earlier: Buffer
    later: Buffer
    lo: int
    hi: int


class Painter:
    """Byte ranges of one memory, each segment remembering its latest occupant."""

    def __init__(self) -> None:
        self.bounds: list[int] = []        # sorted segment starts
        self.owner: list[object] = []      # occupant of [bounds[i], bounds[i+1])

    def _split(self, at: int) -> int:
        i = bisect.bisect_right(self.bounds, at) - 1
        if i >= 0 and self.bounds[i] == at:
            return i
        # Insert a boundary at ``at`` carrying the occupant of the segment it splits.
        owner = self.owner[i] if i >= 0 else None
        self.bounds.insert(i + 1, at)
        self.owner.insert(i + 1, owner)
        return i + 1

    def paint(self, lo: int, hi: int, item) -> list[tuple[object, int, int]]:
        """Occupy [lo, hi); return the previous occupants with the ranges they held."""
        first = self._split(lo)
        last = self._split(hi)
        previous = []
        for i in range(first, last):
            if self.owner[i] is not None:
                previous.append((self.owner[i], self.bounds[i], self.bounds[i + 1]))
        del self.bounds[first + 1:last]
        del self.owner[first + 1:last]
        self.owner[first] = item
        return previous


def overlap_conflicts(schedule: Schedule, placed: list[tuple[Buffer, int, int, list[int]]]
                      ) -> list[Conflict]:
    """Pairs of buffers sharing bytes of one memory while both may be live.

    ``placed`` holds (buffer, lo, hi, users) for every buffer of that memory.
    """
    items = []
    for buffer, lo, hi, units in placed:
        if units and hi > lo:
            items.append((Lifetime.of(schedule, units), buffer, lo, hi))
    items.sort(key=lambda item: item[0].start_pos)
    painter = Painter()
    conflicts: list[Conflict] = []
    for life, buffer, lo, hi in items:
        seen = set()
        for (other_life, other), seg_lo, seg_hi in painter.paint(lo, hi, (life, buffer)):
            if id(other) in seen:
                continue
            seen.add(id(other))
            if not ordered_before(schedule, other_life, life):
                conflicts.append(Conflict(other, buffer, max(lo, seg_lo), min(hi, seg_hi)))
    return conflicts


def placed_cmx_conflicts(module: Module, schedule: Schedule) -> list[Conflict]:
    """``overlap_conflicts`` among the CMX buffers of ``module`` that have an offset, tile by
    tile (allocate-cmx's check of a placement it is offered, and of values pinned before it)."""
    users = users_by_root(schedule, SymbolTable(module))
    tiles: dict[int, list] = {}
    for b in module.buffers:
        if b.kind is BufferKind.CMX and b.offset is not None:
            tiles.setdefault(b.tile, []).append(
                (b, b.offset, b.offset + buffer_footprint(b), users.get(b.name, [])))
    return [c for placed in tiles.values() for c in overlap_conflicts(schedule, placed)]
