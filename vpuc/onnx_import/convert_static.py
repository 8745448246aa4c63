"""ONNX ops whose result, or whose copy pattern, is fixed at import: EyeLike, the window
functions, ReverseSequence and Compress.

- EyeLike: the identity (``k`` diagonals off) of the input's static shape, a constant
  whatever the input holds: a known array, folded into whatever reads it.
- HannWindow, HammingWindow, BlackmanWindow of a constant size fold at import through
  ``onnx.reference`` like any node over constants (``fold.py``); a run-time size would give
  a run-time shape, refused here naming the node.
- ReverseSequence with constant ``sequence_lens``: per batch entry one ``Gather`` along the
  time axis of constant indices (the first ``len`` steps reversed, the rest in place), the
  entries ``Concat``enated back: DMA copies.  One Gather of the whole tensor when every
  length is the same; none when no step moves.
- Compress with a constant condition: one ``Gather`` of the selected indices along ``axis``
  (of the flattened input without one); nothing selected is an empty value (``empty.py``).
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph_ops import BOOL
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.empty import make_empty


def _eye_like(b: GraphBuilder, node, attrs) -> None:
    from onnx import helper
    shape = b.shape(node.input[0])
    if len(shape) != 2:
        raise b.error(f"EyeLike of a rank-{len(shape)} input; ONNX defines it for 2-D inputs")
    if "dtype" in attrs:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["dtype"]))
    else:                       # the input's type: a float, a boolean (u8) or an index (i32)
        elem = b.types[b.value(node.input[0])].elem
        dtype = np.dtype(np.float32 if elem.is_float else np.bool_ if elem is BOOL else np.int64)
    b.known[node.output[0]] = np.eye(shape[0], shape[1], int(attrs.get("k", 0)), dtype=dtype)


def _window(b: GraphBuilder, node, attrs) -> None:
    attrs.get("periodic")
    attrs.get("output_datatype")
    raise b.error(f"{node.op_type} of a run-time size '{node.input[0]}': its output's shape would "
                  "be data; a constant size folds at import")


def _reverse_sequence(b: GraphBuilder, node, attrs) -> None:
    shape = b.shape(node.input[0])
    batch_axis, time_axis = int(attrs.get("batch_axis", 1)), int(attrs.get("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise b.error(f"ReverseSequence batch_axis {batch_axis} and time_axis {time_axis}: ONNX "
                      "takes 0 and 1, one each")
    lengths = np.asarray(b.array(node.input[1])).astype(np.int64).reshape(-1)
    steps = shape[time_axis]
    if lengths.size != shape[batch_axis] or ((lengths < 0) | (lengths > steps)).any():
        raise b.error(f"ReverseSequence sequence_lens {lengths.tolist()} are not one length in "
                      f"[0, {steps}] per batch entry ({shape[batch_axis]})")
    x = b.value(node.input[0])

    def reversed_steps(value: str, length: int, out: str | None) -> str:
        order = tuple(range(length - 1, -1, -1)) + tuple(range(length, steps))
        return b.op("Gather", [value], {"axis": time_axis, "indices": order}, out=out)

    if (lengths <= 1).all():
        b.alias(node.output[0], node.input[0])
        return
    if (lengths == lengths[0]).all():
        reversed_steps(x, int(lengths[0]), node.output[0])
        return
    parts = []
    for entry, length in enumerate(lengths):
        begin, end = [0] * len(shape), list(shape)
        begin[batch_axis], end[batch_axis] = entry, entry + 1
        part = b.op("Slice", [x], {"begin": tuple(begin), "end": tuple(end), "step": (1,) * len(shape)})
        parts.append(part if length <= 1 else reversed_steps(part, int(length), None))
    b.op("Concat", parts, {"axis": batch_axis}, out=node.output[0])


def _compress(b: GraphBuilder, node, attrs) -> None:
    shape = b.shape(node.input[0])
    condition = np.asarray(b.array(node.input[1])).reshape(-1).astype(bool)
    x = b.value(node.input[0])
    if "axis" in attrs:
        axis = b.axis(attrs["axis"], len(shape))
    else:
        x, axis, shape = b.op("Reshape", [x], {"shape": (int(np.prod(shape)),)}), 0, (int(np.prod(shape)),)
    if condition.size > shape[axis]:
        raise b.error(f"Compress condition has {condition.size} values for an axis of {shape[axis]}")
    picked = tuple(int(i) for i in np.flatnonzero(condition))
    if not picked:
        make_empty(b, node.output[0], shape[:axis] + (0,) + shape[axis + 1:])
        return
    b.op("Gather", [x], {"axis": axis, "indices": picked}, out=node.output[0])


STATIC_CONVERTERS = {
    "EyeLike": _eye_like, "HannWindow": _window, "HammingWindow": _window, "BlackmanWindow": _window,
    "ReverseSequence": _reverse_sequence, "Compress": _compress,
}
