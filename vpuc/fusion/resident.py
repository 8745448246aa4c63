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
buffer) or an ACT segment produces and only such segments read, or a Concat, whose copies
then read it CMX -> DDR (``CMX_READING_DMA``: an unrolled RNN's ``h``, which the next step's
MatMul reads and the Concat stacking ``Y`` copies; a CRNN 723,958 -> 586,094 cycles); no
other DMA or library segment, which address DDR by their own plans (DDR -> DDR copies
through scratch buffers, re-typed bytes),
becomes one CMX buffer of the whole tensor on one tile (``Value.tile``,
declared ``cmx %v : T tile t``); so does a Concat's result whose operands DPU layers all
write in place (``concat_in_place.resident_concats``: it lives from the first of them).
The emitters' stores and loads address views of that buffer instead of a DDR buffer,
so each block's store is a CMX -> CMX copy into it and each reader's load a copy out
of it (also across tiles); a DPU layer's blocks on the value's own tile write their
rows straight into it instead, with no block slot and no store (``in_place_blocks``;
the loads of such rows wait on those tasks: ``schedule_deps`` rule 1).  The value lives from its producer's first store to its last reader's
last load; the resident values live at once on a tile never take more than
``room`` bytes (what the segments' own blocks, ``cmx_budget``, and the schedule's
prefetched constants, ``schedule.EARLY_CMX_BYTES``, leave of the tile's CMX), each
on the tile with more of that room left over its lifetime.

Padded channels.  A DPU task reads and writes channels in multiples of 16
(``VPU_CHANNEL_ALIGNMENT``, ``src/vpux_compiler/include/vpux/compiler/dialect/VPU/nce_invariant.hpp``
in ``openvinotoolkit/npu_plugin``, which ``lower_dpu_channels`` cites; the NPU compiler's
``expand_activation_channels.cpp`` expands a tensor to that multiple), so a value of 72 or 88
channels (MobileNetV3-Small's expansions) could not be read or written in place: each
block was copied CMX -> CMX with its padding zeroed.  Such a value, when a convolution
(``PADS_WRITTEN_BY``) writes it and only DPU layers reading it through views of its
channels (``PADDED_READERS``: window layers, eltwise joins) read it,
gets a buffer of the aligned channel count from the start (``Value.padded``,
``padded_channels``).  Its users' views name the real channels (a strided view) or all of
them: producers write whole rows (in place, or a block's store of all its channels) and
consumers read whole rows (in place, or a load with no zero copy after it).  The pad
channels hold finite values: a convolution's pad outputs are its post-op of 0 (zero
weights rows and bias, over inputs whose pads are zeroed or finite), and a depthwise
layer's input pads are zeroed (``lower_dpu_nn.emit_jobs``) unless its input is padded
itself, finite by the same argument; so 0 x pad is 0 in every reader.  A path that stores
only the real channels (a convolution cut over its reduction) gets its pads zeroed once
(``ensure_pads``).

The schedule's other decisions see resident buffers as values between segments:
``shared_buffers`` names them (CMX buffers that DMA tasks of more than one segment
touch), ``resident_use`` adds their bytes to every segment they live across, for
the CMX fit checks of ``schedule_room.EarlyRoom`` and ``schedule_deps``.

Expects: values as ``lower_segments.graph_values`` names them, laid out by
``schedule_layouts.ddr_layouts``.  Guarantees: a resident value's real channels are the bytes its
DDR buffer would hold (same element type and dims order; a padded one's finite pad
channels beside them), so the tasks compute the same values; no network input, output or
constant is resident.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vpuc.fusion.blocked_program import Value, label
from vpuc.fusion.concat_in_place import in_place_operand, resident_concats, value_users
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.types import NAMED_ORDERS, DimsOrder
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor

if TYPE_CHECKING:
    from vpuc.fusion.schedule_layouts import SegmentValues

# Segment kinds whose loads and stores of a value are block copies of its (strided) views.
RESIDENT_KINDS = ("dpu", "act", "matmul")
# Padded channels: the layers whose DPU blocks write a padded value's pad channels
# (``lower_dpu_window``, ``lower_dpu_nn``), and the ones that read it through views of
# their channels, the real ones or all of them, never the whole buffer (an eltwise join's
# loads, ``lower_dpu_eltwise``, and a fused one's side loads, ``fuse_epilogue``: the real
# ones, their own pads zeroed).
# DMA segments whose copies may read a resident value's CMX buffer (their plan's views of it)
CMX_READING_DMA = ("Concat",)
PADS_WRITTEN_BY = ("Convolution", "GroupConvolution")
PADDED_READERS = ("Convolution", "GroupConvolution", "MaxPool", "AvgPool", "Add", "Multiply")
NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def resident_room(cmx_bytes: int | None, cmx_budget: int, early: int) -> int:
    """The CMX bytes per tile resident values may hold at once: what a segment's blocks
    (``cmx_budget``) and the next segment's prefetched constants (``early``) leave."""
    return 0 if cmx_bytes is None else max(0, cmx_bytes - cmx_budget - early)


def resident_values(values: list[Value], segments: list[SegmentValues], keep_out: set[str],
                    tiles: int, room: int, rooms: list[list[int]] | None = None,
                    viewed: dict[int, str] | None = None) -> list[Value]:
    """``values`` with the ones that stay in CMX given a tile (module docstring), in the
    order their producers run; ``keep_out``: values that must not (a layer's output a
    fused epilogue takes, which never exists whole); ``rooms[s][t]``: the room at segment
    s on tile t measured on a program lowered before (``resident_measure``), else ``room``
    at every segment; ``viewed``: Slice segments whose results are views of their source
    (``slice_in_place.viewed_slices``), whose readers read the source in their place."""
    viewed = viewed or {}
    if rooms is None:
        rooms = [[room] * tiles for _ in segments]
    if tiles < 1 or max((r for per in rooms for r in per), default=0) <= 0:
        return values
    widest = max(r for per in rooms for r in per)
    by_name = {v.name: v for v in values}
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for s, seg in enumerate(segments):
        for name in seg.writes:
            producer.setdefault(name, s)
        for name in seg.reads:
            readers.setdefault(name, []).append(s)
    concats = resident_concats(values, segments)     # results DPU layers fill in place
    users_of = value_users(segments)

    def aliased(name: str) -> bool:     # written into its slice of a Concat's result instead
        return any(segments[s].kind == "dma" and segments[s].op == "Concat"
                   and in_place_operand(name, s, by_name, users_of, segments)
                   for s in readers.get(name, []))

    for name, writers in concats.items():
        producer[name] = writers[0]
    held = [[0] * len(segments) for _ in range(tiles)]      # tile -> segment -> bytes
    chosen: dict[str, int] = {}
    def through(users: list[int]) -> list[int]:       # a viewed Slice's readers instead
        return [r for s in users for r in (through(readers.get(viewed[s], []))
                                           if s in viewed else [s])]

    for name in sorted(producer, key=producer.get):
        v = by_name[name]
        users = through(readers.get(name, []))
        if v.kind != "ddr" or name in keep_out or not users or not v.type.is_static \
                or v.type.nbytes > widest:
            continue
        first = producer[name]
        writers = concats.get(name, [first])
        if any(segments[s].kind not in RESIDENT_KINDS for s in writers) \
                or not all(_reads_resident(segments[s]) for s in users) or aliased(name) \
                or any(name in segments[s].writes for s in users if s != first):
            continue
        pad = None if name in concats or users != readers[name] else padded_channels(
            v, segments[first], [segments[s] for s in users])
        size = v.type.nbytes if pad is None else v.type.nbytes // v.type.dims[1] * pad
        span = range(first, max(users) + 1)
        # the tile holding the least over the value's lifetime that has room for it
        peak = [max(held[t][s] for s in span) for t in range(tiles)]
        fits = [t for t in sorted(range(tiles), key=lambda t: (peak[t], t))
                if all(held[t][s] + size <= rooms[s][t] for s in span)]
        if not fits:
            continue
        tile = fits[0]
        for s in span:
            held[tile][s] += size
        chosen[name] = tile, pad
    return [replace(v, tile=chosen[v.name][0], padded=chosen[v.name][1])
            if v.name in chosen else v for v in values]


def _reads_resident(seg: SegmentValues) -> bool:
    """Whether ``seg`` may read a value held in CMX: block copies of its views, or a
    Concat's copies (CMX -> DDR: an unrolled LSTM's ``h``, which the next step's MatMul
    loads and the Concat stacking ``Y`` copies).  A Concat operand its writer can write
    into its slice of the result (``concat_in_place``) is left to that instead."""
    return seg.kind in RESIDENT_KINDS or seg.kind == "dma" and seg.op in CMX_READING_DMA


def padded_channels(v: Value, producer: SegmentValues, readers: list[SegmentValues]
                    ) -> int | None:
    """The aligned channel count a resident value's buffer gets (module docstring, "Padded
    channels"), or None: an NHWC value of channels short of the DPU's multiple that a
    convolution (``PADS_WRITTEN_BY``) writes and only DPU layers reading it through views
    of its channels (``PADDED_READERS``) read."""
    if v.type.rank != 4 or v.type.order != NHWC:
        return None
    c = v.type.dims[1]
    if aligned(c) == c or producer.kind != "dpu" or producer.op not in PADS_WRITTEN_BY \
            or any(s.kind != "dpu" or s.op not in PADDED_READERS for s in readers):
        return None
    return aligned(c)


def held_channels(v: Value) -> int:
    """The channels of ``v``'s buffer: its aligned count when padded, else its own."""
    return v.padded or v.type.dims[1]


def in_place_blocks(e, out: Value, channels: int, tiles_of: list[int],
                    whole: bool = True) -> set[int]:
    """The blocks (``tiles_of[k]``: block k's tile) of a DPU layer whose task writes its
    output rows straight into the resident value ``out`` (no CMX slot, no store): those on
    ``out``'s tile, when the task's ``channels`` (aligned) are exactly ``out``'s, the
    layer's blocks are ``whole`` rows of them (NHWC: one contiguous run) and no epilogue
    runs on the blocks before their store (``fuse_epilogue``).  ``e``: the layer's
    ``lower_dpu.LayerEmitter``."""
    if not _writes_rows(e, out, channels, whole):
        return set()
    return {k for k, t in enumerate(tiles_of) if t == out.tile}


def cast_blocks(e, out: Value, channels: int, tiles_of: list[int],
                whole: bool = True) -> set[int]:
    """The blocks of a DPU layer on the other tiles whose task writes its output rows into
    the resident value ``out`` as an output copy on ``out``'s tile (``out(%slot, %rows)``,
    the output stage's ``odu_cast``, docs/vir.md "Output copies on other tiles"), so no
    CMX -> CMX store copies them there: under ``in_place_blocks``' conditions, the blocks
    it leaves out, unless the program is lowered without output copies
    (``ProgramText.output_copies``: ``lower_graph`` found no room for them).  Their own
    output slot is written and never read.  Not a layer of one block off ``out``'s tile:
    its one store is often its segment's last DMA, behind which
    ``schedule_prefetch_order`` places the next segments' early loads; with its copy
    instead DenseNet-121's last BatchNormalization of block 3 took 3,120,310 -> 3,287,841
    cycles (MobileNetV3-Small 549,507 -> 546,787)."""
    if not _writes_rows(e, out, channels, whole) or not e.prog.output_copies:
        return set()
    cast = {k for k, t in enumerate(tiles_of) if t != out.tile}
    return cast if len(cast) > 1 else set()


def _writes_rows(e, out: Value, channels: int, whole: bool) -> bool:
    """Whether a DPU layer's blocks may write whole rows of the resident value ``out``
    themselves (``in_place_blocks``, ``cast_blocks``)."""
    return out.tile is not None and out.kind == "ddr" and whole and e.prog.epilogue is None \
        and out.type.order == NHWC and held_channels(out) == channels


def in_place_input(e, k: int, x: Value, channels: int, first_row: int, rows: int,
                   whole: bool = True) -> str | None:
    """A view of ``rows`` rows from ``first_row`` of the resident value ``x`` for block
    ``k``'s DPU task to read straight (no load; ``e.reads_in_place`` notes it), when the
    block's tile holds ``x``, the task reads ``channels`` (aligned) that are exactly
    ``x``'s and ``whole`` rows of them (NHWC: one contiguous run); else None.  ``e``: the
    layer's ``lower_dpu.LayerEmitter``."""
    if x.tile != e.tile(k) or x.kind != "ddr" or not whole or x.type.order != NHWC \
            or held_channels(x) != channels:
        return None
    e.reads_in_place.add(k)
    n, _, _, w = x.type.dims
    return e.view(f"in.v{k}", x.name, [f"0:{n}", f"0:{channels}",
                                       f"{first_row}:{first_row + rows}", f"0:{w}"])


def ensure_pads(prog, views_from: int, out: Value, prefix: str, gate: tuple[str, ...],
                finish: str | None) -> bool:
    """After a layer wrote the padded value ``out`` (its views from ``prog.views[views_from]``
    on are its writes): when they stop short of its pad channels (a path that stores only
    the real ones: a reduction cut into chunks, ``lower_dpu_ksplit_conv``; a grouped
    convolution whose last group starts off the channel multiple, 24:36 of 36 held as 48,
    computes pads up to 40 only), zeros from a ``splat 0`` constant into the pad channels
    past the last one written, one DMA after the gate, so no reader meets garbage there;
    whether it added that DMA."""
    if not out.padded or out.tile is None:
        return False
    n, c, h, w = out.type.dims
    head = f"view %{prefix}"
    ends = [int(line.split("[", 1)[1].split(",")[1].split(":")[-1])
            for line in prog.views[views_from:]
            if line.startswith(head) and line.split(" = ", 1)[1].startswith(f"%{out.name}[")]
    written = min((e for e in ends if e >= c), default=out.padded)   # pads written below
    if written >= out.padded:
        return False
    zeros = f"{prefix}padzeros"
    prog.buffers.append(f"const %{zeros} : {n}x{out.padded - written}x{h}x{w}x{out.type.elem} "
                        "NHWC = splat 0")
    prog.views.append(f"view %{prefix}pads.v = %{out.name}[0:{n}, {written}:{out.padded}, "
                      f"0:{h}, 0:{w}]")
    waits = f" waits({', '.join(f'%{g}' for g in gate)})" if gate else ""
    updates = f" updates(%{finish})" if finish else ""
    prog.dma.append(f"  {label(prefix)}zero_pads: dma %{zeros} -> %{prefix}pads.v "
                    f"channel 0{waits}{updates}")
    return True


def shared_buffers(module: Module, segment_of) -> dict[str, list[int]]:
    """CMX buffer -> the sorted segments whose DMA tasks (or DPU tasks reading or writing in
    place) touch it, for the CMX buffers those of more than one segment touch (resident values);
    ``segment_of(label)``: a task's segment index, or None."""
    symbols = SymbolTable(module)
    users: dict[str, set[int]] = {}
    for task_list in module.task_lists:
        for task in task_list.tasks:
            # DMAs, and DPU tasks writing a value in place (in_place_blocks, cast_blocks)
            if isinstance(task, DmaTask):
                names = (task.src, task.dst)
            elif isinstance(task, DpuTask):
                names = (*task.inputs, task.output, *task.broadcast_outputs)
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
