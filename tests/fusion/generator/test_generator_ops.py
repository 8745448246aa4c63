"""Every op the ACT SHAVE target machine emits, against the reference executor.

Each op runs alone on random inputs (with a tail: 3x37 elements) in f32, f16 and
bf16, on the exact interpreter and the fast path (identical bytes and cycles).
Results are bit-identical to numpy, except the documented approximations (Erf,
Gelu's erf form, Power, SoftPlus, Mish), checked against their stated accuracy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gen_testlib import APPROXIMATE, Builder, check_graph, run_both
from vpuc.fusion.generator.generate import generate
from vpuc.ir.types import ElemType

UNARY = ["Abs", "Negative", "Relu", "Exp", "Sigmoid", "Tanh", "Gelu", "Sqrt", "Floor", "Swish",
         "HSwish", "Erf", "Clamp", "Elu", "Log", "SoftPlus", "Mish"]
BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power",
          "SquaredDifference"]
COMPARE = ["Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"]
FLOATS = [ElemType.F32, ElemType.F16, ElemType.BF16]
ATTRS = {"Clamp": {"min": -1.0, "max": 2.0}, "Elu": {"alpha": 0.5}}
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 65504.0]


def _inputs(graph, seed=0, low=-6.0, high=6.0):
    rng = np.random.default_rng(seed)
    out = {}
    for p in graph.parameters:
        x = rng.uniform(low, high, p.type.bound_shape)
        flat = x.reshape(-1)
        flat[:len(SPECIAL)] = SPECIAL[:flat.size]
        out[p.result] = x
    return out


@pytest.mark.parametrize("elem", FLOATS, ids=str)
@pytest.mark.parametrize("kind", UNARY)
def test_unary(kind, elem):
    b = Builder()
    x = b.param((3, 37), elem)
    b.result(b.op(kind, x, **ATTRS.get(kind, {})))
    g = b.build()
    check_graph(g, _inputs(g))


@pytest.mark.parametrize("elem", FLOATS, ids=str)
@pytest.mark.parametrize("kind", BINARY)
def test_binary(kind, elem):
    b = Builder()
    x, y = b.param((3, 37), elem), b.param((3, 37), elem)
    b.result(b.op(kind, x, y))
    g = b.build()
    check_graph(g, _inputs(g, low=-3, high=3))


@pytest.mark.parametrize("approx", ["tanh", "erf"])
@pytest.mark.parametrize("elem", [ElemType.F32, ElemType.F16])
def test_gelu_modes(approx, elem):
    b = Builder()
    x = b.param((2, 40), elem)
    b.result(b.op("Gelu", x, approximation=approx))
    g = b.build()
    check_graph(g, _inputs(g))


@pytest.mark.parametrize("elem", [ElemType.F32, ElemType.F16])
@pytest.mark.parametrize("kind", COMPARE)
def test_comparisons_and_select(kind, elem):
    b = Builder()
    x, y = b.param((2, 21), elem), b.param((2, 21), elem)
    cond = b.op(kind, x, y)
    b.result(cond)
    b.result(b.op("Select", cond, x, y))
    g = b.build()
    inputs = _inputs(g, low=-2, high=2)
    inputs[g.parameters[1].result].reshape(-1)[::3] = inputs[g.parameters[0].result].reshape(-1)[::3]
    check_graph(g, inputs)


def test_select_of_narrow_values_in_a_wide_loop():
    """f16 values selected by an f32 comparison: a loop of 4 lanes, f16 in half registers."""
    b = Builder()
    x, y = b.param((3, 13), ElemType.F32), b.param((3, 13), ElemType.F32)
    h = b.op("Convert", x, to=ElemType.F16)
    g16 = b.op("Convert", y, to=ElemType.F16)
    b.result(b.op("Select", b.op("Less", x, y), h, g16))
    g = b.build()
    check_graph(g, _inputs(g))


@pytest.mark.parametrize("source,target", [
    (ElemType.F32, ElemType.F16), (ElemType.F16, ElemType.F32), (ElemType.F32, ElemType.BF16),
    (ElemType.BF16, ElemType.F32), (ElemType.F16, ElemType.BF16), (ElemType.F32, ElemType.I32),
    (ElemType.I32, ElemType.F32), (ElemType.F32, ElemType.U8), (ElemType.F16, ElemType.U8),
    (ElemType.U8, ElemType.F16), (ElemType.U8, ElemType.F32)])
def test_convert(source, target):
    b = Builder()
    x = b.param((2, 19), source)
    b.result(b.op("Convert", x, to=target))
    g = b.build()
    inputs = _inputs(g, low=-300, high=300) if source is not ElemType.U8 else {
        g.parameters[0].result: np.random.default_rng(3).integers(0, 256, (2, 19))}
    check_graph(g, inputs)


def test_comparison_results_stored_as_u8_and_read_back():
    b = Builder()
    x, y = b.param((1, 45), ElemType.F16), b.param((1, 45), ElemType.F16)
    cond = b.op("Greater", x, y)
    b.result(cond)
    b.result(b.op("Convert", cond, to=ElemType.F16))
    g = b.build()
    check_graph(g, _inputs(g))


@pytest.mark.parametrize("power", [0.0, 1.0, 2.0, 0.5, -1.0, 3.0, -2.0, 1.5])
def test_power_static(power):
    from gen_testlib import approximate
    from vpuc.fusion.generator.generate import optimize_body
    b = Builder()
    x = b.param((2, 30))
    c = b.const(power)
    b.result(b.op("Power", x, c))
    g = b.build()
    assert any(op.kind == "PowerStatic" for op in optimize_body(g).ops)
    check_graph(g, _inputs(g, low=-3, high=3))


def test_erf_accuracy_in_f32():
    """Eigen's rational erf in f32: within 4 ulp of the correctly rounded erf."""
    b = Builder()
    x = b.param((4096,))
    b.result(b.op("Erf", x))
    g = b.build()
    kernel = generate(g, "erf")
    xs = np.concatenate([np.linspace(-5, 5, 4000), [0.0, -0.0, 1e-6, -1e-6, 1e-30, 4.5, -8.0,
                                                     math.inf, -math.inf, math.nan]] +
                        [np.zeros(86)]).astype(np.float32)
    out = run_both(kernel, [xs], [xs.shape]).outputs[0]
    ref = np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in xs],
                   np.float64).astype(np.float32)
    ulp = np.spacing(np.abs(ref).astype(np.float32))
    err = np.abs(out.astype(np.float64) - ref.astype(np.float64)) / ulp
    assert np.nanmax(err) <= 4, np.nanmax(err)
    assert np.isnan(out[np.isnan(xs)]).all()


def test_power_accuracy_in_f32():
    """exp(b log|a|) with the product's error added back: (3 + 2|b log a|) ulp."""
    rng = np.random.default_rng(5)
    b = Builder()
    x, y = b.param((2048,)), b.param((2048,))
    b.result(b.op("Power", x, y))
    g = b.build()
    kernel = generate(g, "pow")
    a = rng.uniform(0.01, 8, 2048).astype(np.float32)
    e = rng.uniform(-6, 6, 2048).astype(np.float32)
    a[:8] = [-2, -2, -0.0, 0.0, 1.0, np.nan, -3, 2]
    e[:8] = [3, 0.5, -1, 2, np.nan, 0, 2, 0]
    out = run_both(kernel, [a, e], [a.shape]).outputs[0]
    with np.errstate(all="ignore"):
        ref = np.power(a.astype(np.float64), e.astype(np.float64)).astype(np.float32)
        z = np.nan_to_num(np.abs(e * np.log(np.abs(a))).astype(np.float64), nan=0.0)
    finite = np.isfinite(ref) & (ref != 0)
    ulp = np.spacing(np.abs(ref[finite]))
    err = np.abs(out[finite].astype(np.float64) - ref[finite]) / ulp
    assert (err <= 3 + 2 * z[finite]).all(), err.max()
    assert np.array_equal(out[~finite], ref[~finite], equal_nan=True)


def test_approximations_are_the_documented_ones():
    assert APPROXIMATE == {"Erf", "Power", "SoftPlus", "Mish"}


def _ulps_against(kind, reference, xs):
    b = Builder()
    x = b.param(xs.shape)
    b.result(b.op(kind, x))
    out = run_both(generate(b.build(), kind.lower()), [xs], [xs.shape]).outputs[0]
    ref = reference(xs.astype(np.float64)).astype(np.float32)
    tiny = np.finfo(np.float32).tiny      # below it f32 underflows (Mish at -104: e^-104)
    normal = np.isfinite(ref) & (np.abs(ref) >= tiny)
    err = np.abs(out[normal].astype(np.float64) - ref[normal]) / np.spacing(np.abs(ref[normal]))
    rest = ~normal & np.isfinite(ref)
    assert (np.abs(out[rest].astype(np.float64) - ref[rest]) <= tiny).all()
    assert np.array_equal(out[~np.isfinite(ref)], ref[~np.isfinite(ref)], equal_nan=True)
    return err.max()


SOFTPLUS_XS = np.concatenate([np.linspace(-30, 30, 3000), np.geomspace(1e-8, 1e-2, 500),
                              -np.geomspace(1e-8, 1e-2, 500), [0.0, -0.0, 88.0, -104.0, 200.0,
                              -200.0, math.inf, -math.inf, math.nan]] + [np.zeros(87)]
                             ).astype(np.float32)


def test_softplus_and_mish_accuracy_in_f32():
    """max(x, 0) + log1p(exp(-|x|)), log1p by Goldberg's formula: within 4 f32 ulp of
    log(1 + e^x) computed in float64; Mish adds one tanh and one product (6 ulp)."""
    softplus = lambda x: np.logaddexp(0, x)                        # noqa: E731
    with np.errstate(invalid="ignore"):                             # NaN in, NaN out
        assert _ulps_against("SoftPlus", softplus, SOFTPLUS_XS) <= 4
        assert _ulps_against("Mish", lambda x: x * np.tanh(softplus(x)), SOFTPLUS_XS) <= 6
