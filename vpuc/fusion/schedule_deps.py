"""Segments that wait on what they read, not on the segment before (``--schedule default``).

``lower-graph`` runs its segments one after another: a segment's first tasks wait on
the barrier its predecessor's last store updates (the *gate*), so each layer fills
and drains its pipeline alone, and independent work (a shortcut convolution, a
squeeze-excite branch, the next layer's loads while this one stores) never overlaps.
``relax_gates`` replaces that order by the two things it stood for:

1. **Data in DDR**: a DMA that reads DDR bytes an earlier segment writes waits on the
   last such write on each DMA channel (a channel's FIFO ends its transfers in list
   order, so the last one implies the others); one that writes bytes an earlier
   segment reads or writes waits the same way (write-after-read, write-after-write).
   Every DMA does, not only a segment's first ones: a later block's load used to be
   ordered after the gate through its slot's previous block.
2. **CMX**: allocate-cmx lets two buffers share bytes only when the barriers order
   their uses.  A segment whose buffers and its predecessor's fit a tile's CMX
   together (``CMX_SHARE`` of it, room for alignment and fragmentation) waits on the
   gate of the segment two back instead of its own: at most two consecutive
   segments then run at once, and allocate-cmx keeps their buffers apart.  A
   segment that does not fit keeps its gate.  (A segment's early loads, placed by
   ``schedule.overlap`` on the store channel after the last store of the segment two
   back, are already behind that segment by their channel's order.)

Expects: a module of one lowered graph block after ``schedule.overlap``, ``keys`` the
segments' task-label prefixes in program order, ``finishes[s]`` the gate segment ``s``'s
last store updates (``None`` for the last).  When a task's segment cannot be told from its
label, or a DPU or ACT SHAVE task touches DDR directly, the module is left unchanged.
Guarantees: every added wait is on a barrier that a DMA earlier in the DMA list updates,
of an earlier segment; each pair of DDR accesses of different segments, one a write, is
ordered by barriers; the tasks compute the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.analysis.liveness import unit_operands
from vpuc.ir.module import Barrier, BufferKind, Module
from vpuc.ir.symbols import SymbolTable, buffer_footprint
from vpuc.ir.tasks import DmaTask, Executor

# Share of a tile's CMX two overlapping segments' buffers may take (allocate-cmx aligns
# every buffer to 64 bytes and places by first fit, so a full CMX would not pack).
CMX_SHARE = 0.85
_DDR = (BufferKind.DDR, BufferKind.OUTPUT, BufferKind.INPUT)


@dataclass
class _Access:
    task: DmaTask
    position: int          # in the DMA list
    segment: int
    lo: int                # byte interval of the root it touches (a bounding interval)
    hi: int
    write: bool


class _SegmentIndex:
    """The segment of a label or buffer name: the longest dotted prefix among ``keys``."""

    def __init__(self, keys: list[str]) -> None:
        self.index = {key: s for s, key in enumerate(keys)}

    def of(self, name: str | None) -> int | None:
        head = name or ""
        while True:
            found = self.index.get(head)
            if found is not None:
                return found
            cut = head.rfind(".")
            if cut < 0:
                return self.index.get("")
            head = head[:cut]


def relax_gates(module: Module, keys: list[str], finishes: list[str | None],
                cmx_bytes: int) -> bool:
    """Apply the module docstring's rules to ``module``; False when it is left unchanged."""
    if len(keys) < 2 or len(finishes) != len(keys):
        return False
    segments = _SegmentIndex(keys)
    symbols = SymbolTable(module)
    dma_list = None
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if segments.of(task.label) is None:
                return False
            if task_list.executor is not Executor.DMA and any(
                    symbols.region(n).kind in _DDR for n in unit_operands(task)
                    if symbols.is_buffer_like(n)):
                return False
        if task_list.executor is Executor.DMA:
            if dma_list is not None:
                return False
            dma_list = task_list
    if dma_list is None:
        return False
    fits = _fits_beside_previous(module, segments, len(keys), cmx_bytes)
    gate_of = {f: s + 1 for s, f in enumerate(finishes) if f is not None}
    for task in dma_list.tasks + [t for tl in module.task_lists
                                  if tl.executor is not Executor.DMA for t in tl.tasks]:
        s = segments.of(task.label)
        waits = []
        for w in task.waits:
            if gate_of.get(w) == s and fits[s]:
                if s >= 2:
                    w = finishes[s - 2]
                else:
                    continue
            if w not in waits:
                waits.append(w)
        task.waits = tuple(waits)
    _wait_on_ddr_writes(module, dma_list.tasks, segments, symbols)
    _drop_unwaited(module, {f for f in finishes if f is not None})
    return True


def _drop_unwaited(module: Module, gates: set[str]) -> None:
    """Remove the gates no task waits on any more (a barrier nothing waits on is dead)."""
    waited = {w for tl in module.task_lists for t in tl.tasks for w in t.waits}
    dead = gates - waited
    if not dead:
        return
    for tl in module.task_lists:
        for t in tl.tasks:
            if dead.intersection(t.updates):
                t.updates = tuple(u for u in t.updates if u not in dead)
    module.barriers = [b for b in module.barriers if b.name not in dead]


def _fits_beside_previous(module: Module, segments: _SegmentIndex, count: int,
                          cmx_bytes: int) -> list[bool]:
    """Per segment: whether its CMX buffers and its predecessor's fit every tile together
    (buffers of no segment count against every pair)."""
    used: dict[tuple[int | None, int], int] = {}
    tiles: set[int] = set()
    for b in module.buffers:
        if b.kind is BufferKind.CMX and b.offset is None:
            key = (segments.of(b.name), b.tile)
            tiles.add(b.tile)
            used[key] = used.get(key, 0) + (buffer_footprint(b) + 63) // 64 * 64
    limit = int(cmx_bytes * CMX_SHARE)
    return [s > 0 and all(used.get((s - 1, t), 0) + used.get((s, t), 0)
                          + used.get((None, t), 0) <= limit for t in tiles)
            for s in range(count)]


def _wait_on_ddr_writes(module: Module, tasks: list, segments: _SegmentIndex,
                        symbols: SymbolTable) -> None:
    """Rule 1 of the module docstring."""
    by_root: dict[str, list[_Access]] = {}
    for position, task in enumerate(tasks):
        if not isinstance(task, DmaTask):
            continue
        for name, write in ((task.src, False), (task.dst, True)):
            region = symbols.region(name)
            if region is None or region.kind not in _DDR:
                continue
            if all(s >= 0 for s in region.strides_bits):
                lo, hi = region.byte_offset, region.byte_offset + region.span_bytes
            else:
                lo, hi = 0, region.root.type.nbytes
            by_root.setdefault(region.root.name, []).append(
                _Access(task, position, segments.of(task.label), lo, hi, write))
    names = {b.name for b in module.barriers}
    done: dict[int, str] = {}                         # id(task) -> barrier it now updates
    needs: dict[int, dict[int, _Access]] = {}         # id(task) -> channel -> latest access
    for accesses in by_root.values():
        for i, later in enumerate(accesses):
            for earlier in accesses[:i]:
                if earlier.segment >= later.segment or not (earlier.write or later.write) \
                        or earlier.hi <= later.lo or later.hi <= earlier.lo:
                    continue
                latest = needs.setdefault(id(later.task), {})
                held = latest.get(earlier.task.channel)
                if held is None or held.position < earlier.position:
                    latest[earlier.task.channel] = earlier
    for task in tasks:
        for earlier in sorted(needs.get(id(task), {}).values(), key=lambda a: a.position):
            barrier = done.get(id(earlier.task))
            if barrier is None:
                barrier = base = f"{earlier.task.label}.written"
                n = 1
                while barrier in names:
                    barrier, n = f"{base}{n}", n + 1
                names.add(barrier)
                module.barriers.append(Barrier(barrier))
                earlier.task.updates = tuple(earlier.task.updates) + (barrier,)
                done[id(earlier.task)] = barrier
            if barrier not in task.waits:
                task.waits = tuple(task.waits) + (barrier,)
