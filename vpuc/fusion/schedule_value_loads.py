"""The loads of a segment without constants of its own on the store channel when the load
channel holds a later segment's weights ahead of them and the segment before is DDR-bound
(``--schedule default``, after ``schedule_deps.relax_gates``).

Each DMA channel is a FIFO.  The lowering puts a segment's loads on channel 0 and its
stores on the store channel, and the prefetch puts a later segment's weights on channel 0
too, right after the last load of the segment they run during
(``schedule_prefetch_order.prefetch_order``: a CNN classifier's deep chunks).  A segment listed
next that only reads values the segment before computed (a global pool) then waits for
those weights to finish moving, although what it reads was stored on the other channel
long before: ResNet-18's global pool read the last 3x3 layer's output 17K cycles after
its last store, behind the classifier's weight chunks; on the store channel its loads run
right behind the stores they wait for.  Unless the prefetch listed a weight chunk among
them there too: its loads would then take turns with it (a 3x3 layer on a 4x4 map and a
classifier under a CMX budget of 128 KiB: 58,501 -> 60,373 cycles).

A segment with constants of its own keeps its loads on channel 0: its blocks wait for
its weights anyway, which the lowering lists on channel 0 with its loads.  So does one
after a segment that does not stream its weights (``schedule_room.EarlyRoom.heavy``: in
a CNN, a segment whose loads bring 20 times more bytes of constants than of values):
behind a segment whose DDR idles, the prefetch has moved long before (MobileNetV3-Small's
squeeze-excite pools, behind its classifiers' chunks deepened over ACT SHAVE segments: on
the store channel they queued behind those segments' stores, 556,461 -> 587,857 cycles).

Expects: a lowered module after ``relax_gates``, its segments' keys in order and gates.
Guarantees: a load changes channel only, keeping its place in the list, so the list stays
one every channel can run without waiting on a later task; every task reads, writes,
waits on and updates what it did.  The change is kept only when allocate-cmx still
places every buffer (tried): a buffer's lifetime follows the queues of its users.
"""

from __future__ import annotations

from vpuc.fusion.schedule_room import EarlyRoom
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.provenance import by_dotted_prefix
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, Executor

LOAD_CHANNEL = 0


def behind_stores(module: Module, keys: list[str], finishes: list[str | None], arch,
                  placement: dict[str, int] | None) -> dict[str, int] | None:
    """Move the loads the module docstring names to the store channel (``keys``: the
    segments in order, ``finishes``: their gates); returns the CMX placement to offer
    allocate-cmx: a new trial allocation's when a load moved and every buffer fits, else
    ``placement`` (with every load where it was)."""
    if arch is None or arch.dma_channels < 2:
        return placement
    heavy = EarlyRoom(module, {f for f in finishes if f}, arch.cmx_bytes).heavy_segments
    after_heavy = {s for s in range(1, len(keys)) if keys[s - 1] + "." in heavy}
    segment = {key: s for s, key in enumerate(keys)}
    symbols = SymbolTable(module)
    moved: list[DmaTask] = []
    for task_list in module.task_lists:
        if task_list.executor is not Executor.DMA:
            continue
        dmas = [t for t in task_list.tasks if isinstance(t, DmaTask)]
        of = {id(t): by_dotted_prefix(segment, t.label or "") for t in dmas}
        weighted = {of[id(t)] for t in dmas if _loads_constant(symbols, t)}
        stores = [t.channel for t in dmas if t.channel != LOAD_CHANNEL]
        if not stores:
            continue
        channel = stores[0]
        queued: set[int] = set()          # segments whose loads queue behind a prefetch
        last = None                       # the latest task on the load channel so far
        for t in dmas:
            if t.channel != LOAD_CHANNEL:
                continue
            s = of[id(t)]
            if s in after_heavy and s not in weighted and last is not None \
                    and _prefetch_for_later(symbols, last, of, s):
                queued.add(s)
            last = t
        for s in queued - _prefetch_among(symbols, dmas, of, queued, channel):
            for t in dmas:
                if t.channel == LOAD_CHANNEL and of[id(t)] == s:
                    t.channel = channel
                    moved.append(t)
    if not moved:
        return placement
    from vpuc.passes.allocate_cmx import try_allocate
    placed, _ = try_allocate(module, arch)
    if placed is not None:
        return placed
    for load in moved:
        load.channel = LOAD_CHANNEL
    return placement


def _prefetch_among(symbols: SymbolTable, dmas: list, of: dict[int, int | None],
                    segments: set[int], channel: int) -> set[int]:
    """The ``segments`` whose loads would take turns with a prefetch on ``channel``: a
    constant load waiting on nothing listed between their first and last load there."""
    out: set[int] = set()
    for s in segments:
        places = [i for i, t in enumerate(dmas) if of[id(t)] == s and t.channel == LOAD_CHANNEL]
        if any(t.channel == channel and not t.waits and _loads_constant(symbols, t)
               for t in dmas[places[0]:places[-1]]):
            out.add(s)
    return out


def _prefetch_for_later(symbols: SymbolTable, task: DmaTask, of: dict[int, int | None],
                        s: int) -> bool:
    """Whether ``task`` loads a constant into CMX for a segment after ``s``, waiting on
    nothing: a prefetch that may still be moving when segment ``s``'s loads are ready."""
    later = of[id(task)]
    return not task.waits and later is not None and later > s \
        and _loads_constant(symbols, task)


def _loads_constant(symbols: SymbolTable, task: DmaTask) -> bool:
    """Whether a DMA loads a constant into CMX (weights, a bias, zeros)."""
    src, dst = symbols.region(task.src), symbols.region(task.dst)
    return src is not None and dst is not None and src.kind is BufferKind.CONST \
        and dst.kind is BufferKind.CMX
