"""Layers split over their reduction (K): f32 partial sums on the DPU, summed on ACT SHAVE.

A MatMul whose weights with one output row and 16 output columns do not fit a
tile's CMX budget (K = 200,000, or a small ``cmx_budget``) cannot be cut over
its rows or output columns any further (``lower_dpu_matmul``).  Here its K is
cut into chunks too (multiples of 16, the DPU's channel granule): every output
block (rows [r0, r1) by columns [c0, c1)) runs one DPU ``matmul`` per K chunk
on that chunk's slices of the input and the weights, each writing its partial
sums as **f32** (the DPU's output stage writes f32: the NPU compiler's
``DPUInvariantODURewriter`` for NPU37XX, ``getOutDataWidth`` in
``src/vpux_compiler/src/NPU37XX/dialect/VPUIPDPU/rewriters/
dpu_invariant_block_rewriters.cpp`` of ``openvinotoolkit/npu_plugin``, maps an
f32 output to ``ODU_DTYPE_32BIT``).  The first chunk's task adds the bias (in
f32, once); the library kernel ``add`` (kernels/add.s, f32) on the tile's ACT
SHAVE sums each partial into a running f32 total; the activation (``relu``,
``clamp``, ``sigmoid``, ``tanh``, in f32) and ``convert`` (f32 -> f16) run
once on the total, and a DMA stores the f16 block.  So a value is the f32 sum
of its K products rounded once to f16, as the unsplit layer computes it (only
the order of the f32 additions differs).

The tasks of a block are ordered by what they read and write (``_Schedule``):
each waits for the last writer of what it reads and for the readers since of
what it overwrites; buffers of the same role alternate between two slots
per tile (input and weight chunks, partials, totals), so the loads of chunk
*j + 1* overlap the DPU task of chunk *j*, which overlaps the ACT add of chunk
*j - 1*.  Output blocks alternate over the tiles.

The split (rows per block, columns per chunk, K per chunk) is the candidate
that fits the budget whose schedule the cost model says ends first: each
schedule is list-scheduled task by task on its queues (DMA channels, each
tile's DPU and ACT SHAVE) with the cost model's cycles (``vpuc.cost``: DMA
transfers, DPU variants as ``lower_dpu.split_rows`` cuts them, ACT SHAVE
invocations at the library's measured cycles per element, docs/kernels.md).
A layer not even one row, 16 columns and 16 of K fit is a ``VpucError`` at the
op.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import Move, move_cycles
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value, label, type_text
from vpuc.fusion.lower_dpu import DpuLayer, describe, layer_timing, split_rows_cost
from vpuc.fusion.lower_dpu_channels import aligned, padded_vector, variant_boxes
from vpuc.fusion.lower_dpu_split import row_edges
from vpuc.fusion.lower_dpu_support import const_text
from vpuc.ir.types import ElemType, TensorType

GRANULE = 16
# SHAVE cycles per f32 element of the library kernels (docs/kernels.md, "Measured cost")
ACT_CYCLES_PER_ELEMENT = {"add": 0.375, "relu": 0.25, "clamp": 0.5, "sigmoid": 1.188,
                          "tanh": 0.531, "convert": 0.188}
ACTIVATIONS = {"Relu": "relu", "Clamp": "clamp", "Sigmoid": "sigmoid", "Tanh": "tanh"}
MAX_CANDIDATES = 4           # distinct sizes tried per dimension of the split


def kernel_declarations(activation: str | None) -> list[str]:
    """The library kernels a K-split layer calls (f32 totals, an f16 result)."""
    decls = ['kernel @ksplit_add_f32(a: memref<*xf32>, b: memref<*xf32>, output: memref<*xf32>) '
             'from library "add"',
             'kernel @ksplit_convert_f32_f16(input: memref<*xf32>, output: memref<*xf16>) '
             'from library "convert"']
    if activation == "clamp":
        decls.append('kernel @ksplit_clamp_f32(input: memref<*xf32>, output: memref<*xf32>, '
                     'minVal: f16, maxVal: f16) from library "clamp"')
    elif activation is not None:
        decls.append(f'kernel @ksplit_{activation}_f32(input: memref<*xf32>, '
                     f'output: memref<*xf32>) from library "{activation}"')
    return decls


@dataclass
class _Task:
    section: str                          # dma, dpu or act
    queue: tuple                          # ("dma", channel), ("dpu", tile), ("act", tile)
    cycles: float
    deps: set[int]
    render: Callable[[str], list[str]]    # barrier clauses -> the task's lines


@dataclass
class _Schedule:
    """The tasks of one K-split layer, ordered by their reads and writes of hazard keys
    (a buffer's role and slot on its tile), with the cost model's cycles.  Offers the
    ``cmx`` / ``view`` / ``dma`` calls of ``lower_dpu.LayerEmitter`` that
    ``lower_dpu_matmul.load_matrix`` makes; everything goes to a private ``ProgramText``
    that ``commit`` adds to the real one."""

    p: str
    timing: object
    channels: int
    prog: ProgramText = field(default_factory=ProgramText)
    tasks: list[_Task] = field(default_factory=list)
    scope: str | None = None              # the hazard key of the buffers being declared
    key_of: dict[str, str] = field(default_factory=dict)
    shape_of: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    last_write: dict[str, int] = field(default_factory=dict)
    readers: dict[str, set[int]] = field(default_factory=dict)

    def cmx(self, name: str, t: TensorType, tile: int) -> str:
        self.prog.cmx.append(f"cmx %{self.p}{name} : {type_text(t)} tile {tile}")
        self.key_of[self.p + name] = self.scope
        self.shape_of[self.p + name] = (t.dims, t.elem.nbytes)
        return f"%{self.p}{name}"

    def view(self, name: str, base: str, slices: list[str]) -> str:
        self.prog.views.append(f"view %{self.p}{name} = %{base}[{', '.join(slices)}]")
        if base in self.key_of:
            dims = tuple(int(b) - int(a) for a, b in (s.split(":") for s in slices if ":" in s))
            self.key_of[self.p + name] = self.key_of[base]
            self.shape_of[self.p + name] = (dims, self.shape_of[base][1])
        return f"%{self.p}{name}"

    def dma(self, name: str, src: str, dst: str, channel: int, waits=None, updates=None,
            permute: bool = False) -> None:
        """One DMA (``waits``/``updates`` of ``LayerEmitter``'s signature are derived here)."""
        cmx_side = dst if dst[1:] in self.shape_of else src
        dims, eb = self.shape_of[cmx_side[1:]]
        cycles = move_cycles(Move(math.prod(dims) * eb, eb, permute), self.timing,
                             dst[1:] in self.shape_of)[0]
        mode = "permute " if permute else ""
        head = f"  {label(self.p)}{name}: dma {mode}{src} -> {dst} channel {channel}"
        self.add("dma", ("dma", channel), [src], [dst], cycles, lambda c: [head + c])

    def add(self, section: str, queue: tuple, reads: list[str], writes: list[str],
            cycles: float, render: Callable[[str], list[str]]) -> int:
        """Append a task: it waits for the last writer of each key it reads, and for the
        readers since (and the last writer) of each key it writes; a dependency on an
        earlier task of its own single-engine queue (a DMA channel, a tile's DPU) is left to
        the queue's order."""
        n = len(self.tasks)
        deps: set[int] = set()
        rkeys = {self.key_of[r[1:]] for r in reads if self.key_of.get(r[1:])}
        wkeys = {self.key_of[w[1:]] for w in writes if self.key_of.get(w[1:])}
        for k in rkeys:
            if k in self.last_write:
                deps.add(self.last_write[k])
        for k in wkeys:
            deps |= self.readers.get(k, set())
            if k in self.last_write:
                deps.add(self.last_write[k])
        latest: dict[tuple, int] = {}      # a single-engine queue runs in order: its last
        for d in deps:                      # task waited for implies the ones before it
            q = self.tasks[d].queue
            if q[0] == "act":
                latest[(q, d)] = d
            elif q != queue or queue[0] == "act":
                latest[q] = max(latest.get(q, d), d)
        deps = set(latest.values())
        for k in rkeys:
            self.readers.setdefault(k, set()).add(n)
        for k in wkeys:
            self.last_write[k] = n
            self.readers[k] = set()
        self.tasks.append(_Task(section, queue, cycles, deps, render))
        return n

    def makespan(self) -> float:
        """The list schedule's end: each task starts when its queue is free and its
        dependencies have ended (the ACT SHAVEs of a tile counted as one queue)."""
        end: list[float] = []
        free: dict[tuple, float] = {}
        for task in self.tasks:
            start = max([free.get(task.queue, 0.0)] + [end[d] for d in task.deps])
            end.append(start + task.cycles)
            free[task.queue] = end[-1]
        return max(end, default=0.0)

    def commit(self, prog: ProgramText, gate: tuple[str, ...], finish: str | None) -> None:
        """Render every task with its barriers into ``prog``; the last task (a store) also
        updates ``finish``, tasks waiting on nothing wait on ``gate``."""
        waited = {d for task in self.tasks for d in task.deps}
        zeros: dict[str, str] = {}          # one zero splat per shape (zero_pad_matrix's)
        rename: dict[str, str] = {}
        for line in self.prog.buffers:
            name, _, rest = line.partition(" : ")
            if rest.endswith("= splat 0"):
                if rest in zeros:
                    rename[name.split("%")[1]] = zeros[rest]
                    continue
                zeros[rest] = name.split("%")[1]
            prog.buffers.append(line)
        prog.cmx += self.prog.cmx
        for line in self.prog.views:
            view, _, base = line.partition(" = %")
            root, bracket, rest = base.partition("[")
            prog.views.append(f"{view} = %{rename.get(root, root)}{bracket}{rest}")
        prog.barriers += [f"barrier %{self.p}k{n}" for n in sorted(waited)]
        prog.kernels += [k for k in self.prog.kernels if k not in prog.kernels]
        for n, task in enumerate(self.tasks):
            waits = [f"%{self.p}k{d}" for d in sorted(task.deps)] or [f"%{g}" for g in gate]
            updates = [f"%{self.p}k{n}"] if n in waited else []
            if finish and n == len(self.tasks) - 1:
                updates.append(f"%{finish}")
            clauses = (f" waits({', '.join(waits)})" if waits else "") + (
                f" updates({', '.join(updates)})" if updates else "")
            getattr(prog, task.section).extend(task.render(clauses))


@dataclass(frozen=True)
class Split:
    rows: int        # output rows per block (at most)
    cols: int        # output columns per chunk (a multiple of 16, or all of N)
    depth: int       # K per chunk (a multiple of 16, or all of K)


class MatmulKSplit:
    """A MatMul lowered with K cut into chunks (module docstring)."""

    def __init__(self, prog: ProgramText, layer: DpuLayer, values: dict[str, Value],
                 tiles: int, prefix: str) -> None:
        from vpuc.fusion.lower_dpu_matmul import _out_order   # noqa: PLC0415 (cycle)
        op = layer.op
        self.prog, self.layer, self.tiles, self.p = prog, layer, tiles, prefix
        self.a, self.b = values[op.operands[0]], values[op.operands[1]]
        self.out = values[layer.output]
        ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
        ra, rb = self.a.type.rank, self.b.type.rank
        self.a_axes = (ra - 1, ra - 2) if ta else (ra - 2, ra - 1)        # M, K
        self.b_axes = (rb - 2, rb - 1) if tb else (rb - 1, rb - 2)        # N, K
        self.m, self.n = self.out.type.dims[-2:]
        self.k = self.a.type.dims[self.a_axes[1]]
        self.items = list(itertools.product(*(range(d) for d in self.out.type.dims[:-2])))
        self.order = _out_order(self.out.type, self.out.type.rank)
        self.timing = layer_timing(prog, op)
        self.activation = next((ACTIVATIONS[o.kind] for o in layer.chain if o.kind in ACTIVATIONS),
                               None)
        self.clamp = next(((o.attrs["min"], o.attrs["max"]) for o in layer.chain
                           if o.kind == "Clamp"), None)
        if self.out.type.elem is not ElemType.F16:
            raise VpucError(f"{describe(op)} does not fit a tile's CMX and needs its K split "
                            f"into f32 partial sums, which are converted to f16 only; the layer "
                            f"is {self.out.type.elem}", op.loc)

    # ---------------------------------------------------------------- CMX and cost

    def need(self, s: Split) -> int:
        """CMX bytes of a tile: two slots of input and weight chunks (with a staging copy
        where ``load_matrix`` makes one), two f32 partials, two f32 totals, the f16 result,
        the bias."""
        kp, cp = aligned(s.depth), aligned(s.cols)
        ea, eb = self.a.type.elem.nbytes, self.b.type.elem.nbytes
        x, w = s.rows * kp * ea, cp * kp * eb
        staged = (x if self._staged(self.a, self.a_axes, s.rows, s.depth) else 0) + (
            w if self._staged(self.b, self.b_axes, s.cols, s.depth) else 0)
        bias = 4 * cp if self.layer.bias is not None else 0
        return 2 * (x + w + staged) + 4 * s.rows * cp * 4 + s.rows * cp * 2 + bias

    @staticmethod
    def _staged(v: Value, axes: tuple[int, int], rows: int, depth: int) -> bool:
        """Whether ``load_matrix`` copies a chunk through a staging buffer (a transposing
        copy of a square block)."""
        k = v.type.dims[axes[1]]
        return v.type.rank == 2 and axes[0] == 1 and rows in (min(depth, k), k % depth)

    def candidates(self) -> list[Split]:
        """Splits that fit: per rows and columns, the fewest K chunks that fit (balanced)
        and twice as many."""
        budget = self.prog.cmx_budget
        rows = sorted({math.ceil(self.m / c) for c in range(1, self.m + 1)}, reverse=True)
        cols = sorted({min(self.n, math.ceil(math.ceil(self.n / p) / GRANULE) * GRANULE)
                       for p in range(1, self.n + 1)}, reverse=True)
        out = []
        for r in rows:
            for c in cols:
                fewest = next((p for p in _chunk_counts(self.k)
                               if self.need(Split(r, c, _depth(self.k, p))) <= budget), None)
                if fewest is None:
                    continue
                out += [Split(r, c, _depth(self.k, p)) for p in _chunk_counts(self.k)
                        if fewest <= p <= 2 * fewest][:2]
                if len({(s.rows, s.cols) for s in out}) >= MAX_CANDIDATES ** 2:
                    return out
        return out

    def choose(self) -> Split:
        op = self.layer.op
        options = self.candidates()
        if not options:
            least = Split(1, min(self.n, GRANULE), min(self.k, GRANULE))
            raise VpucError(f"{describe(op)} does not fit a tile's CMX: {self.need(least)} bytes "
                            f"with one matrix row, {least.cols} output columns and {least.depth} "
                            f"of K per block (K split into f32 partial sums) over a budget of "
                            f"{self.prog.cmx_budget}", op.loc)
        return min(options, key=lambda s: (self.schedule(s).makespan(), -s.depth, -s.rows))

    # ---------------------------------------------------------------- the tasks

    def schedule(self, s: Split) -> _Schedule:
        """Every task of the layer under split ``s``, in program order: output blocks in
        rounds of one per tile, their K chunks interleaved, then each block's epilogue."""
        from vpuc.fusion.lower_dpu_matmul import _batch_index, load_matrix  # noqa: PLC0415
        sch = _Schedule(self.p, self.timing, self.prog.dma_channels)
        sch.prog.kernels = kernel_declarations(self.activation)
        blocks = [(item, r, c) for item in self.items
                  for c in _edges(self.n, s.cols) for r in _edges(self.m, s.rows)]
        kchunks = _edges(self.k, s.depth)
        bias = None
        if self.layer.bias is not None:
            bias = padded_vector(self.layer.bias, aligned(self.n))
            sch.prog.buffers.append(f"const %{self.p}bias : {bias.size}xf32 = "
                                    f"{const_text(bias, self.p + 'bias')}")
        counter = [0] * self.tiles          # K chunks so far per tile: the slot parity
        totals = [0] * self.tiles           # f32 totals so far per tile
        out_batch = self.out.type.dims[:-2]
        for first in range(0, len(blocks), self.tiles):
            round_ = list(enumerate(blocks[first:first + self.tiles]))
            current: dict[int, str] = {}
            for j, (k0, k1) in enumerate(kchunks):
                for t, (item, (r0, r1), (c0, c1)) in round_:
                    g, b = counter[t], first + t
                    slot = g % 2
                    tag = f"b{b}k{j}"
                    cp = aligned(c1 - c0)
                    sch.scope = f"t{t}.x{slot}"
                    x = load_matrix(sch, f"a.{tag}", self.a,
                                    _batch_index(self.a.type.dims, out_batch, item),
                                    self.a_axes[0], (r0, r1), self.a_axes[1], t, "", [],
                                    pad=(r1 - r0, aligned(k1 - k0)), cols=(k0, k1))
                    sch.scope = f"t{t}.w{slot}"
                    w = load_matrix(sch, f"w.{tag}", self.b,
                                    _batch_index(self.b.type.dims, out_batch, item),
                                    self.b_axes[0], (c0, c1), self.b_axes[1], t, "", [],
                                    pad=(cp, aligned(k1 - k0)), cols=(k0, k1))
                    clause, reads = "", [x, w]
                    if j == 0 and bias is not None:
                        sch.scope = f"t{t}.bias"
                        cmx = sch.cmx(f"bias.{tag}", TensorType((cp,), ElemType.F32,
                                                                _vector_order()), t)
                        sch.dma(f"load_bias.{tag}",
                                sch.view(f"bias.v{tag}", f"{self.p}bias", [f"{c0}:{c0 + cp}"]),
                                cmx, 0)
                        clause, reads = f" bias({cmx})", reads + [cmx]
                    sch.scope = f"t{t}.p{slot}"
                    part = sch.cmx(f"part.{tag}", TensorType((r1 - r0, cp), ElemType.F32,
                                                             self.order), t)
                    self._dpu(sch, tag, t, x, w, clause, part, reads, (r1 - r0, cp, k1 - k0))
                    if j > 0:
                        sch.scope = f"t{t}.acc{totals[t] % 2}"
                        total = sch.cmx(f"acc.{tag}", TensorType((r1 - r0, cp), ElemType.F32,
                                                                 self.order), t)
                        totals[t] += 1
                        self._act(sch, f"add.{tag}", "ksplit_add_f32", t, [current[t], part],
                                  total, (r1 - r0) * cp)
                        part = total
                    current[t] = part
                    counter[t] += 1
            for t, (item, (r0, r1), (c0, c1)) in round_:
                self._epilogue(sch, f"b{first + t}", t, item, (r0, r1), (c0, c1), current[t],
                               totals)
        return sch

    def _dpu(self, sch: _Schedule, tag: str, t: int, x: str, w: str, bias: str, part: str,
             reads: list[str], shape: tuple[int, int, int]) -> None:
        rows, cp, depth = shape

        def workload_of(r: int) -> DpuWorkload:
            return DpuWorkload(op="matmul", elem=self.a.type.elem.value, width=r, height=1,
                               channels=cp, in_channels=aligned(depth),
                               in_bytes=self.a.type.elem.nbytes, out_bytes=4,
                               weight_bytes=self.b.type.elem.nbytes)

        runs, cycles = split_rows_cost(rows, workload_of, self.timing)
        head = f"  {label(self.p)}c.{tag}: dpu matmul on tile {t} in({x}) weights({w}){bias} out({part})"
        body = [f"    variant start(0, {a}, {z0}) end(0, {b - 1}, {z1}) mode({mode})"
                for a, b, z0, z1, mode in variant_boxes("matmul", runs, (0, cp - 1))]
        sch.add("dpu", ("dpu", t), reads, [part], cycles,
                lambda c: [head + c + " {"] + body + ["  }"])

    def _act(self, sch: _Schedule, name: str, kernel: str, t: int, ins: list[str], out: str,
             elements: int, scalars: tuple[float, ...] = ()) -> None:
        which = kernel.split("_")[1]
        cycles = (self.timing.dispatch["ACT_SHAVE"]
                  + elements * ACT_CYCLES_PER_ELEMENT[which] * self.timing.shave_cycle)
        binds = ", ".join(f"{v} as %a{i}" for i, v in enumerate(ins))
        region = [f"    %c{i} = const {v!r} : f16" for i, v in enumerate(scalars)]
        args = [f"%a{i}" for i in range(len(ins))] + ["%r0"] + [f"%c{i}" for i in range(len(scalars))]
        head = f"  {label(self.p)}{name}: sw @{kernel} on tile {t} inputs({binds}) outputs({out} as %r0)"
        sch.add("act", ("act", t), ins, [out], cycles,
                lambda c: [head + c + " {"] + region + [f"    run({', '.join(args)})", "  }"])

    def _epilogue(self, sch: _Schedule, tag: str, t: int, item: tuple, rows: tuple[int, int],
                  cols: tuple[int, int], total: str, totals: list[int]) -> None:
        """The activation on the f32 total, the conversion to f16, the store of the real
        columns."""
        (r0, r1), (c0, c1) = rows, cols
        cp = aligned(c1 - c0)
        f32 = TensorType((r1 - r0, cp), ElemType.F32, self.order)
        if self.activation is not None:
            sch.scope = f"t{t}.acc{totals[t] % 2}"
            result = sch.cmx(f"act.{tag}", f32, t)
            totals[t] += 1
            scalars = _f16_bounds(*self.clamp) if self.activation == "clamp" else ()
            self._act(sch, f"act.{tag}", f"ksplit_{self.activation}_f32", t, [total], result,
                      (r1 - r0) * cp, scalars)
            total = result
        sch.scope = f"t{t}.out"
        y = sch.cmx(f"out.{tag}", TensorType((r1 - r0, cp), ElemType.F16, self.order), t)
        self._act(sch, f"convert.{tag}", "ksplit_convert_f32_f16", t, [total], y, (r1 - r0) * cp)
        if cp != c1 - c0:                        # only the real columns are stored
            y = sch.view(f"out.r{tag}", y[1:], [f"0:{r1 - r0}", f"0:{c1 - c0}"])
        dst = sch.view(f"out.v{tag}", self.out.name,
                       [str(i) for i in item] + [f"{r0}:{r1}", f"{c0}:{c1}"])
        sch.dma(f"store.{tag}", y, dst, self.prog.store_channel)


def emit_matmul_ksplit(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], tiles: int,
                       prefix: str, gate: tuple[str, ...], finish: str | None) -> Split:
    """Lower ``layer`` (a MatMul) with K split (module docstring); the split chosen."""
    lowering = MatmulKSplit(prog, layer, values, tiles, prefix)
    split = lowering.choose()
    lowering.schedule(split).commit(prog, gate, finish)
    return split


def _chunk_counts(k: int) -> list[int]:
    """The distinct chunk counts of K in multiples of 16, fewest first."""
    counts, last = [], None
    for parts in range(1, math.ceil(k / GRANULE) + 1):
        depth = _depth(k, parts)
        if depth != last:
            counts.append(math.ceil(k / depth))
            last = depth
    return sorted(set(counts))


def _depth(k: int, parts: int) -> int:
    """K per chunk for about ``parts`` chunks: a multiple of 16, or all of K."""
    return min(k, math.ceil(math.ceil(k / parts) / GRANULE) * GRANULE)


def _edges(extent: int, size: int) -> list[tuple[int, int]]:
    if size >= extent:
        return [(0, extent)]
    return [(a, min(a + size, extent)) for a in range(0, extent, size)]


def _vector_order():
    from vpuc.ir.types import DimsOrder   # noqa: PLC0415
    return DimsOrder.identity(1)


def _f16_bounds(low: float, high: float) -> tuple[float, float]:
    """Clamp bounds as the kernel's f16 scalars (beyond f16's range: its largest finite)."""
    top = float(np.finfo(np.float16).max)
    return (float(np.float16(max(low, -top))), float(np.float16(min(high, top))))


__all__ = ["emit_matmul_ksplit", "Split", "MatmulKSplit", "row_edges"]
