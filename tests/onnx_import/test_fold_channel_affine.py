"""A per-output-channel Mul and Add after a Conv (Caffe2's BatchNorm as the ``onnx``
package's Inception v2 and DenseNet-121 write it, their constants computed by
``ConstantOfShape`` and ``Unsqueeze``) folded into the Conv's weights and bias at import
(``vpuc/onnx_import/fold_channel_affine.py``): the graph holds one Conv and its Relu, no
Multiply; in f32 it matches the exact result to f32 round-off, compiled in f16 it matches
onnxruntime within the bound of one rounding of each folded weight; a Mul whose constant
varies along another axis, or a Conv output read twice, is left alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper

from tests.tolerances import assert_within_bound, conv_magnitude, gamma, unit_roundoff
from vpuc import api
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT
from vpuc.ir.module import BufferKind
from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import run_graph

C_IN, C_OUT, SIZE = 8, 24, 6
K = C_IN * 9                       # terms of each output's sum (3x3 over 8 channels)


def _model(tmp_path, along_width=False, extra_use=False):
    """x -> Conv 3x3 (bias) -> Mul(Unsqueeze(s)) -> Add(Unsqueeze(ConstantOfShape)) -> Relu,
    as Caffe2 exports write a BatchNorm (``along_width``: s of one value per column instead,
    not unsqueezed); returns (path, weights, bias, scale, shift)."""
    m = ModelBuilder(seed=7, opset=13)
    x = m.input("x", [1, C_IN, SIZE, SIZE])
    w, b = m.weight((C_OUT, C_IN, 3, 3)), m.weight((C_OUT,), 0.5)
    conv = m.node("Conv", [x, w, b], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    rng = np.random.default_rng(9)
    scale = rng.uniform(-1.5, 1.5, SIZE if along_width else C_OUT).astype(np.float32)
    s = m.init(scale, "s") if along_width else m.node(
        "Unsqueeze", [m.init(scale, "s"), m.init(np.asarray([1, 2], np.int64), "axes")])
    shape = m.init(np.asarray([C_OUT], np.int64), "shape")
    shift_value = np.float32(0.25)
    t = m.node("Unsqueeze", [m.node("ConstantOfShape", [shape], value=numpy_helper.from_array(
        np.asarray([shift_value], np.float32))), m.init(np.asarray([1, 2], np.int64), "axes")])
    y = m.node("Relu", [m.node("Add", [m.node("Mul", [conv, s]), t])])
    m.output(y)
    if extra_use:
        m.output(conv)
    weights, bias = (numpy_helper.to_array(i).astype(np.float64) for i in m.inits[:2])
    return m.save(tmp_path / "m.onnx", "m"), weights, bias, scale.astype(np.float64), float(shift_value)


def _ops(imported) -> list[str]:
    return [op.kind for op in imported.module.graphs[0].ops
            if op.kind not in (PARAMETER, RESULT, CONSTANT)]


def test_the_scale_and_shift_fold_into_the_conv(tmp_path):
    path, w, b, s, t = _model(tmp_path)
    imported = import_onnx(path, precision="f32")
    assert _ops(imported) == ["Convolution", "Add", "Relu"]
    x = np.random.default_rng(3).standard_normal((1, C_IN, SIZE, SIZE)).astype(np.float32)
    write_import(imported, tmp_path / "m.vir")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: x}, tmp_path)[0]
    # exact in float64; the folded weights and bias rounded once to f32 (u each), the sum of
    # K + 1 terms in f32 (gamma_{K+1}), the bias add once more: (u + gamma_{K+2}) of the
    # magnitude, and Relu is 1-Lipschitz
    wf, bf = w * s[:, None, None, None], b * s + t
    want = np.maximum(_conv(x, wf, bf), 0)
    magnitude = conv_magnitude(wf, bf, [1, 1, 1, 1], [1, 1])(x)
    u32 = unit_roundoff(np.float32)
    assert_within_bound(got, want, (u32 + gamma(K + 2, np.float32)) * magnitude)


def _conv(x, w, b):
    """The 3x3 convolution (pads 1) in float64."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None)
                                            for n in ("x", "w", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    return ReferenceEvaluator(helper.make_model(graph)).run(
        None, {"x": x.astype(np.float64), "w": w, "b": b})[0]


def test_compiled_f16_matches_onnxruntime_within_the_folds_rounding(tmp_path):
    path, w, b, s, t = _model(tmp_path)
    program = api.compile(path)
    x = np.random.default_rng(4).standard_normal((1, C_IN, SIZE, SIZE)).astype(np.float16)
    inputs = {buf.name: x for buf in program.module.buffers if buf.kind is BufferKind.INPUT}
    sim = api.simulate(program, inputs)
    got = next(iter(sim.outputs.values())).astype(np.float64).reshape(1, C_OUT, SIZE, SIZE)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0].astype(np.float64)
    # each folded weight and the bias rounded to f16 once (u16 of the magnitude), the K + 1
    # terms summed in f32 on both sides in other orders (2 gamma_{K+1}), onnxruntime's
    # product and sum in f32 (2 u32 of the magnitude), the output stored as f16 (u16 of it,
    # half a subnormal); Relu is 1-Lipschitz
    wf, bf = w * s[:, None, None, None], b * s + t
    magnitude = conv_magnitude(wf, bf, [1, 1, 1, 1], [1, 1])(x.astype(np.float64))
    u16, u32 = unit_roundoff(np.float16), unit_roundoff(np.float32)
    bound = ((u16 + 2 * gamma(K + 1, np.float32) + 2 * u32) * magnitude + u16 * np.abs(want)
             + float(np.finfo(np.float16).smallest_subnormal))
    assert_within_bound(got, want, bound)


def test_a_scale_along_another_axis_is_not_folded(tmp_path):
    path, *_ = _model(tmp_path, along_width=True)
    assert "Multiply" in _ops(import_onnx(path, precision="f32"))


def test_a_conv_output_read_elsewhere_is_not_folded(tmp_path):
    path, *_ = _model(tmp_path, extra_use=True)
    assert _ops(import_onnx(path, precision="f32")) == ["Convolution", "Add", "Multiply", "Add", "Relu"]


def test_a_batch_norm_after_a_concat_takes_the_scale_and_shift(tmp_path):
    """DenseNet-121's pre-activation: Concat -> BatchNormalization -> Mul -> Add -> Relu
    becomes one BatchNormalization (a Multiply and an Add of [1, C, 1, 1] constants) of
    gamma c, beta c + t.  Against onnxruntime in f32: each side rounds at most 8 times
    (the folded scale and shift, the product and the sum here; onnxruntime's normalization,
    product and sum), each by at most u32 of a partial result bounded by the magnitude
    (|x| |s| + |mean s| + |beta|) (1 + |c|) + |t|, so 16 u32 of it bounds the difference."""
    m = ModelBuilder(seed=8, opset=13)
    x = m.input("x", [1, C_IN, SIZE, SIZE])
    cat = m.node("Concat", [x, x], axis=1)
    rng = np.random.default_rng(2)
    gamma, beta, mean = rng.standard_normal((3, 2 * C_IN)).astype(np.float32)
    var = rng.uniform(0.5, 1.5, 2 * C_IN).astype(np.float32)
    norm = m.node("BatchNormalization", [cat, *(m.init(v, "bn") for v in (gamma, beta, mean, var))])
    axes = m.init(np.asarray([1, 2], np.int64), "axes")
    c = rng.uniform(-2, 2, 2 * C_IN).astype(np.float32)
    t = rng.uniform(-1, 1, 2 * C_IN).astype(np.float32)
    y = m.node("Add", [m.node("Mul", [norm, m.node("Unsqueeze", [m.init(c, "c"), axes])]),
                       m.node("Unsqueeze", [m.init(t, "t"), axes])])
    m.output(m.node("Relu", [y]))
    path = m.save(tmp_path / "m.onnx", "m")
    imported = import_onnx(path, precision="f32")
    assert _ops(imported) == ["Concat", "Multiply", "Add", "Relu"]
    feed = np.random.default_rng(3).standard_normal((1, C_IN, SIZE, SIZE)).astype(np.float32)
    write_import(imported, tmp_path / "m.vir")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: feed}, tmp_path)[0]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
    s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + np.float64(np.float32(1e-5)))
    xs = np.concatenate([feed, feed], axis=1).astype(np.float64)
    per_channel = lambda v: v.reshape(1, -1, 1, 1)  # noqa: E731
    magnitude = ((np.abs(xs) * per_channel(np.abs(s)) + per_channel(np.abs(mean * s) + np.abs(beta)))
                 * per_channel(1 + np.abs(c)) + per_channel(np.abs(t)))
    assert_within_bound(got, want, 16 * unit_roundoff(np.float32) * magnitude)
