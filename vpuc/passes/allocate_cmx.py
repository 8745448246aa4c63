"""allocate-cmx: place every CMX buffer that has no offset.

Expects: a verified module (an acyclic barrier schedule).
Guarantees: every CMX buffer has an offset, aligned to ``CMX_ALIGNMENT``, inside
its tile's CMX; two buffers share bytes only if every use of one happens before
every use of the other (the verifier's overlap rule holds).  Buffers placed by
hand are kept where they are and allocated around.

Method: interval colouring by first fit.  Buffers are taken in order of first
use; a buffer may reuse the bytes of any buffer whose every use the barriers
order before its own.  Buffers that are over for good (ordered before the next
unit of every queue) are retired, so each step only looks at the live set.  On
overflow the error names the peak: the buffers live at that point and the
bytes over.

A placement found earlier in the compile (``lower-graph``'s trial of its schedule,
``vpuc/fusion/schedule_deps.py``) is offered through ``PassContext.artifacts`` under
``PLACEMENT``; it is taken when it places every CMX buffer without an offset, aligned,
inside its tile, and passes the verifier's overlap rule on the module as it is now
(``liveness.overlap_conflicts``), else the buffers are placed afresh.  So a pass between
the two that changes the schedule costs the saving, never correctness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vpuc.analysis.liveness import (Lifetime, ordered_before, placed_cmx_conflicts,
                                    users_by_root)
from vpuc.analysis.schedule import Schedule
from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.ir.module import Buffer, BufferKind, Module
from vpuc.ir.symbols import SymbolTable, buffer_footprint
from vpuc.passes.base import ModulePass, PassContext

CMX_ALIGNMENT = 64  # assumption: DPU and DMA descriptors want 64-byte aligned CMX addresses
# PassContext.artifacts key: {buffer name: offset}, a placement offered to the pass
PLACEMENT = "cmx-placement"


@dataclass
class Block:
    buffer: Buffer
    life: Lifetime
    lo: int
    hi: int
    fixed: bool


def align_up(value: int, alignment: int = CMX_ALIGNMENT) -> int:
    return (value + alignment - 1) // alignment * alignment


class AllocateCmxPass(ModulePass):
    name = "allocate-cmx"

    def run(self, module: Module, ctx: PassContext) -> None:
        offered = ctx.artifacts.pop(PLACEMENT, None)
        if offered is None or not take_placement(module, ctx.arch, offered):
            allocate(module, ctx.arch)
        module.attributes["cmx"] = "allocated"


def take_placement(module: Module, arch, offsets: dict[str, int]) -> bool:
    """Give the CMX buffers without an offset theirs in ``offsets`` when that placement
    holds (module docstring); False, with the module unchanged, when it does not."""
    unplaced = [b for b in module.buffers if b.kind is BufferKind.CMX and b.offset is None]
    for b in unplaced:
        offset = offsets.get(b.name)
        if offset is None or offset % CMX_ALIGNMENT or offset < 0 \
                or offset + buffer_footprint(b) > arch.cmx_bytes:
            return False
    for b in unplaced:
        b.offset = offsets[b.name]
    schedule = Schedule(module, arch)
    holds = not schedule.cycle_nodes
    if holds:
        holds = not placed_cmx_conflicts(module, schedule)
    if not holds:
        for b in unplaced:
            b.offset = None
    return holds


def try_allocate(module: Module, arch, users: dict | None = None
                 ) -> tuple[dict[str, int] | None, str | None]:
    """A trial of ``allocate`` (a lowering's, ``vpuc/fusion/schedule_deps.py`` and
    ``resident.py``): (the offsets it gives the CMX buffers without one, None), or (None,
    the buffer it finds no room for: "" when its message names none); the module's
    offsets are left as they were.  ``users``: as ``allocate``'s."""
    unplaced = [b for b in module.buffers if b.kind is BufferKind.CMX and b.offset is None]
    try:
        allocate(module, arch, users)
        return {b.name: b.offset for b in unplaced}, None
    except VpucError as exc:
        found = re.search(r"(?:placing|gap for) %([^\s:(]+)", str(exc))
        return None, found.group(1) if found else ""
    finally:
        for b in unplaced:
            b.offset = None


def allocate(module: Module, arch, users: dict | None = None) -> None:
    """Place every CMX buffer of ``module`` without an offset (the pass's work; also a
    lowering's trial of a schedule, ``vpuc/fusion/schedule_deps.py``).  ``users``: kept
    across trials of one program whose tasks change only their waits and updates (its
    units, and so which units touch each buffer, stay the same): ``users["by_root"]``,
    ``users_by_root``'s answer, found on the first trial and read on the others."""
    schedule = Schedule(module, arch)
    if schedule.cycle_nodes:
        raise VpucError("allocate-cmx needs an acyclic barrier schedule; run verify first")
    by_root = None if users is None else users.get("by_root")
    if by_root is None:
        by_root = users_by_root(schedule, SymbolTable(module))
        if users is not None:
            users["by_root"] = by_root
    users = by_root
    for tile in range(arch.tiles):
        buffers = [b for b in module.buffers
                   if b.kind is BufferKind.CMX and b.tile == tile]
        _TileAllocator(schedule, users, arch.cmx_bytes, tile).allocate(buffers)


class _TileAllocator:
    def __init__(self, schedule: Schedule, users: dict[str, list[int]], capacity: int,
                 tile: int) -> None:
        self.schedule = schedule
        self.users = users
        self.capacity = capacity
        self.tile = tile
        self.frontier = [0] * len(schedule.queues)  # next unit of each queue not yet passed

    def allocate(self, buffers: list[Buffer]) -> None:
        fixed, todo = [], []
        for buffer in buffers:
            units = self.users.get(buffer.name, [])
            if buffer.offset is not None:
                if units:
                    fixed.append(Block(buffer, Lifetime.of(self.schedule, units), buffer.offset,
                                       buffer.offset + buffer_footprint(buffer), True))
            elif not units:
                buffer.offset = 0  # never used: it occupies nothing while anything is live
            else:
                todo.append((Lifetime.of(self.schedule, units), buffer))
        todo.sort(key=lambda item: (item[0].start_pos, item[1].name))
        active: list[Block] = []
        for life, buffer in todo:
            self._advance_frontier(life.start_pos)
            active = [b for b in active if not self._retired(b)]
            obstacles = [b for b in active if not ordered_before(self.schedule, b.life, life)]
            obstacles += [b for b in fixed if not ordered_before(self.schedule, b.life, life)
                          and not ordered_before(self.schedule, life, b.life)]
            size = buffer_footprint(buffer)
            offset = self._first_fit(obstacles, size)
            if offset is None:
                raise self._overflow(buffer, size, obstacles)
            buffer.offset = offset
            active.append(Block(buffer, life, offset, offset + size, False))

    def _advance_frontier(self, start_pos: int) -> None:
        topo = self.schedule.topo_pos
        for q, queue in enumerate(self.schedule.queues):
            units = queue.units
            i = self.frontier[q]
            while i < len(units) and topo[2 * units[i]] < start_pos:
                i += 1
            self.frontier[q] = i

    def _retired(self, block: Block) -> bool:
        """Whether every later unit of every queue is ordered after the block's last use."""
        for q, queue in enumerate(self.schedule.queues):
            if self.frontier[q] >= len(queue.units):
                continue
            head = queue.units[self.frontier[q]]
            if not all(self.schedule.happens_before(u, head) for u in block.life.last):
                return False
        return True

    def _first_fit(self, obstacles: list[Block], size: int) -> int | None:
        offset = 0
        for block in sorted(obstacles, key=lambda b: b.lo):
            if block.lo >= offset + size:
                break
            offset = max(offset, align_up(block.hi))
        return offset if offset + size <= self.capacity else None

    def _overflow(self, buffer: Buffer, size: int, live: list[Block]) -> VpucError:
        live_bytes = sum(b.hi - b.lo for b in live)
        need = live_bytes + size
        over = need - self.capacity
        detail = ", ".join(f"%{b.buffer.name} ({b.hi - b.lo} bytes at {b.lo})"
                           for b in sorted(live, key=lambda b: b.lo))
        if over > 0:
            message = (f"CMX of tile {self.tile} overflows while placing %{buffer.name} "
                       f"({size} bytes): {need} bytes are live at this point, {over} bytes over "
                       f"the {self.capacity} available; live: {detail}")
        else:
            message = (f"CMX of tile {self.tile} has no {size}-byte gap for %{buffer.name}: "
                       f"{live_bytes} bytes are live in fragments ({detail})")
        return VpucError([Diagnostic(Severity.ERROR, buffer.loc, message)])
