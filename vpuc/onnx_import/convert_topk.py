"""ONNX TopK of a constant K: the ACT SHAVE library kernel ``topk`` or K rounds of
ArgMax's search, whichever the cost model (``vpuc/cost/topk.py``) finds cheaper.

- The kernel (``kernels/topk.s``, lowered by ``vpuc/fusion/lower_topk.py``): the graph
  op ``TopK`` along the last axis (a ``Transpose`` moves another axis last and back),
  one op, so one kernel call, per output the model reads (``part`` values or indices:
  the dialect's ops have one result).  Any K up to the axis; ties to the lower index and
  NaN ranked as onnxruntime ranks it (above +inf: first for largest, last for smallest).
- The rounds (``convert_scatter.topk_rounds``): a few ACT kernels per round over the
  whole input, cheaper for small K on short rows; only where their search keys (indices
  up to twice the axis) are exact in the graph's float type.  They rank a NaN as their
  ReduceMax does, not as onnxruntime: the choice is by cost alone, the two agreeing on
  every input without NaN.
``sorted = 0`` gets the sorted order, one the spec allows.  Indices are ``i32``, converted
to int64 at the model's boundary.
"""

from __future__ import annotations

from math import prod

from vpuc.cost.timing import load_timing
from vpuc.cost.topk import argmax_rounds_cycles, topk_kernel_cycles
from vpuc.onnx_import.convert_scatter import rounds_exact, topk_count, topk_rounds


def use_kernel(b, shape: tuple[int, ...], axis: int, k: int, outputs: int) -> bool:
    """The kernel where the rounds are not exact or cost more."""
    size = shape[axis]
    if not rounds_exact(b, size):
        return True
    rows = prod(shape) // size
    return topk_kernel_cycles(rows, size, k, outputs, load_timing()) < \
        argmax_rounds_cycles(rows, size, k)


def topk(b, node, attrs) -> None:
    shape = b.shape(node.input[0])
    rank = len(shape)
    axis = b.axis(attrs.get("axis", -1), rank)
    k = topk_count(b, node, attrs, shape[axis])
    largest = bool(attrs.get("largest", 1))
    attrs.get("sorted", 1)           # any order is allowed unsorted: the sorted one is given
    wanted = [(part, name) for part, name in zip(("values", "indices"), node.output) if name]
    if not use_kernel(b, shape, axis, k, len(wanted)):
        topk_rounds(b, node, axis, k, largest)
        return
    x = b.value(node.input[0])
    order = tuple(a for a in range(rank) if a != axis) + (axis,)
    moved = order != tuple(range(rank))
    if moved:
        x = b.op("Transpose", [x], {"order": order})
    back = tuple(order.index(a) for a in range(rank))
    for part, name in wanted:
        attrs_of = {"k": k, "largest": largest, "part": part}
        if moved:
            b.op("Transpose", [b.op("TopK", [x], attrs_of)], {"order": back}, out=name)
        else:
            b.op("TopK", [x], attrs_of, out=name)


TOPK_CONVERTERS = {"TopK": topk}
