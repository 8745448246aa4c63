"""Layers split over their reduction: f32 partial sums on the DPU, summed on ACT SHAVE.

A MatMul whose weights with one output row and 16 output columns do not fit a
tile's CMX budget (K = 200,000, or a small ``cmx_budget``), or a Convolution
whose weights with one output row and 16 output channels do not (a huge
C_in x KH x KW), cannot be cut over rows or output channels any further
(``lower_dpu_matmul``, ``lower_dpu_nn``).  Then the reduction is cut into
chunks too (K, or the input channels; multiples of 16, the DPU's channel
granule): every output block runs one DPU task per chunk on that chunk's
slices of the input and the weights (``lower_dpu_ksplit_matmul``,
``lower_dpu_ksplit_conv``), each writing its partial sums as **f32** (the
DPU's output stage writes f32: the NPU compiler's ``DPUInvariantODURewriter``
for NPU37XX, ``getOutDataWidth`` in ``src/vpux_compiler/src/NPU37XX/dialect/
VPUIPDPU/rewriters/dpu_invariant_block_rewriters.cpp`` of
``openvinotoolkit/npu_plugin``, maps an f32 output to ``ODU_DTYPE_32BIT``).
The first chunk's task adds the bias (in f32, once); the library kernel
``add`` (kernels/add.s, f32) on the tile's two ACT SHAVEs (half of the rows
each) sums each partial into a running f32 total; the activation (``relu``, ``clamp``, ``sigmoid``,
``tanh``, in f32) and ``convert`` (f32 -> f16, or bf16 for a bf16 layer) run once on
the total, and a DMA stores the block.  So a value is the f32 sum of its products
rounded once to the layer's type, as the unsplit layer computes it (only the order of the f32
additions differs).

The tasks are ordered by what they read and write (``lower_dpu_ksplit_schedule``): buffers
of one role alternate between two slots per tile, so loads, DPU tasks and ACT adds of
successive chunks overlap.
Output blocks alternate over the tiles, in rounds of one block per tile.

The split (rows per block, output channels per block, reduction per chunk) is
the candidate that fits the budget whose schedule the cost model says ends
first: each schedule is list-scheduled task by task on its queues (DMA
channels, each tile's DPU and ACT SHAVE) with the cost model's cycles
(``vpuc.cost``: DMA transfers, DPU variants as ``lower_dpu.split_rows`` cuts
them, ACT SHAVE invocations at the library's measured cycles per element,
docs/kernels.md).  A layer not even one row, 16 output channels and 16 of the
reduction fit is a ``VpucError`` at the op.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vpuc.cost import DpuWorkload
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, label
from vpuc.fusion.lower_dpu import DpuLayer, describe, layer_timing, split_rows_cost
from vpuc.fusion.lower_dpu_channels import padded_vector, variant_boxes
from vpuc.fusion.lower_dpu_ksplit_schedule import TaskSchedule
from vpuc.fusion.lower_dpu_support import const_text
from vpuc.ir.types import DimsOrder, ElemType, TensorType

GRANULE = 16
# SHAVE cycles per f32 element of the library kernels (docs/kernels.md, "Measured cost")
ACT_CYCLES_PER_ELEMENT = {"add": 0.375, "relu": 0.25, "clamp": 0.5, "sigmoid": 1.188,
                          "tanh": 0.531, "convert": 0.188}
ACTIVATIONS = {"Relu": "relu", "Clamp": "clamp", "Sigmoid": "sigmoid", "Tanh": "tanh"}
MAX_PAIRS = 16               # (rows, output channels) pairs tried


OUT_ELEMS = (ElemType.F16, ElemType.BF16)       # the DPU's float types (lower_dpu_support)


def kernel_declarations(activation: str | None, out_elem: ElemType = ElemType.F16) -> list[str]:
    """The library kernels a K-split layer calls (f32 totals, an f16 or bf16 result)."""
    decls = ['kernel @ksplit_add_f32(a: memref<*xf32>, b: memref<*xf32>, output: memref<*xf32>) '
             'from library "add"',
             f'kernel @ksplit_convert_f32_{out_elem}(input: memref<*xf32>, '
             f'output: memref<*x{out_elem}>) from library "convert"']
    if activation == "clamp":
        decls.append('kernel @ksplit_clamp_f32(input: memref<*xf32>, output: memref<*xf32>, '
                     'minVal: f16, maxVal: f16) from library "clamp"')
    elif activation is not None:
        decls.append(f'kernel @ksplit_{activation}_f32(input: memref<*xf32>, '
                     f'output: memref<*xf32>) from library "{activation}"')
    return decls


@dataclass(frozen=True)
class Split:
    rows: int        # output rows per block (at most)
    cols: int        # output channels (columns) per block: a multiple of 16, or all
    depth: int       # the reduction per chunk: a multiple of 16, or all of it


class KSplitLayer(ABC):
    """What a layer split over its reduction shares: the choice of the split, the rounds of
    blocks and chunks, the f32 totals and the epilogue.  A subclass gives its ``blocks``,
    each block's reduction ``chunks``, the loads and DPU task of one chunk
    (``emit_chunk``), the ``store`` of a block's f16 result, the CMX ``need`` of a split and
    its ``candidates``."""

    # the smallest block and the reduction, for the error message
    what, outs, reduction, per_chunk = ("one output row", "output channels", "input channels",
                                        "{} input channels")

    def __init__(self, prog: ProgramText, layer: DpuLayer, tiles: int, prefix: str,
                 out_elem: ElemType) -> None:
        op = layer.op
        self.prog, self.layer, self.tiles, self.p = prog, layer, tiles, prefix
        self.timing = layer_timing(prog, op)
        self._variants: dict[DpuWorkload, tuple] = {}
        self.activation = next((ACTIVATIONS[o.kind] for o in layer.chain if o.kind in ACTIVATIONS),
                               None)
        self.clamp = next(((o.attrs["min"], o.attrs["max"]) for o in layer.chain
                           if o.kind == "Clamp"), None)
        if out_elem not in OUT_ELEMS:
            raise VpucError(f"{describe(op)} does not fit a tile's CMX and needs its reduction "
                            f"split into f32 partial sums, which are converted to f16 or bf16 "
                            f"only; the layer is {out_elem}", op.loc)
        self.out_elem = out_elem

    # subclass interface
    @abstractmethod
    def blocks(self, s: Split) -> list: ...
    @abstractmethod
    def chunks(self, block, s: Split) -> list[tuple[int, int]]: ...
    @abstractmethod
    def emit_chunk(self, sch: TaskSchedule, tag: str, t: int, slot: int, block,
                   chunk: tuple[int, int], first: bool) -> str: ...
    @abstractmethod
    def store(self, sch: TaskSchedule, tag: str, t: int, block, y: str) -> None: ...
    @abstractmethod
    def need(self, s: Split) -> int: ...
    @abstractmethod
    def candidates(self) -> list[Split]: ...
    @abstractmethod
    def least(self) -> Split: ...
    @abstractmethod
    def bias_length(self) -> int:
        """The bias's length zero-padded to cover the last block's output channels."""

    def declare(self, sch: TaskSchedule) -> None:
        """The layer's constants (its zero-padded bias) in the program's buffers."""
        if self.layer.bias is not None:
            bias = padded_vector(self.layer.bias, self.bias_length())
            sch.prog.buffers.append(f"const %{self.p}bias : {bias.size}xf32 = "
                                    f"{const_text(bias, self.p + 'bias')}")

    def choose(self) -> Split:
        op = self.layer.op
        options = self.candidates()
        if not options:
            least = self.least()
            raise VpucError(f"{describe(op)} does not fit a tile's CMX: {self.need(least)} bytes "
                            f"with {self.what}, {least.cols} {self.outs} and "
                            f"{self.per_chunk.format(least.depth)} per block ({self.reduction} "
                            f"split into f32 partial sums) over a budget of "
                            f"{self.prog.cmx_budget}", op.loc)
        return min(options, key=lambda s: (self.schedule(s).makespan(), -s.depth, -s.rows))

    def fitting(self, rows: list[int], cols: list[int], depths: list[int]) -> list[Split]:
        """For each (rows, cols), widest first, the deepest chunk that fits (``depths``
        largest first: CMX need falls with the depth) and the one about half as deep; at
        most ``MAX_PAIRS`` pairs."""
        out: list[Split] = []
        for r in rows:
            for c in cols:
                lo, hi = 0, len(depths)          # the first depth that fits, by bisection
                while lo < hi:
                    mid = (lo + hi) // 2
                    if self.need(Split(r, c, depths[mid])) <= self.prog.cmx_budget:
                        hi = mid
                    else:
                        lo = mid + 1
                if lo == len(depths):
                    continue
                best = depths[lo]
                half = next((d for d in depths[lo:] if 2 * d <= best), None)
                out += [Split(r, c, best)] + ([Split(r, c, half)] if half else [])
                if len({(x.rows, x.cols) for x in out}) >= MAX_PAIRS:
                    return out
        return out

    def schedule(self, s: Split) -> TaskSchedule:
        """Every task of the layer under split ``s``, in program order: output blocks in
        rounds of one per tile, their chunks interleaved, then each block's epilogue."""
        sch = TaskSchedule(self.p, self.timing)
        sch.prog.kernels = kernel_declarations(self.activation, self.out_elem)
        self.declare(sch)
        blocks = self.blocks(s)
        counter = [0] * self.tiles          # chunks so far per tile: the slot parity
        totals = [0] * self.tiles           # f32 totals so far per tile
        for first in range(0, len(blocks), self.tiles):
            round_ = list(enumerate(blocks[first:first + self.tiles]))
            chunks = {t: self.chunks(block, s) for t, block in round_}
            current: dict[int, str] = {}
            for j in range(max(len(c) for c in chunks.values())):
                for t, block in round_:
                    if j >= len(chunks[t]):
                        continue
                    tag = f"b{first + t}k{j}"
                    part = self.emit_chunk(sch, tag, t, counter[t] % 2, block, chunks[t][j],
                                           j == 0)
                    counter[t] += 1
                    if j > 0:
                        total = self._total(sch, f"acc.{tag}", t, sch.types[part], totals)
                        self.act(sch, f"add.{tag}", "ksplit_add_f32", t, [current[t], part], total)
                        part = total
                    current[t] = part
            for t, block in round_:
                self._epilogue(sch, f"b{first + t}", t, block, current[t], totals)
        return sch

    def first_bias(self, sch: TaskSchedule, tag: str, t: int, lo: int, count: int,
                   reads: list[str]) -> tuple[str, list[str]]:
        """The ``bias(...)`` clause and reads of a block's first chunk: the bias of output
        channels ``lo .. lo + count`` loaded into CMX (the other chunks add none)."""
        sch.scope = f"t{t}.bias"
        bias = sch.cmx(f"bias.{tag}", vector(count), t)
        sch.dma(f"load_bias.{tag}", sch.view(f"bias.v{tag}", f"{self.p}bias",
                                             [f"{lo}:{lo + count}"]), bias, 0)
        return f" bias({bias})", reads + [bias]

    def _total(self, sch: TaskSchedule, name: str, t: int, f32: TensorType, totals: list[int]) -> str:
        sch.scope = f"t{t}.acc{totals[t] % 2}"
        totals[t] += 1
        return sch.cmx(name, f32, t)

    def dpu(self, sch: TaskSchedule, tag: str, t: int, head: str, reads: list[str], part: str,
            extent: tuple[tuple[int, int], int, tuple[int, int]],
            workload_of: Callable[[int], DpuWorkload]) -> None:
        """One DPU task writing ``part``: ``head`` (``dpu OP on tile ...`` up to its window),
        its rows split into the variants and modes the cost model finds cheapest."""
        x, rows, z = extent
        key = workload_of(rows)                 # blocks repeat: one estimate per shape
        if key not in self._variants:
            self._variants[key] = split_rows_cost(rows, workload_of, self.timing)
        runs, cycles = self._variants[key]
        text = f"  {label(self.p)}c.{tag}: {head}"
        body = [f"    variant start({x[0]}, {a}, {z0}) end({x[1]}, {b - 1}, {z1}) mode({mode})"
                for a, b, z0, z1, mode in variant_boxes(head.split()[1], runs, z)]
        sch.add("dpu", ("dpu", t), reads, [part], cycles,
                lambda c: [text + c + " {"] + body + ["  }"])

    def act(self, sch: TaskSchedule, name: str, kernel: str, t: int, ins: list[str], out: str,
            scalars: tuple[float, ...] = ()) -> None:
        """A library kernel over the whole of ``out``: one invocation per ACT SHAVE of the
        tile, each on half of the rows (views of every operand; one invocation for one
        row)."""
        dims = sch.types[out].dims
        axis = 0 if len(dims) == 2 else 2             # M of a matrix, H of an NCHW tensor
        half = dims[axis] // 2
        parts = [(0, dims[axis])] if half == 0 else [(0, half), (half, dims[axis])]
        per_element = ACT_CYCLES_PER_ELEMENT[kernel.split("_")[1]] * self.timing.shave_cycle
        for j, (a, b) in enumerate(parts):
            def part(v: str, i: str) -> str:
                if len(parts) == 1:
                    return v
                box = [f"{a}:{b}" if d == axis else f"0:{n}" for d, n in enumerate(dims)]
                return sch.view(f"{name}.h{j}.{i}", v[1:], box)
            views = [part(v, f"a{i}") for i, v in enumerate(ins)]
            result = part(out, "r")
            binds = ", ".join(f"{v} as %a{i}" for i, v in enumerate(views))
            region = [f"    %c{i} = const {v!r} : f16" for i, v in enumerate(scalars)]
            args = ([f"%a{i}" for i in range(len(views))] + ["%r0"]
                    + [f"%c{i}" for i in range(len(scalars))])
            head = (f"  {label(self.p)}{name}.{j}: sw @{kernel} on tile {t} inputs({binds}) "
                    f"outputs({result} as %r0)")
            cycles = (self.timing.dispatch["ACT_SHAVE"]
                      + math.prod(dims) * (b - a) // dims[axis] * per_element)
            sch.add("act", ("act", t, j), views, [result], cycles,
                    lambda c, head=head, region=region, args=args:
                    [head + c + " {"] + region + [f"    run({', '.join(args)})", "  }"])

    def _epilogue(self, sch: TaskSchedule, tag: str, t: int, block, total: str,
                  totals: list[int]) -> None:
        """The activation on the f32 total, the conversion to the layer's type, the store."""
        f32 = sch.types[total]
        if self.activation is not None:
            result = self._total(sch, f"act.{tag}", t, f32, totals)
            scalars = _f16_bounds(*self.clamp) if self.activation == "clamp" else ()
            self.act(sch, f"act.{tag}", f"ksplit_{self.activation}_f32", t, [total], result,
                     scalars)
            total = result
        sch.scope = f"t{t}.out"
        y = sch.cmx(f"out.{tag}", TensorType(f32.dims, self.out_elem, f32.order), t)
        self.act(sch, f"convert.{tag}", f"ksplit_convert_f32_{self.out_elem}", t, [total], y)
        self.store(sch, tag, t, block, y)

    def emit(self, gate: tuple[str, ...], finish: str | None) -> Split:
        """Choose the split, add its tasks to the program; the split."""
        split = self.choose()
        self.schedule(split).commit(self.prog, gate, finish)
        return split


def depths(total: int) -> list[int]:
    """The distinct chunk sizes of a reduction of ``total`` (multiples of 16, balanced over
    the chunk count), largest (fewest chunks) first."""
    out, parts = [], 1
    while True:
        depth = min(total, math.ceil(math.ceil(total / parts) / GRANULE) * GRANULE)
        if not out or depth < out[-1]:
            out.append(depth)
        if depth <= GRANULE:
            return out
        parts = max(parts + 1, math.ceil(total / (depth - GRANULE)))


def edges(extent: int, size: int) -> list[tuple[int, int]]:
    """[0, extent) cut into runs of ``size`` (the last shorter)."""
    return [(a, min(a + size, extent)) for a in range(0, extent, size)]


def row_counts(extent: int) -> list[int]:
    """The distinct block heights of ``extent`` rows, tallest first."""
    return sorted({math.ceil(extent / c) for c in range(1, extent + 1)}, reverse=True)


def vector(size: int) -> TensorType:
    return TensorType((size,), ElemType.F32, DimsOrder.identity(1))


def _f16_bounds(low: float, high: float) -> tuple[float, float]:
    """Clamp bounds as the kernel's f16 scalars (beyond f16's range: its largest finite)."""
    top = float(np.finfo(np.float16).max)
    return (float(np.float16(max(low, -top))), float(np.float16(min(high, top))))
