"""GroupNormalization, the composed reductions and the composed elementwise ops
(vpuc/onnx_import/convert_norm.py, convert_math.py): their import (golden text), the
shapes they infer against ONNX's shape inference, their lowering (golden text) and their
numerics against onnxruntime, from the graph reference (f32 and f16) and compiled and
simulated (f16).

Tolerance.  Both sides get the same input, exactly representable in f16 (and the same
f16-rounded weights), so each side is off the exact result only by its own roundings:
vpuc's in the graph's type (unit roundoff u = 2^-11 for f16, 2^-24 for f32) and in the f32
steps of its kernels, onnxruntime's in f32.  Each case's ``error(u, x, want)`` bounds one
side's error for unit roundoff u (tests/tolerances.py), and the test allows
``error(u_graph) + error(u_f32)``, plus half the smallest f16 subnormal per rounding
to f16 near zero.  The bounds, per op:

- exact (0): Sign, Ceil, Round, ThresholdedRelu, Hardmax, ReduceMin (selections and
  exact steps); Mod (fmod of two values of a type is exact in that type, and ``b trunc(a/b)``
  is exact in f32 for quotients below 2^13, the sign fix-up catching a quotient rounded up).
- Elu's ``alpha (exp(x) - 1)`` is computed in f32 on both sides, exp within 2 f32 ulps of
  a value near 1 before the - 1 cancels: 2 alpha 2^-24 absolute, whatever the type.
- Selu: that, Elu rounded, gamma rounded, the product rounded: 3u |want| + 2 alpha gamma 2^-24.
- Celu: x / alpha rounded moves ``alpha (exp(x/alpha) - 1)`` by at most u |x| (its slope
  is below 1 for x <= 0), Elu rounded: u (|x| + |want|) + 2 alpha 2^-24.
- Softsign: 1 + |x| rounded, the quotient rounded: 2u |want|.
- Sin, Cos: the f32 reduction (three products and subtractions, 2^-24 (|r| + |k pi_2|)
  each) and the 15th-degree polynomial (16 f32 roundings of values below 2): below
  2^-24 (30 + |x| / 1024); the result rounded once: u |want|.
- ReduceL1, ReduceSumSquare, ReduceL2, ReduceLogSum, ReduceLogSumExp: the f32 sum of n
  terms, gamma_n sum |t| (Higham), plus the roundings of the steps around it (each case);
  ReduceProd: f32 logarithms (within 2 f32 ulps) summed, the exponent's absolute error
  the product's relative error: ((2^-23 + gamma_n) sum |log |x|| + 2^-23 + u + gamma_n) |want|.
- GroupNormalization: the MVN kernel's f32 sums relative to the group's spread, and three
  roundings (MVN's output |y| <= sqrt(n), times the scale, plus the bias).
"""

from __future__ import annotations

import math
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


def _axes(m, values):
    return m.init(np.asarray(values, np.int64), "axes")


def _group_norm(groups, per):
    def build(m, x):
        scale = m.init(m.rng.uniform(0.5, 1.5, per).astype(np.float32), "scale")   # |scale| <= 1.5
        return m.node("GroupNormalization", [x, scale, m.weight((per,), 0.1)],
                      num_groups=groups, epsilon=1e-5)
    return build


def _normal(scale):
    return lambda rng, shape: rng.standard_normal(shape) * scale


def _quarters(rng, shape):            # many exact halves: Round's ties
    return rng.integers(-24, 24, shape) / 4


def _few_values(rng, shape):          # many equal maxima: Hardmax's ties
    return rng.integers(0, 3, shape).astype(np.float64)


def _sum_terms(x, want, axes):
    n = int(np.prod([x.shape[a] for a in axes]))
    return n, np.abs(x).sum(axis=tuple(axes)).reshape(want.shape)


def _reduce_bound(kind, axes):
    """One side's error of a composed reduction over ``axes`` (the case keeps or drops them)."""
    def error(u, x, want):
        n, total = _sum_terms(x, want, axes)
        sums = gamma(n, np.float32)
        if kind == "l1":            # the f32 sum, rounded once
            return sums * total + u * np.abs(want)
        if kind == "sumsquare":     # x*x rounded (u x^2 each), summed, rounded
            squares = (x * x).sum(axis=tuple(axes)).reshape(want.shape)
            return (2 * u + sums) * squares
        if kind == "l2":            # the sum of squares' relative error (3u + gamma) halved, sqrt rounded
            return (2.5 * u + sums) * np.abs(want)
        if kind == "prod":          # f32 logs and their sum: (2^-23 + gamma) sum|log|x||, relative,
            # the exp and the rounding; or (onnxruntime) n products: gamma_n relative
            logs = np.abs(np.log(np.abs(x))).sum(axis=tuple(axes)).reshape(want.shape)
            return ((2 * U32 + sums) * logs + 2 * U32 + u + sums) * np.abs(want)
        if kind == "logsum":        # sum (positive terms) off by (u + gamma) relative: log off by that
            return u * np.abs(want) + u + sums
        # logsumexp: x - m rounded moves each term e^d by u |d| e^d <= u / e; the sum's relative
        # error (2 + n / e) u + gamma; the log and the final add rounded
        return 2 * u * np.abs(want) + u * np.abs(x).max() + (2 + n / math.e) * u + sums
    return error


def _trig_error(u, x, want):
    return u * np.abs(want) + U32 * (30 + np.abs(x) / 1024)


def _group_norm_error(groups):
    def error(u, x, want):
        n = x.size // (x.shape[0] * groups)
        sigma = x.reshape(x.shape[0], groups, -1).std(axis=2).min()
        return u * (2 * 1.5 * np.sqrt(n) + np.abs(want)) + 8 * n * U32 * 1.5 * np.abs(x).max() / sigma
    return error


EXACT = lambda u, x, want: 0.0
SELU_SCALE = 1.6732632 * 1.0507010     # alpha gamma: the scale of Selu's exp(x) - 1

# case: (opset, build(m, x), input values, one side's error(u, x, want))
CASES = {
    "selu": (20, lambda m, x: m.node("Selu", [x]), _normal(2),
             lambda u, x, w: 3 * u * np.abs(w) + 2 * U32 * SELU_SCALE),
    "celu": (20, lambda m, x: m.node("Celu", [x], alpha=0.7), _normal(2),
             lambda u, x, w: u * (np.abs(x) + np.abs(w)) + 2 * U32 * 0.7),
    "softsign": (20, lambda m, x: m.node("Softsign", [x]), _normal(3), lambda u, x, w: 2 * u * np.abs(w)),
    "thresholded_relu": (20, lambda m, x: m.node("ThresholdedRelu", [x], alpha=0.3), _normal(1), EXACT),
    "sign": (20, lambda m, x: m.node("Sign", [x]), _quarters, EXACT),
    "ceil": (20, lambda m, x: m.node("Ceil", [x]), _normal(3), EXACT),
    "round": (20, lambda m, x: m.node("Round", [x]), _quarters, EXACT),
    "sin": (20, lambda m, x: m.node("Sin", [x]), _normal(300), _trig_error),
    "cos": (20, lambda m, x: m.node("Cos", [x]), _normal(300), _trig_error),
    "mod": (20, lambda m, x: m.node("Mod", [x, m.init(np.asarray([0.75, -1.25, 2.5, -0.375], np.float32)
                                                       .reshape(4, 1, 1))], fmod=1), _normal(4), EXACT),
    "hardmax": (20, lambda m, x: m.node("Hardmax", [x], axis=1), _few_values, EXACT),
    "hardmax_opset11": (11, lambda m, x: m.node("Hardmax", [x], axis=2), _few_values, EXACT),
    "group_norm_18": (18, _group_norm(2, 2), _normal(2), _group_norm_error(2)),
    "group_norm_21": (21, _group_norm(2, 4), _normal(2), _group_norm_error(2)),
    "reduce_min": (18, lambda m, x: m.node("ReduceMin", [x, _axes(m, [1, 3])], keepdims=0), _normal(1), EXACT),
    "reduce_min_opset13": (13, lambda m, x: m.node("ReduceMin", [x], axes=[-2]), _normal(1), EXACT),
    "reduce_l1": (18, lambda m, x: m.node("ReduceL1", [x, _axes(m, [-1])]), _normal(1), _reduce_bound("l1", [3])),
    "reduce_l2": (13, lambda m, x: m.node("ReduceL2", [x], axes=[2], keepdims=0), _normal(1),
                  _reduce_bound("l2", [2])),
    "reduce_prod": (18, lambda m, x: m.node("ReduceProd", [x, _axes(m, [1, 3])], keepdims=0), _normal(1),
                    _reduce_bound("prod", [1, 3])),
    "reduce_prod_opset13": (13, lambda m, x: m.node("ReduceProd", [x], axes=[-1]), _normal(1),
                            _reduce_bound("prod", [3])),
    "reduce_sum_square": (18, lambda m, x: m.node("ReduceSumSquare", [x, _axes(m, [1, 2])]), _normal(1),
                          _reduce_bound("sumsquare", [1, 2])),
    "reduce_sum_square_noop": (18, lambda m, x: m.node("ReduceSumSquare", [x, _axes(m, [])],
                                                        noop_with_empty_axes=1), _normal(1),
                               lambda u, x, w: u * np.abs(w)),
    "reduce_log_sum": (18, lambda m, x: m.node("ReduceLogSum", [m.node("Abs", [x]), _axes(m, [3])]),
                       _normal(1), _reduce_bound("logsum", [3])),
    "reduce_log_sum_exp": (18, lambda m, x: m.node("ReduceLogSumExp", [x, _axes(m, [1, 3])], keepdims=0),
                           _normal(20), _reduce_bound("logsumexp", [1, 3])),
    "reduce_log_sum_exp_all": (13, lambda m, x: m.node("ReduceLogSumExp", [x], keepdims=1), _normal(20),
                               _reduce_bound("logsumexp", [0, 1, 2, 3])),
}
# the cases whose graph the lowering golden records
LOWERED = ("group_norm_21", "reduce_log_sum_exp", "hardmax")


def _model(tmp_path, case, shape=SHAPE) -> str:
    opset, build, _, _ = CASES[case]
    m = ModelBuilder(seed=sorted(CASES).index(case), opset=opset)
    y = build(m, m.input("x", shape))
    m.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, None))
    model = m.model(case)
    if case.startswith("group_norm"):       # shape inference leaves its output untyped
        del model.graph.output[:]
        model.graph.output.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, shape))
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _input(case, shape=SHAPE) -> np.ndarray:
    values = CASES[case][2](np.random.default_rng(11), shape)
    return np.asarray(values).astype(np.float16).astype(np.float32)


def _onnxruntime(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].astype(np.float64)


def _bound(case, u, x, want):
    error = CASES[case][3]
    return error(u, x.astype(np.float64), want) + error(U32, x.astype(np.float64), want) + 2.0 ** -25


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(_model(tmp_path, case), precision="f32").module)
    golden = GOLDEN / f"{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("shape", [[1, 4, 6, 10], [2, 6, 3, 5]])
@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_agree_with_onnx_inference(case, shape, tmp_path):
    """The imported graph's output type is the one ONNX's shape inference gives."""
    if case.startswith("group_norm") or case == "mod":
        shape = shape[:1] + [4] + shape[2:]           # its weights fix 4 channels
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
    # f32 keeps the weights as they are; f16 rounds them, and onnxruntime gets them rounded
    reference = path if precision == "f32" else rounded_to_f16(path, tmp_path / "rounded.onnx")
    want = _onnxruntime(reference, x)
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


@pytest.mark.parametrize("case", LOWERED)
def test_lowering_golden(case, tmp_path):
    """What the lowering makes of them: the library kernels (MVN, ReduceMax, ReduceSum),
    the generated kernels of the elementwise steps and the copies of the reshapes."""
    text, name, _ = onnx_as_vir(_model(tmp_path, case, [1, 4, 4, 8]), None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / f"lowered_{case}.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


def test_hardmax_picks_the_first_of_tied_maxima(tmp_path):
    """Rows whose maximum appears two or three times: the one-hot is at the first."""
    m = ModelBuilder(seed=0, opset=13)
    m.output(m.node("Hardmax", [m.input("x", [4, 6])], axis=-1))
    path = m.save(tmp_path / "ties.onnx", "ties")
    x = np.asarray([[1, 3, 3, 0, 3, 2], [5, 5, 5, 5, 5, 5], [0, 1, 2, 3, 4, 4], [-2, -1, -3, -1, -4, -5]],
                   np.float16)
    first = np.zeros((4, 6))
    first[np.arange(4), [1, 0, 4, 1]] = 1
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x.astype(np.float32))
    assert (want == first).all() and (got == first).all(), got


REFUSED = {
    "Mod": (13, lambda m, x: m.node("Mod", [x, m.init(np.asarray(0.5, np.float32))]),
            "Mod of float tensors needs fmod=1"),
    "Hardmax": (13, lambda m, x: m.node("Hardmax", [m.node("Reshape", [x, _axes(m, [1, 4 * 6 * 100])])]),
                "Hardmax over 2400 values: indices above 2048 are not exact in f16"),
}


@pytest.mark.parametrize("op", sorted(REFUSED))
def test_refused_with_the_reason_at_the_node(op, tmp_path, capsys):
    from vpuc.cli import main
    opset, build, reason = REFUSED[op]
    m = ModelBuilder(seed=0, opset=opset)
    m.output(build(m, m.input("x", [1, 4, 6, 100])))
    path = m.save(tmp_path / f"{op}.onnx", op)
    assert main(["import", path]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"({op}, domain ai.onnx, opset {opset}): {reason}" in err, err


def test_group_norm_as_pytorch_exports_it_before_opset_18(tmp_path):
    """Reshape to [N, G, -1], InstanceNormalization with unit scale and zero bias, Reshape
    back, Mul and Add per channel: recognized as one GroupNormalization (group_norm_pattern.py),
    so the Multiply by ones and the Add of zeros node by node import would make are gone,
    and as close to onnxruntime as GroupNormalization itself."""
    m = ModelBuilder(seed=4, opset=17)
    x = m.input("x", SHAPE)
    grouped = m.node("Reshape", [x, _axes(m, [1, 2, -1])])
    normed = m.node("InstanceNormalization", [grouped, m.init(np.ones(2, np.float32)),
                                              m.init(np.zeros(2, np.float32))], epsilon=1e-5)
    back = m.node("Reshape", [normed, _axes(m, SHAPE)])
    scale = m.init(m.rng.uniform(0.5, 1.5, (4, 1, 1)).astype(np.float32))
    m.output(m.node("Add", [m.node("Mul", [back, scale]), m.weight((4, 1, 1), 0.1)]))
    path = rounded_to_f16(m.save(tmp_path / "pytorch_gn.onnx", "pytorch_gn"), tmp_path / "r.onnx")
    kinds = [op.kind for op in import_onnx(path).module.graphs[0].ops
             if op.kind not in ("Parameter", "Constant", "Result")]
    assert kinds == ["Reshape", "MVN", "Reshape", "Multiply", "Add"]
    x = _input("group_norm_21")
    want = _onnxruntime(path, x)
    got = next(iter(api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs.values()))
    bound = _group_norm_error(2)(U16, x, want) + _group_norm_error(2)(U32, x, want)
    assert_within(got.astype(np.float64), want, bound, "PyTorch's group norm")


def test_group_norm_pattern_left_alone_where_it_would_change_the_result(tmp_path):
    """An InstanceNormalization whose scale is not all ones is not the written-out group
    norm: it stays, with its own Multiply."""
    m = ModelBuilder(seed=4, opset=17)
    grouped = m.node("Reshape", [m.input("x", SHAPE), _axes(m, [1, 2, -1])])
    normed = m.node("InstanceNormalization", [grouped, m.init(np.asarray([1.0, 2.0], np.float32)),
                                              m.init(np.zeros(2, np.float32))])
    m.output(m.node("Reshape", [normed, _axes(m, SHAPE)]))
    ops = import_onnx(m.save(tmp_path / "not_gn.onnx", "not_gn")).module.graphs[0].ops
    assert [op.origin[0].op_type for op in ops if op.kind == "MVN"] == ["InstanceNormalization"]
