"""The normalizations, elementwise, boolean, trigonometric and hyperbolic ops of
vpuc/onnx_import/convert_more.py and convert_trig.py: their import (golden text), the shapes
they infer against ONNX's shape inference, their lowering (golden text) and their numerics
against onnxruntime, from the graph reference (f32 and f16) and compiled and simulated (f16).

Tolerance, as in test_norm_math_ops.py: both sides get the same f16-exact input (and the
same f16-rounded weights); each case's ``error(u, x, want)`` bounds one side's error for
the graph's unit roundoff u (2^-11 for f16, 2^-24 for f32), and the test allows
``error(u_graph) + error(u_f32)`` (onnxruntime computes in f32), plus half the smallest f16
subnormal.  U below is 2^-24, the unit roundoff of vpuc's f32 steps.  Per op:

- exact (0): IsNaN, IsInf, Not, And, Or, Xor, CastLike (selections and comparisons).
- Shrink: the bias rounded to the graph's type and ``x -+ bias`` rounded: u (|want| + |bias|).
  Swish: ``beta x`` rounded moves sigmoid by at most u |beta x| relative, the exp, the sum,
  the reciprocal and the product rounded: (4 + |beta x|) u |want| (the kernel's f32 steps are
  within that); onnxruntime's sigmoid (MLAS) is off by up to 2.8U absolute: 3U |x|.
- Mean of k inputs: k - 1 additions and the division rounded in the graph's type:
  gamma_k sum |x_i| / k.
- LpNormalization in f32: the squares (p = 2) and the sum of n terms, gamma_n + U relative;
  the root halves it and adds U, the quotient U: (gamma_n + 4U) |want|, then rounded, u |want|.
- RMSNormalization in f32: squares, sum (gamma_n), the mean's division, + eps, the root, the
  quotient and the product by the scale, one U each: (gamma_n + 6U) |want| + u |want|.
- MeanVarianceNormalization: the MVN kernel's f32 sums relative to the row's spread (and
  onnxruntime's ``E[x^2] - E[x]^2``): 8 n U max|x| / sigma, the result rounded: u |want|.
- Atan, Asin, Acos: the reduction's roundings (at most 3U of the reduced argument, whose
  size is within 1.06 of the result's), the constant (pi/2 or pi/4) and the series' Horner
  steps (terms below 0.03 of the result), Cephes' approximation error (below U): 8U |want|.
- Sinh, Cosh: exp within 1 f32 ulp (2U), h h and the quotient (4U), the sum rounded, at most
  1.31 amplified by sinh's cancellation at |x| = 1 (coth 1): 10U |want|; the series below 1,
  6 roundings of terms summing to at most 1.2 |x|.
- Asinh, Acosh, Atanh: the argument of log1p (3 roundings, log1p's slope z / ((1+z) log(1+z))
  below 1) and Goldberg's log1p (5U with a log within 1 ulp): 12U |want|.
- Tan: sin and cos each within E = U (30 + |x| / 1024) absolute (test_norm_math_ops.py),
  so the quotient within E (1 + |tan x|) / |cos x| + U |tan x|.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_testlib import assert_shape_inferred, assert_within, rounded_to_f16
from tests.tolerances import gamma
from vpuc import api
from vpuc.arch import load_arch
from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.reference.graph import run_graph
from vpuc.vir.parser import parse_file, parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16, U32 = 2.0 ** -11, 2.0 ** -24
SHAPE = [1, 4, 6, 10]


def _normal(scale):
    return lambda rng, shape: rng.standard_normal(shape) * scale


def _uniform(lo, hi):
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def _unit_and_edges(rng, shape):
    """[-1, 1], a third of them f16's values next to +-1 (and +-1 itself)."""
    x = rng.uniform(-1, 1, shape)
    near = 1 - 2.0 ** -rng.integers(1, 12, shape)
    pick = rng.integers(0, 3, shape) == 0
    return np.where(pick, np.sign(x) * near, x)


def _above_one(rng, shape):
    """acosh's domain: 1 + 2^-k next to 1, up to 1000, and a few below 1 (NaN)."""
    x = np.where(rng.integers(0, 2, shape) == 0, 1 + 2.0 ** -rng.integers(0, 11, shape),
                 rng.uniform(1, 1000, shape))
    return np.where(rng.integers(0, 16, shape) == 0, 0.5, x)


def _specials(rng, shape):
    """Normal values with infinities of both signs and NaNs among them."""
    x = rng.standard_normal(shape)
    kind = rng.integers(0, 8, shape)
    return np.select([kind == 0, kind == 1, kind == 2], [np.inf, -np.inf, np.nan], x)


def _relative(k):
    """u |want| for the rounding to the graph's type, k U |want| for the f32 steps."""
    return lambda u, x, w: (u + k * U32) * np.abs(w)


def _tan_error(u, x, w):
    sine_cosine = U32 * (30 + np.abs(x) / 1024)
    return u * np.abs(w) + sine_cosine * (1 + np.abs(w)) / np.abs(np.cos(x)) + U32 * np.abs(w)


def _row_terms(x, axes):
    return int(np.prod([x.shape[a] for a in axes]))


def _lp_error(axis):
    return lambda u, x, w: (u + gamma(x.shape[axis], np.float32) + 4 * U32) * np.abs(w)


def _rms_error(u, x, w):
    return (u + gamma(x.shape[-1], np.float32) + 6 * U32) * np.abs(w)


def _mvn_error(axes):
    def error(u, x, w):
        sigma = x.std(axis=tuple(axes)).min()
        return u * np.abs(w) + 8 * _row_terms(x, axes) * U32 * np.abs(x).max() / sigma
    return error


MEAN_CONSTANT = np.linspace(-2, 2, 10, dtype=np.float32)


def _swish_error(beta):
    # onnxruntime's sigmoid (MLAS's logistic) is off by up to 2.8U absolute (measured over
    # 2 million points of [-90, 90]), times |x|
    return lambda u, x, w: (4 + np.abs(beta * x)) * u * np.abs(w) + 3 * U32 * np.abs(x)


def _rms_norm(m, x):
    scale = m.init(m.rng.uniform(0.5, 1.5, (6, 10)).astype(np.float32), "scale")
    return m.node("RMSNormalization", [x, scale], axis=-2, epsilon=1e-5)


def _compare(m, x, op, value):
    return m.node(op, [x, m.init(np.asarray(value, np.float32))])


def _as_float(m, flag):
    return m.node("Where", [flag, m.init(np.asarray(1.0, np.float32)), m.init(np.asarray(0.0, np.float32))])


def _logic(m, x):
    positive = _compare(m, x, "Greater", 0.0)
    small = m.node("And", [_compare(m, x, "Less", 1.0), m.node("Not", [positive])])
    either = m.node("Or", [_compare(m, x, "Less", -1.0), _compare(m, x, "Greater", 0.5)])
    return _as_float(m, m.node("Xor", [small, either]))


def _cast_like(m, x):
    flag = m.node("CastLike", [x, m.init(np.asarray(True))])            # x != 0
    return m.node("Mul", [m.node("CastLike", [flag, m.init(np.asarray(0.0, np.float32))]), x])


def _is_inf(**attrs):
    return lambda m, x: _as_float(m, m.node("IsInf", [x], **attrs))


EXACT = lambda u, x, w: 0.0

# case: (opset, build(m, x), input values, one side's error(u, x, want))
CASES = {
    "lp_norm_2": (22, lambda m, x: m.node("LpNormalization", [x], axis=1, p=2), _normal(1), _lp_error(1)),
    "lp_norm_1": (13, lambda m, x: m.node("LpNormalization", [x], p=1), _normal(1), _lp_error(3)),
    "mvn_axes": (13, lambda m, x: m.node("MeanVarianceNormalization", [x], axes=[1, 3]), _normal(2),
                 _mvn_error([1, 3])),
    "mvn_default": (13, lambda m, x: m.node("MeanVarianceNormalization", [x], axes=[0, 2, 3]),
                    _normal(2), _mvn_error([0, 2, 3])),
    "rms_norm": (23, _rms_norm, _normal(2), _rms_error),
    "mean": (13, lambda m, x: m.node("Mean", [x, m.node("Abs", [x]), m.init(MEAN_CONSTANT)]), _normal(2),
             lambda u, x, w: gamma(3, np.float16 if u == U16 else np.float32)
             * (2 * np.abs(x) + np.abs(MEAN_CONSTANT)) / 3),
    "swish": (24, lambda m, x: m.node("Swish", [x], alpha=0.7), _normal(3), _swish_error(0.7)),
    "shrink": (13, lambda m, x: m.node("Shrink", [x], lambd=0.3, bias=0.1), _normal(1),
               lambda u, x, w: u * (np.abs(w) + 0.1)),
    "is_nan": (20, lambda m, x: _as_float(m, m.node("IsNaN", [x])), _specials, EXACT),
    "is_inf": (20, _is_inf(), _specials, EXACT),
    "is_inf_negative": (20, _is_inf(detect_positive=0), _specials, EXACT),
    "logic": (20, _logic, _normal(1), EXACT),
    "cast_like": (21, _cast_like, _normal(1), EXACT),
    "tan": (22, lambda m, x: m.node("Tan", [x]), _normal(3), _tan_error),
    "atan": (22, lambda m, x: m.node("Atan", [x]), _normal(5), _relative(8)),
    "asin": (22, lambda m, x: m.node("Asin", [x]), _unit_and_edges, _relative(8)),
    "acos": (22, lambda m, x: m.node("Acos", [x]), _unit_and_edges, _relative(8)),
    "sinh": (22, lambda m, x: m.node("Sinh", [x]), _uniform(-10, 10), _relative(10)),
    "cosh": (22, lambda m, x: m.node("Cosh", [x]), _uniform(-10, 10), _relative(10)),
    "asinh": (22, lambda m, x: m.node("Asinh", [x]), _normal(100), _relative(12)),
    "acosh": (22, lambda m, x: m.node("Acosh", [x]), _above_one, _relative(12)),
    "atanh": (22, lambda m, x: m.node("Atanh", [x]), _unit_and_edges, _relative(12)),
}


def _model(tmp_path, case, shape=SHAPE) -> str:
    opset, build, _, _ = CASES[case]
    m = ModelBuilder(seed=sorted(CASES).index(case), opset=opset)
    y = build(m, m.input("x", shape))
    m.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, None))
    path = tmp_path / f"{case}.onnx"
    onnx.save(m.model(case), str(path))
    return str(path)


def _input(case, shape=SHAPE) -> np.ndarray:
    values = CASES[case][2](np.random.default_rng(11), shape)
    return np.asarray(values).astype(np.float16).astype(np.float32)


def _onnxruntime(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].astype(np.float64)


def _bound(case, u, x, want):
    error = CASES[case][3]
    with np.errstate(invalid="ignore"):
        return error(u, x.astype(np.float64), want) + error(U32, x.astype(np.float64), want) + 2.0 ** -25


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(_model(tmp_path, case), precision="f32").module)
    golden = GOLDEN / f"{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("shape", [[1, 4, 6, 10], [2, 3, 6, 10]])
@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_agree_with_onnx_inference(case, shape, tmp_path):
    """The imported graph's output type is the one ONNX's shape inference gives."""
    path = _model(tmp_path, case, shape)
    assert_shape_inferred(path, shape)


@pytest.mark.parametrize("precision", ["f32", "f16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_reference_against_onnxruntime(case, precision, tmp_path):
    path = _model(tmp_path, case)
    imported = import_onnx(path, precision=precision)
    vir = tmp_path / "out" / f"{case}.vir"
    write_import(imported, vir)
    module = parse_file(vir)
    x = _input(case)
    reference = path if precision == "f32" else rounded_to_f16(path, tmp_path / "rounded.onnx")
    want = _onnxruntime(reference, x)
    with np.errstate(all="ignore"):
        got = run_graph(module.graphs[0], {imported.inputs["x"]: x}, vir.parent)[0].astype(np.float64)
    u = U16 if precision == "f16" else U32
    assert_within(got, want, _bound(case, u, x, want), f"{case} {precision}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_against_onnxruntime(case, tmp_path):
    path = _model(tmp_path, case)
    x = _input(case)
    want = _onnxruntime(rounded_to_f16(path, tmp_path / "rounded.onnx"), x)
    outputs = api.simulate(api.compile(rounded_to_f16(path, tmp_path / "r16.onnx")),
                           {"x": x.astype(np.float16)}).outputs
    got = next(iter(outputs.values())).astype(np.float64)
    assert_within(got, want, _bound(case, U16, x, want), case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_golden(case, tmp_path):
    """What the lowering makes of them: the library kernels (MVN, ReduceMean, ReduceSum), the
    Transposes around an MVN over axes apart, one generated kernel of an op's f32 steps."""
    text, name, _ = onnx_as_vir(_model(tmp_path, case, [2, 4, 6, 10]), None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / f"lowered_{case}.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_mvn_default_axes(opset, tmp_path):
    """MeanVarianceNormalization with ``axes`` left unsaid is over [0, 2, 3] (ONNX's
    function body fails strict shape inference then from opset 13: the import writes the
    default out first, model.py)."""
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    shape = [2, 3, 4, 5]
    graph = helper.make_graph([node], "mvn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = str(tmp_path / "mvn.onnx")
    onnx.save(model, path)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float16).astype(np.float32)
    want = _onnxruntime(path, x)
    got = next(iter(api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs.values()))
    error = _mvn_error([0, 2, 3])
    assert_within(got.astype(np.float64), want, error(U16, x, want) + error(U32, x, want), f"opset {opset}")


def _edges(op: str) -> np.ndarray:
    """f32 inputs where the textbook forms lose digits: next to +-1 (to f32's last bit), tiny
    and huge magnitudes."""
    k = np.arange(1, 24, dtype=np.float64)
    near_one = 1 - 2.0 ** -k
    tiny = 2.0 ** -np.arange(10, 120, 7, dtype=np.float64)
    if op in ("Asin", "Acos", "Atanh"):
        values = np.concatenate([near_one, -near_one, tiny, -tiny, [0.5, -0.5, 0.75]])
    elif op == "Acosh":
        values = np.concatenate([1 + 2.0 ** -k, [2.0, 10.0, 1e4, 1e10, 1e30, 3e38]])
    elif op == "Tan":
        values = np.concatenate([tiny, -tiny, [1.5, -1.5, 3.0, 10.0, 100.0]])
    else:                                   # Atan, Sinh, Cosh, Asinh
        huge = [1e4, 1e10, 1e30, 3e38] if op in ("Atan", "Asinh") else [20.0, 80.0, 88.0, 89.0]
        values = np.concatenate([tiny, -tiny, [0.5, 1.0, 1.5, 2.5, 30.0 if op != "Cosh" else 1.25], huge,
                                 -np.asarray(huge)])
    return values.astype(np.float32)


EXACT_OF = {"Tan": np.tan, "Atan": np.arctan, "Asin": np.arcsin, "Acos": np.arccos, "Sinh": np.sinh,
            "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh}


@pytest.mark.parametrize("op", sorted(EXACT_OF))
def test_f32_relative_accuracy_at_the_edges(op, tmp_path):
    """In f32 the compositions keep their relative accuracy next to +-1 and at tiny and huge
    magnitudes, where ``asin = atan(x / sqrt(1 - x^2))``, ``atanh = log((1 + x) / (1 - x)) / 2``
    or ``asinh = log(x + sqrt(x^2 + 1))`` would lose every digit: within the bounds of the
    module docstring (relative, k U) against the float64 value of the same f32 input.  The
    textbook atanh in f32 is beyond its bound at 31 of Atanh's 81 points, asinh at 35 of 45."""
    x = _edges(op)
    m = ModelBuilder(seed=0, opset=22)
    m.outputs.append(helper.make_tensor_value_info(m.node(op, [m.input("x", [x.size])]), TensorProto.FLOAT, None))
    path = tmp_path / f"{op}.onnx"
    onnx.save(m.model(op), str(path))
    imported = import_onnx(str(path), precision="f32")
    write_import(imported, tmp_path / "out" / f"{op}.vir")
    module = parse_file(tmp_path / "out" / f"{op}.vir")
    with np.errstate(all="ignore"):
        got = run_graph(module.graphs[0], {imported.inputs["x"]: x}, tmp_path / "out")[0].astype(np.float64)
        want = EXACT_OF[op](x.astype(np.float64))
    bound = CASES[op.lower()][3](0.0, x.astype(np.float64), want)      # u = 0: no final rounding
    assert_within(got, want, bound, op)


REFUSED = {
    "LpNormalization": (22, lambda m, x: m.node("LpNormalization", [x], p=3),
                        "LpNormalization p = 3; ONNX defines p = 1 and p = 2"),
    "Shrink": (13, lambda m, x: m.node("Shrink", [x], lambd=-0.5), "Shrink lambd -0.5 is negative"),
}


@pytest.mark.parametrize("op", sorted(REFUSED))
def test_refused_with_the_reason_at_the_node(op, tmp_path, capsys):
    from vpuc.cli import main
    opset, build, reason = REFUSED[op]
    m = ModelBuilder(seed=0, opset=opset)
    m.output(build(m, m.input("x", [1, 4, 6, 10])))
    path = m.save(tmp_path / f"{op}.onnx", op)
    assert main(["import", path]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"({op}, domain ai.onnx, opset {opset}): {reason}" in err, err


def test_a_cast_to_boolean_and_back(tmp_path):
    """Cast of a float to bool is ``x != 0`` and Not of it ``== 0``; back to float a Convert:
    1 where x is 0, else 0, exactly as onnxruntime."""
    m = ModelBuilder(seed=0, opset=13)
    flag = m.node("Cast", [m.input("x", [2, 8])], to=TensorProto.BOOL)
    m.output(m.node("Cast", [m.node("Not", [flag])], to=TensorProto.FLOAT))
    path = m.save(tmp_path / "cast.onnx", "cast")
    x = np.asarray([[0, 1, -2, 0.5, 0, -0.0, 3, 0], [1, 0, 0, 7, -1, 0, 2, 0]], np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x.astype(np.float32))
    assert (got == want).all() and (want == (x == 0)).all(), got


def test_swiglu_against_onnx_reference(tmp_path):
    """SwiGLU (opset 28, which onnxruntime 1.32 does not run) against ONNX's reference: the
    Swish of the gate within the Swish case's bound (the reference's sigmoid in numpy f32,
    within a few U), times the f16-exact value input, then the product rounded once more."""
    from onnx.reference import ReferenceEvaluator
    m = ModelBuilder(seed=3, opset=28)
    x = m.input("x", [2, 4, 6])
    value = m.init(np.linspace(-3, 3, 48, dtype=np.float32).reshape(2, 4, 6), "value")
    m.output(m.node("SwiGLU", [x, value], alpha=1.5))
    path = m.save(tmp_path / "swiglu.onnx", "swiglu")
    xv = (np.random.default_rng(4).standard_normal((2, 4, 6)) * 3).astype(np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": xv}).outputs.values())).astype(np.float64)
    want = ReferenceEvaluator(path).run(None, {"x": xv.astype(np.float32)})[0].astype(np.float64)
    b = np.abs(np.linspace(-3, 3, 48).reshape(2, 4, 6))
    swish = want / np.where(b == 0, 1, np.linspace(-3, 3, 48).reshape(2, 4, 6))
    x64 = xv.astype(np.float64)
    bound = _swish_error(1.5)(U16, x64, swish) * b + _swish_error(1.5)(U32, x64, swish) * b \
        + U16 * np.abs(want) + 2.0 ** -25
    assert_within(got, want, bound, "swiglu")
