"""ONNX copy ops → the graph's copy ops: Pad in every mode, Expand, Tile.

- Pad: ``pads`` as a constant input (or an attribute, their form before opset 11), the
  pad value likewise, the ``axes`` input (opset 18+) spreading them over the
  axes named; modes constant, edge, reflect and wrap (opset 19), negative pads cropping.
  One graph ``Pad`` (``vpuc/ir/graph_ops_copy.py``), which lowers to one DMA per piece.
- Expand: the graph's ``Broadcast`` to the bidirectional broadcast of the input's shape
  and the constant shape (ONNX's rule, not numpy's one-way ``broadcast_to``); nothing at
  all when that is the input's shape.  Broadcast is elementwise, so the tokenizer fuses
  it into the elementwise op reading it: a broadcast load, no copy.
- Tile: the graph's ``Tile`` over constant repeats; nothing when they are all 1.

A shape or count that is not a constant, or pads the input cannot take, is refused with
the node named.  A result with a dim of 0 is an empty value (``empty.py``).
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph_ops import InferError, broadcast_shapes
from vpuc.ir.graph_ops_copy import PAD_MODES, pad_problem
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.empty import make_empty


def _input(node, i: int) -> str | None:
    return node.input[i] if len(node.input) > i and node.input[i] else None


def _ints(b: GraphBuilder, name: str, what: str) -> list[int]:
    values = np.asarray(b.array(name))
    if values.ndim > 1 or not np.issubdtype(values.dtype, np.integer):
        raise b.error(f"{what} '{name}' must be a 1-D integer tensor; got {values.dtype} "
                      f"of shape {list(values.shape)}")
    return [int(v) for v in values.reshape(-1)]


def _pads(b: GraphBuilder, node, attrs, rank: int) -> list[int]:
    """The pads of every axis, begins then ends (``axes`` spread over the rest as 0)."""
    if "pads" in attrs:
        pads = list(attrs["pads"])
    elif _input(node, 1):
        pads = _ints(b, node.input[1], "pads")
    else:
        raise b.error("Pad has no pads (neither an attribute nor an input)")
    axes = list(range(rank))
    if _input(node, 3):
        axes = [b.axis(a, rank, "Pad axis") for a in _ints(b, node.input[3], "axes")]
        if len(set(axes)) != len(axes):
            raise b.error(f"Pad axes {axes} name an axis twice")
    if len(pads) != 2 * len(axes):
        raise b.error(f"Pad has {len(pads)} pads for {len(axes)} axes; expected "
                      f"{2 * len(axes)} (a begin and an end per axis)")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    return full


def _pad(b, node, attrs):
    shape = b.shape(node.input[0])
    rank = len(shape)
    mode = attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        raise b.error(f"Pad mode '{mode}' is not one of {', '.join(PAD_MODES)}")
    pads = _pads(b, node, attrs, rank)
    value = attrs.get("value", 0.0)
    if _input(node, 2):
        constant = np.asarray(b.array(node.input[2]))
        if constant.size != 1:
            raise b.error(f"Pad constant_value has {constant.size} values; expected one")
        value = float(constant.reshape(-1)[0])
    begin, end = pads[:rank], pads[rank:]
    out_shape = tuple(d + p + q for d, p, q in zip(shape, begin, end))
    if mode == "constant" and min(out_shape, default=1) == 0:
        make_empty(b, node.output[0], out_shape)           # cropped to nothing
        return
    for axis, (size, p, q) in enumerate(zip(shape, begin, end)):
        problem = pad_problem(size, p, q, mode)
        if problem:
            raise b.error(f"Pad ({mode}) by {p} and {q} on axis {axis} {problem}")
    if not any(pads):
        b.alias(node.output[0], node.input[0])
        return
    b.op("Pad", [b.value(node.input[0])], {"pads_begin": tuple(begin), "pads_end": tuple(end),
                                           "value": float(value), "mode": mode}, out=node.output[0])


def _expand(b, node, attrs):
    shape = b.shape(node.input[0])
    target = _ints(b, node.input[1], "shape") if _input(node, 1) else None
    if target is None:
        raise b.error("Expand has no shape input")
    if min(target, default=1) < 0:
        raise b.error(f"Expand shape {target} has a negative dim")
    try:
        out_shape = broadcast_shapes(tuple(shape), tuple(target))
    except InferError:
        raise b.error(f"Expand of {list(shape)} to {target}: the shapes do not broadcast "
                      "(each dim must be equal, or 1 on one side)") from None
    if min(out_shape, default=1) == 0:
        make_empty(b, node.output[0], out_shape)
    elif tuple(out_shape) == tuple(shape):
        b.alias(node.output[0], node.input[0])
    else:
        b.op("Broadcast", [b.value(node.input[0])], {"shape": tuple(out_shape)}, out=node.output[0])


def _tile(b, node, attrs):
    shape = b.shape(node.input[0])
    if len(node.input) != 2:
        raise b.error("Tile with tiles and axis inputs (opset 1) is not supported; "
                      "give repeats (opset 6+)")
    repeats = _ints(b, node.input[1], "repeats")
    if len(repeats) != len(shape) or min(repeats, default=0) < 0:
        raise b.error(f"Tile repeats {repeats} need {len(shape)} counts >= 0, one per axis "
                      f"of {list(shape)}")
    out_shape = tuple(d * r for d, r in zip(shape, repeats))
    if min(out_shape, default=1) == 0:
        make_empty(b, node.output[0], out_shape)
    elif all(r == 1 for r in repeats):
        b.alias(node.output[0], node.input[0])
    else:
        b.op("Tile", [b.value(node.input[0])], {"repeats": tuple(repeats)}, out=node.output[0])


COPY_CONVERTERS = {"Pad": _pad, "Expand": _expand, "Tile": _tile}
