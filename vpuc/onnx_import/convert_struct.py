"""Structural ops of exported CNNs and transformers, composed from the graph ops vpuc lowers.

- ArgMax / ArgMin: the row's maximum (ArgMin: of ``-x``), then the index the attribute
  asks for among those equal to it, as Hardmax finds it (``convert_math.py``): the first
  by ``-ReduceMax(-index)``, the last (``select_last_index``) by ``ReduceMax(index)``.
  Indices are exact in the graph's float type up to ``2^(mantissa + 1)`` (2048 in f16);
  the result is converted to ``i32``, as a comparison's boolean is ``u8``: ONNX's int64
  index is the graph's integer type.
- CumSum: one MatMul by a constant 0/1 triangle (``k <= j``; exclusive ``k < j``;
  reverse ``k >= j`` or ``k > j``), the summed axis moved last and back by Transposes
  when other dims follow it: the DPU sums in f32 and rounds once.
- GatherElements and GatherND on constant indices: each output element (GatherElements)
  or slice (GatherND, batch_dims too) is a row of the data flattened to
  ``[rows, slice]``, so one ``Gather`` of those rows (a DMA per run of rows, as Gather
  on constant indices is) and a Reshape to the output's shape.

``STRUCT_CONVERTERS`` also holds Einsum (``convert_einsum.py``) and Attention and
RotaryEmbedding (``convert_attention.py``).
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.ir.types import ElemType
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_attention import ATTENTION_CONVERTERS
from vpuc.onnx_import.convert_einsum import EINSUM_CONVERTERS

NUMPY_OF = {ElemType.F16: np.float16, ElemType.F32: np.float32}


def _const(b: GraphBuilder, value, hint: str) -> str:
    return b.constant(np.asarray(value, np.float32), f"{b.node.output[0]}.{hint}")


def _arg_extreme(minimum: bool):
    def convert(b, node, attrs):
        shape = b.shape(node.input[0])
        axis = b.axis(attrs.get("axis", 0), len(shape))
        keepdims, last = bool(attrs.get("keepdims", 1)), bool(attrs.get("select_last_index", 0))
        size = shape[axis]
        exact = 2 ** (np.finfo(NUMPY_OF[b.elem]).nmant + 1)
        if size > exact:
            raise b.error(f"{node.op_type} over {size} values: indices above {exact} are not exact "
                          f"in {b.elem}")
        x = b.value(node.input[0])
        if minimum:
            x = b.op("Negative", [x])
        index_shape = [1] * len(shape)
        index_shape[axis] = size
        index = b.constant(np.arange(size, dtype=np.float32).reshape(index_shape), f"{node.output[0]}.index")
        peak = b.op("ReduceMax", [x], {"axes": (axis,), "keep_dims": True})
        hit = b.op("Equal", [x, peak])
        if last:            # the greatest index holding the extreme; -1 elsewhere
            found = b.op("ReduceMax", [b.op("Select", [hit, index, _const(b, -1.0, "before")])],
                         {"axes": (axis,), "keep_dims": keepdims})
        else:               # the least: -max(-index), size past the end elsewhere
            away = b.op("Negative", [b.op("Select", [hit, index, _const(b, float(size), "past_end")])])
            found = b.op("Negative", [b.op("ReduceMax", [away], {"axes": (axis,), "keep_dims": keepdims})])
        b.op("Convert", [found], {"to": ElemType.I32}, out=node.output[0])
    return convert


def scan_attributes(b, node, attrs) -> tuple[int, int, bool, bool]:
    """A CumSum's or CumProd's axis (a constant input), its length, ``exclusive``, ``reverse``."""
    shape = b.shape(node.input[0])
    axes = np.asarray(b.array(node.input[1])).reshape(-1)
    if axes.size != 1 or not np.issubdtype(axes.dtype, np.integer):
        raise b.error(f"{node.op_type} axis '{node.input[1]}' must be one integer; got "
                      f"{axes.dtype} of {axes.size} values")
    axis = b.axis(int(axes[0]), len(shape), f"{node.op_type} axis")
    return axis, shape[axis], bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))


def _cumsum(b, node, attrs):
    axis, n, exclusive, reverse = scan_attributes(b, node, attrs)
    shape = b.shape(node.input[0])
    rank = len(shape)
    k, j = np.arange(n)[:, None], np.arange(n)[None, :]
    # y[..., j] = sum_k x[..., k] T[k, j]
    take = {(False, False): k <= j, (True, False): k < j, (False, True): k >= j, (True, True): k > j}
    triangle = b.constant(take[exclusive, reverse].astype(np.float32), f"{node.output[0]}.triangle")
    pre, post = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    x = b.value(node.input[0])
    if post == 1:                    # the axis is last (or only 1s follow it)
        rows = (pre, n)
        if tuple(shape) != rows and rank >= 2 and axis == rank - 1:
            rows = tuple(shape)      # a MatMul takes the leading dims as batch dims
        flat = x if tuple(shape) == rows else b.op("Reshape", [x], {"shape": rows})
        y = b.op("MatMul", [flat, triangle], out=node.output[0] if rows == tuple(shape) else None)
        if rows != tuple(shape):
            b.op("Reshape", [y], {"shape": tuple(shape)}, out=node.output[0])
        return
    cube = x if tuple(shape) == (pre, n, post) else b.op("Reshape", [x], {"shape": (pre, n, post)})
    moved = b.op("Transpose", [cube], {"order": (0, 2, 1)})
    summed = b.op("MatMul", [moved, triangle])
    back = b.op("Transpose", [summed], {"order": (0, 2, 1)},
                out=node.output[0] if tuple(shape) == (pre, n, post) else None)
    if tuple(shape) != (pre, n, post):
        b.op("Reshape", [back], {"shape": tuple(shape)}, out=node.output[0])


def _indices(b: GraphBuilder, name: str) -> np.ndarray:
    indices = np.asarray(b.array(name))
    if not np.issubdtype(indices.dtype, np.integer):
        raise b.error(f"indices '{name}' must be integers; got {indices.dtype}")
    return indices.astype(np.int64)


def _in_range(b: GraphBuilder, indices: np.ndarray, size: int, what: str) -> np.ndarray:
    """``indices`` wrapped from [-size, size) to [0, size); any other is refused."""
    bad = (indices < -size) | (indices >= size)
    if bad.any():
        raise b.error(f"{what} index {int(indices[bad].reshape(-1)[0])} is out of range for a dim "
                      f"of {size} (expected {-size} to {size - 1})")
    return np.where(indices < 0, indices + size, indices)


def _gather_rows(b: GraphBuilder, node, rows: np.ndarray, row_count: int, width: int,
                 out_shape: tuple[int, ...]) -> None:
    """The data as ``[row_count, width]``, its ``rows`` gathered, reshaped to ``out_shape``."""
    shape = b.shape(node.input[0])
    steps = []
    if tuple(shape) != (row_count, width):
        steps.append(("Reshape", {"shape": (row_count, width)}))
    if not np.array_equal(rows, np.arange(row_count)):
        steps.append(("Gather", {"axis": 0, "indices": tuple(int(r) for r in rows)}))
    if (len(rows), width) != tuple(out_shape):
        steps.append(("Reshape", {"shape": tuple(out_shape)}))
    if steps and steps[0][0] == "Reshape" and steps[-1][0] == "Reshape" and len(steps) == 2:
        steps = [("Reshape", {"shape": tuple(out_shape)})] if tuple(shape) != tuple(out_shape) else []
    if not steps:
        b.alias(node.output[0], node.input[0])
        return
    value = b.value(node.input[0])
    for i, (kind, attrs) in enumerate(steps):
        value = b.op(kind, [value], attrs, out=node.output[0] if i == len(steps) - 1 else None)


def _gather_elements(b, node, attrs):
    shape = b.shape(node.input[0])
    axis = b.axis(attrs.get("axis", 0), len(shape))
    indices = _indices(b, node.input[1])
    if indices.ndim != len(shape):
        raise b.error(f"GatherElements indices of rank {indices.ndim} for data of rank {len(shape)}")
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, shape)) if a != axis):
        raise b.error(f"GatherElements indices {list(indices.shape)} exceed the data's {list(shape)} "
                      "off the gathered axis")
    picked = _in_range(b, indices, shape[axis], "GatherElements")
    position = list(np.indices(indices.shape))
    position[axis] = picked
    flat = np.ravel_multi_index(tuple(position), shape).reshape(-1)
    _gather_rows(b, node, flat, math.prod(shape), 1, tuple(indices.shape))


def _gather_nd(b, node, attrs):
    shape = b.shape(node.input[0])
    batch = int(attrs.get("batch_dims", 0))
    indices = _indices(b, node.input[1])
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or not 0 <= batch < min(indices.ndim, len(shape) + 1) or batch + depth > len(shape):
        raise b.error(f"GatherND indices of shape {list(indices.shape)} with batch_dims {batch} do not "
                      f"index data of shape {list(shape)}")
    if tuple(indices.shape[:batch]) != tuple(shape[:batch]):
        raise b.error(f"GatherND batch dims {list(indices.shape[:batch])} differ from the data's "
                      f"{list(shape[:batch])}")
    indexed = shape[batch:batch + depth]
    wrapped = [_in_range(b, indices[..., i], d, "GatherND") for i, d in enumerate(indexed)]
    inner = np.ravel_multi_index(tuple(wrapped), indexed) if depth else np.zeros(indices.shape[:-1], np.int64)
    batch_of = np.indices(indices.shape[:batch]).reshape(batch, -1) if batch else None
    per_batch = math.prod(indexed)
    lead = inner.reshape(math.prod(indices.shape[:batch]), -1)
    if batch_of is not None:
        lead = lead + (np.ravel_multi_index(tuple(batch_of), shape[:batch]) * per_batch)[:, None]
    width = math.prod(shape[batch + depth:])
    out_shape = tuple(indices.shape[:-1]) + tuple(shape[batch + depth:])
    _gather_rows(b, node, lead.reshape(-1), math.prod(shape[:batch + depth]), width, out_shape)


STRUCT_CONVERTERS = {
    "ArgMax": _arg_extreme(False), "ArgMin": _arg_extreme(True), "CumSum": _cumsum,
    "GatherElements": _gather_elements, "GatherND": _gather_nd,
    **EINSUM_CONVERTERS, **ATTENTION_CONVERTERS,
}
