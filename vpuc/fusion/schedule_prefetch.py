"""Where ``--schedule default`` loads a segment's constants early (``schedule.overlap``,
decision 2): which ones run further back than the segment before theirs (``deepen``);
where in the DMA list each goes is ``schedule_prefetch_order``'s, how much room a tile's
CMX leaves them ``schedule_room.EarlyRoom``'s, and the one barrier the deep loads of a
segment share ``schedule_share``'s.

Expects: a lowered module whose segment gates are ``<prefix>finished`` barriers.
Guarantees: nothing here changes what a task reads or writes.
"""

from __future__ import annotations

from collections import Counter

from vpuc.fusion.schedule_room import (DEEP_BYTES_PER_ACT_TASK, EARLY_CMX_BYTES, EarlyRoom,
                                       act_capacity)
from vpuc.ir.tasks import DmaTask
# The largest chunk of a streaming MatMul's constant weights the lowering cuts under
# ``--schedule default`` (``lower_dpu_matmul``): each chunk is one deep load, and smaller
# ones find more segments to run during; the estimate then leaves their loads out of the
# blocks' (``lower_dpu_split``).  MobileNetV3-Small (schedule_bench cycles, its Gemms' chunk
# counts): 64K 956,658 (22 and 32), 128K 812,951 (11, 16), 192K 822,454 (7, 11), 256K
# 825,742 (7, 8); the old estimate, each block loading its chunk, took 7 and 6: 860,111.
DEEP_LOAD_BYTES = 128 << 10
# How many segments back ``deepen`` spreads a heavy segment's early loads, one per segment,
# never across another heavy one.  ResNet-18: 1 1,874,017, 2 and 3 1,862,045 (two early
# chunks); with the room forced to the whole CMX (four early chunks), 4: 1,858,530, but
# 1.8 MB more of CMX held across stage 3.
HEAVY_BACK = 2
# The share of a CNN classifier's weight chunks ``deepen`` loads deep, during the latest
# segment that loads as many bytes; the rest load in the classifier's own order.  With the
# deep ones taking turns between the channels (``prefetch_order``), ResNet-18 (schedule_bench
# cycles): 1/4 1,744,650, 3/8 1,738,254, 1/2 1,735,207, 5/8 1,734,515, 3/4 1,733,414, 7/8
# 1,737,014, all 1,741,637; all on channel 0, 1/2 (before): 1,738,080.
CNN_CLASSIFIER_DEEP = 3 / 4
# A classifier's deep chunks in a network with ACT SHAVE work stay on channel 0 after the
# last load of the segment they run during (``prefetch_order``): MobileNetV3-Small 556,461
# schedule_bench cycles.  Measured instead: taking turns between the channels 581,305; on
# channel 1 after the segment's last store 684,126, or before its first store that waits
# on compute 630,137 (a store late frees no block slot); in 64 KB or 32 KB pieces ahead of
# its DMAs that wait on compute 614,232 / 620,031; after the next segment's first load
# 756,504; also during the DPU-only blocks 1-3, whose DDR idles, 592,569 (CMX then keeps
# a later chunk out); 2 of the last Gemm's chunks during the first Gemm 561,264.  The
# simulated DMA is in FIFO order: a chunk costs the path wherever a load that waits on data
# queues behind it, and only 1% of the run is the channels' shared DDR (bench/dma_headroom.py).
# The smallest load of a segment that does not stream its weights that ``deepen`` moves
# further back, when the segment before cannot hide it.
DEEP_MIN_BYTES = 32 << 10


def deepen(moved: list[tuple[DmaTask, str, int, str, int]], early: dict[int, str],
           early_bytes: dict[tuple[str, int], int], room: EarlyRoom,
           copies: dict[int, list[tuple[DmaTask, int, str, int]]] | None = None,
           turns: set[int] | None = None) -> set[int]:
    """Decision 2 further back (``schedule.py``): the early loads of a streaming segment
    (``EarlyRoom.streaming``: a classifier's weights, which neither its own compute nor
    the short segment before it can hide) whose constants on a tile exceed
    ``EARLY_CMX_BYTES`` run during an earlier segment with ACT SHAVE work instead, so the
    DDR moves them while the ACT SHAVEs compute; ``early[id(load)]`` becomes that
    segment's gate.  ``moved``: the early loads, (load, gate, tile, destination buffer,
    its bytes), in list order.  Loads are taken from the last (the network's end has
    no compute after it to hide them behind), one per segment (loads of at most
    ``DEEP_BYTES_PER_ACT_TASK`` beside the others: they take no segment), each in the latest
    segment before the next one's whose ACT SHAVE work hides it (``act_capacity``: its
    loads on channel 0 end long before that work), and never so
    far back that a segment it then lives across lacks room on its tile beside that
    segment's buffers, the next one's (which may run beside it, ``schedule_deps``) and
    ``EARLY_CMX_BYTES`` for the usual prefetch.
    Any other segment's load of at least ``DEEP_MIN_BYTES`` goes further back the same way
    when the segment just before it has too few ACT SHAVE tasks to hide it (a squeeze-excite
    block's 1x1 weights and its projection's, behind a pool and two one-pixel layers), as
    do the weights of a projection a squeeze-excite product folded into
    (``EarlyRoom.scaled_segments``) of any size: its scale waits on them as soon as the
    excitation is computed, and behind the one-pixel layer before it they held the
    excitation's stores back in the store channel's FIFO (MobileNetV3-Small: 572,378 ->
    565,060 cycles; every load from 16 KB instead of 32 KB: 642,781), as do a squeeze-excite
    1x1's (streaming, no classifier): behind them its input's loads and stores waited in
    the FIFOs, ~1.5K cycles a block (MobileNetV3-Small 554,079 -> 550,363), and
    ``copies`` (a load's id -> the CMX -> CMX copies of it that load early too: (copy, tile,
    buffer, bytes)) go with it, when their tiles have the room.
    A network without ACT SHAVE work (a CNN) has no segment to hide a classifier's weights
    behind: the first half of them run during the latest segment before theirs that loads
    at least as many bytes itself (``loader``), after its last load, instead of after the
    short segments between (a pool, a flatten) while the DDR idles; the other half leave
    ``early`` and load in the classifier's own order.  There a heavy segment's early loads
    (``EarlyRoom.heavy``: a DDR-bound layer's weight chunks) go one per segment back from
    the last, up to ``HEAVY_BACK`` segments, never across another heavy one, so the DDR
    moves them while the DPU-bound layers before compute.  Returns the ids of the loads
    (and copies) moved; ``turns`` gets those of a CNN classifier (``prefetch_order``)."""
    deep: set[int] = set()
    if room.cmx_bytes is None:
        return deep
    index = {p + "finished": i for i, p in enumerate(room.order) if p}
    streaming = room.streaming()
    per_tile = Counter((room.prefix_of(t.label or ""), tile) for t, _, tile, _, _ in moved)
    cut = {prefix for (prefix, _), n in per_tile.items() if n > 1}     # weights in chunks
    held: dict[tuple[int, int], int] = {}      # (segment, tile) -> bytes loaded deep
    counted: set[str] = set()                  # buffers held already (two partial loads)

    def fits(j: int, tile: int, nbytes: int) -> bool:
        return _busy(room, j, tile) + held.get((j, tile), 0) + nbytes + EARLY_CMX_BYTES \
            <= room.cmx_bytes

    def hidden(a: int, gate: str) -> bool:
        """Whether segment ``a`` (whose end is ``gate``), the one the next segment's early
        loads run during, moves as many bytes of values itself as they all do: their DMAs
        then take no longer than its own."""
        ahead = sum(n for (g, _), n in early_bytes.items() if g == gate)
        return room.traffic.get(room.order[a], (0, 0))[1] >= ahead

    ahead: dict[str, list[DmaTask]] = {}      # gate -> a CNN classifier's early loads
    heavy = getattr(room, "heavy_segments", set())
    folded = getattr(room, "scaled_segments", set())
    back: dict[str, int] = {}                 # gate -> the segment its last heavy load went to

    def loader(a: int, nbytes: int) -> int | None:
        """The latest segment before ``a`` whose own loads bring ``nbytes`` or more."""
        return next((j for j in range(a - 1, -1, -1)
                     if sum(room.traffic.get(room.order[j], (0, 0))) >= nbytes), None)

    # segment -> bytes the loads of segments that do not stream (the second kind) load
    # deep during it: together within its ACT SHAVE tasks' share
    spent: dict[int, int] = {}

    copies = copies or {}
    cursor = len(room.order)
    for task, gate, tile, buffer, nbytes in reversed(moved):
        a = index.get(gate)
        # a copy of a load waits on it: it stays after it (or moves with it, below)
        if a is None or task.waits:
            continue
        classifier = _classifier_load(room, streaming, early_bytes, task, gate, tile)
        # any size: a folded projection's; a squeeze-excite 1x1's, one load a tile (under a
        # small --cmx-budget its many chunks' barriers overflowed NPU37XX's 64)
        prefix = room.prefix_of(task.label or "")
        any_size = prefix in folded or (prefix in streaming and prefix not in cut)
        if not classifier and ((nbytes < DEEP_MIN_BYTES and not any_size) or hidden(a, gate)):
            continue
        if not classifier and room.prefix_of(task.label or "") in heavy:
            # a heavy segment's early loads (from the last), one per segment back, into
            # segments whose DDR idles while their DPU computes; never across another
            # heavy segment (its own chunks need that CMX and that DDR)
            j = back.get(gate, a) - 1
            if j >= max(a - HEAVY_BACK, 0) and not any(room.order[i] in heavy
                                                       for i in range(j, a + 1)):
                back[gate] = j
                early[id(task)] = room.order[j] + "finished"
                deep.add(id(task))
            continue
        if classifier and not any(room.act_tasks.values()):
            # no ACT SHAVE work anywhere (a CNN): the DDR idles while the short segments
            # before the classifier (a pool, a flatten) run; the first half of its weights
            # load during the latest segment that loads at least as many bytes itself,
            # after its last load, the rest in the classifier's own order, after its rows,
            # while its DPU computes the first half (a deep load ahead of them would hold
            # the pool's loads back in the channel's FIFO).  ResNet-18's Gemm, 8 chunks,
            # during its last 3x3 layer: all deep 1,893,640 cycles (1,894,229 taking turns
            # with its stores on channel 1), the last 2 in own order 1,883,634, 4 1,883,645,
            # 5 1,883,819, 6 1,890,214; none moved 1,903,843 (``CNN_CLASSIFIER_DEEP``
            # since they take turns between the channels).  allocate-cmx's trial decides
            # the room (``schedule._fewer_deep``)
            j = loader(a, sum(n for (g, _), n in early_bytes.items() if g == gate))
            if j is None:
                continue
            own = ahead.setdefault(gate, [t for t, g, *_ in moved if g == gate])
            if own.index(task) < int(len(own) * CNN_CLASSIFIER_DEEP):
                early[id(task)] = room.order[j] + "finished"
                deep.add(id(task))
                if turns is not None:
                    turns.add(id(task))
            else:
                early.pop(id(task))      # in the classifier's own order, after its rows
            continue
        extra = 0 if buffer in counted else nbytes
        along = [(c, t, b, n) for c, t, b, n in copies.get(id(task), ())
                 if early.get(id(c)) == gate]
        anchor = None
        for j in range(a - 1, -1, -1):
            if not fits(j, tile, extra) or not all(fits(j, t, n) for _, t, _, n in along):
                break
            if not classifier:
                # the latest segment with ACT SHAVE work left to hide it: no cursor
                if act_capacity(room, room.order[j]) \
                        >= spent.get(j, 0) + nbytes + sum(n for *_, n in along):
                    anchor = j
                    break
            elif act_capacity(room, room.order[j]) >= nbytes:
                anchor = j             # the latest that fits, when none before the cursor does
                if j <= cursor:
                    break
        if anchor is None:
            continue
        counted.add(buffer)
        for k in range(anchor, a):
            held[(k, tile)] = held.get((k, tile), 0) + extra
            for _, t, _, n in along:
                held[(k, t)] = held.get((k, t), 0) + n
        if not classifier:
            spent[anchor] = spent.get(anchor, 0) + nbytes + sum(n for *_, n in along)
        elif nbytes > DEEP_BYTES_PER_ACT_TASK:     # a bias, say, takes no segment of its own
            cursor = min(cursor, anchor - 1)
        for t in [task] + [c for c, *_ in along]:
            early[id(t)] = room.order[anchor] + "finished"
            if classifier:
                deep.add(id(t))
    deep |= _left_over(moved, early, early_bytes, room, held, index, streaming)
    return deep


def _classifier_load(room: EarlyRoom, streaming: set[str],
                     early_bytes: dict[tuple[str, int], int], task, gate: str, tile: int) -> bool:
    """Whether an early load is a streaming segment's (a classifier's) that the usual room
    beside the segment before (``EARLY_CMX_BYTES``) cannot take."""
    return room.prefix_of(task.label or "") in streaming \
        and early_bytes.get((gate, tile), 0) > EARLY_CMX_BYTES


def _busy(room: EarlyRoom, j: int, tile: int) -> int:
    """The CMX bytes segment ``j`` and the one after it (which may run beside it,
    ``schedule_deps``) take on ``tile``: a load held during ``j`` lives beside both."""
    return sum(room.used.get((room.order[k], tile), 0)
               for k in (j, j + 1) if k < len(room.order))


def _left_over(moved: list, early: dict[int, str], early_bytes: dict[tuple[str, int], int],
               room: EarlyRoom, held: dict[tuple[int, int], int], index: dict[str, int],
               streaming: set[str]) -> set[int]:
    """``deepen``'s streaming loads that found no segment, tried again with the room the
    usual early loads of the segments they would live across actually take instead of
    ``EARLY_CMX_BYTES``: those loads are known by now, and a classifier's last loads
    otherwise run after everything else, on the critical path (MobileNetV3-Small's first
    Gemm: two 112 KB chunks, 9.2K cycles, once the other chunks hold its tile's CMX; with
    them deep 607,090 -> 603,365 cycles).  Each goes to the latest segment before its own
    whose ACT SHAVE work hides it beside the deep loads that run during it already
    (``act_capacity``: ``deepen``'s and those placed here before it; one at a time, the
    last expansion of MobileNetV3-Small took two of them beside the second Gemm's last
    chunk, 14K cycles of DDR behind 9.4K of ACT SHAVE work, which held the last pool's
    loads back in channel 0's FIFO) and that it lives across with room; returns their
    ids."""
    usual: dict[tuple[str, int], int] = {}     # (gate, tile) -> bytes still loading early
    hidden: dict[int, int] = {}                # segment -> bytes of deep loads during it
    for task, gate, tile, _, nbytes in moved:
        anchor = early.get(id(task))
        if anchor == gate \
                and not _classifier_load(room, streaming, early_bytes, task, gate, tile):
            usual[(gate, tile)] = usual.get((gate, tile), 0) + nbytes
        elif anchor is not None and anchor != gate and anchor in index:
            hidden[index[anchor]] = hidden.get(index[anchor], 0) + nbytes
    placed: set[int] = set()
    for task, gate, tile, _, nbytes in moved:
        a = index.get(gate)
        if a is None or task.waits or early.get(id(task)) != gate \
                or not _classifier_load(room, streaming, early_bytes, task, gate, tile):
            continue
        for j in range(a - 1, -1, -1):
            reserve = max(usual.get((room.order[k] + "finished", tile), 0)
                          for k in (j, j + 1) if k < len(room.order))
            if _busy(room, j, tile) + held.get((j, tile), 0) + nbytes + reserve \
                    > room.cmx_bytes:
                break
            if act_capacity(room, room.order[j]) >= hidden.get(j, 0) + nbytes:
                for k in range(j, a):
                    held[(k, tile)] = held.get((k, tile), 0) + nbytes
                hidden[j] = hidden.get(j, 0) + nbytes
                early[id(task)] = room.order[j] + "finished"
                placed.add(id(task))
                break
    return placed
