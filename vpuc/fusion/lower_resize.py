"""Linear Interpolate (ONNX Resize, mode linear) as ops the other lowerings take.

``lower-graph`` calls ``expand_linear_resizes`` before tokenizing.  Bilinear
resizing is separable: ``y = A_h · x · A_wᵀ`` per (n, c) plane, where each row
of ``A_h`` (``A_w``) has at most two non-zero taps (``low``, ``high`` with
weights ``1 - f`` and ``f``: ``reference.graph_nn.linear_taps``, the same
coordinate math as the reference).  The two directions suit different engines:

- **rows** (H): every output row blends two whole input rows.  Gathering the
  ``low`` and the ``high`` rows is a DMA copy each (a resize by p is p strided
  runs, ``lower_dma_plan.strided_runs``); the blend ``lo + (hi - lo)·f``, with
  ``f`` a constant per output row, is elementwise work that the tokenizer fuses
  into one generated ACT SHAVE kernel, in f32 (Converts around it) and rounded
  once: f16 roundings of ``hi - lo`` would show where ``lo`` and ``hi`` cancel.
  A MatMul here would need the planes transposed (H is not the innermost dim);
- **columns** (W): W is the innermost dim, so ``x · A_wᵀ`` is a MatMul of
  [N, C, OH, W] by the constant [W, OW] interpolation matrix, a DPU task with
  f32 accumulation (two non-zero terms per output).  A gather along W would be
  element-strided DMA, the slowest kind.

Non-integral scales need no special case: the taps come from the op's own
``scales`` when it has them.

Expects: a typed graph.
Guarantees: no linear Interpolate is left; each became Gather / Subtract /
Multiply / Add (rows) and MatMul (columns) ops at the Interpolate's location,
the last of them defining the Interpolate's value; the graph is re-typed.  An
axis the resize keeps is left out; a row axis whose taps all have ``f = 0``
(e.g. a downscale by 2 with ``asymmetric``) is one Gather.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph import CONSTANT, Graph, GraphOp
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.reference.graph_nn import linear_taps
from vpuc.verifier.graph import infer_graph

ROW_AXIS, COL_AXIS = 2, 3


def expand_linear_resizes(graph: Graph) -> bool:
    """Rewrite every linear Interpolate of ``graph`` in place; True when one was."""
    changed = False
    ops: list[GraphOp] = []
    taken = {o.result for o in graph.ops}
    index = graph.index()
    for op in graph.ops:
        if op.kind == "Interpolate" and op.attrs["mode"] == "linear":
            ops += _expand(op, index.producer(op.operands[0]).type, taken)
            changed = True
        else:
            ops.append(op)
    if changed:
        graph.ops = ops
        infer_graph(graph)
    return changed


class _Builder:
    """New ops named after the Interpolate's value, at its location."""

    def __init__(self, op: GraphOp, taken: set) -> None:
        self.op, self.taken, self.ops = op, taken, []

    def name(self, suffix: str) -> str:
        base, n = f"{self.op.result}.{suffix}", 1
        name = base
        while name in self.taken:
            name, n = f"{base}.{n}", n + 1
        self.taken.add(name)
        return name

    def add(self, kind: str, operands, attrs=None, result: str | None = None) -> str:
        result = result or self.name(kind.lower())
        self.ops.append(GraphOp(kind, result, tuple(operands), dict(attrs or {}), loc=self.op.loc,
                                origin=self.op.origin))   # provenance: the Interpolate's node
        return result

    def constant(self, suffix: str, values: np.ndarray, t: TensorType) -> str:
        name = self.name(suffix)
        flat = values.astype(np.float64).ravel().tolist()
        self.ops.append(GraphOp(CONSTANT, name, (), {}, t, ConstInit(values=tuple(flat)),
                                loc=self.op.loc))
        return name


def _expand(op: GraphOp, x_type: TensorType, taken: set) -> list[GraphOp]:
    b = _Builder(op, taken)
    value = op.operands[0]
    out_shape = tuple(op.attrs["shape"])
    rows_kept = _kept(op, x_type, ROW_AXIS)
    cols_kept = _kept(op, x_type, COL_AXIS)
    if rows_kept and cols_kept:                       # nothing resized: a copy of every row
        b.add("Gather", [value], {"axis": ROW_AXIS, "indices": tuple(range(x_type.dims[2]))},
              result=op.result)
        return b.ops
    if not rows_kept:
        value = _rows(b, op, value, x_type, result=op.result if cols_kept else None)
    if not cols_kept:
        low, high, frac = linear_taps(op.attrs, x_type.dims, COL_AXIS)
        matrix = np.zeros((x_type.dims[COL_AXIS], out_shape[COL_AXIS]))
        columns = np.arange(out_shape[COL_AXIS])
        np.add.at(matrix, (low, columns), 1 - frac)
        np.add.at(matrix, (high, columns), frac)
        t = TensorType(matrix.shape, x_type.elem, DimsOrder.identity(2))
        b.add("MatMul", [value, b.constant("columns", matrix, t)],
              {"transpose_a": False, "transpose_b": False}, result=op.result)
    return b.ops


def _kept(op: GraphOp, x_type: TensorType, axis: int) -> bool:
    scales = op.attrs.get("scales") or ()
    return (op.attrs["shape"][axis] == x_type.dims[axis]
            and (not scales or float(scales[axis]) == 1.0))


def _rows(b: _Builder, op: GraphOp, value: str, x_type: TensorType, result: str | None) -> str:
    low, high, frac = linear_taps(op.attrs, x_type.dims, ROW_AXIS)
    blended = np.flatnonzero(frac > 0)
    lo = b.add("Gather", [value], {"axis": ROW_AXIS, "indices": tuple(int(i) for i in low)},
               result=result if not blended.size else None)
    if not blended.size:
        return lo
    hi = b.add("Gather", [value], {"axis": ROW_AXIS, "indices": tuple(int(i) for i in high)})
    # The blend in f32 (converted in the kernel's registers, never stored): the rows are
    # rounded once, as the reference's one Interpolate rounds them.
    wide = x_type.elem if x_type.elem in (ElemType.F32, ElemType.F64) else ElemType.F32
    if wide != x_type.elem:
        lo, hi = (b.add("Convert", [v], {"to": wide}) for v in (lo, hi))
    weights = TensorType((1, 1, len(frac), 1), wide, DimsOrder.identity(4))
    step = b.add("Multiply", [b.add("Subtract", [hi, lo]), b.constant("row_weights", frac, weights)])
    if wide == x_type.elem:
        return b.add("Add", [lo, step], result=result)
    return b.add("Convert", [b.add("Add", [lo, step])], {"to": x_type.elem}, result=result)
