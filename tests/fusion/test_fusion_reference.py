"""The reference executor against hand-written numpy, op by op."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from fusion_testlib import Builder, graph_of, same
from vpuc.diagnostics import VpucError
from vpuc.reference.graph import round_to, run_graph, run_graph_values
from vpuc.ir.types import ElemType

RNG = np.random.default_rng(7)
X = RNG.uniform(-4, 4, size=(2, 3, 4)).astype(np.float32)
Y = RNG.uniform(0.5, 3, size=(1, 3, 1)).astype(np.float32)


def run1(kind, *arrays, elem=ElemType.F32, **attrs):
    b = Builder()
    names = [b.param(a.shape, elem) for a in arrays]
    b.result(b.op(kind, *names, **attrs))
    return run_graph(b.build(), dict(zip(names, arrays)))[0]


def erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


UNARY = {
    "Abs": np.abs, "Negative": np.negative, "Relu": lambda x: np.maximum(x, 0),
    "Exp": np.exp, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh,
    "Sqrt": lambda x: np.sqrt(np.abs(x)), "Floor": np.floor, "Erf": erf,
    "HSwish": lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6,
    "Gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    "Swish": lambda x: x / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("kind", sorted(UNARY))
def test_unary_f32(kind):
    x = np.abs(X) if kind == "Sqrt" else X
    want = UNARY[kind](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(run1(kind, x), want, rtol=2e-6, atol=1e-7)


def test_attributes():
    np.testing.assert_array_equal(run1("Clamp", X, min=-1.0, max=2.0), np.clip(X, -1, 2))
    np.testing.assert_allclose(run1("Elu", X, alpha=0.5),
                               np.where(X > 0, X, 0.5 * (np.exp(X) - 1)), rtol=1e-6)
    c = math.sqrt(2 / math.pi)
    want = 0.5 * X * (1 + np.tanh(c * (X + 0.044715 * X ** 3)))
    np.testing.assert_allclose(run1("Gelu", X, approximation="tanh"), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run1("Swish", X, beta=2.0), X / (1 + np.exp(-2 * X)), rtol=1e-6)


@pytest.mark.parametrize("power, exact", [
    (0.0, lambda x: np.ones_like(x)), (1.0, lambda x: x), (2.0, lambda x: x * x),
    (0.5, np.sqrt), (-1.0, lambda x: 1 / x)])
def test_power_static_specialized_exponents_are_correctly_rounded(power, exact):
    # the exponents the kernel generator specializes; in f64 each is exact or correctly
    # rounded to f32 afterwards, so the bits must agree whatever numpy's pow does
    # (numpy < 2.3: pow(3, 0.5) one ulp off sqrt, pow(-0, 0.5) = +0)
    x = np.array([3.0, -0.0, 0.0, 2.0, 1e-30, 7.5, np.inf, -np.inf, np.nan, -2.0],
                 np.float32)
    with np.errstate(all="ignore"):
        want = exact(x.astype(np.float64)).astype(np.float32)
        got = run1("PowerStatic", x, power=power)
    assert got.dtype == np.float32
    assert (np.isnan(got) == np.isnan(want)).all()
    known = ~np.isnan(want)
    assert got[known].view(np.uint32).tolist() == want[known].view(np.uint32).tolist()


BINARY = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Divide": np.divide,
          "Maximum": np.maximum, "Minimum": np.minimum, "Power": np.power,
          "SquaredDifference": lambda a, b: (a - b) ** 2}


@pytest.mark.parametrize("kind", sorted(BINARY))
def test_binary_broadcasts(kind):
    x = np.abs(X) if kind == "Power" else X
    got = run1(kind, x, Y)
    assert got.shape == (2, 3, 4)
    np.testing.assert_allclose(got, BINARY[kind](x, Y).astype(np.float32), rtol=1e-6)


def test_comparisons_and_select_use_u8():
    lt = run1("Less", X, Y)
    assert lt.dtype == np.uint8 and set(np.unique(lt)) <= {0, 1}
    b = Builder()
    x, y = b.param(X.shape), b.param(Y.shape)
    b.result(b.op("Select", b.op("GreaterEqual", x, y), x, y))
    np.testing.assert_array_equal(run_graph(b.build(), {x: X, y: Y})[0], np.where(X >= Y, X, Y))


def test_f16_rounds_after_every_op():
    # In f16, (x + 0.1) rounds before the multiply; in f32 it would not.
    x = np.array([100.0, 0.3, -2.7], np.float16)
    b = Builder()
    p = b.param(x.shape, ElemType.F16)
    c = b.const(0.1, (), ElemType.F16)
    s = b.op("Add", p, c)
    b.result(b.op("Multiply", s, s))
    got = run_graph(b.build(), {p: x})[0]
    step = (x.astype(np.float32) + np.float32(np.float16(0.1))).astype(np.float16)
    want = (step.astype(np.float32) * step.astype(np.float32)).astype(np.float16)
    assert got.dtype == np.float16 and same(got, want)


def test_fma_rounds_once():
    a = np.array([1 + 3 * 2 ** -10], np.float16)
    c = np.array([-1.0], np.float16)
    fused = run1("FMA", a, a, c, elem=ElemType.F16)
    exact = np.float16(float(a[0]) * float(a[0]) - 1.0)
    unfused = np.float16(np.float16(float(a[0]) ** 2) - np.float16(1.0))
    assert fused[0] == exact and exact != unfused


def test_bf16_and_integers():
    x = np.array([1.00390625, 3.5, -7.25], np.float32)
    got = run1("Relu", x, elem=ElemType.BF16)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), np.maximum(x.astype(ml_dtypes.bfloat16), 0))
    assert round_to(np.array([2.7, -2.7, 300.0, np.nan]), ElemType.U8).tolist() == [2, 0, 255, 0]
    b = Builder()
    p = b.param((3,), ElemType.I32)
    b.result(b.op("Convert", b.op("Abs", p), to=ElemType.F16))
    out = run_graph(b.build(), {p: np.array([-5, 7, -1])})[0]
    assert out.dtype == np.float16 and out.tolist() == [5, 7, 1]


def test_layers():
    g = graph_of("""graph @g {
      %x = Parameter() : 1x2x5x5xf32
      %w = Constant([1, 0, -1, 2, 1, 0, 0, 1, 1, 0, 2, 1, 1, 1, 1, 1, 0, 0]) : 1x2x3x3xf32
      %c = Convolution{strides = [2, 2], pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)
      %p = MaxPool{kernel = [2, 2], strides = [1, 1]}(%x)
      %r = Reshape{shape = [2, -1]}(%x)
      %t = Transpose{order = [1, 0]}(%r)
      %m = MatMul{transpose_a = true}(%t, %t)
      %s = Softmax{axis = 1}(%m)
      Result(%c)
      Result(%p)
      Result(%s)
    }""")
    x = RNG.uniform(-1, 1, (1, 2, 5, 5)).astype(np.float32)
    conv, pool, soft = run_graph(g, {"x": x})
    w = np.array([1, 0, -1, 2, 1, 0, 0, 1, 1, 0, 2, 1, 1, 1, 1, 1, 0, 0], np.float32).reshape(1, 2, 3, 3)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.array([[np.sum(xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[0]) for j in range(3)]
                     for i in range(3)], np.float32)
    np.testing.assert_allclose(conv[0, 0], want, rtol=1e-5, atol=1e-6)
    want_pool = np.array([[x[0, c, i:i + 2, j:j + 2].max() for j in range(4)] for i in range(4)
                          for c in range(2)]).reshape(4, 2, 4).transpose(1, 0, 2)
    np.testing.assert_array_equal(pool[0], want_pool)
    r = x.reshape(2, 25)
    m = r @ r.T
    e = np.exp(m - m.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_dynamic_dims_and_result_broadcast():
    g = graph_of("""graph @g {
      %x = Parameter() : 1x?<=16xf32
      %b = Broadcast{shape = [3, ?<=16]}(%x)
      %y = Relu(%x)
      Result(%b)
      Result(%y) : 2x?<=16xf32
    }""")
    x = RNG.uniform(-1, 1, (1, 5))
    b, y = run_graph(g, {"x": x})
    assert b.shape == (3, 5) and y.shape == (2, 5)
    np.testing.assert_array_equal(y[1], np.maximum(x[0], 0).astype(np.float32))


def test_values_and_input_checks():
    g = graph_of("graph @g {\n %x = Parameter() : 1x?<=4xf32\n %y = Exp(%x)\n Result(%y)\n}")
    values, _ = run_graph_values(g, {"x": np.zeros((1, 3))})
    assert set(values) == {"x", "y"} and values["y"].tolist() == [[1, 1, 1]]
    with pytest.raises(VpucError, match="has shape"):
        run_graph(g, {"x": np.zeros((1, 5))})
    with pytest.raises(VpucError, match="no input"):
        run_graph(g, {})
