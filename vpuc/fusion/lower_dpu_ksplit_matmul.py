"""A MatMul split over K (``lower_dpu_ksplit``): blocks of output rows and columns, each
a series of K chunks.

Each chunk loads rows [r0, r1) of the input and columns [c0, c1) of the weights,
both only over K [k0, k1), with ``lower_dpu_matmul.load_matrix`` (the memory
order of the DDR tensor kept, K and N padded to 16 with zeros), and runs one DPU
``matmul`` writing the f32 partial [rows, aligned(cols)] in the output's matrix
order; the first chunk loads the block's slice of the bias.  Batch items
(broadcasting as in ``lower_dpu_matmul``) are blocks of their own.
"""

from __future__ import annotations

import itertools

from vpuc.cost import DpuWorkload
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.fold_views import view_slices
from vpuc.fusion.lower_dpu import DpuLayer
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.fusion.lower_dpu_ksplit_schedule import TaskSchedule
from vpuc.fusion.lower_dpu_ksplit import (GRANULE, KSplitLayer, Split, depths, edges,
                                          row_counts)
from vpuc.ir.types import ElemType, TensorType


class MatmulKSplit(KSplitLayer):
    """A MatMul lowered with K cut into chunks."""

    what, outs, reduction, per_chunk = "one matrix row", "output columns", "K", "{} of K"

    def __init__(self, prog: ProgramText, layer: DpuLayer, values: dict[str, Value],
                 tiles: int, prefix: str) -> None:
        from vpuc.fusion.lower_dpu_matmul import _out_order   # noqa: PLC0415 (import cycle)
        op = layer.op
        self.a, self.b = values[op.operands[0]], values[op.operands[1]]
        self.out = values[layer.output]
        super().__init__(prog, layer, tiles, prefix, self.out.type.elem)
        ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
        ra, rb = self.a.type.rank, self.b.type.rank
        self.a_axes = (ra - 1, ra - 2) if ta else (ra - 2, ra - 1)        # M, K
        self.b_axes = (rb - 2, rb - 1) if tb else (rb - 1, rb - 2)        # N, K
        self.m, self.n = self.out.type.dims[-2:]
        self.k = self.a.type.dims[self.a_axes[1]]
        self.items = list(itertools.product(*(range(d) for d in self.out.type.dims[:-2])))
        self.order = _out_order(self.out, self.out.type.rank)

    def need(self, s: Split) -> int:
        """CMX bytes of a tile: two slots of input and weight chunks (with a staging copy
        where ``load_matrix`` makes one), two f32 partials, two f32 totals, the f16 result,
        the bias."""
        kp, cp = aligned(s.depth), aligned(s.cols)
        x, w = s.rows * kp * self.a.type.elem.nbytes, cp * kp * self.b.type.elem.nbytes
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
        return self.fitting(row_counts(self.m), depths(self.n), depths(self.k))

    def least(self) -> Split:
        return Split(1, min(self.n, GRANULE), min(self.k, GRANULE))

    def bias_length(self) -> int:          # to the last block's columns
        return aligned(self.n)

    def blocks(self, s: Split) -> list:
        return [(item, r, c) for item in self.items for c in edges(self.n, s.cols)
                for r in edges(self.m, s.rows)]

    def chunks(self, block, s: Split) -> list[tuple[int, int]]:
        return edges(self.k, s.depth)

    def emit_chunk(self, sch: TaskSchedule, tag: str, t: int, slot: int, block,
                   chunk: tuple[int, int], first: bool) -> str:
        from vpuc.fusion.lower_dpu_matmul import _batch_index, load_matrix  # noqa: PLC0415
        item, (r0, r1), (c0, c1) = block
        k0, k1 = chunk
        rows, cp, kp = r1 - r0, aligned(c1 - c0), aligned(k1 - k0)
        out_batch = self.out.type.dims[:-2]
        sch.scope = f"t{t}.x{slot}"
        x = load_matrix(sch, f"a.{tag}", self.a, _batch_index(self.a.type.dims, out_batch, item),
                        self.a_axes[0], (r0, r1), self.a_axes[1], t, "", [], pad=(rows, kp),
                        cols=(k0, k1))
        sch.scope = f"t{t}.w{slot}"
        sch.channel = self.prog.store_channel   # weights beside the inputs: latencies overlap
        w = load_matrix(sch, f"w.{tag}", self.b, _batch_index(self.b.type.dims, out_batch, item),
                        self.b_axes[0], (c0, c1), self.b_axes[1], t, "", [], pad=(cp, kp),
                        cols=(k0, k1))
        sch.channel = None
        clause, reads = "", [x, w]
        if first and self.layer.bias is not None:
            clause, reads = self.first_bias(sch, tag, t, c0, cp, reads)
        sch.scope = f"t{t}.p{slot}"
        part = sch.cmx(f"part.{tag}", TensorType((rows, cp), ElemType.F32, self.order), t)

        def workload_of(r: int) -> DpuWorkload:     # rows along W, as lower_dpu_matmul's
            return DpuWorkload(op="matmul", elem=self.a.type.elem.value, width=r, height=1,
                               channels=cp, in_channels=kp, in_bytes=self.a.type.elem.nbytes,
                               out_bytes=4, weight_bytes=self.b.type.elem.nbytes)

        self.dpu(sch, tag, t, f"dpu matmul on tile {t} in({x}) weights({w}){clause} out({part})",
                 reads, part, ((0, 0), rows, (0, cp - 1)), workload_of)
        return part

    def store(self, sch: TaskSchedule, tag: str, t: int, block, y: str) -> None:
        """The real columns of the f16 result into the output."""
        item, (r0, r1), (c0, c1) = block
        if aligned(c1 - c0) != c1 - c0:
            y = sch.view(f"out.r{tag}", y[1:], [f"0:{r1 - r0}", f"0:{c1 - c0}"])
        dst = sch.view(f"out.v{tag}", *view_slices(
            self.out, [str(i) for i in item] + [f"{r0}:{r1}", f"{c0}:{c1}"]))
        sch.dma(f"store.{tag}", y, dst, self.prog.store_channel)


def emit_matmul_ksplit(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], tiles: int,
                       prefix: str, gate: tuple[str, ...], finish: str | None) -> Split:
    """Lower ``layer`` (a MatMul) with K split; the split chosen."""
    return MatmulKSplit(prog, layer, values, tiles, prefix).emit(gate, finish)
