"""The DPU's integer mode against onnxruntime as the oracle.

A one-layer float model (a padded or strided Conv, a depthwise Conv, with a Relu, or a
MatMul) is quantized by onnxruntime's ``quantize_static`` in the QDQ form (per-channel
int8 weights, uint8 activations).  Its integers (the quantized input, weights, int32 bias,
scales and zero points) are written as one integer DPU task in VIR, as the NPU compiler
lowers such a layer: the input zero point folded into the bias, the requantization scale
``sx * sw[c] / sy`` as the PPE's (mult, shift).  onnxruntime runs the model with its
graph optimizations (its QDQ selectors fuse the layer into QLinearConv / QLinearMatMul:
exact int32 sums, then ``round_half_even(sum * M) + zy`` in float), and its quantized
output is compared with vpuc's.

Bound (docs/vir.md, "How it differs from onnxruntime"): both sums are exact, so an output
differs only where ``sum * M`` is within the fixed-point scale's relative error 2^-14
(plus float32's 2^-23 on onnxruntime's side) of a tie, and there by one step.  Measured
once: 1 of 2,592 outputs of the padded conv and 1 of 384 of the MatMul differ, none of the
others.  (The quantizer folds the Relu into the output's zero point, the bottom of its
range: saturation is the relu.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from vpuc import api
from vpuc.ir.fixed_point import fixed_point_scale
from tests.onnx_import.qdq_models import quantize

TIE_WINDOW = 2.0 ** -14 + 2.0 ** -22


def _float_model(kind: str, channels: int, out_channels: int, size: int) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    if kind == "matmul":
        x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [size, channels])
        y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [size, out_channels])
        inits.append(numpy_helper.from_array(
            rng.standard_normal((channels, out_channels)).astype(np.float32) * 0.2, "w"))
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y"]))
    else:
        groups = channels if kind == "dwconv" else 1
        stride = 2 if kind == "strided" else 1
        out_size = (size + 2 - 3) // stride + 1
        x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, channels, size, size])
        y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT,
                                          [1, out_channels, out_size, out_size])
        inits.append(numpy_helper.from_array(rng.standard_normal(
            (out_channels, channels // groups, 3, 3)).astype(np.float32) * 0.3, "w"))
        inits.append(numpy_helper.from_array(
            rng.standard_normal(out_channels).astype(np.float32) * 0.5, "b"))
        nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                                      strides=[stride, stride], group=groups))
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(nodes, "layer", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _integers(qdq: onnx.ModelProto) -> dict:
    """The layer's integers and scales, read off the QDQ graph."""
    consts = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    layer = next(n for n in qdq.graph.node if n.op_type in ("Conv", "MatMul"))
    dq_x, dq_w = producer[layer.input[0]], producer[layer.input[1]]
    q_x = producer[dq_x.input[0]]
    q_y = next(n for n in qdq.graph.node if n.op_type == "QuantizeLinear"
               and n.input[0] != "x")
    found = {"layer": layer, "q_x": q_x, "q_y": q_y,
             "sx": float(consts[q_x.input[1]]), "zx": int(consts[q_x.input[2]]),
             "elem": {np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8"}[
                 consts[q_x.input[2]].dtype],
             "w": consts[dq_w.input[0]], "sw": np.atleast_1d(consts[dq_w.input[1]]),
             "sy": float(consts[q_y.input[1]]), "zy": int(consts[q_y.input[2]]),
             "bias": None}
    if len(layer.input) > 2:
        found["bias"] = consts[producer[layer.input[2]].input[0]]
    return found


def _ort_integers(qdq: onnx.ModelProto, q: dict, x: np.ndarray):
    """onnxruntime's quantized input and quantized output (the Q nodes' results made graph
    outputs), with all its graph optimizations on."""
    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    elem = onnx.TensorProto.UINT8 if q["elem"] == "u8" else onnx.TensorProto.INT8
    for node in (q["q_x"], q["q_y"]):
        model.graph.output.append(helper.make_tensor_value_info(node.output[0], elem, None))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    _, x_q, y_q = session.run(None, {"x": x})
    return x_q, y_q


def _vir(kind: str, q: dict, x_shape, y_shape, folder) -> str:
    w = q["w"]
    if kind == "matmul":              # ONNX's [K, N] as the DPU's [N, K]
        w = np.ascontiguousarray(w.T)
    out_channels = w.shape[0]
    sw = np.broadcast_to(q["sw"], (out_channels,))
    bias = np.zeros(out_channels, np.int64) if q["bias"] is None else q["bias"].astype(np.int64)
    folded = bias - q["zx"] * w.reshape(out_channels, -1).astype(np.int64).sum(1)
    rows = [fixed_point_scale(q["sx"] * float(s) / q["sy"]) for s in sw]
    for name, array in (("w", w), ("bias", folded.astype(np.int32)),
                        ("scale", np.array(rows, np.int32))):
        np.save(folder / f"{name}.npy", array)
    dims = "x".join(map(str, x_shape))
    out_dims = "x".join(map(str, y_shape))
    w_dims = "x".join(map(str, w.shape))
    order = "" if kind == "matmul" else " NHWC"
    layer = q["layer"]
    if kind == "matmul":
        op, params = "matmul", ""
    else:
        strides = next((a.ints for a in layer.attribute if a.name == "strides"), [1, 1])
        op = "dwconv" if kind == "dwconv" else "conv"
        params = f" stride({strides[0]}, {strides[1]}) pad(1, 1, 1, 1)"
    end = (f"end(0, {y_shape[0] - 1}, {y_shape[1] - 1})" if kind == "matmul"
           else f"end({y_shape[3] - 1}, {y_shape[2] - 1}, {y_shape[1] - 1})")
    t = q["elem"]
    return f"""module @q arch NPU37XX
input %x : {dims}x{t}{order}
output %y : {out_dims}x{t}{order}
const %w : {w_dims}xi8{order} = file "{folder}/w.npy"
const %bias : {out_channels}xi32 = file "{folder}/bias.npy"
const %scale : {out_channels}x2xi32 = file "{folder}/scale.npy"
cmx %cx : {dims}x{t}{order} tile 0
cmx %cw : {w_dims}xi8{order} tile 0
cmx %cb : {out_channels}xi32 tile 0
cmx %cs : {out_channels}x2xi32 tile 0
cmx %cy : {out_dims}x{t}{order} tile 0
barrier %loaded
barrier %done
tasks DMA {{
  dma %x -> %cx channel 0 updates(%loaded)
  dma %w -> %cw channel 0 updates(%loaded)
  dma %bias -> %cb channel 1 updates(%loaded)
  dma %scale -> %cs channel 1 updates(%loaded)
  dma %cy -> %y channel 0 waits(%done)
}}
tasks DPU {{
  layer: dpu {op} on tile 0 in(%cx) weights(%cw) bias(%cb) out(%cy){params}
         quant scale(%cs) zero_point({q["zx"]}, {q["zy"]}) waits(%loaded) updates(%done) {{
    variant start(0, 0, 0) {end}
  }}
}}
"""


def _exact_products(kind: str, q: dict, x_q: np.ndarray, y_shape) -> np.ndarray:
    """sum * M per output, in float64 from the exact int64 sums (the tie test's value)."""
    w = q["w"].astype(np.int64)
    centred = x_q.astype(np.int64) - q["zx"]
    bias = 0 if q["bias"] is None else q["bias"].astype(np.int64)
    if kind == "matmul":
        sums = centred @ w + bias
        scale = q["sx"] * np.broadcast_to(q["sw"], (w.shape[1],)) / q["sy"]
        return sums * scale
    from runtime_sim.dpu.integer import integer_sums
    layer = q["layer"]
    strides = tuple(next((a.ints for a in layer.attribute if a.name == "strides"), [1, 1]))
    op = "dwconv" if kind == "dwconv" else "conv"
    sums = integer_sums(op, centred, w, None, 0, stride=strides, padding=(1, 1, 1, 1))
    sums = sums + np.reshape(bias, (1, -1, 1, 1))
    scale = q["sx"] * np.broadcast_to(q["sw"], (w.shape[0],)) / q["sy"]
    return sums * scale.reshape(1, -1, 1, 1)


@pytest.mark.parametrize("kind,channels,out_channels,size,activations", [
    ("padded", 16, 32, 9, "QUInt8"), ("strided", 16, 16, 10, "QUInt8"),
    ("dwconv", 32, 32, 8, "QUInt8"), ("padded", 16, 16, 8, "QInt8"),
    ("matmul", 48, 32, 12, "QUInt8")])
def test_integer_layer_matches_onnxruntime_within_one_step_at_ties(kind, channels, out_channels,
                                                                   size, activations, tmp_path):
    model = _float_model(kind, channels, out_channels, size)
    x_shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    y_shape = tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim)
    qdq = onnx.load(quantize(model, tmp_path, x_shape, activations))
    q = _integers(qdq)
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32) * 1.5
    x_q, y_ort = _ort_integers(qdq, q, x)
    program = api.compile_text(_vir(kind, q, x_shape, y_shape, tmp_path), "layer.vir")
    y = api.simulate(program, {"x": x_q}).outputs["y"]
    assert y.shape == y_ort.shape and y.dtype == y_ort.dtype
    diff = y.astype(np.int64) - y_ort.astype(np.int64)
    assert np.abs(diff).max() <= 1
    product = _exact_products(kind, q, x_q, y_shape)
    near_tie = np.abs(np.abs(product - np.floor(product)) - 0.5) <= np.abs(product) * TIE_WINDOW
    assert not (diff != 0)[~near_tie].any(), "a difference away from a tie"
    # the layer is not trivial: many distinct outputs, most not saturated
    assert len(np.unique(y)) > 20 and (y > np.iinfo(y.dtype).min).mean() > 0.3
