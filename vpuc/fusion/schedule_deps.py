"""Segments that wait on the DDR bytes they touch, not on the segment before
(``--schedule default``): the one mechanism that lets lowered segments overlap.

``lower-graph`` runs its segments one after another: a segment's first tasks wait on
the barrier its predecessor's last store updates (its *gate*, ``<prefix>finished``), so
each layer fills and drains its pipeline alone, and independent work (a shortcut
convolution, a squeeze-excite branch, the next layer's loads while this one stores, a
transformer's FC2 on the first GELU blocks) never overlaps.  ``relax_gates`` replaces
that order by the two things it stood for, data in DDR and room in CMX, with one model of
DDR bytes (the exact strided footprints of ``vpuc/analysis/races.py``) and one place
that decides every wait (``_Relaxation.apply``):

1. **Data**: a DMA that touches DDR bytes (or a value kept in CMX between segments,
   ``resident.py``) a DMA of an earlier segment writes (or writes bytes one reads:
   write-after-read, write-after-write) waits on the last such DMA on
   each DMA channel (a channel's FIFO ends its transfers in list order, so the last one
   implies the others), through a barrier only that DMA updates (one it has, else
   ``<label>.written``).  Every DMA does, not only a segment's first ones.  A later
   segment's waits are thinned to 3/8 of the physical barriers
   (``schedule_anchors``: a later DMA of the same channel implies the earlier ones).  A DPU task
   writing a value kept in CMX in place (``resident.in_place_blocks``) counts as such a
   write: the DMA waits on the latest one per tile (a tile's DPU queue is in order).
2. **Loads on data alone**: a load into CMX of a value only DMAs write (or a network
   input) waits on rule 1 and on no gate, so a segment's first blocks run beside its
   predecessor's last ones, when the segment's CMX buffers, its predecessor's (and the
   one before, when the predecessor's loads run early too), the values kept in CMX
   across them and ``reserve`` bytes of prefetched constants fit a tile (an estimate;
   the trial below decides).  Copies out of a value kept in CMX count as such loads
   (``loads_data``): rule 1 orders them after the copies or in-place DPU writes into it.
3. **Gate two back**: every other task that waits on its predecessor's gate waits on the
   gate of the segment two back instead: at most two consecutive segments then run at once.

Whether the overlapping segments' buffers fit depends on lifetimes and fragmentation,
so the result is allocated on trial (``TRIALS`` times at most): a segment whose buffer
finds no room keeps its own gate for rule 3 (or, when it already does, the segment after
it; when that does too, its loads keep their gates: no rule 2), and after the last trial
no segment is relaxed by rule 3; when even that does not
fit, rule 2 goes too (the module keeps its gates, with rule 1's waits, and is left to
allocate-cmx to report; when its barriers then outnumber the target's, rule 1's waits go
too: the gates order every access already).  A trial also gives every barrier a physical
one (assign-physical-barriers): segments running at once whose barriers outnumber the
target's fail it as a buffer without room does, charged to the segment of the barrier.  The successful trial's placement is returned, for allocate-cmx
to take when it still holds (``allocate_cmx.PLACEMENT``); the module itself is left
unplaced.  A block among others (``trial=False``) keeps its order against theirs: rules
1 and 2 only, without trial; one whose DPU or ACT SHAVE tasks touch DDR has rule 3 off
and its trial checks rule 2 alone.

Expects: a module of one lowered graph block after ``schedule.overlap``, ``keys`` the
segments' task-label prefixes in program order, ``finishes[s]`` the gate segment ``s``'s
last store updates (``None`` for the last).  When a task's segment cannot be told from its
label, or the module has several DMA lists, it is left unchanged; when a DPU or ACT SHAVE
task touches DDR, rule 3 is off, the trial decides rule 2 alone, and loads of what such
tasks touch keep their gates.
Guarantees: every added wait is on a barrier that only a DMA earlier in the DMA list, of
an earlier segment, updates (so the channels' FIFOs cannot deadlock on it); each pair of
DDR accesses by DMAs of different segments, one a write, is ordered by barriers; the
tasks compute the same values; a returned placement is one allocate-cmx found for the
module as returned.
"""

from __future__ import annotations

import re

from vpuc.analysis.liveness import unit_operands
from vpuc.analysis.races import shared_bytes
from vpuc.analysis.schedule import Schedule
from vpuc.fusion.resident import resident_use, shared_buffers
from vpuc.fusion.schedule_accesses import (DDR_KINDS, OwnBarriers, all_waits, ddr_accesses,
                                           dpu_accesses, loads_data)
from vpuc.fusion.schedule_anchors import in_place_needs, queue_counts, thin_waits
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.provenance import by_dotted_prefix
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor

# Trial allocations before rule 3 is dropped (each costs about what allocate-cmx does).
TRIALS = 6
# A later segment waits on at most this fraction of the physical barriers for the DMAs and
# in-place DPU writes of earlier ones (``schedule_anchors``).  3/8 leaves ResNet-18,
# MobileNetV3-Small and the encoder at full size their cycles (1/4 and 3/16 did not: the
# encoder's segments of 13 waits, thinned to 12, took 1,002 cycles more).
WAIT_FRACTION = 3 / 8


def relax_gates(module: Module, keys: list[str], finishes: list[str | None], arch,
                reserve: int, trial: bool = True,
                outcome: dict | None = None) -> dict[str, int] | None:
    """Apply the module docstring's rules to ``module`` (``arch``: the target, whose CMX
    the trial allocations fill; ``reserve``: CMX bytes per tile kept for prefetched
    constants in rule 2's estimate).  Returns the CMX offsets of the successful trial
    (buffer name -> offset), or None when there was none; ``outcome`` receives the
    buffers the failed trials found no room for (``failed``) and how many segments keep
    rule 3 in the successful one (``two_back``)."""
    if outcome is not None:
        outcome.setdefault("failed", [])
    if len(keys) < 2 or len(finishes) != len(keys):
        return None
    relax = _Relaxation.of(module, keys, finishes, arch.cmx_bytes, reserve)
    if relax is None:
        return None
    relax.wait_cap, relax.arch = max(1, int(arch.barriers * WAIT_FRACTION)), arch
    # rule 3 only when no DPU or ACT SHAVE task touches DDR (rule 1 orders DMAs alone); the
    # trial still checks rule 2: a segment whose loads are its only entry (a gather from a
    # table in DDR: the calls wait on the index load alone) runs whole beside every segment
    # before it, whose buffers the estimate counts two back only ([1,32,64,64] bicubic
    # GridSample: 16 gathers of 256 KiB rows each, 8 at once on tile 0, overflowed by 9 KB)
    two_back = [trial and relax.direct_ddr is None and s > 0 for s in range(len(keys))]
    early = list(relax.early)
    saved = [(t, t.waits, t.updates) for tl in module.task_lists for t in tl.tasks]
    barriers = list(module.barriers)
    # (two_back, early) -> the buffer its trial found no room for: a failed trial's
    # choices lead back to the same ones (MobileNetV3-Small at 224: rule 3 given up
    # everywhere, then tried three times more), and a trial of the same waits fails the same
    failures: dict[tuple, str | None] = {}
    users: dict = {}       # the trials' buffer users (``allocate_cmx.allocate``): only waits change
    for attempt in range(TRIALS + 2):
        if attempt >= TRIALS:                  # each trial allocates the whole program
            two_back = [False] * len(two_back)
        if attempt > TRIALS:
            early = [False] * len(keys)
        tried = (tuple(two_back), tuple(early))
        if trial and attempt <= TRIALS and tried in failures:
            failed = failures[tried]
            if outcome is not None:
                outcome["failed"].append(failed)
            two_back, early = _narrowed(relax, failed, two_back, early)
            continue
        relax.apply(two_back, early)
        if not trial:
            return None
        if attempt > TRIALS:
            if _barriers_exceeded(module, arch) is not None:
                # rule 1's waits on stores of long-lived values hold their barriers live
                # across the segments between (the gates order those accesses already)
                for task, waits, updates in saved:
                    task.waits, task.updates = waits, updates
                module.barriers = list(barriers)
            return None
        placed, failed = _trial_allocation(module, arch, users)
        if placed is not None:
            failed = _barriers_exceeded(module, arch)
            placed = placed if failed is None else None
        if outcome is not None:
            if placed is not None:
                outcome["two_back"] = sum(two_back)
            else:
                outcome["failed"].append(failed)
        if placed is not None:
            return placed
        failures[tried] = failed
        for task, waits, updates in saved:
            task.waits, task.updates = waits, updates
        module.barriers = list(barriers)
        two_back, early = _narrowed(relax, failed, two_back, early)
    return None


def _narrowed(relax: "_Relaxation", failed: str | None, two_back: list[bool],
              early: list[bool]) -> tuple[list[bool], list[bool]]:
    """The segments relaxed in the next trial after one that found no room for ``failed``:
    the segment it is charged to keeps its gate for rule 3 (or, when it already does, the
    one after it; when that does too, its loads keep their gates); rule 3 goes everywhere
    when none of these applies."""
    two_back, early = list(two_back), list(early)
    s = relax.owner_of(failed)
    if s is not None and two_back[s]:
        two_back[s] = False
    elif s is not None and s + 1 < len(two_back) and two_back[s + 1]:
        two_back[s + 1] = False
    elif s is not None and early[s]:
        early[s] = False
    else:
        two_back = [False] * len(two_back)
    return two_back, early


class _Relaxation:
    """The module's DMA accesses of DDR and its segments, read once; ``apply`` sets the
    waits of one attempt."""

    def __init__(self, module: Module, keys: list[str], finishes: list[str | None],
                 dma_tasks: list[DmaTask], others: list, symbols: SymbolTable) -> None:
        self.module = module
        self.index = {key: s for s, key in enumerate(keys)}
        self.finishes = finishes
        self.gates = {f for f in finishes if f is not None}
        self.dma_tasks = dma_tasks
        self.symbols = symbols
        self.others = others                  # DPU and ACT SHAVE tasks
        self.segment = {id(t): self.segment_of(t.label) for t in dma_tasks + others}
        # roots of DDR bytes DPU or ACT SHAVE tasks touch (none on lowered programs)
        touched = {symbols.region(n).root.name for t in others for n in unit_operands(t)
                   if symbols.is_buffer_like(n) and symbols.region(n).kind in DDR_KINDS}
        self.direct_ddr = touched or None
        # values kept in CMX -> the segments whose tasks touch them
        self.resident = shared_buffers(module, self.segment_of)
        resident = set(self.resident)
        self.accesses = ddr_accesses(dma_tasks, symbols, resident)
        self.dpu_writes = dpu_accesses(others, symbols, resident, write=True)
        self.dpu_reads = dpu_accesses(others, symbols, resident, write=False)
        self.loads = {id(t) for t in dma_tasks if loads_data(t, symbols, touched, resident)}
        self.early: list[bool] = []
        # distinct earlier DMAs a later segment waits on per channel (schedule_anchors)
        self.wait_cap: int | None = None
        self.arch = None                      # the target (the thinned waits' cycle check)

    @staticmethod
    def of(module: Module, keys, finishes, cmx_bytes: int, reserve: int):
        symbols = SymbolTable(module)
        dma_lists = [tl for tl in module.task_lists if tl.executor is Executor.DMA]
        if len(dma_lists) != 1:
            return None
        others = [t for tl in module.task_lists if tl.executor is not Executor.DMA
                  for t in tl.tasks]
        relax = _Relaxation(module, keys, finishes, dma_lists[0].tasks, others, symbols)
        if any(s is None for s in relax.segment.values()):
            return None
        relax.early = _early_segments(module, relax, cmx_bytes, reserve)
        return relax

    def segment_of(self, name: str | None) -> int | None:
        return by_dotted_prefix(self.index, name or "")

    def owner_of(self, name: str | None) -> int | None:
        """The segment a buffer allocate-cmx found no room for is charged to: the one its
        name is under, else (a value kept in CMX, ``resident.py``, named as the graph's)
        the first segment of the DMA list that writes it, its producer, whose overlap with
        the segments before it is what a failed trial gives up first (DenseNet-121 with
        its dense layers' 3x3s on their blocks, ``fuse_halo_conv``: one 480-channel value
        of its second block not placed gave up every segment's overlap, 3,942,224 cycles)."""
        s = self.segment_of(name)
        if s is not None or not name:
            return s
        first = next((t for t in self.dma_tasks if self._writes(t.dst, name)), None)
        writers = [] if first is None else [self.segment[id(first)]]
        # or the DPU tasks writing it themselves, in place or as output copies on its tile
        # (``resident.cast_blocks``): a value no store writes (SqueezeNet's fire modules'
        # Concats) was charged to no segment, and every segment's overlap given up:
        # 486,803 cycles, charged to its writers' 462,161
        writers += [self.segment[id(t)] for t in self.others if isinstance(t, DpuTask)
                    and any(self._writes(n, name) for n in (t.output, *t.broadcast_outputs))]
        return min(writers, default=None)

    def _writes(self, operand: str, name: str) -> bool:
        region = self.symbols.region(operand)
        return region is not None and region.root.name == name

    def apply(self, two_back: list[bool], early: list[bool]) -> None:
        """Rules 1 to 3 of the module docstring, for the segments ``two_back`` (rule 3)
        and ``early`` (rule 2) name; the gates no task waits on any more go."""
        gate_of = {f: s + 1 for s, f in enumerate(self.finishes) if f is not None}
        for task in self.dma_tasks + self.others:
            s = self.segment[id(task)]
            if id(task) in self.loads and early[s]:
                waits = [w for w in task.waits if w not in self.gates]
            else:
                waits = []
                for w in task.waits:
                    if gate_of.get(w) == s and two_back[s]:
                        if s < 2:
                            continue
                        w = self.finishes[s - 2]
                    if w not in waits:
                        waits.append(w)
            task.waits = tuple(waits)
        self._wait_on_ddr_writes()
        _drop_unwaited(self.module, self.gates)

    def _wait_on_ddr_writes(self) -> None:
        """Rule 1: per task, the latest conflicting DMA of an earlier segment per channel."""
        seg = self.segment
        channels = len({t.channel for t in self.dma_tasks if isinstance(t, DmaTask)})
        needs: dict[int, dict[int, tuple[int, DmaTask]]] = {}  # id(later) -> channel -> earlier
        for accesses in self.accesses.values():
            for i, (later, _, lfp, lwrite) in enumerate(accesses):
                latest = needs.setdefault(id(later), {})
                ls = seg[id(later)]
                for j in range(i - 1, -1, -1):          # latest first: one hit per channel
                    earlier, epos, efp, ewrite = accesses[j]
                    if seg[id(earlier)] >= ls or not (ewrite or lwrite):
                        continue
                    held = latest.get(earlier.channel)
                    if held is not None and held[0] >= epos:
                        if len(latest) == channels and all(p >= epos for p, _ in latest.values()):
                            break
                        continue
                    if shared_bytes(efp, lfp) is not None:
                        latest[earlier.channel] = (epos, earlier)
        extra, tasks = in_place_needs(seg, self.dma_tasks, self.others, self.accesses,
                                      self.dpu_writes, self.dpu_reads)
        queues = queue_counts(seg, needs, extra)
        if self.wait_cap is not None:
            thin_waits(needs, seg, {id(t): i for i, t in enumerate(self.dma_tasks)},
                       self.wait_cap, queues)
        own = OwnBarriers(self.module)
        for task in self.dma_tasks:
            for _, earlier in sorted(needs.get(id(task), {}).values(), key=lambda e: e[0]):
                barrier = own.of(earlier)
                if barrier not in task.waits:
                    task.waits = tuple(task.waits) + (barrier,)
        self._wait_on_queues(extra, tasks, own, queues)

    def _wait_on_queues(self, extra: dict, tasks: dict, own: OwnBarriers,
                        queues: dict[int, int]) -> None:
        """The in-place waits ``extra`` (id(later) -> queue -> (place, earlier task)),
        thinned (``schedule_anchors``) unless that would close a cycle: a thinned wait on
        a later task of a queue than the one needed is not ordered by the DMA list, so the
        schedule is checked (``vpuc.analysis.schedule``), and the waits kept exact if not."""
        def apply(needs) -> None:
            for key, later in tasks.items():
                for _, earlier in sorted(needs.get(key, {}).values(), key=lambda e: e[0]):
                    barrier = own.of(earlier)
                    if barrier not in later.waits:
                        later.waits = tuple(later.waits) + (barrier,)

        exact = {k: dict(v) for k, v in extra.items()}
        if self.wait_cap is None or not thin_waits(extra, self.segment, None, self.wait_cap,
                                                   queues):
            apply(exact)
            return
        saved = {key: later.waits for key, later in tasks.items()}
        apply(extra)
        if not Schedule(self.module, self.arch).cycle_nodes:
            return
        for key, later in tasks.items():
            later.waits = saved[key]
        apply(exact)


def _early_segments(module: Module, relax: _Relaxation, cmx_bytes: int,
                    reserve: int) -> list[bool]:
    """Rule 2's estimate: the segments whose loads may wait on data alone."""
    n = len(relax.finishes)
    used: dict[tuple[int, int], int] = {}      # (segment, tile) -> bytes of its CMX buffers
    for b in module.buffers:
        if b.kind is BufferKind.CMX:
            s = relax.segment_of(b.name)
            if s is not None:
                used[(s, b.tile)] = used.get((s, b.tile), 0) + b.type.nbytes
    keys = list(relax.index)

    def key_of(label: str) -> str | None:
        s = relax.segment_of(label)
        return None if s is None else keys[s]

    for (key, tile), nbytes in resident_use(module, keys, key_of).items():
        s = relax.index[key]                   # values kept in CMX across the segment
        used[(s, tile)] = used.get((s, tile), 0) + nbytes
    tiles = sorted({tile for _, tile in used})
    early = [False] * n
    for s in range(1, n):
        group = [s, s - 1] + ([s - 2] if s >= 2 and early[s - 1] else [])
        early[s] = all(sum(used.get((g, t), 0) for g in group) + reserve <= cmx_bytes
                       for t in tiles)
    return early


def _trial_allocation(module: Module, arch, users: dict | None = None
                      ) -> tuple[dict[str, int] | None, str | None]:
    """``allocate_cmx.try_allocate`` (a name of its own here, for the tests to stand in for)."""
    from vpuc.passes.allocate_cmx import try_allocate
    return try_allocate(module, arch, users)


def _barriers_exceeded(module: Module, arch) -> str | None:
    """None when assign-physical-barriers finds the trial's barriers a physical id each; else
    the barrier it found none for (the segments running at once hold more barriers live than
    the target has: [1,32,64,64] bicubic reflection GridSample's 16 gathers, each waiting
    on stores of its own indices, all early).  The module is left as it was."""
    from vpuc.passes.assign_physical_barriers import AssignPhysicalBarriersPass
    from vpuc.passes.base import PassContext
    from vpuc.diagnostics import VpucError
    saved = [(b, b.physical) for b in module.barriers]
    order, attributes = list(module.barriers), dict(module.attributes)
    try:
        AssignPhysicalBarriersPass().run(module, PassContext(arch=arch))
        return None
    except VpucError as exc:
        found = re.search(r"%([^\s:(]+) \(first used by", str(exc))
        return found.group(1) if found else ""
    finally:
        for b, physical in saved:
            b.physical = physical
        module.barriers[:] = order
        module.attributes.clear()
        module.attributes.update(attributes)


def _drop_unwaited(module: Module, gates: set[str]) -> None:
    """Remove the gates no task waits on any more (a barrier nothing waits on is dead)."""
    waited = {w for tl in module.task_lists for t in tl.tasks for w in all_waits(t)}
    dead = gates - waited
    if not dead:
        return
    for tl in module.task_lists:
        for t in tl.tasks:
            if dead.intersection(t.updates):
                t.updates = tuple(u for u in t.updates if u not in dead)
    module.barriers = [b for b in module.barriers if b.name not in dead]
