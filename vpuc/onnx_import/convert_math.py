"""Elementwise ops ONNX defines by formula, composed from the graph ops vpuc lowers.

Each is exact, or within a few roundings the tests state (tests/onnx_import/test_math_ops.py):

- Selu ``gamma * Elu(x, alpha)``; Celu ``relu(x) + min(0, Elu(x / alpha, alpha))``;
  Softsign ``x / (1 + |x|)``.
- ThresholdedRelu ``x > alpha ? x : 0`` against alpha rounded *down* to the graph's type, so
  that every value of that type compares as it does against the exact alpha.
- Sign, Ceil ``-floor(-x)`` and Round (half to even: ``floor(x)`` plus one where the
  fraction is above 1/2, or is 1/2 and the floor odd): exact, every step is (``x -
  floor(x)`` is exact in binary floating point).
- Sin and Cos in f32 (an f16 graph converts in and out): ``k`` the nearest multiple of pi
  (Cos: of pi/2 by an odd multiple), ``x - k pi`` by Cody and Waite's three-part pi (the
  first two parts short, so ``k`` times them is exact for ``|k| < 2^16``: every f16, f32
  up to about 10^5), then the Taylor series of sin to ``r^15`` on ``[-pi/2, pi/2]``
  (remainder below 10^-9), times ``(-1)^k``.
- Mod with fmod = 1 (C's fmod, the only form ONNX gives floats): ``a - b trunc(a / b)`` in
  f32, with the one wrong quotient ``a / b`` can round to (an integer just above the exact
  quotient) corrected by adding ``b`` back where the result's sign is not ``a``'s.
- Hardmax: the row's maximum, the first index holding it (the least index whose value
  equals the maximum, by ``-ReduceMax(-index)``), and one-hot of that index; before
  opset 13 over the input coerced to 2-D at ``axis``.
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.ir.graph import CONSTANT, GraphOp
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.onnx_import.builder import GraphBuilder

# pi = PI_1 + PI_2 + PI_3 + 1.1e-14: PI_1 has 8 significant bits and PI_2 8, so ``k`` of
# 16 bits times either is exact in f32 (Cody and Waite's reduction).
PI_1, PI_2, PI_3 = 3.140625, 0.00096893310546875, -1.279515686292143e-06
SIN_TAYLOR = tuple((-1) ** n / math.factorial(2 * n + 1) for n in range(1, 8))   # r^3 .. r^15
NUMPY_OF = {ElemType.F16: np.float16, ElemType.F32: np.float32}


def _const(b: GraphBuilder, value: float, hint: str) -> str:
    return b.constant(np.asarray(value, np.float32), f"{b.node.output[0]}.{hint}")


def f32_constant(b: GraphBuilder, value: float, hint: str) -> str:
    """A scalar f32 Constant even in an f16 graph (for the f32 steps of Sin, Cos and Mod)."""
    name = b.fresh(f"{b.node.output[0]}.{hint}")
    ttype = TensorType((), ElemType.F32, DimsOrder.identity(0))
    b.graph.ops.append(GraphOp(CONSTANT, name, type=ttype,
                               const=ConstInit(values=(float(np.float32(value)),))))
    b.types[name] = ttype
    return name


def in_f32(b: GraphBuilder, value: str) -> str:
    return value if b.types[value].elem is ElemType.F32 else b.op("Convert", [value], {"to": ElemType.F32})


def f32_result(b: GraphBuilder, node, compute) -> None:
    """``compute(out)`` makes the node's f32 result, named ``out`` when the graph is f32;
    in an f16 graph it is converted back, rounded once."""
    elem = b.types[b.value(node.input[0])].elem
    y = compute(node.output[0] if elem is ElemType.F32 else None)
    if elem is not ElemType.F32:
        b.op("Convert", [y], {"to": elem}, out=node.output[0])


def _x(b, node) -> str:
    return b.value(node.input[0])


def _selu(b, node, attrs):
    alpha = float(attrs.get("alpha", 1.67326319217681884765625))
    gamma = float(attrs.get("gamma", 1.05070102214813232421875))
    elu = b.op("Elu", [_x(b, node)], {"alpha": alpha})
    b.op("Multiply", [elu, _const(b, gamma, "gamma")], out=node.output[0])


def _celu(b, node, attrs):
    alpha = float(attrs.get("alpha", 1.0))
    if alpha == 0.0:
        raise b.error("Celu alpha 0 divides by zero")
    x = _x(b, node)
    scaled = x if alpha == 1.0 else b.op("Divide", [x, _const(b, alpha, "alpha")])
    negative = b.op("Minimum", [b.op("Elu", [scaled], {"alpha": alpha}), _const(b, 0.0, "zero")])
    b.op("Add", [b.op("Relu", [x]), negative], out=node.output[0])


def _softsign(b, node, attrs):
    x = _x(b, node)
    b.op("Divide", [x, b.op("Add", [b.op("Abs", [x]), _const(b, 1.0, "one")])], out=node.output[0])


def _thresholded_relu(b, node, attrs):
    alpha = float(attrs.get("alpha", 1.0))
    kind = NUMPY_OF[b.elem]
    threshold = kind(alpha)
    if float(threshold) > alpha:            # x > alpha iff x > the largest value <= alpha
        threshold = np.nextafter(threshold, kind(-np.inf))
    x = _x(b, node)
    above = b.op("Greater", [x, b.constant(np.asarray(threshold), f"{node.output[0]}.alpha")])
    b.op("Select", [above, x, _const(b, 0.0, "zero")], out=node.output[0])


def _sign(b, node, attrs):
    x, zero = _x(b, node), _const(b, 0.0, "zero")
    negative = b.op("Select", [b.op("Less", [x, zero]), _const(b, -1.0, "minus_one"), zero])
    b.op("Select", [b.op("Greater", [x, zero]), _const(b, 1.0, "one"), negative], out=node.output[0])


def _ceil(b, node, attrs):
    b.op("Negative", [b.op("Floor", [b.op("Negative", [_x(b, node)])])], out=node.output[0])


def odd(b: GraphBuilder, whole: str, const) -> str:
    """1 where the integer ``whole`` is odd, else 0: ``whole - 2 floor(whole / 2)``, exact."""
    halved = b.op("Floor", [b.op("Multiply", [whole, const(0.5, "half")])])
    return b.op("Subtract", [whole, b.op("Multiply", [halved, const(2.0, "two")])])


def _round(b, node, attrs):
    x = _x(b, node)
    const = lambda v, hint: _const(b, v, hint)
    down = b.op("Floor", [x])
    fraction = b.op("Subtract", [x, down])
    half, zero, one = const(0.5, "half"), const(0.0, "zero"), const(1.0, "one")
    on_tie = b.op("Select", [b.op("Equal", [fraction, half]), odd(b, down, const), zero])
    up = b.op("Select", [b.op("Greater", [fraction, half]), one, on_tie])
    b.op("Add", [down, up], out=node.output[0])


def _sine_like(cosine: bool):
    def convert(b, node, attrs):
        f32_result(b, node, lambda out: sine(b, in_f32(b, _x(b, node)), cosine, out))
    return convert


def sine(b: GraphBuilder, x: str, cosine: bool, out: str | None) -> str:
    c = lambda v, hint: f32_constant(b, v, hint)
    # k: sin, the nearest integer to x / pi; cos, floor(x / pi), reduced by (k + 1/2) pi
    k = b.op("Floor", [b.op("Add", [b.op("Multiply", [x, c(1 / math.pi, "inv_pi")]),
                                    c(0.0 if cosine else 0.5, "offset")])])
    j = b.op("Add", [k, c(0.5, "half")]) if cosine else k
    r = x
    for i, part in enumerate((PI_1, PI_2, PI_3)):
        r = b.op("Subtract", [r, b.op("Multiply", [j, c(part, f"pi{i + 1}")])])
    r2 = b.op("Multiply", [r, r])
    poly = c(SIN_TAYLOR[-1], "s15")
    for n, coef in reversed(list(enumerate(SIN_TAYLOR[:-1], start=1))):
        poly = b.op("Add", [b.op("Multiply", [poly, r2]), c(coef, f"s{2 * n + 1}")])
    series = b.op("Add", [r, b.op("Multiply", [b.op("Multiply", [r, r2]), poly])])
    # sin(r + k pi) = (-1)^k sin r; cos(r + (k + 1/2) pi) = -(-1)^k sin r
    sign = b.op("Subtract", [c(1.0, "one"), b.op("Multiply", [odd(b, k, c), c(2.0, "two")])])
    if cosine:
        sign = b.op("Negative", [sign])
    return b.op("Multiply", [series, sign], out=out)


def _mod(b, node, attrs):
    if not attrs.get("fmod", 0):
        raise b.error("Mod of float tensors needs fmod=1 (ONNX defines fmod=0 for integers only)")
    if len(node.input) != 2:
        raise b.error(f"expected 2 inputs, found {len(node.input)}")
    a, d = (in_f32(b, b.value(n)) for n in node.input)
    f32_result(b, node, lambda out: _fmod(b, a, d, out))


def _fmod(b: GraphBuilder, a: str, d: str, out: str | None) -> str:
    zero = f32_constant(b, 0.0, "zero")
    q = b.op("Divide", [a, d])
    toward_zero = b.op("Select", [b.op("Less", [q, zero]),
                                  b.op("Negative", [b.op("Floor", [b.op("Negative", [q])])]),
                                  b.op("Floor", [q])])
    r = b.op("Subtract", [a, b.op("Multiply", [d, toward_zero])])
    # a quotient rounded up onto an integer leaves r of the other sign, one |d| too far
    size = b.op("Abs", [d])
    back = b.op("Select", [b.op("Less", [a, zero]), b.op("Negative", [size]), size])
    wrong = b.op("Less", [b.op("Multiply", [r, a]), zero])
    return b.op("Select", [wrong, b.op("Add", [r, back]), r], out=out)


def _hardmax(b, node, attrs):
    shape = b.shape(node.input[0])
    rank = len(shape)
    x = _x(b, node)
    if b.opset < 13:            # coerced to 2-D at axis (default 1), over every dim from it
        axis = b.axis(attrs.get("axis", 1), rank) if rank else 0
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        x = b.op("Reshape", [x], {"shape": (rows, int(np.prod(shape[axis:], dtype=np.int64)))})
        axis, work = 1, b.types[x].dims
    else:
        axis, work = b.axis(attrs.get("axis", -1), rank), shape
    size = work[axis]
    exact = 2 ** (np.finfo(NUMPY_OF[b.elem]).nmant + 1)
    if size > exact:
        raise b.error(f"Hardmax over {size} values: indices above {exact} are not exact in {b.elem}")
    index_shape = [1] * len(work)
    index_shape[axis] = size
    index = b.constant(np.arange(size, dtype=np.float32).reshape(index_shape), f"{node.output[0]}.index")
    peak = b.op("ReduceMax", [x], {"axes": (axis,), "keep_dims": True})
    candidate = b.op("Select", [b.op("Equal", [x, peak]), index, _const(b, float(size), "past_end")])
    candidate = b.op("Negative", [candidate])
    first = b.op("Negative", [b.op("ReduceMax", [candidate], {"axes": (axis,), "keep_dims": True})])
    hot = b.op("Equal", [index, first])
    out = node.output[0] if b.opset >= 13 else None
    y = b.op("Select", [hot, _const(b, 1.0, "one"), _const(b, 0.0, "zero")], out=out)
    if b.opset < 13:
        b.op("Reshape", [y], {"shape": tuple(shape)}, out=node.output[0])


MATH_CONVERTERS = {
    "Selu": _selu, "Celu": _celu, "Softsign": _softsign, "ThresholdedRelu": _thresholded_relu,
    "Sign": _sign, "Ceil": _ceil, "Round": _round, "Sin": _sine_like(False),
    "Cos": _sine_like(True), "Mod": _mod, "Hardmax": _hardmax,
}
