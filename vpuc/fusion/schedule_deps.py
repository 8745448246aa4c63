"""Segments that wait on what they read, not on the segment before (``--schedule default``).

``lower-graph`` runs its segments one after another: a segment's first tasks wait on
the barrier its predecessor's last store updates (the *gate*), so each layer fills
and drains its pipeline alone, and independent work (a shortcut convolution, a
squeeze-excite branch, the next layer's loads while this one stores) never overlaps.
``relax_gates`` replaces that order by the two things it stood for:

1. **Data in DDR** (and values kept in CMX between segments, ``resident.py``): a DMA
   that reads DDR bytes an earlier segment writes waits on the
   last such write on each DMA channel (a channel's FIFO ends its transfers in list
   order, so the last one implies the others); one that writes bytes an earlier
   segment reads or writes waits the same way (write-after-read, write-after-write).
   Every DMA does, not only a segment's first ones: a later block's load used to be
   ordered after the gate through its slot's previous block.
2. **CMX**: allocate-cmx lets two buffers share bytes only when the barriers order
   their uses.  A segment waits on the gate of the segment two back instead of its
   own: at most two consecutive segments then run at once, and allocate-cmx keeps
   their buffers apart when their lifetimes overlap.  Whether both fit depends on
   lifetimes and fragmentation, so the result is allocated on trial (``TRIALS``
   times at most): a segment whose buffer finds no room keeps its own gate (then the
   segment after it does too), and after the last trial every segment does.  (A segment's early loads, placed by
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

import re
from dataclasses import dataclass

from vpuc.analysis.liveness import unit_operands
from vpuc.diagnostics import VpucError
from vpuc.ir.module import Barrier, BufferKind, Module
from vpuc.fusion.resident import shared_buffers
from vpuc.ir.provenance import by_dotted_prefix
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, Executor

_DDR = (BufferKind.DDR, BufferKind.OUTPUT, BufferKind.INPUT)
# Trial allocations before every gate is kept (each costs about what allocate-cmx does).
TRIALS = 6


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
        return by_dotted_prefix(self.index, name or "")


def relax_gates(module: Module, keys: list[str], finishes: list[str | None], arch,
                then=None) -> bool:
    """Apply the module docstring's rules to ``module`` (``arch``: the target, whose CMX
    the trial allocations fill); False when it is left unchanged.  ``then``: a further
    relaxation of waits, barriers and updates only (``block_deps.pipeline_segments``),
    applied after each attempt and tried with it; when even every gate kept does not
    allocate with it, the module goes on without it (and without trial: as before)."""
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
    fits = [s > 0 for s in range(len(keys))]       # segment s waits two back, not one
    saved = [(t, t.waits, t.updates) for tl in module.task_lists for t in tl.tasks]
    barriers = list(module.barriers)
    for attempt in range(TRIALS + 2):
        if attempt >= TRIALS:                  # each trial allocates the whole program
            fits = [False] * len(fits)
        further = then is not None and attempt <= TRIALS
        _relax(module, dma_list, segments, symbols, finishes, fits)
        if further:
            then()
        failed = _failed_allocation(module, arch) if any(fits) or further else None
        if failed is None:
            return True
        for task, waits, updates in saved:
            task.waits, task.updates = waits, updates
        module.barriers = list(barriers)
        s = segments.of(failed)
        if s is not None and fits[s]:
            fits[s] = False
        elif s is not None and s + 1 < len(fits) and fits[s + 1]:
            fits[s + 1] = False
        else:
            fits = [False] * len(fits)
    return True


def _relax(module: Module, dma_list, segments: _SegmentIndex, symbols: SymbolTable,
           finishes: list[str | None], fits: list[bool]) -> None:
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
    _wait_on_ddr_writes(module, dma_list.tasks, segments, symbols,
                        set(shared_buffers(module, segments.of)))
    _drop_unwaited(module, {f for f in finishes if f is not None})


def _failed_allocation(module: Module, arch) -> str | None:
    """The CMX buffer allocate-cmx would find no room for ("" when its message names none),
    or None; the module's offsets are left as they were."""
    from vpuc.passes.allocate_cmx import allocate
    unplaced = [b for b in module.buffers if b.kind is BufferKind.CMX and b.offset is None]
    try:
        allocate(module, arch)
    except VpucError as exc:
        found = re.search(r"(?:placing|gap for) %([^\s:(]+)", str(exc))
        return found.group(1) if found else ""
    finally:
        for b in unplaced:
            b.offset = None
    return None


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


def _wait_on_ddr_writes(module: Module, tasks: list, segments: _SegmentIndex,
                        symbols: SymbolTable, resident: set[str]) -> None:
    """Rule 1 of the module docstring; ``resident``: CMX buffers holding values between
    segments (``resident.shared_buffers``), ordered as DDR values are."""
    by_root: dict[str, list[_Access]] = {}
    for position, task in enumerate(tasks):
        if not isinstance(task, DmaTask):
            continue
        for name, write in ((task.src, False), (task.dst, True)):
            region = symbols.region(name)
            if region is None or (region.kind not in _DDR
                                  and region.root.name not in resident):
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
