"""Each supported ONNX op: its import (golden text), and its numerics against onnxruntime.

The graph is run by vpuc's reference executor (``vpuc/reference/graph.py``) in
the precision it was imported in; onnxruntime runs the f32 model.  Imported as
f32 the graph matches onnxruntime to f32 round-off.  Imported as f16, the
inputs and weights are rounded to f16 on both sides (onnxruntime gets the f16
values widened to f32), so what remains is each op rounding its result to f16
(relative error u = 2**-11) and f32 round-off.  With at most 4 ops in a case,
an op's rounding error is at most u times a value of the case, so
|got - want| <= 4u (|want| + max|want|) bounds it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from onnx_testlib import rounded_to_f16
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import run_graph
from vpuc.onnx_import import import_onnx, write_import
from vpuc.vir.parser import parse_file
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
F16_REL = 4 * 2.0 ** -11   # 4 ops at most, each rounding once to f16


def _unary(op, **attrs):
    def build(m):
        return m.node(op, [m.input("x", [1, 4, 5, 6])], **attrs)
    return build


def _binary(op):
    def build(m):
        x = m.input("x", [1, 4, 5, 6])
        return m.node(op, [x, m.init(m.rng.uniform(0.5, 1.5, (1, 4, 1, 6)).astype(np.float32))])
    return build


def _clip(m):
    x = m.input("x", [1, 4, 5, 6])
    return m.node("Clip", [x, m.init(np.asarray(-0.5, np.float32)), m.init(np.asarray(0.75, np.float32))])


def _prelu(m):
    return m.node("PRelu", [m.input("x", [1, 4, 5, 6]), m.init(np.full((4, 1, 1), 0.2, np.float32))])


def _where(m):
    x = m.input("x", [1, 4, 5, 6])
    cond = m.node("Greater", [x, m.init(np.asarray(0.0, np.float32))])
    return m.node("Where", [cond, x, m.init(np.asarray(0.25, np.float32))])


def _conv(m, **attrs):
    x = m.input("x", [1, 3, 9, 9])
    return m.node("Conv", [x, m.weight((4, 3, 3, 3)), m.weight((4,), 0.1)], kernel_shape=[3, 3], **attrs)


def _gemm(m):
    x = m.input("x", [2, 12])
    return m.node("Gemm", [x, m.weight((5, 12)), m.weight((5,), 0.1)], transB=1, alpha=0.5, beta=2.0)


def _matmul(m):
    return m.node("MatMul", [m.input("x", [2, 3, 8]), m.weight((8, 4))])


def _maxpool(m, **attrs):
    return m.node("MaxPool", [m.input("x", [1, 2, 7, 7])], kernel_shape=[3, 3], strides=[2, 2], **attrs)


def _shape_ops(m):
    x = m.input("x", [1, 4, 6, 2])
    flat = m.node("Flatten", [x], axis=2)
    squeezed = m.node("Squeeze", [m.node("Unsqueeze", [flat, m.init(np.asarray([0], np.int64))]),
                                  m.init(np.asarray([0], np.int64))])
    return m.node("Transpose", [squeezed], perm=[1, 0])


def _shape_ops_negative(m):
    """Negative axes count from the back; Flatten's may also be the rank (an earlier
    import took Flatten's -1 as 4 here and made 48x1)."""
    x = m.input("x", [1, 4, 6, 2])
    flat = m.node("Flatten", [x], axis=-1)
    return m.node("Unsqueeze", [flat, m.init(np.asarray([-1], np.int64))])


def _batchnorm_alone(m):
    x = m.input("x", [1, 3, 4, 4])
    stats = [m.init(m.rng.uniform(0.5, 1.5, 3).astype(np.float32)) for _ in range(4)]
    return m.node("BatchNormalization", [x] + stats)


def _x(m, shape=(1, 4, 6, 6)):
    return m.input("x", list(shape))


def _split(m):
    a, c = m.node("Split", [_x(m), m.init(np.asarray([1, 3], np.int64))], n_out=2, axis=1)
    return m.node("Mul", [m.node("ReduceSum", [a, m.init(np.asarray([1], np.int64))], keepdims=1), c])


def _layer_norm(m):
    x = m.input("x", [2, 5, 16])
    return m.node("LayerNormalization", [x, m.weight((16,), 1.0), m.weight((16,), 0.1)], axis=-1, epsilon=1e-5)


def _attention(m):
    """QK^T / sqrt(d), softmax, times V: the batched and broadcast MatMuls of attention."""
    q, k, v = (m.input(n, [1, 2, 6, 8]) for n in ("q", "k", "v"))
    scores = m.node("MatMul", [q, m.node("Transpose", [k], perm=[0, 1, 3, 2])])
    weights = m.node("Softmax", [m.node("Div", [scores, m.init(np.asarray(8 ** 0.5, np.float32))])], axis=-1)
    return m.node("MatMul", [weights, v])


def _decomposed_layer_norm(m):
    """LayerNorm as exporters before opset 17 write it; the importer makes it one MVN."""
    x = m.input("x", [2, 5, 16])
    axes = m.init(np.asarray([-1], np.int64))
    d = m.node("Sub", [x, m.node("ReduceMean", [x, axes])])
    var = m.node("ReduceMean", [m.node("Pow", [d, m.init(np.asarray(2.0, np.float32))]), axes])
    y = m.node("Div", [d, m.node("Sqrt", [m.node("Add", [var, m.init(np.asarray(1e-5, np.float32))])])])
    return m.node("Add", [m.node("Mul", [y, m.weight((16,), 1.0)]), m.weight((16,), 0.1)])


CASES = {
    "layer_norm_decomposed": _decomposed_layer_norm,
    "depthwise": lambda m: m.node("Conv", [_x(m), m.weight((4, 1, 3, 3)), m.weight((4,), 0.1)],
                                  kernel_shape=[3, 3], group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
    "grouped": lambda m: m.node("Conv", [_x(m), m.weight((6, 2, 3, 3))], kernel_shape=[3, 3], group=2,
                                dilations=[2, 1], pads=[0, 1, 2, 0]),
    # grouped ConvTranspose, named to sort after the cases with random weights (seeds by position)
    "transposed_conv_grouped": lambda m: m.node("ConvTranspose", [_x(m), m.weight((4, 3, 2, 2)), m.weight((6,), 0.1)],
                                               kernel_shape=[2, 2], strides=[2, 2], group=2),
    "conv_transpose": lambda m: m.node("ConvTranspose", [_x(m), m.weight((4, 3, 3, 3)), m.weight((3,), 0.1)],
                                       kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                       output_padding=[1, 1]),
    "avgpool_include": lambda m: m.node("AveragePool", [_x(m)], kernel_shape=[3, 3], strides=[2, 2],
                                        pads=[1, 1, 1, 1], count_include_pad=1),
    "avgpool_exclude": lambda m: m.node("AveragePool", [_x(m)], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "global_avgpool": lambda m: m.node("GlobalAveragePool", [_x(m)]),
    "global_maxpool": lambda m: m.node("GlobalMaxPool", [_x(m)]),
    "reduce_mean": lambda m: m.node("ReduceMean", [_x(m), m.init(np.asarray([1, 3], np.int64))], keepdims=0),
    "reduce_max": lambda m: m.node("ReduceMax", [_x(m), m.init(np.asarray([-1], np.int64))], keepdims=1),
    "reduce_sum_opset13": lambda m: m.node("ReduceSum", [_x(m), m.init(np.asarray([0, 2], np.int64))]),
    "concat": lambda m: m.node("Concat", [_x(m), m.node("Relu", ["x"]), m.weight((1, 2, 6, 6), 1.0)], axis=1),
    "split": _split,
    "slice": lambda m: m.node("Slice", [_x(m), *(m.init(np.asarray(v, np.int64)) for v in
                                                 ([1, 5, 0], [3, 0, 2 ** 62], [1, 2, 3], [1, -2, 2]))]),
    "gather": lambda m: m.node("Gather", [_x(m), m.init(np.asarray([3, 0, -1], np.int64))], axis=1),
    "gather_scalar": lambda m: m.node("Gather", [_x(m), m.init(np.asarray(2, np.int64))], axis=2),
    "pad": lambda m: m.node("Pad", [_x(m), m.init(np.asarray([0, 1, 2, 0, 0, 0, 1, 3], np.int64)),
                                    m.init(np.asarray(0.5, np.float32))]),
    "resize_nearest": lambda m: m.node("Resize", [_x(m), "", m.init(np.asarray([1, 1, 2, 2], np.float32))],
                                       mode="nearest", coordinate_transformation_mode="asymmetric",
                                       nearest_mode="floor"),
    "resize_linear": lambda m: m.node("Resize", [_x(m), "", "", m.init(np.asarray([1, 4, 12, 9], np.int64))],
                                      mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    "resize_align": lambda m: m.node("Resize", [_x(m), "", m.init(np.asarray([1, 1, 2, 2], np.float32))],
                                     mode="linear", coordinate_transformation_mode="align_corners"),
    # ONNX takes the coordinates from a scale whose product with the dim is not whole:
    # kept as the Interpolate's own scales
    "resize_nearest_fractional": lambda m: m.node(
        "Resize", [_x(m), "", m.init(np.asarray([1, 1, 1.7, 0.6], np.float32))], mode="nearest",
        coordinate_transformation_mode="half_pixel"),
    "resize_linear_fractional": lambda m: m.node(
        "Resize", [_x(m), "", m.init(np.asarray([1, 1, 1.3, 1.7], np.float32))], mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel"),
    "depth_to_space_dcr": lambda m: m.node("DepthToSpace", [_x(m)], blocksize=2, mode="DCR"),
    "depth_to_space_crd": lambda m: m.node("DepthToSpace", [_x(m)], blocksize=2, mode="CRD"),
    "space_to_depth": lambda m: m.node("SpaceToDepth", [_x(m)], blocksize=3),
    "log_softmax": lambda m: m.node("LogSoftmax", [_x(m)], axis=1),
    "layer_norm": _layer_norm,
    "instance_norm": lambda m: m.node("InstanceNormalization", [_x(m), m.weight((4,), 1.0), m.weight((4,), 0.1)]),
    "softplus": _unary("Softplus"), "mish": _unary("Mish"),
    "log": lambda m: m.node("Log", [m.node("Exp", [m.input("x", [1, 4, 5, 6])])]),
    "attention": _attention,

    "abs": _unary("Abs"), "neg": _unary("Neg"), "relu": _unary("Relu"), "exp": _unary("Exp"),
    "sigmoid": _unary("Sigmoid"), "tanh": _unary("Tanh"), "erf": _unary("Erf"),
    "floor": _unary("Floor"), "hardswish": _unary("HardSwish"),
    "hardsigmoid": _unary("HardSigmoid", alpha=0.25, beta=0.4), "leakyrelu": _unary("LeakyRelu", alpha=0.1),
    "elu": _unary("Elu", alpha=0.7), "gelu_tanh": _unary("Gelu", approximate="tanh"),
    "reciprocal": lambda m: m.node("Reciprocal", [m.node("Exp", [m.input("x", [1, 4, 5, 6])])]),
    "sqrt": lambda m: m.node("Sqrt", [m.node("Abs", [m.input("x", [1, 4, 5, 6])])]),
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "max": _binary("Max"), "min": _binary("Min"), "pow": lambda m: m.node(
        "Pow", [m.node("Abs", [m.input("x", [1, 4, 5, 6])]), m.init(np.asarray(1.5, np.float32))]),
    "clip": _clip, "prelu": _prelu, "where": _where,
    "conv": _conv, "conv_same_lower": lambda m: _conv(m, strides=[2, 2], auto_pad="SAME_LOWER"),
    "conv_dilated": lambda m: _conv(m, dilations=[2, 2], pads=[2, 1, 2, 1]),
    "gemm": _gemm, "matmul": _matmul, "maxpool": _maxpool,
    "maxpool_ceil": lambda m: _maxpool(m, ceil_mode=1, pads=[0, 0, 1, 1]),
    "softmax": lambda m: m.node("Softmax", [m.input("x", [2, 3, 7])], axis=1),
    "shape_ops": _shape_ops, "batchnorm": _batchnorm_alone,
    # named to sort last: a new case must not move the seeds of the others
    "wrap_negative_axes": _shape_ops_negative,
    "identity_dropout": lambda m: m.node("Dropout", [m.node("Identity", [m.input("x", [3, 4])])]),
}


def _model(tmp_path, case):
    m = ModelBuilder(seed=sorted(CASES).index(case), opset=20)
    m.output(CASES[case](m))
    return m.save(tmp_path / f"{case}.onnx", case), m


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_text(case, tmp_path):
    path, _ = _model(tmp_path, case)
    text = print_module(import_onnx(path, precision="f32").module)
    golden = GOLDEN / f"{case}.expected"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("precision", ["f32", "f16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_numerics_against_onnxruntime(case, precision, tmp_path):
    path, m = _model(tmp_path, case)
    imported = import_onnx(path, precision=precision)
    vir = tmp_path / "out" / f"{case}.vir"
    write_import(imported, vir)
    module = parse_file(vir)                              # what was written is what runs
    feeds = {}
    for value in m.inputs:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    if precision == "f16":
        feeds = {k: v.astype(np.float16).astype(np.float32) for k, v in feeds.items()}
        path = rounded_to_f16(path, tmp_path / "rounded.onnx")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = run_graph(module.graphs[0], {imported.inputs[k]: v for k, v in feeds.items()}, vir.parent)[0]
    got = got.astype(np.float32)
    assert got.shape == want.shape
    if precision == "f32":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        bound = F16_REL * (np.abs(want) + np.max(np.abs(want)))
        assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)
