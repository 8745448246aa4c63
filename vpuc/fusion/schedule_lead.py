"""The first weight chunks of a CNN's DDR-bound end loaded during the DPU-bound segments
well before it (``schedule.overlap``, decision 2): ResNet-18's stage 4 reads 17.5 MB of
weights, more than CMX holds, so the DDR streams them at its peak from stage 3's end to
the network's end, while before that it idles more than half the time.  Every byte of
stage 4's weights already in CMX when stage 3 ends is one the DDR need not move after it
(1 MB is about 43,700 cycles at 24 B a cycle; docs/simulator.md, "Lower bound").

The lead run (``schedule_room.EarlyRoom.lead``: ResNet-18's two 3x3 layers at the start
of stage 4) has chunks that wait only on a segment gate (each layer's first weight slots)
but find no room beside the segment before theirs (``EarlyRoom``): those load during the
latest segments before the run whose DPU work leaves their DDR idle long enough
(``idle_bytes``), in pieces put where the channel waits for that segment's compute
anyway (``schedule_prefetch_order.prefetch_order``).  Their buffers, and those of the run's
chunks loaded early the usual way, are pinned at the top of their tile's CMX, stacked
downwards, so the buffers of the segments they live across are placed below them in one
piece (placed by first fit where they loaded, two 442 KB chunks left holes in which no
third fitted).  When allocate-cmx's trial finds no room, the chunks loaded furthest back
are given up first, each waiting on its gate again.

Expects: a lowered module whose segment gates are ``<prefix>finished`` barriers.
Guarantees: a load given up waits on its gate again, unpinned and whole; a piece reads and
writes its rows of what its load did and updates what it updated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vpuc.fusion.schedule_room import EarlyRoom
from vpuc.ir.module import BufferKind, Module, Ref, Slice, View
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor
from vpuc.passes.allocate_cmx import CMX_ALIGNMENT

# A lead chunk loads in pieces of at most this many bytes (whole rows of output channels),
# each ahead of one of the segment's DMAs that wait on its compute: one DMA of a 442 KB
# chunk held the segment's next store or load back 7K to 26K cycles in its channel's FIFO,
# a piece about 2.7K (64 KB at 24 B a cycle).  ResNet-18 (schedule_bench cycles): whole
# 1,711,871, 128K 1,711,871, 64K 1,707,839, 32K 1,709,355.
LEAD_PIECE_BYTES = 64 << 10
# How many segments back from the lead run a chunk may go.  ResNet-18 (schedule_bench
# cycles): 8 1,721,900 (stage 4's stride-2 layer's two chunks during stage 2's 3x3
# layers), 9 to 12 1,707,839 (and one of the next layer's during stage 2's first 3x3).
LEAD_BACK = 9


@dataclass
class LeadLoad:
    """A lead chunk's load: the gate it waited on, its destination buffer, its pieces."""
    task: DmaTask
    gate: str
    buffer: str
    pieces: list[DmaTask] | None = None


def idle_bytes(module: Module, room: EarlyRoom, timing) -> dict[int, float]:
    """Segment (index into ``room.order``) -> the bytes its DDR could move beside its own
    loads while its DPU computes: its dense convolutions' MACs on its busiest tile at the
    cost model's rate (``timing.dpu``), times ``timing.ddr_bytes_per_cycle``, less the bytes
    its loads bring (constants and values, ``EarlyRoom.traffic``).  An estimate from below
    of its length (no dispatch, no edges, its loads' latencies left out)."""
    symbols = SymbolTable(module)
    macs: dict[tuple[str, int], float] = {}        # (segment prefix, tile) -> MACs / rate
    for task_list in module.task_lists:
        for t in task_list.tasks:
            if not isinstance(t, DpuTask) or t.weights is None:
                continue
            weights = symbols.region(t.weights)
            peak = timing.dpu.dense_macs_per_cycle.get(str(weights.type.elem)) \
                if weights is not None else None
            if not peak or len(weights.type.dims) != 4:
                continue
            per_output = math.prod(weights.type.dims[1:])
            outputs = sum(math.prod(e - s + 1 for s, e in zip(v.start, v.end))
                          for v in t.variants)
            key = (room.prefix_of(t.label or ""), t.tile)
            macs[key] = macs.get(key, 0.0) + outputs * per_output / (
                peak * timing.dpu.dense_efficiency)
    out: dict[int, float] = {}
    for j, prefix in enumerate(room.order):
        cycles = max((c for (p, _), c in macs.items() if p == prefix), default=0.0)
        out[j] = cycles * timing.ddr_bytes_per_cycle - sum(room.traffic.get(prefix, (0, 0)))
    return out


def assign_lead(beyond: list, early: dict[int, str], room: EarlyRoom, module: Module,
                timing, min_bytes: int) -> list[LeadLoad]:
    """The lead run's loads of at least ``min_bytes`` that found no room beside the segment
    before theirs (``beyond``: (load, gate, tile, buffer, bytes), in list order), each to
    the latest segment before the run, at most ``LEAD_BACK`` back, whose DDR still idles
    long enough to move it (``idle_bytes``, less the chunks given it before): it then waits
    on nothing and ``early[id(load)]`` is that segment's gate.  Returns the loads moved,
    the run's first chunk first (the latest segment)."""
    if not room.lead_segments or timing is None or room.cmx_bytes is None:
        return []
    first = room.order.index(room.lead_segments[0])
    idle = idle_bytes(module, room, timing)
    out: list[LeadLoad] = []
    for task, gate, _, buffer, nbytes in beyond:
        if nbytes < min_bytes or task.waits != (gate,):
            continue
        j = next((j for j in range(first - 1, max(first - 1 - LEAD_BACK, -1), -1)
                  if room.order[j] and idle[j] >= nbytes), None)
        if j is None:
            continue
        idle[j] -= nbytes
        task.waits = ()
        early[id(task)] = room.order[j] + "finished"
        out.append(LeadLoad(task, gate, buffer))
    return out


def give_up(task: DmaTask, gate: str, early: dict[int, str]) -> None:
    """A lead load waits on its gate again, no longer early."""
    task.waits = (gate,) if gate else ()
    early.pop(id(task), None)


def pin_top(module: Module, lead: list[LeadLoad], cmx_bytes: int) -> None:
    """Each lead load's buffer at the top of its tile's CMX, stacked downwards in ``lead``'s
    order; other CMX buffers are left for allocate-cmx."""
    top: dict[int, int] = {}
    buffers = {b.name: b for b in module.buffers}
    for load in lead:
        b = buffers[load.buffer]
        offset = (top.get(b.tile, cmx_bytes) - b.type.nbytes) // CMX_ALIGNMENT * CMX_ALIGNMENT
        b.offset = top[b.tile] = offset


def unpin(module: Module, lead: list[LeadLoad]) -> None:
    """The lead loads' buffers left to allocate-cmx again."""
    names = {load.buffer for load in lead}
    for b in module.buffers:
        if b.name in names:
            b.offset = None


def cut_pieces(module: Module, lead: list[LeadLoad]) -> None:
    """Each lead load's ``pieces``: DMAs of ``LEAD_PIECE_BYTES`` or less over its leading
    dim (output channels, outermost in both the constant and the CMX buffer), each updating
    what the load updates, through views added to ``module``."""
    symbols = SymbolTable(module)
    for load in lead:
        src, dst = symbols.region(load.task.src), symbols.region(load.task.dst)
        dims = dst.type.dims
        rows = max(1, LEAD_PIECE_BYTES * dims[0] // max(dst.type.nbytes, 1))
        load.pieces = []
        for k, a in enumerate(range(0, dims[0], rows)):
            b = min(a + rows, dims[0])
            names = []
            for side, name, region in (("src", load.task.src, src), ("dst", load.task.dst, dst)):
                view = f"{load.task.label}.{side}{k}"
                module.views.append(View(view, Ref(name, name.loc), (Slice(a, b),) + tuple(
                    Slice(0, d) for d in region.type.dims[1:])))
                names.append(Ref(view, name.loc))
            load.pieces.append(DmaTask(f"{load.task.label}.p{k}", (), tuple(load.task.updates),
                                       names[0], names[1], load.task.channel, load.task.mode))


def with_pieces(tasks: list, lead: list[LeadLoad]) -> list:
    """``tasks`` with each lead load that has pieces replaced by them, in its place."""
    pieces = {id(load.task): load.pieces for load in lead if load.pieces}
    return [p for t in tasks for p in pieces.get(id(t), [t])]


def drop_pieces(module: Module, load: LeadLoad) -> None:
    """A given-up lead load's pieces and their views gone: it loads whole again."""
    if load.pieces:
        names = {p.src for p in load.pieces} | {p.dst for p in load.pieces}
        module.views = [v for v in module.views if v.name not in names]
    load.pieces = None


def lead_order(tasks: list, lead: list[LeadLoad], early: dict[int, str],
               deep: set[int]) -> tuple[list, set[int], set[int]]:
    """``tasks`` with the lead loads' pieces in their places (``with_pieces``), the ``deep``
    ids with each piece's in its load's stead, and the pieces' ids; each piece loads early
    during its load's segment."""
    ids: set[int] = set()
    for load in lead:
        for piece in load.pieces or ():
            early[id(piece)] = early[id(load.task)]
            ids.add(id(piece))
    loads = {id(load.task) for load in lead if load.pieces}
    return with_pieces(tasks, lead), (deep - loads) | ids, ids


def compute_barriers(module: Module) -> set[str]:
    """The barriers DPU or ACT SHAVE tasks (or their variants) update: a DMA waiting on one
    waits for compute (``prefetch_order`` puts a piece ahead of it)."""
    out: set[str] = set()
    for task_list in module.task_lists:
        if task_list.executor is Executor.DMA:
            continue
        for t in task_list.tasks:
            out.update(t.updates)
            out.update(u for v in getattr(t, "variants", ()) for u in v.updates)
    return out



def free_slots(module: Module, pinned: list[LeadLoad], lead_segments: list[str],
               prefix_of) -> list[tuple[DmaTask, tuple[str, ...]]]:
    """Per lead segment and tile, its first chunk after the pinned ones, when its CMX slot
    is a pinned chunk's: a load of a constant that waits only on the ``done`` barrier of the
    block whose slot it takes, when that block's weights are one of the ``pinned`` buffers,
    waits on that block's load's gate instead.  Its slot was never shared (the pinned chunk
    lives at the top of CMX), so the wait only held it until that block's compute:
    ResNet-18's stage 4 started with the DDR idle 12K cycles while its first blocks loaded
    their input and computed, and its second layer 11K.  One per tile and segment: each
    lives beside the pinned chunks from its segment's start (ResNet-18, schedule_bench
    cycles, stage 4's first layer alone: none 1,667,511, one per tile 1,656,262, all four
    1,656,924).  Returns each changed load with the waits it had, in list order, for
    ``restore_slots``."""
    symbols = SymbolTable(module)
    buffers = {load.buffer: load for load in pinned}
    slot_owner: dict[str, LeadLoad] = {}    # done barrier -> the pinned load its block reads
    for task_list in module.task_lists:
        if task_list.executor is not Executor.DPU:
            continue
        for t in task_list.tasks:
            weights = symbols.region(t.weights) if t.weights else None
            load = buffers.get(weights.root.name) if weights is not None else None
            if load is None:
                continue
            for b in tuple(t.updates) + tuple(u for v in t.variants for u in v.updates):
                slot_owner[b] = load
    freed: list[tuple[DmaTask, tuple[str, ...]]] = []
    taken: set[tuple[str, int]] = set()     # (segment, tile) that has one
    pinned_tasks = {id(load.task) for load in pinned}
    for task_list in module.task_lists:
        if task_list.executor is not Executor.DMA:
            continue
        for t in task_list.tasks:
            segment = prefix_of(t.label or "")
            if not isinstance(t, DmaTask) or len(t.waits) != 1 or id(t) in pinned_tasks \
                    or segment not in lead_segments:
                continue
            owner = slot_owner.get(t.waits[0])
            src, dst = symbols.region(t.src), symbols.region(t.dst)
            if owner is None or not owner.gate or src is None or dst is None \
                    or src.kind is not BufferKind.CONST \
                    or (segment, dst.root.tile) in taken:
                continue
            taken.add((segment, dst.root.tile))
            freed.append((t, tuple(t.waits)))
            t.waits = (owner.gate,)
    return freed


def restore_slots(freed: list[tuple[DmaTask, tuple[str, ...]]]) -> None:
    """``free_slots`` undone: each load waits on its slot again."""
    for task, waits in freed:
        task.waits = waits


def lead_starts(tasks: list, freed: list[tuple[DmaTask, tuple[str, ...]]],
                computed: set[str], lead_segments: list[str], symbols: SymbolTable,
                prefix_of) -> list:
    """``tasks`` with the DMAs that load a lead segment's weights as soon as its gate
    allows moved to its start on their channel: each ``free_slots`` load ahead of the first
    DMA of its segment there that waits on compute (``computed``: ``compute_barriers``),
    when it is listed after one (the lowering put it behind the store of the block whose
    slot it took); and, in every lead segment but the first, each load of a constant that
    waits on the segment's gate alone ahead of the loads of the segment's input (the
    lowering lists those first): ``relax_gates`` then lets that chunk wait on the gate two
    back, so it streams while the previous layer's last blocks compute and store, where the
    DDR idled (ResNet-18's second 512-channel layer: its one chunk not pinned loaded after
    its input, 11K cycles after the first layer's last chunk).  Every moved load waits on
    what the DMAs it now precedes wait on, or on less, so each channel still runs its list
    in order."""
    moving = {id(t) for t, _ in freed}
    anchors: dict[tuple, int] = {}      # (segment, channel, kind) -> id of the DMA to precede
    for t in tasks:
        if not isinstance(t, DmaTask) or id(t) in moving:
            continue
        segment = prefix_of(t.label or "")
        if segment not in lead_segments:
            continue
        if computed & set(t.waits):
            anchors.setdefault((segment, t.channel, "compute"), id(t))
        src = symbols.region(t.src)
        if src is not None and src.kind is not BufferKind.CONST:
            anchors.setdefault((segment, t.channel, "input"), id(t))
    place = {id(t): i for i, t in enumerate(tasks)}
    ahead: dict[int, list] = {}
    for t in tasks:
        if not isinstance(t, DmaTask):
            continue
        segment = prefix_of(t.label or "")
        if id(t) in moving:
            anchor = anchors.get((segment, t.channel, "compute"))
        elif segment in lead_segments[1:] and len(t.waits) == 1 \
                and t.waits[0].endswith("finished") and _loads_constant(symbols, t):
            anchor = anchors.get((segment, t.channel, "input"))
            inputs = [u for u in tasks[place.get(anchor, 0):place[id(t)]]
                      if isinstance(u, DmaTask) and u.channel == t.channel
                      and not set(u.waits) >= set(t.waits)]
            if inputs:          # something between waits on less: not moved past it
                anchor = None
        else:
            continue
        if anchor is not None and place[id(t)] > place[anchor]:
            ahead.setdefault(anchor, []).append(t)
    moved = {id(t) for group in ahead.values() for t in group}
    out = []
    for t in tasks:
        if id(t) in moved:
            continue
        out.extend(ahead.get(id(t), ()))
        out.append(t)
    return out


def fit_freed(module: Module, arch, task_list, freed: list, computed: set[str],
              room: EarlyRoom, symbols: SymbolTable, fits) -> bool:
    """``task_list``'s DMAs in ``lead_starts``' order, tried on ``arch`` (``fits``: allocate-cmx's
    trial, ``resident.cmx_fits``): while it finds no room, the ``free_slots`` load whose
    buffer it found none for waits on its slot again (every one left when it names another
    buffer) and the order is made again.  Returns whether the last try placed every buffer;
    when not, the list is back in the order it had (``task_list.tasks`` on entry)."""
    from vpuc.fusion.resident import cmx_failure
    listed = task_list.tasks
    task_list.tasks = lead_starts(listed, freed, computed, room.lead_segments, symbols,
                                  room.prefix_of)
    if arch is None:
        return True
    # while slots are freed, the trial names the buffer it finds no room for
    failed = cmx_failure(module, arch) if freed else None
    while failed is not None and freed:
        back = [f for f in freed if symbols.region(f[0].dst).root.name == failed] or freed
        restore_slots(back)
        freed = [f for f in freed if f not in back]
        task_list.tasks = lead_starts(listed, freed, computed, room.lead_segments, symbols,
                                      room.prefix_of)
        failed = cmx_failure(module, arch) if freed else None
    # a trial that placed every buffer with slots freed decides; else ``fits`` does
    placed = bool(freed) or fits(module, arch)
    if not placed:
        task_list.tasks = listed
        placed = fits(module, arch)
    return placed


def _loads_constant(symbols: SymbolTable, task: DmaTask) -> bool:
    src, dst = symbols.region(task.src), symbols.region(task.dst)
    return src is not None and dst is not None and src.kind is BufferKind.CONST \
        and dst.kind is BufferKind.CMX
