"""A task-level program for a chain of ACT SHAVE kernels, in blocks over the tiles.

The shape compiled elementwise networks take (and ``examples/double_buffer.vir``
writes by hand): the tensors are cut along one logical axis into blocks; block
*k* runs on tile ``k % tiles`` in CMX slot ``(k // tiles) % 2`` (double
buffering), and is

    DMA in (channel 0) -> stage 1 -> ... -> stage n -> DMA out (channel 1, or 0 on one)

where each stage is one kernel invocation per ACT SHAVE of the tile, each on
its part of the block (views of the block's CMX buffers), and every value
between stages stays in CMX.  Barriers: ``loaded``/``done``/``stored`` per
block, one per stage boundary; the loads of block k wait for ``done`` of the
block that used its slot before (k - 2*tiles), its first stage for that
block's ``stored``.  Buffers are one per (value, tile, slot), placed by
allocate-cmx; a constant that does not span the axis is loaded into each slot
once.  A stage's ``boxes`` (``act_split.shave_boxes``) cut an odd block into four
parts, a kernel per part size, so both ACT SHAVEs share it too; leading stages
that touch nothing along the axis (an excitation) run in each tile's first block
only (``_per_tile``).

Values in DDR (``input``, ``const``, ``output``, a ``ddr`` tensor between
pipelines, a temp that is also a graph output) are loaded when no stage of the
pipeline produces them and stored when one does.  ``emit_blocks`` adds one such
pipeline to a ``ProgramText`` (so ``lower-graph`` can put several, and DPU
layers, in one program): its names carry a ``prefix``, its first loads wait on
the ``gate`` barriers and its last store updates ``finish``.  Every store is on
one DMA channel (``ProgramText.store_channel``), which runs them in list order, so the last one ends after every
task of the pipeline.

``build_program(...)`` returns the VIR text of a one-pipeline program (the
verifier checks what it builds); ``lower-graph`` (fused subgraphs, generated
kernels) and ``bench/fusion_bench.py`` (fused and unfused) use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from vpuc.cost.timing import Timing
from vpuc.ir.module import ConstInit
from vpuc.ir.types import TensorType

SLOTS = 2


@dataclass
class Value:
    name: str
    type: TensorType             # the whole tensor (logical dims, dims order)
    kind: str                    # input, output, const, temp (CMX only) or ddr (DDR scratch)
    init: ConstInit | None = None
    also_output: bool = False    # a temp that is also a graph output
    tile: int | None = None      # a ddr value held whole in this tile's CMX instead (resident.py)
    padded: int | None = None    # its CMX buffer's channels, aligned for the DPU (resident.py)
    # a view of another value's slice instead of a buffer: (its name, per-axis (start, stop))
    # (a Concat operand written in place, concat_in_place.py)
    alias: tuple[str, tuple[tuple[int, int], ...]] | None = None

    @property
    def in_ddr(self) -> bool:
        return self.kind != "temp" or self.also_output


@dataclass
class Stage:
    kernel: str
    inputs: list[str]
    outputs: list[str]
    scalars: list[tuple[str, float]] = field(default_factory=list)   # (elem, value), after memrefs
    parts: int = 2               # invocations per block (one per ACT SHAVE)
    # or one invocation per box (``act_split.shave_boxes``: rows along the cut axis, columns
    # along ``emit_blocks``' ``inner`` axis), each with its kernel (generated for its size)
    boxes: list[tuple[int, int, int, int]] | None = None
    box_kernels: list[str] | None = None


@dataclass
class ProgramText:
    """The statements of a program being built, by section, rendered in VIR order."""

    kernels: list[str] = field(default_factory=list)
    buffers: list[str] = field(default_factory=list)     # DDR: input, output, const, ddr
    cmx: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    barriers: list[str] = field(default_factory=list)
    dma: list[str] = field(default_factory=list)
    dpu: list[str] = field(default_factory=list)
    act: list[str] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)      # provenance: layer "KEY" from ...
    # The target's timing model: DPU layers ask the cost model for their blocks and modes.
    timing: Timing | None = None
    # The target's DMA channels: loads go on channel 0, stores on the last of at most two
    # (with one channel both share its FIFO, which still runs stores in list order).
    dma_channels: int = 2
    # Bytes of a tile's CMX one layer's or segment's blocks may use (the compile option
    # ``cmx_budget``; default half the tile's CMX, ``vpuc.arch.default_cmx_budget``).
    cmx_budget: int = 1 << 20
    # Bytes of a tile's CMX a segment's constants may load during the previous segment
    # (``--schedule default``: ``schedule.overlap``, ``early_bytes``); 0: no prefetch.
    prefetch_bytes: int = 0
    # The target's physical barriers: a layer's blocks in flight hold at most a share of
    # them (``lower_dpu.in_flight_slots``), so the segments running beside it find theirs.
    physical_barriers: int = 64
    # constants a layer declared again in another layout (``lower_dpu_matmul``)
    redeclared: set = field(default_factory=set)
    # ``--schedule default``: (tile, element type) -> the zero vector every DPU layer of the
    # program copies its input's padded channels from (``lower_dpu_channels.zero_vector``)
    zeros: dict = field(default_factory=dict)
    # ``--schedule default``: (constant, tile) -> the CMX buffer holding a MatMul's whole
    # constant weights, which later MatMuls of the same constant read (``lower_dpu_matmul``)
    held_weights: dict = field(default_factory=dict)
    # ``--schedule default``: the elementwise subgraph the DPU layer being emitted runs on
    # its output blocks in CMX (``fuse_epilogue.Epilogue``, called by ``LayerEmitter.store``).
    epilogue: object = None
    # ``--schedule default``: the squeeze-excite scale the DPU layer being emitted applies to
    # its weights after each load (``lower_dpu_scale_weights.WeightsScale``), or None.
    weights_scale: object = None
    # ``--schedule default``: value name -> when the DPU layer that wrote it stores each
    # block, by its pipeline estimate (``pool_stream.RowsReady``, ``record_rows``)
    rows_ready: dict = field(default_factory=dict)
    # ``--schedule default``: whether DPU layers write a value kept in CMX on another tile as
    # an output copy (``resident.cast_blocks``), not by a store; off when ``lower_graph``
    # found no room for the values kept in CMX with them
    output_copies: bool = True

    @property
    def store_channel(self) -> int:
        return min(1, self.dma_channels - 1)

    def declare_kernel(self, declaration: str) -> None:
        """Declare a kernel once, however many segments call it."""
        if declaration not in self.kernels:
            self.kernels.append(declaration)

    def drop_unused(self, names: set[str]) -> None:
        """Remove the declarations of the DDR buffers ``names`` that no task or view names
        (a constant a layer declared again in another layout)."""
        text = "\n".join(self.views + self.dma + self.dpu + self.act)
        unused = {n for n in names if not re.search(rf"%{re.escape(n)}(?![\w.])", text)}
        self.buffers = [b for b in self.buffers
                        if b.split(" ", 2)[1].lstrip("%") not in unused]

    def declare(self, values: list[Value]) -> None:
        """The DDR declaration of every value that lives in DDR (a resident value's CMX
        buffer, ``resident.py``)."""
        for v in values:
            t = type_text(v.type)
            if v.kind == "input":
                self.buffers.append(f"input %{v.name} : {t}")
            elif v.kind == "output" or v.also_output:
                self.buffers.append(f"output %{v.name} : {t}")
            elif v.kind == "const":
                self.buffers.append(f"const %{v.name} : {t} = {v.init}")
            elif v.alias is not None:
                base, spans = v.alias
                slices = ", ".join(f"{a}:{b}" for a, b in spans)
                self.views.insert(0, f"view %{v.name} = %{base}[{slices}]")
            elif v.kind == "ddr" and v.tile is not None:
                if v.padded:        # channels aligned: its users slice the real ones
                    n, _, h, w = v.type.dims
                    t = type_text(TensorType((n, v.padded, h, w), v.type.elem, v.type.order))
                self.buffers.append(f"cmx %{v.name} : {t} tile {v.tile}")
            elif v.kind == "ddr":
                self.buffers.append(f"ddr %{v.name} : {t}")

    def render(self, module: str, arch: str, tiles: int, stacks: int = 16384) -> str:
        lines = [f"module @{module} arch {arch}", ""] + self.kernels
        if self.act:
            lines += ['kernel @runtime() from library "runtime"',
                      f"runtime @runtime stacks({', '.join([str(stacks)] * tiles)})"]
        lines += [""] + self.buffers + self.cmx + [""] + self.views + [""] + self.barriers
        for name, tasks in (("DMA", self.dma), ("DPU", self.dpu), ("ACT_SHAVE", self.act)):
            if tasks:
                lines += ["", f"tasks {name} {{"] + tasks + ["}"]
        if self.layers:
            lines += [""] + self.layers
        return "\n".join(lines) + "\n"


def sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.$]", "_", name)


def label(name: str) -> str:
    """A task label from value names (labels take no '$')."""
    return name.replace("$", "_")


def type_text(t: TensorType) -> str:
    text = "x".join([str(d) for d in t.dims] + [str(t.elem)])
    return text + (f" {t.order}" if t.rank > 1 else "")


def block_type(t: TensorType, axis: int, rank: int, size: int) -> TensorType:
    """``t`` with its dim along master axis ``axis`` (right-aligned ranks) set to ``size``
    when it spans that axis (dims of 1 broadcast and stay); ``axis`` None: whole tensors."""
    if axis is None:
        return t
    a = axis - (rank - t.rank)
    if not 0 <= a < t.rank or t.dims[a] == 1:      # rank 0, or not along the axis
        return t
    dims = tuple(size if i == a else d for i, d in enumerate(t.dims))
    return TensorType(dims, t.elem, t.order)


def spans(t: TensorType, axis: int, rank: int) -> bool:
    """Whether ``t`` (right-aligned in a master of ``rank`` dims) has an extent along ``axis``
    that blocks cut, so halves of a block are different bytes."""
    if axis is None:
        return False
    a = axis - (rank - t.rank)
    return 0 <= a < t.rank and t.dims[a] != 1


def _sliced(t: TensorType) -> bool:
    """Whether blocks move through views of ``t`` (a dynamic or rank-0 tensor moves whole,
    in one block)."""
    return t.is_static and t.rank > 0


def _slices(t: TensorType, axis: int, rank: int, start: int, stop: int,
            inner: tuple[int, int, int] | None = None) -> str:
    """Slices of ``t`` along master ``axis``; with ``inner`` ``(axis, start, stop)`` along
    that axis too (a box of ``shave_boxes``); dims of 1 broadcast and stay whole."""
    cuts = {axis - (rank - t.rank): (start, stop)} if axis is not None else {}
    if inner is not None:
        cuts[inner[0] - (rank - t.rank)] = inner[1:]
    parts = []
    for i, d in enumerate(t.dims):
        parts.append(f"{cuts[i][0]}:{cuts[i][1]}" if i in cuts and d != 1 else f"0:{d}")
    return ", ".join(parts)


def build_program(module: str, kernel_decls: list[str], values: list[Value],
                  stages: list[Stage], *, axis: int, rank: int, extent: int, blocks: int,
                  tiles: int = 2, stacks: int = 16384, arch: str = "NPU37XX") -> str:
    prog = ProgramText(kernels=list(kernel_decls))
    prog.declare(values)
    emit_blocks(prog, values, stages, axis=axis, rank=rank, extent=extent, blocks=blocks,
                tiles=tiles)
    return prog.render(module, arch, tiles, stacks)


def emit_blocks(prog: ProgramText, values: list[Value], stages: list[Stage], *, axis: int | None,
                rank: int, extent: int, blocks: int, tiles: int = 2, prefix: str = "",
                gate: tuple[str, ...] = (), finish: str | None = None, offset: int = 0,
                first_tile: int = 0, inner: int | None = None,
                shared: dict | None = None) -> dict:
    """Add one block pipeline over ``stages`` to ``prog``; ``values`` are the values the
    stages read or write (declared by the caller when they live in DDR).  The pipeline
    covers ``extent`` elements of the axis from ``offset`` (a tail pipeline after a main one
    when the axis does not divide evenly), its first block on tile ``first_tile`` (``axis``
    None: one block of whole tensors, whose dims may differ, as a reduction's do); a
    stage's ``boxes`` cut its block along ``axis`` and ``inner``.  Returns the per-tile
    stages' outputs (``_per_tile``) as ``{tile: (barrier, {value: buffer})}``; a later
    pipeline of the same stages given them as ``shared`` reads them instead of running
    those stages again on that tile."""
    if extent % blocks:
        raise ValueError(f"{blocks} blocks do not divide the extent {extent}")
    chunk = extent // blocks
    by_name = {v.name: v for v in values}
    # An output that does not span the axis (rank 0, or 1 along it) has no halves: its stage
    # runs as one invocation per block (two parts would write the same bytes).
    stages = [replace(st, parts=1, boxes=None, box_kernels=None)
              if any(not spans(by_name[v].type, axis, rank) for v in st.outputs)
              else st for st in stages]
    if any(st.boxes for st in stages) and inner is None:
        raise ValueError("a stage cut into boxes needs the inner axis")
    produced = {v for st in stages for v in st.outputs}
    loaded = [v for v in values if v.in_ddr and v.name not in produced]
    stored = [v for v in values if v.in_ddr and v.name in produced]
    p, lp = prefix, label(prefix)
    used_tiles = min(tiles, blocks)
    tile_of = [(first_tile + i) % tiles for i in range(used_tiles)]
    once, once_values = _per_tile(stages, by_name, axis, rank)
    # loaded values that only the per-tile stages read: loaded by a tile's first block only
    once_loaded = {v for st in stages[:once] for v in st.inputs} \
        - {v for st in stages[once:] for v in st.inputs}

    have = shared or {}

    def slot(v: str, s: int) -> int:     # a per-tile value lives in its first block's slot
        return 0 if v in once_values else s

    def buf(v: str, t: int, s: int) -> str:
        return have[t][1][v] if v in once_values and t in have else f"%{p}{v}.t{t}s{slot(v, s)}"

    for v in values:
        bt = type_text(block_type(v.type, axis, rank, chunk))
        for t in tile_of:
            if v.name in once_values and t in have:
                continue
            for s in range(1 if v.name in once_values else min(SLOTS, -(-blocks // used_tiles))):
                prog.cmx.append(f"cmx %{p}{v.name}.t{t}s{s} : {bt} tile {t}")
    for k in range(blocks):
        for v in values:
            if v.in_ddr and _sliced(v.type):
                prog.views.append(f"view %{p}{v.name}.b{k} = %{v.name}"
                                  f"[{_slices(v.type, axis, rank, offset + k * chunk, offset + (k + 1) * chunk)}]")
    parts_of: dict[tuple, list[str]] = {}
    for k in range(min(blocks, used_tiles * SLOTS)):
        t = tile_of[k % used_tiles]
        for st in stages[once if k >= used_tiles or t in have else 0:]:
            for v in st.inputs + st.outputs:
                s = slot(v, (k // used_tiles) % SLOTS)
                key = (v, t, s, st.parts, bool(st.boxes))
                if key in parts_of:
                    continue
                t_v = by_name[v].type
                if st.boxes and (spans(t_v, axis, rank) or spans(t_v, inner, rank)):
                    bt = block_type(by_name[v].type, axis, rank, chunk)
                    parts_of[key] = [f"%{p}{v}.t{t}s{s}q{j}" for j in range(len(st.boxes))]
                    prog.views += [f"view %{p}{v}.t{t}s{s}q{j} = {buf(v, t, s)}"
                                   f"[{_slices(bt, axis, rank, r0, r1, (inner, x0, x1))}]"
                                   for j, (r0, r1, x0, x1) in enumerate(st.boxes)]
                    continue
                if st.parts == 1 or st.boxes or chunk % st.parts or by_name[v].type.rank == 0:
                    parts_of[key] = [buf(v, t, s)]
                    continue
                bt, sub = block_type(by_name[v].type, axis, rank, chunk), chunk // st.parts
                names = []
                for j in range(st.parts):
                    name = f"%{p}{v}.t{t}s{s}p{j}"
                    prog.views.append(f"view {name} = {buf(v, t, s)}"
                                      f"[{_slices(bt, axis, rank, j * sub, (j + 1) * sub)}]")
                    names.append(name)
                parts_of[key] = names
    reuse = used_tiles * SLOTS
    gate_waits = ", ".join(f"%{g}" for g in gate)
    for k in range(blocks):
        t, s = tile_of[k % used_tiles], (k // used_tiles) % SLOTS
        before = k - reuse
        later = k + reuse < blocks
        k0 = k % used_tiles
        # the per-tile stages ran in block k0, or in an earlier pipeline (``shared``)
        first = once if k >= used_tiles or t in have else 0
        # Every value it reads may be a constant folded into the kernels: nothing to load.
        loads = [v for v in loaded if not (v.kind == "const" and before >= 0
                                           and block_type(v.type, axis, rank, 1) == v.type)
                 and not (first and v.name in once_loaded)]
        # (a constant that is the same for every block is already in this slot)
        prog.barriers += ([f"barrier %{p}loaded{k}"] if loads else []) + [f"barrier %{p}done{k}"]
        if later:
            prog.barriers.append(f"barrier %{p}stored{k}")
        prog.barriers += [f"barrier %{p}stage{k}.{i}" for i in range(first, len(stages) - 1)]
        for v in loads:
            src = f"%{p}{v.name}.b{k}" if _sliced(v.type) else f"%{v.name}"
            wait = (f" waits(%{p}done{before})" if before >= 0
                    else f" waits({gate_waits})" if gate else "")
            prog.dma.append(f"  {lp}load{k}.{label(v.name)}: dma {src} -> %{p}{v.name}.t{t}s{s} "
                            f"channel 0{wait} updates(%{p}loaded{k})")
        for n, v in enumerate(stored):
            dst = f"%{p}{v.name}.b{k}" if _sliced(v.type) else f"%{v.name}"
            updates = ([f"%{p}stored{k}"] if later else [])
            if finish and k == blocks - 1 and n == len(stored) - 1:
                updates.append(f"%{finish}")
            upd = f" updates({', '.join(updates)})" if updates else ""
            prog.dma.append(f"  {lp}store{k}.{label(v.name)}: dma %{p}{v.name}.t{t}s{s} -> {dst} "
                            f"channel {prog.store_channel} waits(%{p}done{k}){upd}")
        for i, st in enumerate(stages):
            if i < first:
                continue
            if i == first:
                waits = ([f"%{p}loaded{k}"] if loads else [f"%{g}" for g in gate] if before < 0
                         else []) + ([f"%{p}stored{before}"] if before >= 0 else [])
                waits += [have[t][0] if t in have else f"%{p}stage{k0}.{i - 1}"] if first else []
            else:
                waits = [f"%{p}stage{k}.{i - 1}"]
            update = f"%{p}done{k}" if i == len(stages) - 1 else f"%{p}stage{k}.{i}"
            ins = [parts_of[(v, t, slot(v, s), st.parts, bool(st.boxes))] for v in st.inputs]
            outs = [parts_of[(v, t, slot(v, s), st.parts, bool(st.boxes))] for v in st.outputs]
            count = len(outs[0]) if outs else 1
            for j in range(count):
                pick = lambda names: names[j] if len(names) > 1 else names[0]  # noqa: E731
                binds_in = ", ".join(f"{pick(n)} as %a{m}" for m, n in enumerate(ins))
                binds_out = ", ".join(f"{pick(n)} as %r{m}" for m, n in enumerate(outs))
                region = [f"    %c{m} = const {value!r} : {elem}"
                          for m, (elem, value) in enumerate(st.scalars)]
                args = [f"%a{m}" for m in range(len(ins))] + [f"%r{m}" for m in range(len(outs))]
                args += [f"%c{m}" for m in range(len(st.scalars))]
                kernel = st.box_kernels[j] if st.box_kernels else st.kernel
                prog.act.append(f"  {lp}s{k}.{i}.{j}: sw @{kernel} on tile {t} "
                                f"inputs({binds_in}) outputs({binds_out}) "
                                + (f"waits({', '.join(waits)}) " if waits else "")
                                + f"updates({update}) {{")
                prog.act += region + [f"    run({', '.join(args)})", "  }"]
    if not once:
        return {}
    made = {t: (f"%{p}stage{k0}.{once - 1}", {v: f"%{p}{v}.t{t}s0" for v in once_values})
            for k0, t in enumerate(tile_of) if t not in have}
    return {**have, **made}


def _per_tile(stages: list[Stage], by_name: dict[str, Value], axis: int,
              rank: int) -> tuple[int, set[str]]:
    """``(n, values)``: the leading ``n`` stages read and write nothing along the axis (the
    excitation of a squeeze-excite product: the same for every block), their outputs
    ``values`` temps in CMX, and some stage after them: they run once per tile, in the
    tile's first block (MobileNetV3's hardsigmoid of 240 channels was recomputed on one
    ACT SHAVE before every block's product, 755 cycles each)."""
    done: set[str] = set()
    n = 0
    for st in stages[:-1]:
        if any(spans(by_name[v].type, axis, rank) for v in st.inputs + st.outputs) \
                or any(by_name[v].in_ddr for v in st.outputs) \
                or any(by_name[v].kind not in ("input", "const", "ddr") and v not in done
                       for v in st.inputs):
            break
        n += 1
        done |= set(st.outputs)
    return n, done
