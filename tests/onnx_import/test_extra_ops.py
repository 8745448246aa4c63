"""Resize tf_crop_and_resize, Trilu, LpPool, GlobalLpPool, CenterCropPad, OneHot, ScatterND,
ScatterElements, TopK and CumProd (vpuc/onnx_import/convert_extra.py, convert_scatter.py):
their import (golden text), the shapes they infer against ONNX's shape inference, their
lowering (golden text) and their numerics against onnxruntime, compiled and simulated in f16.

The rois and scales are exact in f16, as the weights onnxruntime gets are rounded to it.

Tolerance.  Both sides get the same f16-exact input and the same f16-rounded weights, so
each is off the exact result only by its own roundings: vpuc's stored in f16 (u = 2^-11)
with f32 steps in the kernels and DPU sums, onnxruntime's in f32 (u = 2^-24).
``error(u, x, want, weights)`` bounds one side's error; the test allows
``error(2^-11) + error(2^-24)`` plus half the smallest f16 subnormal:

- exact (0): Resize nearest (copies and the extrapolation value), Trilu, CenterCropPad,
  OneHot, ScatterND / ScatterElements without reduction (a row gather, or a box's Concat) or with max / min (copies and
  comparisons), TopK's values and indices.
- Resize linear: per interpolated axis a weight (rounded), two products and their sum, a
  convex combination: ``((1 + u)^(3 a + 2) - 1) max |x|`` over ``a`` axes (onnxruntime's
  weights are products of two fractions, its four terms summed: within the same count).
- LpPool / GlobalLpPool: ``|x|^p`` off by ``u_p = u + (3 + 2 p max|ln|x||) 2^-23`` (Power's
  accuracy, docs/generator.md; ``u`` for ``x * x``, 0 for ``|x|``), the f32 sum of n terms
  (``gamma_n``, Higham) rounded (u), the p-th root dividing that relative error by p and
  adding its own: ``((u_p + gamma_n + u) / p + r + u) |want|``, ``r`` the root's accuracy
  (none for p = 1, an f32 ulp for Sqrt, Power's for any other p).
- ScatterND add: round q adds one update, rounded: ``m u M``, ``M`` the scatter-add of
  ``|x|`` and ``|updates|``, ``m`` the most updates of one row; mul: ``((1 + u)^m - 1)|want|``.
- CumProd: each output a product of at most n factors, each multiplication rounded once in
  Hillis and Steele's tree as in the sequential loop: ``((1 + u)^(n - 1) - 1) |want|``, plus
  an underflow's half subnormal per rounding scaled by the factors after it.
"""

from __future__ import annotations

import math
import os
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_testlib import assert_within, rounded_to_f16
from tests.tolerances import gamma
from vpuc import api
from vpuc.arch import load_arch
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16, U32 = 2.0 ** -11, 2.0 ** -24
ETA16 = 2.0 ** -25
EXACT = lambda u, x, want, w: 0.0
CROP = {"coordinate_transformation_mode": "tf_crop_and_resize"}


def _f(values):
    return np.asarray(values, np.float32)


def _i(m, values, base="i"):
    return m.init(np.asarray(values, np.int64), base)


def _linear_error(axes):
    return lambda u, x, want, w: ((1 + u) ** (3 * axes + 2) - 1) * np.abs(x).max()


def _lp_error(p, terms):
    def error(u, x, want, weights):
        logs = np.abs(np.log(np.abs(x[x != 0]))).max()
        u_p = 0.0 if p == 1 else u if p == 2 else u + (3 + 2 * p * logs) * 2.0 ** -23
        with np.errstate(divide="ignore"):
            root = 0.0 if p == 1 else 2.0 ** -24 if p == 2 else \
                (3 + 2 * np.abs(np.log(np.where(want > 0, want, 1.0))) / p) * 2.0 ** -23
        return ((u_p + gamma(terms, np.float32) + u) / p + root + u) * np.abs(want)
    return error


def _scatter_add_error(targets, most):
    """``targets``: the flat data position each update lands on, in update order."""
    def error(u, x, want, weights):
        magnitude = np.abs(x).reshape(-1).copy()
        np.add.at(magnitude, np.asarray(targets), np.abs(weights[0]).reshape(-1))
        return most * u * magnitude.reshape(want.shape)
    return error


def _product_error(axis):
    def error(u, x, want, weights):
        n = x.shape[axis]
        after = np.prod(np.maximum(np.abs(x), 1.0), axis=axis, keepdims=True)
        return ((1 + u) ** (n - 1) - 1) * np.abs(want) + (n - 1) * ETA16 * after
    return error


def _floor(m, x):
    return m.node("Floor", [x])


# ScatterElements over axis 0 of a [16, 40] input: each column's rows in a permutation
# (distinct), or drawn with repeats; hundreds of runs of rows, more than one Gather's DMAs
MANY_DISTINCT = np.stack([np.random.default_rng(5 + c).permutation(16)[:10] for c in range(40)], axis=1)
MANY_REPEATED = np.random.default_rng(6).integers(0, 16, (24, 40))


def _column_targets(indices):
    return (indices * 40 + np.arange(40)[None, :]).reshape(-1)


def _most_per_target(indices):
    return int(np.bincount(_column_targets(indices)).max())


# case: (opset, x shape, build(m, x), one side's error(u, x, want, weights))
CASES = {
    "crop_nearest": (13, [1, 2, 6, 7], lambda m, x: m.node(
        "Resize", [x, m.init(_f([0, 0, 0.1875, -0.125, 1, 1, 0.875, 1.1875]), "roi"), "", _i(m, [1, 2, 5, 9], "sizes")],
        mode="nearest", extrapolation_value=-3.0, **CROP), EXACT),
    "crop_nearest_ceil": (13, [1, 2, 6, 7], lambda m, x: m.node(
        "Resize", [x, m.init(_f([0, 0, 0.125, 0.25, 1, 1, 0.8125, 0.75]), "roi"), m.init(_f([1, 1, 1.5, 0.625]), "scales")],
        mode="nearest", nearest_mode="ceil", **CROP), EXACT),
    "crop_linear": (13, [1, 2, 6, 7], lambda m, x: m.node(
        "Resize", [x, m.init(_f([0, 0, 0.1875, -0.125, 1, 1, 0.875, 1.1875]), "roi"), "", _i(m, [1, 2, 5, 9], "sizes")],
        mode="linear", extrapolation_value=2.5, **CROP), _linear_error(2)),
    "crop_linear_scales": (11, [1, 2, 6, 7], lambda m, x: m.node(
        "Resize", [x, m.init(_f([0, 0, 0.125, 0.3125, 1, 1, 0.6875, 0.8125]), "roi"), m.init(_f([1, 1, 1.5, 0.625]), "scales")],
        mode="linear", **CROP), _linear_error(2)),
    "trilu_upper": (14, [2, 5, 6], lambda m, x: m.node("Trilu", [x, m.init(np.int64(1), "k")]), EXACT),
    "trilu_lower": (14, [2, 5, 6], lambda m, x: m.node("Trilu", [x, m.init(np.int64(-1), "k")], upper=0), EXACT),
    "trilu_default": (14, [6, 4], lambda m, x: m.node("Trilu", [x]), EXACT),
    "lppool_p2": (18, [1, 3, 7, 8], lambda m, x: m.node("LpPool", [x], kernel_shape=[3, 2], strides=[2, 1],
                                                        pads=[1, 0, 1, 1], p=2), _lp_error(2, 6)),
    "lppool_p1": (11, [1, 3, 7, 8], lambda m, x: m.node("LpPool", [x], kernel_shape=[2, 2], p=1), _lp_error(1, 4)),
    "lppool_p3_ceil": (18, [1, 3, 7, 8], lambda m, x: m.node("LpPool", [x], kernel_shape=[2, 3], strides=[2, 2],
                                                             p=3, ceil_mode=1), _lp_error(3, 6)),
    "global_lppool_p2": (13, [1, 3, 7, 8], lambda m, x: m.node("GlobalLpPool", [x]), _lp_error(2, 56)),
    "global_lppool_p3": (13, [1, 3, 7, 8], lambda m, x: m.node("GlobalLpPool", [x], p=3), _lp_error(3, 56)),
    "center_crop_pad": (18, [1, 3, 7, 8], lambda m, x: m.node("CenterCropPad", [x, _i(m, [5, 11])], axes=[2, 3]),
                        EXACT),
    "center_crop_pad_all": (18, [2, 7, 5], lambda m, x: m.node("CenterCropPad", [x, _i(m, [3, 4, 6])]), EXACT),
    "one_hot": (13, [1, 2], lambda m, x: m.node("OneHot", [
        _i(m, [[1, 4, -1], [0, 7, 2]]), m.init(np.int64(5), "depth"), m.node("Reshape", [x, _i(m, [2])])], axis=1),
        EXACT),
    "scatter_nd": (13, [4, 3, 5], lambda m, x: m.node("ScatterND", [x, _i(m, [[1], [3]]), m.weight((2, 3, 5))]),
                   EXACT),
    "scatter_nd_kv_cache": (16, [1, 2, 8, 4], lambda m, x: m.node(
        "ScatterND", [x, _i(m, [[[[0, 0, 5], [0, 1, 5]]]]), m.weight((1, 1, 2, 4))]), EXACT),
    "scatter_nd_box_updates": (16, [1, 2, 3, 4], lambda m, x: m.node("ScatterND", [
        m.weight((1, 2, 8, 4)), _i(m, [[[[0, h, s] for s in (3, 4, 5)] for h in (0, 1)]]), x]), EXACT),
    "scatter_nd_replace_all": (16, [4, 3], lambda m, x: m.node(
        "ScatterND", [m.weight((4, 3)), _i(m, [[0], [1], [2], [3]]), x]), EXACT),
    "scatter_nd_add": (16, [4, 3], lambda m, x: m.node(
        "ScatterND", [x, _i(m, [[1, 2], [3, 0], [1, 2], [1, 2]]), m.weight((4,))], reduction="add"),
        _scatter_add_error([5, 9, 5, 5], 3)),
    "scatter_nd_max": (16, [4, 3], lambda m, x: m.node(
        "ScatterND", [x, _i(m, [[1], [1], [-1]]), m.weight((3, 3))], reduction="max"), EXACT),
    "scatter_elements": (13, [3, 4], lambda m, x: m.node(
        "ScatterElements", [x, _i(m, [[1, 0, 2, 0], [0, 2, 1, 1]]), m.weight((2, 4))], axis=0), EXACT),
    "scatter_elements_mul": (16, [3, 4], lambda m, x: m.node(
        "ScatterElements", [x, _i(m, [[1, 0, 1], [3, 3, -1]]), m.weight((2, 3))], axis=1, reduction="mul"),
        lambda u, x, want, w: ((1 + u) ** 2 - 1) * np.abs(want)),
    "scatter_elements_min": (16, [3, 4], lambda m, x: m.node(
        "ScatterElements", [x, _i(m, [[1, 0, 1], [3, 3, -1]]), m.weight((2, 3))], axis=1, reduction="min"), EXACT),
    "scatter_elements_many_runs": (13, [16, 40], lambda m, x: m.node(
        "ScatterElements", [x, _i(m, MANY_DISTINCT), m.weight((10, 40))], axis=0), EXACT),
    "scatter_elements_add_many": (16, [16, 40], lambda m, x: m.node(
        "ScatterElements", [x, _i(m, MANY_REPEATED), m.weight((24, 40))], axis=0, reduction="add"),
        _scatter_add_error(_column_targets(MANY_REPEATED), _most_per_target(MANY_REPEATED))),
    "topk_values": (11, [3, 7], lambda m, x: m.node("TopK", [_floor(m, x), _i(m, [3])], n_out=2, axis=1)[0], EXACT),
    "topk_indices": (11, [3, 7], lambda m, x: m.node("TopK", [_floor(m, x), _i(m, [4])], n_out=2)[1], EXACT),
    "topk_smallest": (11, [5, 2, 3], lambda m, x: m.node("TopK", [_floor(m, x), _i(m, [2])], n_out=2, axis=0,
                                                         largest=0)[1], EXACT),
    "topk_smallest_values": (11, [5, 2, 3], lambda m, x: m.node("TopK", [_floor(m, x), _i(m, [1])], n_out=2,
                                                                axis=-2, largest=0)[0], EXACT),
    "cumprod": (26, [3, 6], lambda m, x: m.node("CumProd", [x, m.init(np.int64(1), "axis")]), _product_error(1)),
    "cumprod_reverse_exclusive": (26, [5, 3], lambda m, x: m.node(
        "CumProd", [x, m.init(np.int32(0), "axis")], reverse=1, exclusive=1), _product_error(0)),
}
INT_OUTPUT = {"topk_indices", "topk_smallest"}
FLOORED = {"topk_values", "topk_indices", "topk_smallest", "topk_smallest_values"}
# the cases whose graph the lowering golden records
LOWERED = ("crop_linear", "crop_nearest", "trilu_upper", "lppool_p2", "global_lppool_p3", "center_crop_pad",
           "one_hot", "scatter_nd_kv_cache", "scatter_nd_box_updates", "scatter_nd_add", "scatter_elements", "topk_values", "cumprod")


def _model(tmp_path, case) -> str:
    opset, shape, build, _ = CASES[case]
    m = ModelBuilder(seed=zlib.crc32(case.encode()), opset=opset)
    y = build(m, m.input("x", shape))
    m.output(y)
    model = m.model(case)
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _input(case) -> np.ndarray:
    shape = CASES[case][1]
    rng = np.random.default_rng(11)
    values = rng.integers(-2, 3, shape) + 0.5 * (rng.random(shape) < 0.3) if case in FLOORED \
        else rng.standard_normal(shape)
    return np.asarray(values).astype(np.float16).astype(np.float32)


def _weights(path) -> list[np.ndarray]:
    return [numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(path).graph.initializer
            if i.name.startswith("w_")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(_model(tmp_path, case), precision="f32").module)
    golden = GOLDEN / f"extra_{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_agree_with_onnx_inference(case, tmp_path):
    """The imported graph's output type is the one ONNX's shape inference gives (TopK's
    int64 indices as i32, as ArgMax's are)."""
    path = _model(tmp_path, case)
    imported = import_onnx(path, precision="f16")
    output = next(iter(imported.outputs.values()))
    otype = next(op.type for op in imported.module.graphs[0].ops if op.result == output)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True).graph.output[0]
    assert tuple(otype.dims) == tuple(d.dim_value for d in inferred.type.tensor_type.shape.dim)
    integer = inferred.type.tensor_type.elem_type == TensorProto.INT64
    assert integer == (case in INT_OUTPUT) and (otype.elem.name == "I32") == integer, otype


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_against_onnxruntime(case, tmp_path):
    path = rounded_to_f16(_model(tmp_path, case), tmp_path / "r16.onnx")
    x = _input(case)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = next(iter(api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs.values()))
    if case in INT_OUTPUT:
        assert got.dtype == np.int32 and (got == want).all(), (got, want)
        return
    error = CASES[case][3]
    weights, x64, want = _weights(path), x.astype(np.float64), want.astype(np.float64)
    bound = error(U16, x64, want, weights) + error(U32, x64, want, weights)
    assert_within(got.astype(np.float64), want, bound + ETA16, case)


@pytest.mark.parametrize("case", LOWERED)
def test_lowering_golden(case, tmp_path):
    """What the lowering makes of them: Gathers, Concats, Slices and Pads by DMA, the
    window sum on the DPU, generated kernels of the elementwise steps and selects."""
    text, name, _ = onnx_as_vir(_model(tmp_path, case), None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / f"lowered_extra_{case}.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


def _one_node(tmp_path, op, inputs, inits, opset=17, **attrs):
    m = ModelBuilder(seed=0, opset=opset)
    names = [m.input("x", [2, 4, 6, 12])] + [m.init(np.asarray(v), "c") for v in inits]
    y = m.node(op, [names[i] if isinstance(i, int) else i for i in inputs], **attrs)
    m.output(y if isinstance(y, str) else y[0])
    model = m.model(op)
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / "refused.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("op, inputs, inits, attrs, message", [
    ("TopK", [0, 1], [np.asarray([0], np.int64)], {"n_out": 2}, r"outside \[1, 12\]"),
    ("Resize", [0, 1, "", 2], [_f([0, 0, 0, 0, 1, 1, 1]), np.asarray([2, 4, 3, 3], np.int64)],
     {"mode": "nearest", **CROP}, "roi has 7 values"),
    ("Resize", [0, 1, "", 2], [_f([0] * 4 + [1] * 4), np.asarray([2, 4, 3, 3], np.int64)],
     {"mode": "cubic", **CROP}, "mode 'cubic' is not supported"),
    ("ScatterND", [0, 1, 2], [np.asarray([[5]], np.int64), np.zeros((1, 4, 6, 12), np.float32)], {},
     "index 5 is out of range"),
    ("ScatterElements", [0, 1, 2], [np.zeros((2, 4, 6, 12), np.int64), np.zeros((2, 4, 6, 12), np.float32)],
     {"reduction": "mean"}, "reduction 'mean'"),
    ("LpPool", [0], [], {"kernel_shape": [2, 2], "p": 0}, "p = 0.0"),
])
def test_refusals_name_the_node(op, inputs, inits, attrs, message, tmp_path):
    from vpuc.diagnostics import VpucError
    path = _one_node(tmp_path, op, inputs, inits, opset=18 if op != "LpPool" else 17, **attrs)
    with pytest.raises(VpucError, match=message) as caught:
        import_onnx(path, precision="f16")
    assert f"({op}, domain ai.onnx" in str(caught.value)
