"""Quantized models with integer inputs and outputs (issue 11): a DequantizeLinear of a
run-time int8/uint8 input is ``(Convert(q) - zero_point) * scale`` in f32, as ONNX defines
it; a QuantizeLinear whose integer result leaves the float graph is the fake
quantization's integer half (round half to even, saturate) plus the zero point, converted
to int8/uint8.  Checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc import api
from vpuc.cli import main

RNG = np.random.default_rng(23)
C, H, W = 3, 6, 9
U16 = 2.0 ** -11                     # f16's unit roundoff


def _save(tmp_path, name, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path)
    return path


def _both(path, feeds):
    got = api.simulate(api.compile(path), feeds).outputs
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    return list(got.values()), want


def _model(tmp_path):
    """a (uint8, per tensor) and b (int8, per channel) dequantized and added, a 3x3 conv,
    quantized to a uint8 output; the dequantized sum an output too.  Power-of-two scales:
    every dequantized value and their sum are exact in f16."""
    weights = (RNG.standard_normal((4, C, 3, 3)) * 0.25).astype(np.float32)
    inits = {"sa": np.float32(2 ** -4), "za": np.uint8(131),
             "sb": np.float32([2 ** -3, 2 ** -5, 2 ** -6]), "zb": np.int8([0, -7, 12]),
             "w": weights, "sy": np.float32(0.125), "zy": np.uint8(100)}
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"], axis=1),
             helper.make_node("Add", ["da", "db"], ["sum"]),
             helper.make_node("Conv", ["sum", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["conv", "sy", "zy"], ["y"], name="quant")]
    inputs = [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, C, H, W]),
              helper.make_tensor_value_info("b", TensorProto.INT8, [1, C, H, W])]
    outputs = [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [1, C, H, W]),
               helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, H, W])]
    return _save(tmp_path, "qio", nodes, inputs, outputs, inits), inits


def test_integer_inputs_dequantized_conv_quantized_to_uint8(tmp_path):
    path, inits = _model(tmp_path)
    feeds = {"a": RNG.integers(0, 256, (1, C, H, W)).astype(np.uint8),
             "b": RNG.integers(-128, 128, (1, C, H, W)).astype(np.int8)}
    feeds["a"].reshape(-1)[:3] = [0, 255, 131]
    feeds["b"].reshape(-1)[:3] = [-128, 127, 0]
    (got_sum, got_y), (want_sum, want_y) = _both(path, feeds)
    assert np.array_equal(got_sum.astype(np.float32), want_sum)     # exact, see _model
    assert got_y.dtype == np.uint8
    # The conv: weights rounded to f16 (u each), f32 accumulation of 27 products and one
    # rounding to f16: within (2 u + 28 2^-24) sum |w| |x| of the exact sum.  Where that
    # keeps conv / sy from crossing a rounding tie, the integers are equal; elsewhere
    # they differ by one at most (the bound is below half a step, asserted).
    w = np.asarray(inits["w"], np.float64)
    exact, magnitude = _conv3x3(want_sum, w), _conv3x3(np.abs(want_sum), np.abs(w))
    bound = (2 * U16 + 28 * 2.0 ** -24) * magnitude / inits["sy"]
    assert bound.max() < 0.5
    steps = exact / inits["sy"]
    near_tie = np.abs(steps - np.floor(steps) - 0.5) <= bound
    diff = np.abs(got_y.astype(np.int32) - want_y.astype(np.int32))
    assert diff.max() <= 1 and not np.any(diff[~near_tie]), (diff.max(), near_tie.sum())


def _conv3x3(x, w):
    """Conv of one image, pads 1, in float64."""
    padded = np.pad(np.asarray(x, np.float64)[0], ((0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, w.shape[0]) + padded.shape[1:])[..., :-2, :-2]
    for i in range(3):
        for j in range(3):
            out[0] += np.einsum("oc,chw->ohw", w[:, :, i, j], padded[:, i:i + H, j:j + W])
    return out


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("n", [8, 37])
def test_requantize_elementwise_is_exact(tmp_path, dtype, n):
    """q -> DequantizeLinear -> QuantizeLinear (another scale and zero point) -> integer
    output: every step exact (power-of-two input scale), so equal to onnxruntime's,
    ties (x / scale at a half) rounding to even, and saturating at both ends."""
    onnx_type = TensorProto.INT8 if dtype is np.int8 else TensorProto.UINT8
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    inits = {"s": np.float32(0.5), "z": dtype(3), "s2": np.float32(1.0), "z2": dtype(lo + 5)}
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["x"]),
             helper.make_node("QuantizeLinear", ["x", "s2", "z2"], ["y"])]
    path = _save(tmp_path, "requant", nodes,
                 [helper.make_tensor_value_info("q", onnx_type, [1, n])],
                 [helper.make_tensor_value_info("y", onnx_type, [1, n])], inits)
    q = RNG.integers(lo, hi + 1, (1, n)).astype(dtype)
    q[0, :4] = [lo, hi, 4, 6]                    # (4 - 3) / 2 = 0.5 and 1.5: ties
    (got,), (want,) = _both(path, {"q": q})
    assert got.dtype == dtype and np.array_equal(got, want)


def test_dequantize_of_a_float_input_refused(tmp_path, capsys):
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["x"], name="dq")]
    path = _save(tmp_path, "bad", nodes,
                 [helper.make_tensor_value_info("q", TensorProto.INT32, [1, 4])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                 {"s": np.float32(0.5)})
    assert main(["import", path]) == 1
    err = capsys.readouterr().err
    assert "node 'dq' (DequantizeLinear" in err and "run-time i32 value" in err
    assert "Traceback" not in err
