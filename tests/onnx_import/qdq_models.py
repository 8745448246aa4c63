"""Small float models quantized by onnxruntime's ``quantize_static`` in the QDQ form
(per-channel int8 weights, 4 seeded calibration samples): the integer layers' tests."""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _conv(nodes, inits, rng, name, x, cin, cout, kernel=3, stride=1, pad=1, relu=False):
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((cout, cin, kernel, kernel)) * (1.5 / np.sqrt(cin * kernel ** 2)))
        .astype(np.float32), f"{name}.w"))
    inits.append(numpy_helper.from_array(
        (rng.standard_normal(cout) * 0.2).astype(np.float32), f"{name}.b"))
    out = f"{name}.y"
    nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [out],
                                  pads=[pad] * 4, strides=[stride] * 2, name=name))
    if relu:
        nodes.append(helper.make_node("Relu", [out], [f"{name}.r"], name=f"{name}.relu"))
        out = f"{name}.r"
    return out


def single_conv(channels=16, out_channels=32, size=12, stride=1, pad=1, kernel=3,
                relu=False) -> onnx.ModelProto:
    """One Conv (optionally with a Relu) on a 1 x channels x size x size input."""
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    y = _conv(nodes, inits, rng, "conv", "x", channels, out_channels, kernel, stride, pad, relu)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    out = (size + 2 * pad - kernel) // stride + 1
    return _model(nodes, inits, [1, channels, size, size], [1, out_channels, out, out])


def conv_pair(channels=16, out_channels=32, size=12, stride=1, pad=1, kernel=3):
    """One Conv + Relu of the given window, then a 1x1 Conv: two integer layers in a row
    (an integer layer alone between float ops stays f16: ``quant_layers._in_chains``)."""
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    a = _conv(nodes, inits, rng, "conv1", "x", channels, out_channels, kernel, stride, pad, True)
    y = _conv(nodes, inits, rng, "conv2", a, out_channels, 16, 1, 1, 0)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    out = (size + 2 * pad - kernel) // stride + 1
    return _model(nodes, inits, [1, channels, size, size], [1, 16, out, out])


def small_cnn(size=16) -> onnx.ModelProto:
    """conv-relu-conv-relu-maxpool-flatten-gemm: two integer layers in a row."""
    rng = np.random.default_rng(6)
    nodes, inits = [], []
    a = _conv(nodes, inits, rng, "conv1", "x", 16, 32, relu=True)
    b = _conv(nodes, inits, rng, "conv2", a, 32, 32, relu=True)
    nodes.append(helper.make_node("MaxPool", [b], ["pool"], kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    features = 32 * (size // 2) ** 2
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((10, features)) / np.sqrt(features)).astype(np.float32), "fc.w"))
    inits.append(numpy_helper.from_array(np.zeros(10, np.float32), "fc.b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["y"], transB=1))
    return _model(nodes, inits, [1, 16, size, size], [1, 10])


def _model(nodes, inits, in_shape, out_shape) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, in_shape)
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)
    graph = helper.make_graph(nodes, "qdq", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def quantize(model: onnx.ModelProto, folder, shape, activations="QUInt8"):
    """``model`` quantized in the QDQ form; the path of the quantized file."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    onnx.save(model, folder / "float.onnx")
    rng = np.random.default_rng(0)
    samples = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    class Samples(CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    logging.disable(logging.WARNING)
    try:
        quantize_static(str(folder / "float.onnx"), str(folder / "qdq.onnx"), Samples(),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=getattr(QuantType, activations),
                        weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    return folder / "qdq.onnx"


def hand_qdq_conv(channels=16, size=8, relu=True, shared_outputs=1):
    """QDQ Convs written by hand (as exporters other than onnxruntime write them): Q(x) ->
    DQ -> Conv(DQ(w int8 per channel), DQ(b int32)) -> Relu -> Q (``shared_outputs``
    QuantizeLinears of the same parameters) -> DQ -> a 1x1 Conv the same way -> Q -> DQ ->
    y (plus the other shared outputs' DequantizeLinears, summed)."""
    rng = np.random.default_rng(9)
    sx, sy = np.float32(0.02), np.float32(0.05)
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"),
             numpy_helper.from_array(np.array(128, np.uint8), "zx"),
             numpy_helper.from_array(np.array(sy, np.float32), "sy"),
             numpy_helper.from_array(np.array(3, np.uint8), "zy"),
             numpy_helper.from_array(np.zeros(channels, np.int8), "zw")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"])]

    def conv(name, x, s_in, kernel, pad):
        sw = rng.uniform(0.004, 0.01, channels).astype(np.float32)
        inits.extend([numpy_helper.from_array(rng.integers(
            -127, 128, (channels, channels, kernel, kernel)).astype(np.int8), f"{name}.wq"),
            numpy_helper.from_array(sw, f"{name}.sw"),
            numpy_helper.from_array(rng.integers(-3000, 3000, channels).astype(np.int32),
                                    f"{name}.bq"),
            numpy_helper.from_array(s_in * sw, f"{name}.sb")])
        nodes.extend([
            helper.make_node("DequantizeLinear", [f"{name}.wq", f"{name}.sw", "zw"],
                             [f"{name}.w"], axis=0),
            helper.make_node("DequantizeLinear", [f"{name}.bq", f"{name}.sb"], [f"{name}.b"],
                             axis=0),
            helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.c"],
                             pads=[pad] * 4, name=name)])
        return f"{name}.c"

    out = conv("conv", "xd", sx, 3, 1)
    if relu:
        nodes.append(helper.make_node("Relu", [out], ["r"]))
        out = "r"
    shared = []
    for i in range(shared_outputs):
        nodes += [helper.make_node("QuantizeLinear", [out, "sy", "zy"], [f"yq{i}"]),
                  helper.make_node("DequantizeLinear", [f"yq{i}", "sy", "zy"], [f"yd{i}"])]
        shared.append(f"yd{i}")
    second = conv("conv2", shared[0], sy, 1, 0)
    nodes += [helper.make_node("QuantizeLinear", [second, "sy", "zy"], ["zq"]),
              helper.make_node("DequantizeLinear", ["zq", "sy", "zy"], ["zd"])]
    ys = ["zd"] + shared[1:]
    nodes.append(helper.make_node("Sum" if len(ys) > 1 else "Identity", ys, ["y"]))
    return _model(nodes, inits, [1, channels, size, size], [1, channels, size, size])
