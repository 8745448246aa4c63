"""The integer layers of quantized models: ``QConvolution``.

An imported QDQ convolution (``vpuc/onnx_import/quant_layers.py``) whose input, weights,
bias and output are all integers on fixed grids becomes one op the DPU runs in its integer
mode (docs/vir.md, "The DPU's integer mode")::

    y = QConvolution(x, w, bias, scale)            x: u8/i8 NCHW, w: i8 OIHW,
                                                   bias: i32 [O], scale: f32 [O]
    acc[o] = bias[o] + sum((x - in_zero_point) * w[o])            exact integers
    y[o]   = saturate(round_half_even(acc[o] * scale[o]) + out_zero_point)

``scale`` is each output channel's requantization scale ``s_x * s_w[o] / s_y``, applied as
the PPE does: its fixed-point ``(mult, shift)`` (``vpuc/ir/fixed_point.py``), so the
graph's meaning is the hardware's bit for bit.  ``relu`` clamps at ``out_zero_point``
(the quantized zero), as the PPE's relu does.  Padded cells hold ``in_zero_point``
(they contribute nothing, like ONNX's zero padding of the dequantized input).
"""

from __future__ import annotations

from vpuc.ir.graph import GraphOp
from vpuc.ir.graph_ops import AttrSpec, InferError, OpSpec, _out_size, _pairs
from vpuc.ir.types import ElemType, TensorType

ACTIVATION_TYPES = {ElemType.U8: (0, 255), ElemType.I8: (-128, 127)}


def _qconvolution(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, w, bias, scale = ins
    if x.rank != 4 or w.rank != 4:
        raise InferError(f"QConvolution takes NCHW data and OIHW weights (rank 4); got ranks "
                         f"{x.rank} and {w.rank}")
    if x.elem not in ACTIVATION_TYPES or w.elem is not ElemType.I8:
        raise InferError(f"QConvolution takes u8 or i8 data and i8 weights; got {x.elem} and "
                         f"{w.elem}")
    if not (w.is_static and x.is_static):
        raise InferError("QConvolution takes static dims")
    if x.dims[1] != w.dims[1]:
        raise InferError(f"QConvolution input has {x.dims[1]} channels but the weights expect "
                         f"{w.dims[1]}")
    for operand, elem, what in ((bias, ElemType.I32, "bias"), (scale, ElemType.F32, "scale")):
        if operand.elem is not elem or operand.dims != (w.dims[0],):
            raise InferError(f"QConvolution {what} must be {w.dims[0]}x{elem.value} (one per "
                             f"output channel); got {operand}")
    out = op.attrs["out"]
    if out not in ACTIVATION_TYPES:
        raise InferError(f"QConvolution out = {out.value}; expected u8 or i8")
    for name, elem in (("in_zero_point", x.elem), ("out_zero_point", out)):
        low, high = ACTIVATION_TYPES[elem]
        if not low <= op.attrs[name] <= high:
            raise InferError(f"QConvolution {name} {op.attrs[name]} is outside {elem.value}'s "
                             f"[{low}, {high}]")
    strides, pb, pe, dil = _pairs(op, "strides", "pads_begin", "pads_end", "dilations")
    oh = _out_size(x.dims[2], w.dims[2], strides[0], pb[0] + pe[0], dil[0])
    ow = _out_size(x.dims[3], w.dims[3], strides[1], pb[1] + pe[1], dil[1])
    return TensorType((x.dims[0], w.dims[0], oh, ow), out, x.order)


QUANT_SPECS = [
    OpSpec("QConvolution", 4, "layer", _qconvolution, (
        AttrSpec("strides", "ints", (1, 1)), AttrSpec("pads_begin", "ints", (0, 0)),
        AttrSpec("pads_end", "ints", (0, 0)), AttrSpec("dilations", "ints", (1, 1)),
        AttrSpec("in_zero_point", "int"), AttrSpec("out_zero_point", "int"),
        AttrSpec("out", "elem"), AttrSpec("relu", "bool", False))),
]
