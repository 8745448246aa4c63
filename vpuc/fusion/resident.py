"""Values kept in CMX between segments (``--schedule default``).

``lower-graph`` passes every value between segments through DDR: its producer's
blocks store it and each reader's blocks load it back.  A DDR transfer holds its
DMA channel for the DDR's read or write latency (870 and 310 cycles on NPU37XX)
before its first byte, so a chain of small layers (MobileNetV3-Small after its
first stages, its squeeze-excite branches of four tiny segments) spends its time
waiting on DDR, not computing.  A CMX -> CMX copy pays the CMX's latency (16
cycles) instead.

``resident_values`` picks the values that stay in CMX: a ``ddr`` value that a DPU
layer (a MatMul too, whose folded views, ``fold_views.py``, are then views of the CMX
buffer) or an ACT segment produces and only such segments read (no DMA or library
segment, which address DDR by their own plans: DDR -> DDR copies, re-typed bytes)
becomes one CMX buffer of the whole tensor on one tile (``Value.tile``,
declared ``cmx %v : T tile t``).  The emitters' stores and loads address views of
that buffer instead of a DDR buffer, so each block's store is a CMX -> CMX copy into
it and each reader's load a copy out of it (also across tiles); a DPU layer's blocks
on the value's own tile write their rows straight into it instead, with no block
slot and no store (``in_place_blocks``; the loads of such rows wait on those tasks:
``schedule_deps`` rule 1).  The value lives from its producer's first store to its last reader's
last load; the resident values live at once on a tile never take more than
``room`` bytes (what the segments' own blocks, ``cmx_budget``, and the schedule's
prefetched constants, ``schedule.EARLY_CMX_BYTES``, leave of the tile's CMX), each
on the tile with more of that room left over its lifetime.

The schedule's other decisions see resident buffers as values between segments:
``shared_buffers`` names them (CMX buffers that DMA tasks of more than one segment
touch), ``resident_use`` adds their bytes to every segment they live across, for
the CMX fit checks of ``schedule_prefetch.EarlyRoom`` and ``schedule_deps``.

Expects: values as ``lower_segments.graph_values`` names them, laid out by
``schedule.ddr_layouts``.  Guarantees: a resident value's bytes are the ones its
DDR buffer would hold (same type and dims order), so the tasks compute the same
values; no network input, output or constant is resident.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vpuc.fusion.blocked_program import Value
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.types import NAMED_ORDERS, DimsOrder
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor

if TYPE_CHECKING:
    from vpuc.fusion.schedule import SegmentValues

# Segment kinds whose loads and stores of a value are block copies of its (strided) views.
RESIDENT_KINDS = ("dpu", "act", "matmul")
NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def resident_room(cmx_bytes: int | None, cmx_budget: int, early: int) -> int:
    """The CMX bytes per tile resident values may hold at once: what a segment's blocks
    (``cmx_budget``) and the next segment's prefetched constants (``early``) leave."""
    return 0 if cmx_bytes is None else max(0, cmx_bytes - cmx_budget - early)


def resident_values(values: list[Value], segments: list[SegmentValues], keep_out: set[str],
                    tiles: int, room: int) -> list[Value]:
    """``values`` with the ones that stay in CMX given a tile (module docstring), in the
    order their producers run; ``keep_out``: values that must not (a layer's output a
    fused epilogue takes, which never exists whole)."""
    if room <= 0 or tiles < 1:
        return values
    by_name = {v.name: v for v in values}
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for s, seg in enumerate(segments):
        for name in seg.writes:
            producer.setdefault(name, s)
        for name in seg.reads:
            readers.setdefault(name, []).append(s)
    held = [[0] * len(segments) for _ in range(tiles)]      # tile -> segment -> bytes
    chosen: dict[str, int] = {}
    for name in sorted(producer, key=producer.get):
        v = by_name[name]
        users = readers.get(name, [])
        if v.kind != "ddr" or name in keep_out or not users or not v.type.is_static \
                or v.type.nbytes > room:
            continue
        first = producer[name]
        if any(segments[s].kind not in RESIDENT_KINDS for s in [first, *users]) \
                or any(name in segments[s].writes for s in users if s != first):
            continue
        span = range(first, max(users) + 1)
        peak = [max(held[t][s] for s in span) for t in range(tiles)]
        tile = min(range(tiles), key=lambda t: (peak[t], t))
        if peak[tile] + v.type.nbytes > room:
            continue
        for s in span:
            held[tile][s] += v.type.nbytes
        chosen[name] = tile
    return [replace(v, tile=chosen[v.name]) if v.name in chosen else v for v in values]


def in_place_blocks(e, out: Value, channels: int, tiles_of: list[int],
                    whole: bool = True) -> set[int]:
    """The blocks (``tiles_of[k]``: block k's tile) of a DPU layer whose task writes its
    output rows straight into the resident value ``out`` (no CMX slot, no store): those on
    ``out``'s tile, when the task's ``channels`` (aligned) are exactly ``out``'s, the
    layer's blocks are ``whole`` rows of them (NHWC: one contiguous run) and no epilogue
    runs on the blocks before their store (``fuse_epilogue``).  ``e``: the layer's
    ``lower_dpu.LayerEmitter``."""
    if out.tile is None or out.kind != "ddr" or not whole or e.prog.epilogue is not None \
            or out.type.order != NHWC or out.type.dims[1] != channels:
        return set()
    return {k for k, t in enumerate(tiles_of) if t == out.tile}


def in_place_input(e, k: int, x: Value, channels: int, first_row: int, rows: int,
                   whole: bool = True) -> str | None:
    """A view of ``rows`` rows from ``first_row`` of the resident value ``x`` for block
    ``k``'s DPU task to read straight (no load; ``e.reads_in_place`` notes it), when the
    block's tile holds ``x``, the task reads ``channels`` (aligned) that are exactly
    ``x``'s and ``whole`` rows of them (NHWC: one contiguous run); else None.  ``e``: the
    layer's ``lower_dpu.LayerEmitter``."""
    if x.tile != e.tile(k) or x.kind != "ddr" or not whole or x.type.order != NHWC \
            or x.type.dims[1] != channels:
        return None
    e.reads_in_place.add(k)
    n, c, _, w = x.type.dims
    return e.view(f"in.v{k}", x.name, [f"0:{n}", f"0:{c}", f"{first_row}:{first_row + rows}",
                                       f"0:{w}"])


def shared_buffers(module: Module, segment_of) -> dict[str, list[int]]:
    """CMX buffer -> the sorted segments whose DMA tasks (or DPU tasks reading or writing in
    place) touch it, for the CMX buffers those of more than one segment touch (resident values);
    ``segment_of(label)``: a task's segment index, or None."""
    symbols = SymbolTable(module)
    users: dict[str, set[int]] = {}
    for task_list in module.task_lists:
        for task in task_list.tasks:
            # DMAs, and DPU tasks writing a value in place (in_place_blocks)
            if isinstance(task, DmaTask):
                names = (task.src, task.dst)
            elif isinstance(task, DpuTask):
                names = (*task.inputs, task.output)
            else:
                continue
            s = segment_of(task.label or "")
            if s is None:
                continue
            for name in names:
                region = symbols.region(name)
                if region is not None and region.kind is BufferKind.CMX:
                    users.setdefault(region.root.name, set()).add(s)
    return {root: sorted(s) for root, s in users.items() if len(s) > 1}


def resident_use(module: Module, order: list[str], prefix_of) -> dict[tuple[str, int], int]:
    """(segment prefix, tile) -> the bytes of resident buffers live during that segment
    (from the first to the last segment whose DMAs touch it); ``order``: the segment
    prefixes in program order, ``prefix_of(name)``: the segment prefix of a task label."""
    index = {p: i for i, p in enumerate(order)}

    def segment_of(label: str) -> int | None:
        return index.get(prefix_of(label))

    tiles = {b.name: b for b in module.buffers if b.kind is BufferKind.CMX}
    use: dict[tuple[str, int], int] = {}
    for root, segs in shared_buffers(module, segment_of).items():
        buffer = tiles[root]
        for s in range(segs[0], segs[-1] + 1):
            key = (order[s], buffer.tile)
            use[key] = use.get(key, 0) + buffer.type.nbytes
    return use


def segment_order(module: Module, prefix_of) -> list[str]:
    """Segment prefixes in program order: by their last DMA (a segment's last store; its
    first loads may have moved ahead of the previous segment's, ``schedule.overlap``)."""
    last: dict[str, int] = {}
    for task_list in module.task_lists:
        if task_list.executor is Executor.DMA:
            for i, task in enumerate(task_list.tasks):
                last[prefix_of(task.label or "")] = i
    return sorted(last, key=last.get)


def cmx_fits(module: Module, arch) -> bool:
    """Whether allocate-cmx places every CMX buffer of ``module`` on ``arch`` (tried; the
    offsets are left as they were)."""
    from vpuc.passes.allocate_cmx import try_allocate
    return try_allocate(module, arch)[0] is not None
