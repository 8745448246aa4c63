"""Normalizations, elementwise and boolean ops exported models contain, composed from graph ops.

Each is exact, or within a few roundings the tests state (tests/onnx_import/test_more_ops.py):

- LpNormalization ``x / ||x||_p`` along ``axis`` (p = 1: ``ReduceSum(|x|)``, p = 2:
  ``Sqrt(ReduceSum(x * x))``) in f32, 0 where the norm is 0 (onnxruntime's rule).
- MeanVarianceNormalization: the MVN op over ``axes`` without an epsilon, as onnxruntime
  divides by ``sqrt(var)`` alone (a constant row is NaN there too; ONNX's function body adds
  1e-9 outside the root).  Axes of extent 1 reduce nothing and are left out; axes still apart
  in memory are moved last by a Transpose (and back), as the library kernel needs.
- RMSNormalization (opset 23) in f32 whatever ``stash_type`` says (the most precise of the
  types it names): ``x / sqrt(mean(x * x) + eps) * scale`` over the axes from ``axis`` on.
- Mean: the inputs' sum (a left fold of Add) divided by their count.  Swish (opset 24):
  the graph's Swish with ``beta = alpha``; SwiGLU (opset 28) it times the value input.  Shrink: ``x < -lambd ? x + bias : x > lambd ?
  x - bias : 0`` against lambd rounded *down* to the graph's type (ThresholdedRelu's way).
- IsNaN ``x != x``; IsInf ``|x| > max`` (or ``x > max``, ``x < -max``) with ``max`` the
  graph type's largest finite value; Not, And, Or, Xor on the dialect's booleans (u8 0 or 1,
  what comparisons make): ``x == 0``, ``min``, ``max``, ``!=``.
- CastLike as Cast to the second input's type; Cast of a boolean to a float is a Convert,
  of a float to a boolean ``x != 0``.
- Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh, Acosh, Atanh: ``convert_trig.py``.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph_ops import BOOL
from vpuc.ir.types import ElemType
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_math import NUMPY_OF, f32_constant, f32_result, in_f32
from vpuc.onnx_import.convert_trig import TRIG_CONVERTERS


def _x(b: GraphBuilder, node) -> str:
    return b.value(node.input[0])


def _const(b: GraphBuilder, value, hint: str) -> str:
    return b.constant(np.asarray(value, np.float32), f"{b.node.output[0]}.{hint}")


def _false(b: GraphBuilder) -> str:
    return b.constant(np.asarray(False), f"{b.node.output[0]}.false")


def _lp_norm(b, node, attrs):
    rank = len(b.shape(node.input[0]))
    axis = b.axis(attrs.get("axis", -1), rank)
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise b.error(f"LpNormalization p = {p}; ONNX defines p = 1 and p = 2")
    x = in_f32(b, _x(b, node))

    def normalized(out):
        terms = b.op("Abs", [x]) if p == 1 else b.op("Multiply", [x, x])
        norm = b.op("ReduceSum", [terms], {"axes": (axis,), "keep_dims": True})
        if p == 2:
            norm = b.op("Sqrt", [norm])
        zero = f32_constant(b, 0.0, "zero")
        return b.op("Select", [b.op("Equal", [norm, zero]), zero, b.op("Divide", [x, norm])], out=out)
    f32_result(b, node, normalized)


def _mean_variance_norm(b, node, attrs):
    shape = b.shape(node.input[0])
    rank = len(shape)
    axes = sorted({b.axis(a, rank, "axes entry") for a in attrs.get("axes", (0, 2, 3))})
    if not axes:
        raise b.error("MeanVarianceNormalization over no axes")
    reduced = [a for a in axes if shape[a] != 1] or axes[-1:]      # extent 1: mean of one value
    x = _x(b, node)
    if reduced == list(range(reduced[0], reduced[0] + len(reduced))):
        b.op("MVN", [x], {"axes": tuple(reduced), "eps": 0.0}, out=node.output[0])
        return
    kept = [a for a in range(rank) if a not in reduced]
    order = tuple(kept + reduced)
    moved = b.op("Transpose", [x], {"order": order})
    normalized = b.op("MVN", [moved], {"axes": tuple(range(len(kept), rank)), "eps": 0.0})
    b.op("Transpose", [normalized], {"order": tuple(int(i) for i in np.argsort(order))},
         out=node.output[0])


def _rms_norm(b, node, attrs):
    rank = len(b.shape(node.input[0]))
    axis = b.axis(attrs.get("axis", -1), rank)
    eps = float(attrs.get("epsilon", 1e-5))
    attrs.get("stash_type", 1)           # computed in f32, the most precise stash type
    x, scale = in_f32(b, _x(b, node)), in_f32(b, b.value(node.input[1]))

    def normalized(out):
        mean_square = b.op("ReduceMean", [b.op("Multiply", [x, x])],
                           {"axes": tuple(range(axis, rank)), "keep_dims": True})
        rms = b.op("Sqrt", [b.op("Add", [mean_square, f32_constant(b, eps, "epsilon")])])
        return b.op("Multiply", [b.op("Divide", [x, rms]), scale], out=out)
    f32_result(b, node, normalized)


def _mean(b, node, attrs):
    values = [b.value(name) for name in node.input if name]
    if len(values) == 1:
        b.alias(node.output[0], node.input[0])
        return
    total = values[0]
    for value in values[1:]:
        total = b.op("Add", [total, value])
    b.op("Divide", [total, _const(b, float(len(values)), "count")], out=node.output[0])


def _swish(b, node, attrs):
    b.op("Swish", [_x(b, node)], {"beta": float(attrs.get("alpha", 1.0))}, out=node.output[0])


def _swiglu(b, node, attrs):
    """SwiGLU (opset 28): ``Swish_alpha(A) * B``, A and B of one shape, as ONNX's function
    body defines it."""
    if b.shape(node.input[0]) != b.shape(node.input[1]):
        raise b.error(f"SwiGLU gate {b.shape(node.input[0])} and value {b.shape(node.input[1])} "
                      "differ in shape; ONNX applies no broadcasting")
    gate = b.op("Swish", [_x(b, node)], {"beta": float(attrs.get("alpha", 1.0))})
    b.op("Multiply", [gate, b.value(node.input[1])], out=node.output[0])


def rounded_down(b: GraphBuilder, value: float) -> np.ndarray:
    """The largest value of the graph's type <= ``value``: ``x > value`` iff ``x > it``
    for every ``x`` of that type (and ``x < -value`` iff ``x < -it``)."""
    kind = NUMPY_OF[b.elem]
    threshold = kind(value)
    if float(threshold) > value:
        threshold = np.nextafter(threshold, kind(-np.inf))
    return np.asarray(threshold)


def _shrink(b, node, attrs):
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    if lambd < 0:
        raise b.error(f"Shrink lambd {lambd} is negative")
    x = _x(b, node)
    limit = rounded_down(b, lambd)
    above = b.op("Greater", [x, b.constant(limit, f"{node.output[0]}.lambd")])
    below = b.op("Less", [x, b.constant(-limit, f"{node.output[0]}.minus_lambd")])
    low = b.op("Select", [below, b.op("Add", [x, _const(b, bias, "bias")]), _const(b, 0.0, "zero")])
    b.op("Select", [above, b.op("Subtract", [x, _const(b, bias, "bias")]), low], out=node.output[0])


def _is_nan(b, node, attrs):
    x = _x(b, node)
    b.op("NotEqual", [x, x], out=node.output[0])


def _is_inf(b, node, attrs):
    positive, negative = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    x = _x(b, node)
    largest = float(np.finfo(NUMPY_OF[b.types[x].elem]).max)
    if positive and negative:
        b.op("Greater", [b.op("Abs", [x]), _const(b, largest, "largest")], out=node.output[0])
    elif positive:
        b.op("Greater", [x, _const(b, largest, "largest")], out=node.output[0])
    elif negative:
        b.op("Less", [x, _const(b, -largest, "lowest")], out=node.output[0])
    else:                                   # detects nothing: false everywhere, NaN included
        b.op("Less", [x, x], out=node.output[0])


def _booleans(b: GraphBuilder, node) -> list[str]:
    values = [b.value(name) for name in node.input if name]
    for name, value in zip(node.input, values):
        if b.types[value].elem is not BOOL:
            raise b.error(f"{node.op_type} takes booleans; '{name}' is {b.types[value].elem}")
    return values


def _not(b, node, attrs):
    b.op("Equal", [_booleans(b, node)[0], _false(b)], out=node.output[0])


def _logical(kind: str):
    def convert(b, node, attrs):
        if len(node.input) != 2:
            raise b.error(f"expected 2 inputs, found {len(node.input)}")
        b.op(kind, _booleans(b, node), out=node.output[0])
    return convert


def cast_value(b: GraphBuilder, node, target: np.dtype) -> None:
    """The node's first input as ``target``: floats in the graph's precision (a boolean or an
    index converted), booleans as the dialect's u8 (``x != 0``), an i32 index (ArgMax's) as
    itself for int32 and int64, a float as int8 or uint8 (truncated, saturated, NaN to 0);
    anything else refused (integer tensors fold at import)."""
    source = node.input[0]
    if b.is_known(source):
        b.known[node.output[0]] = b.array(source).astype(target)
        return
    x = b.value(source)
    elem = b.types[x].elem
    if np.issubdtype(target, np.floating):
        if elem.is_float:
            b.alias(node.output[0], source)    # every float computes in the graph's precision
        else:
            b.op("Convert", [x], {"to": b.elem}, out=node.output[0])
        return
    if target == np.bool_:
        if elem is BOOL:
            b.alias(node.output[0], source)
        else:
            zero = _const(b, 0.0, "zero") if elem.is_float else \
                b.constant(np.zeros((), np.int32), f"{node.output[0]}.zero")
            b.op("NotEqual", [x, zero], out=node.output[0])
        return
    if elem is ElemType.I32 and target in (np.int32, np.int64):
        b.alias(node.output[0], source)
        return
    if elem.is_float and target in (np.int8, np.uint8):
        # truncated toward zero (C's cast, as onnxruntime does in range); beyond the range
        # ONNX leaves the result undefined and the NPU's store saturates; NaN becomes 0
        zero = _const(b, 0.0, "zero")
        clean = b.op("Select", [b.op("NotEqual", [x, x]), zero, x])
        b.op("Convert", [clean], {"to": ElemType.I8 if target == np.int8 else ElemType.U8},
             out=node.output[0])
        return
    raise b.error(f"Cast to {target} of a run-time tensor; the graph computes in "
                  f"{b.elem} only (integer tensors must fold to constants at import)")


def _cast_like(b, node, attrs):
    like = node.input[1]
    if b.is_known(like):
        target = b.array(like).dtype
    else:
        target = np.dtype(np.bool_) if b.types[b.value(like)].elem is BOOL else np.dtype(np.float32)
    cast_value(b, node, target)


MORE_CONVERTERS = {
    "LpNormalization": _lp_norm, "MeanVarianceNormalization": _mean_variance_norm,
    "RMSNormalization": _rms_norm, "Mean": _mean, "Swish": _swish, "SwiGLU": _swiglu,
    "Shrink": _shrink,
    "IsNaN": _is_nan, "IsInf": _is_inf, "Not": _not, "And": _logical("Minimum"),
    "Or": _logical("Maximum"), "Xor": _logical("NotEqual"), "CastLike": _cast_like,
    **TRIG_CONVERTERS,
}
