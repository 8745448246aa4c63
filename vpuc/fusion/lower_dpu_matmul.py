"""A graph MatMul as DPU ``matmul`` tasks (see ``lower_dpu`` for the common contract).

The task-level matmul takes an input [M, K] and weights [N, K] in CMX and
writes [M, N] (``docs/vir.md``, DPU tasks), so a graph MatMul (ranks >= 2,
batch dims broadcasting, ``transpose_a``/``transpose_b``, either operand a
constant or an activation) becomes one 2-D matmul per output batch item,
each cut into blocks of M rows over the tiles (double-buffered when they do
not fit the CMX budget at once).

Operands come from DDR by plain DMA copies, never a compute pass: each CMX
matrix takes the *memory* order (``NC`` or ``CN``) in which its two logical
dims appear in the DDR tensor, so a byte copy of the DDR view *is* the matrix,
transposed or not.  A transposed rank-2 square block (same shape, other
order, which a copy may not do) goes through a flat CMX staging buffer.
Weights without batch dims are loaded once per tile; batched weights with
each block.  The bias (from the folded post-op chain) runs along N.
"""

from __future__ import annotations

import itertools

from vpuc.cost import DpuWorkload
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import DpuLayer, LayerEmitter, choose_blocks, vector
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType

NC, CN = DimsOrder(NAMED_ORDERS["NC"]), DimsOrder(NAMED_ORDERS["CN"])


def matrix_order(t: TensorType, row_axis: int, col_axis: int) -> DimsOrder:
    """NC when the rows' dim is outer to the columns' dim in memory, else CN."""
    perm = t.order.perm
    return NC if perm.index(row_axis) < perm.index(col_axis) else CN


def _batch_index(dims: tuple, out_batch: tuple, index: tuple) -> tuple[int, ...]:
    """The batch index of an operand with ``dims`` for output batch ``index`` (broadcasting)."""
    batch = dims[:-2]
    offset = len(out_batch) - len(batch)
    return tuple(0 if d == 1 else index[offset + j] for j, d in enumerate(batch))


def load_matrix(e: LayerEmitter, name: str, v: Value, batch: tuple[int, ...], row_axis: int,
                rows: tuple[int, int], col_axis: int, tile: int, waits: str,
                updates: list[str]) -> str:
    """DMA rows [r0, r1) of the matrix (row_axis, col_axis) of ``v`` into a CMX [rows, cols]."""
    r0, r1 = rows
    cols = v.type.dims[col_axis]
    slices = [f"{r0}:{r1}" if j == row_axis else f"0:{d}" if j == col_axis else str(batch[j])
              for j, d in enumerate(v.type.dims)]
    src = e.view(f"{name}.v", v.name, slices)
    order = matrix_order(v.type, row_axis, col_axis)
    dst = e.cmx(name, TensorType((r1 - r0, cols), v.type.elem, order), tile)
    if v.type.rank == 2 and row_axis == 1 and r1 - r0 == cols:
        flat = e.cmx(f"{name}.flat", vector((r1 - r0) * cols, v.type.elem), tile)
        e.dma(f"{name}.stage", src, flat, 0, waits, [])
        src = flat
    e.dma(name, src, dst, 0, waits, updates)
    return dst


def emit_matmul(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], tiles: int,
                prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    op = layer.op
    a, b, out = values[op.operands[0]], values[op.operands[1]], values[layer.output]
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    ra, rb, ro = a.type.rank, b.type.rank, out.type.rank
    a_rows, a_cols = (ra - 1, ra - 2) if ta else (ra - 2, ra - 1)        # M, K
    b_rows, b_cols = (rb - 2, rb - 1) if tb else (rb - 1, rb - 2)        # N, K
    m, n = out.type.dims[-2:]
    k_dim = a.type.dims[a_cols]
    elem, eb = out.type.elem, out.type.elem.nbytes
    out_batch = out.type.dims[:-2]
    items = list(itertools.product(*(range(d) for d in out_batch)))
    batched_b = any(d != 1 for d in b.type.dims[:-2])
    bias_bytes = 4 * n if layer.bias is not None else 0
    resident = bias_bytes + (0 if batched_b else n * k_dim * eb)

    def footprint(rows: int) -> int:
        return (rows * k_dim + rows * n + (n * k_dim if batched_b else 0)) * eb

    per_item = choose_blocks(m, 1 if len(items) >= tiles else tiles, resident, footprint,
                             "matrix row", op)
    work = [(item, rows) for item in items for rows in per_item]
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(work))
    bias_of = {}
    for k, (item, (r0, r1)) in enumerate(work):
        t = e.tile(k)
        e.barriers(k)
        if k < e.used:              # weights and bias: once per tile, before its first block
            if not batched_b:
                load_matrix(e, f"w.t{t}", b, (0,) * (rb - 2), b_rows, (0, n), b_cols, t,
                            e.load_waits(t), [f"%{prefix}loaded{t}"])
            bias_of[t] = e.load_bias(t, layer.bias)
        loaded = [f"%{prefix}loaded{k}"]
        x = load_matrix(e, f"a.c{k}", a, _batch_index(a.type.dims, out_batch, item), a_rows,
                        (r0, r1), a_cols, t, e.load_waits(k), loaded)
        weights = f"%{prefix}w.t{t}"
        if batched_b:
            weights = load_matrix(e, f"w.c{k}", b, _batch_index(b.type.dims, out_batch, item),
                                  b_rows, (0, n), b_cols, t, e.load_waits(k), loaded)
        y = e.cmx(f"out.c{k}", TensorType((r1 - r0, n), elem,
                                          _out_order(out.type, ro)), t)
        head = f"dpu matmul on tile {t} in({x}) weights({weights}){bias_of[t]} out({y}){layer.post}"
        # The DPU runs a matmul as a 1x1 convolution with its rows along W (H = 1).
        e.task(k, head, ((0, 0), r1 - r0, (0, n - 1)),
               lambda rows: DpuWorkload(op="matmul", elem=a.type.elem.value, width=rows,
                                        height=1, channels=n, in_channels=k_dim,
                                        in_bytes=a.type.elem.nbytes, out_bytes=eb,
                                        weight_bytes=b.type.elem.nbytes))
        slices = [str(i) for i in item] + [f"{r0}:{r1}", f"0:{n}"]
        dst = e.view(f"out.v{k}", out.name, slices)
        e.store(k, y, dst)


def _out_order(t: TensorType, rank: int) -> DimsOrder:
    return matrix_order(t, rank - 2, rank - 1)
