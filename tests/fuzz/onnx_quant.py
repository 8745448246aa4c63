"""Fuzz cases of quantized models in the QDQ form (vpuc/onnx_import/convert_quant.py): the
input fake-quantized (QuantizeLinear -> DequantizeLinear, per tensor or per channel, int8
or uint8, a zero point or none), one layer whose weights are integers behind a
DequantizeLinear (a Conv or a Gemm: int8 or uint8 per tensor or per output channel, from
opset 21 also int4 / uint4 in blocks along the input channels, the bias int32; or an
elementwise Relu or Add), and the result fake-quantized again; or a QLinearConv
(onnxruntime's QOperator form) between a QuantizeLinear and a DequantizeLinear; or a
Transpose, Reshape or MaxPool between two fake quantizations; or integers at the
boundary: an int8/uint8 model input dequantized (per tensor or per channel), added to x,
maybe a Conv of integer weights, quantized to an int8/uint8 model output; at an opset
from 13 (where ``axis`` is) drawn for the case.  The ``quant`` family is nothing else
(``bench/onnx_fuzz.py --quant N``).

The scales are drawn so an 8-bit step is about 1/250 of the range of the values quantized
(inputs of about unit variance over [-3, 3], outputs over [-1.5, 1.5], or [0, 1.5] after a
Relu, with their tails saturating): a value at a rounding boundary lands one step apart on the two sides (f16
against f32; onnxruntime's int8 kernels requantizing in fixed point; its scales rounded
to f16 as every float initializer is for the comparison), within the whole-model
tolerance of 1% of the range (tests/fuzz/onnx_check.py) for two such steps.  Activations
are quantized per channel only where no Conv or Gemm reads or writes them: onnxruntime
fuses those into QLinearConv, which takes per-tensor zero points only.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz import onnx_forms as forms

INT8 = {"int8": (np.int8, -128, 127), "uint8": (np.uint8, 0, 255)}
INT4 = {"int4": (ml_dtypes.int4, -8, 7), "uint4": (ml_dtypes.uint4, 0, 15)}


def _init(m, array, name=None) -> str:
    name = name or f"c{len(m.inits)}"
    m.inits.append(numpy_helper.from_array(np.asarray(array), name))
    return name


def _fake_quantize(m, x: str, channels: int, spread: float, per_channel: bool = False,
                   one_sided: bool = False) -> tuple[str, np.ndarray]:
    """QuantizeLinear -> DequantizeLinear of ``x`` over about [-spread, spread], or [0, spread]
    (``one_sided``: after a Relu), the tails saturating; per tensor or (``per_channel``, at
    random) per channel; and its scale."""
    r = m.rng
    kind = r.choice(sorted(INT8))
    dtype, lo, hi = INT8[kind]
    per_channel = per_channel and r.random() < 0.5
    shape = (channels,) if per_channel else ()
    scale = _f16_exact(m.np.uniform(0.8, 1.2, shape) * (1 if one_sided else 2) * spread / (hi - lo))
    centre = lo if one_sided else (lo + hi + 1) // 2 if kind == "uint8" else 0
    inputs = [_init(m, scale)]
    if kind == "int8" or not one_sided or r.random() < 0.8:   # none: uint8 of zero point 0
        offset = m.np.integers(0, 3, shape) if one_sided else m.np.integers(-4, 5, shape)
        inputs.append(_init(m, (centre + offset).astype(dtype)))
    attrs = {"axis": 1} if per_channel else {}
    q = m.node("QuantizeLinear", [x] + inputs, **attrs)
    return m.node("DequantizeLinear", [q] + inputs, **attrs), scale


def _f16_exact(values) -> np.ndarray:
    """``values`` as f32 numbers f16 holds exactly: onnx_check gives onnxruntime every float
    initializer rounded to f16, and a scale it moved would move the whole grid."""
    return np.asarray(values).astype(np.float16).astype(np.float32)


def _weights(m, shape: list[int]) -> tuple[str, np.ndarray | None]:
    """Integer weights behind a DequantizeLinear: 8-bit per tensor or per output channel, or
    (opset 21) 4-bit in blocks along the input channels; and their scale per output channel
    (None when blocked)."""
    r = m.rng
    fan_in = int(np.prod(shape[1:]))
    if m.opset >= 21 and r.random() < 0.4:
        dtype, lo, hi = INT4[r.choice(sorted(INT4))]
        block = r.choice([2, 4, 8])
        blocks = [shape[0], -(-shape[1] // block)] + shape[2:]
        attrs = {"axis": 1, "block_size": block}
        scale_shape, zp_shape = blocks, blocks
    else:
        dtype, lo, hi = INT8[r.choice(sorted(INT8))]
        per_channel = r.random() < 0.6
        attrs = {"axis": 0} if per_channel else {}
        scale_shape = zp_shape = [shape[0]] if per_channel else []
    centre = (lo + hi + 1) // 2 if lo == 0 else 0
    q = m.np.integers(lo, hi + 1, shape).astype(dtype)
    scale = _f16_exact(m.np.uniform(0.8, 1.2, scale_shape) * 2 * np.sqrt(3 / fan_in) / (hi - lo))
    zp = np.full(zp_shape, centre).astype(dtype)
    w = m.node("DequantizeLinear", [_init(m, q), _init(m, scale), _init(m, zp)], **attrs)
    return w, None if "block_size" in attrs else np.broadcast_to(scale, (shape[0],))


def _bias(m, x_scale: np.ndarray, w_scale: np.ndarray) -> str:
    """An int32 bias behind a DequantizeLinear as quantizers write one: in steps of the
    input's scale times the weights' (onnxruntime's integer kernels take it so), of about
    0.3 at most."""
    scale = (x_scale * w_scale).astype(np.float32)
    q = np.round(m.np.uniform(-0.3, 0.3, scale.shape) / scale).astype(np.int32)
    return m.node("DequantizeLinear", [_init(m, q), _init(m, scale)], axis=0)


def _qlinear_conv(m):
    """onnxruntime's QOperator form of a quantized Conv: QuantizeLinear, QLinearConv (int8
    weights per output channel, an int32 bias), DequantizeLinear (vpuc/onnx_import/qoperator.py)."""
    r = m.rng
    c, h, w = r.choice([1, 3, 8, 16]), r.randint(3, 10), r.randint(3, 10)
    cout, k = r.choice([4, 8, 16]), r.choice([1, 3])
    fan_in = c * k * k
    xs, ys = _f16_exact(6.0 / 255), _f16_exact(3.0 / 255)
    ws = _f16_exact(m.np.uniform(0.8, 1.2, cout) * 2 * np.sqrt(3 / fan_in) / 255)
    x_scale, x_zp, y_scale, y_zp = (_init(m, v) for v in (xs, np.uint8(128), ys, np.uint8(128)))
    xq = m.node("QuantizeLinear", ["x", x_scale, x_zp])
    weights = _init(m, m.np.integers(-127, 128, (cout, c, k, k)).astype(np.int8))
    bias = _init(m, np.round(m.np.uniform(-0.3, 0.3, cout) / (xs * ws)).astype(np.int32))
    yq = m.node("QLinearConv", [xq, x_scale, x_zp, weights, _init(m, ws), _init(m, np.zeros(cout, np.int8)),
                                y_scale, y_zp, bias], kernel_shape=[k, k], pads=[k // 2] * 4)
    return m.model([1, c, h, w], m.node("DequantizeLinear", [yq, y_scale, y_zp]))


def _moved(m):
    """A fake quantization, a Transpose, Reshape or MaxPool, and a fake quantization of the
    same parameters (which vpuc leaves out: convert_quant._on_its_grid) or of its own."""
    r = m.rng
    c, h, w = r.choice([1, 3, 8]), r.randint(2, 9), r.randint(2, 9)
    x, _ = _fake_quantize(m, "x", c, 3.0)
    quantize, dequantize = (n for n in m.nodes[-2:])
    op = r.choice(["Transpose", "Reshape", "MaxPool"])
    if op == "Transpose":
        y = m.node("Transpose", [x], perm=[0, 1, 3, 2])
    elif op == "Reshape":
        y = m.node("Reshape", [x, m.ints([1, c * h, w])])
    else:
        y = m.node("MaxPool", [x], kernel_shape=[2, 2], pads=[0, 0, 1, 1])
    if r.random() < 0.7:                         # the same parameters, as quantizers write
        q = m.node("QuantizeLinear", [y, *quantize.input[1:]], **{a.name: a.i for a in quantize.attribute})
        y = m.node("DequantizeLinear", [q, *dequantize.input[1:]], **{a.name: a.i for a in dequantize.attribute})
    else:
        y = _fake_quantize(m, y, c, 2.0)[0]
    return m.model([1, c, h, w], y)


def _integer_io(m):
    """An int8/uint8 input ``q`` dequantized (per tensor or per channel: its codes over about
    [-3, 3]) added to x, maybe a Conv of integer weights, and quantized to an int8/uint8
    output over about [-4, 4] (an output step is about 1/250 of its range, as above)."""
    r = m.rng
    c, h, w = r.choice([1, 3, 8, 16]), r.randint(3, 12), r.randint(3, 12)
    in_kind = r.choice(sorted(INT8))
    dtype, lo, hi = INT8[in_kind]
    shape = (c,) if r.random() < 0.5 else ()
    scale = _f16_exact(m.np.uniform(0.8, 1.2, shape) * 6.0 / (hi - lo))
    centre = (lo + hi + 1) // 2 if lo == 0 else 0
    zp = (centre + m.np.integers(-4, 5, shape)).astype(dtype)
    attrs = {"axis": 1} if shape else {}
    y = m.node("Add", ["x", m.node("DequantizeLinear", ["q", _init(m, scale), _init(m, zp)],
                                   **attrs)])
    channels, conv = c, r.random() < 0.6
    if conv:
        channels, k = r.choice([4, 8, 16]), r.choice([1, 3])
        weights, _ = _weights(m, [channels, c, k, k])
        y = m.node("Conv", [y, weights], kernel_shape=[k, k], pads=[k // 2] * 4)
    out_kind = r.choice(sorted(INT8))
    out_dtype, lo, hi = INT8[out_kind]
    # per channel only where no Conv writes it (onnxruntime's QLinearConv: per tensor)
    out_shape = (channels,) if not conv and r.random() < 0.5 else ()
    out_scale = _f16_exact(m.np.uniform(0.8, 1.2, out_shape) * 8.0 / (hi - lo))
    out_zp = ((lo + hi + 1) // 2 if lo == 0 else 0) + m.np.integers(-4, 5, out_shape)
    out = m.node("QuantizeLinear", [y, _init(m, out_scale), _init(m, out_zp.astype(out_dtype))],
                 **({"axis": 1} if out_shape else {}))
    model = m.model([1, c, h, w], out)
    onnx_type = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
    model.graph.input.append(helper.make_tensor_value_info("q", onnx_type[in_kind], [1, c, h, w]))
    model.graph.output[0].type.tensor_type.elem_type = onnx_type[out_kind]
    return model


def quant_case(m):
    r = m.rng
    m.opset = forms.draw_opset(m, 13)
    kind = r.choice(["conv", "conv", "gemm", "relu", "add", "qlinear", "move", "integer_io"])
    if kind == "integer_io":
        return _integer_io(m)
    if kind == "qlinear":
        return _qlinear_conv(m)
    if kind == "move":
        return _moved(m)
    if kind == "gemm":
        rows, cin, cout = r.randint(1, 8), r.randint(3, 40), r.randint(2, 40)
        x, x_scale = _fake_quantize(m, "x", cin, 3.0)
        w, w_scale = _weights(m, [cout, cin])
        inputs = [x, w] + ([_bias(m, x_scale, w_scale)] if w_scale is not None else [])
        y = m.node("Gemm", inputs, transB=1)
        return m.model([rows, cin], _fake_quantize(m, y, cout, 1.5)[0])
    c, h, w_ = r.choice([1, 3, 8, 16, 20]), r.randint(3, 12), r.randint(3, 12)
    x, x_scale = _fake_quantize(m, "x", c, 3.0)
    if kind == "relu":
        return m.model([1, c, h, w_], _fake_quantize(m, m.node("Relu", [x]), c, 1.5, True, True)[0])
    if kind == "add":
        other = _init(m, m.np.standard_normal([1, c, 1, w_]).astype(np.float32))
        return m.model([1, c, h, w_], _fake_quantize(m, m.node("Add", [x, other]), c, 3.0, True)[0])
    cout, k = r.choice([4, 8, 16, 24]), r.choice([1, 3])
    weights, w_scale = _weights(m, [cout, c, k, k])
    inputs = [x, weights] + ([_bias(m, x_scale, w_scale)] if w_scale is not None and r.random() < 0.7 else [])
    y = m.node("Conv", inputs, kernel_shape=[k, k], pads=[k // 2] * 4)
    relu = r.random() < 0.5
    y = m.node("Relu", [y]) if relu else y
    return m.model([1, c, h, w_], _fake_quantize(m, y, cout, 1.5, one_sided=relu)[0])

