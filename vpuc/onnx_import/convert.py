"""ONNX ops → graph-dialect ops: one converter per ONNX op type, in one table.

A converter receives the builder (``builder.py``), the node and its attributes
as plain Python values, and appends graph ops.  ONNX's multidirectional
broadcasting is numpy's, which is the graph dialect's too, so elementwise ops
map one to one.  Ops ONNX defines by formula map to the dialect's ops by the
same formula (LeakyRelu is ``max(x, alpha*x)`` for 0 <= alpha <= 1, HardSigmoid
is ``clamp(alpha*x + beta, 0, 1)``, Gemm is MatMul then scale and bias), each
named in ``CONVERTERS``' docstrings.  Anything else is refused by the caller
with the list of what is supported (``supported_ops()``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_bitwise import BITWISE_CONVERTERS
from vpuc.onnx_import.convert_extra import EXTRA_CONVERTERS
from vpuc.onnx_import.convert_grid_sample import GRID_SAMPLE_CONVERTERS
from vpuc.onnx_import.convert_roi_align import ROI_ALIGN_CONVERTERS
from vpuc.onnx_import.convert_static import STATIC_CONVERTERS
from vpuc.onnx_import.convert_math import MATH_CONVERTERS
from vpuc.onnx_import.convert_more import MORE_CONVERTERS, cast_value
from vpuc.onnx_import.convert_norm import NORM_CONVERTERS
from vpuc.onnx_import.convert_quant import QUANT_CONVERTERS
from vpuc.onnx_import.convert_rnn import RNN_CONVERTERS
from vpuc.onnx_import.convert_struct import STRUCT_CONVERTERS

Converter = Callable[[GraphBuilder, object, dict], None]

ELEMENTWISE_BINARY = {"Add": "Add", "Sub": "Subtract", "Mul": "Multiply", "Div": "Divide",
                      "Pow": "Power", "Equal": "Equal", "Less": "Less", "LessOrEqual": "LessEqual",
                      "Greater": "Greater", "GreaterOrEqual": "GreaterEqual"}
ELEMENTWISE_UNARY = {"Abs": "Abs", "Neg": "Negative", "Relu": "Relu", "Exp": "Exp",
                     "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Sqrt": "Sqrt", "Floor": "Floor",
                     "Erf": "Erf", "HardSwish": "HSwish"}


def _inputs(b: GraphBuilder, node) -> list[str]:
    return [b.value(name) for name in node.input if name]


def _scalar(b: GraphBuilder, value: float, hint: str) -> str:
    return b.constant(np.asarray(value, np.float32), f"{b.node.output[0]}.{hint}")


def _binary(kind: str) -> Converter:
    def convert(b, node, attrs):
        if len(node.input) != 2:
            raise b.error(f"expected 2 inputs, found {len(node.input)}")
        b.op(kind, _inputs(b, node), out=node.output[0])
    return convert


def _unary(kind: str) -> Converter:
    def convert(b, node, attrs):
        b.op(kind, _inputs(b, node)[:1], out=node.output[0])
    return convert


def _variadic(kind: str) -> Converter:
    """Max/Min/Sum over any number of inputs: a left fold of the binary op."""
    def convert(b, node, attrs):
        values = _inputs(b, node)
        if len(values) == 1:
            b.alias(node.output[0], node.input[0])
            return
        acc = values[0]
        for i, value in enumerate(values[1:], start=2):
            acc = b.op(kind, [acc, value], out=node.output[0] if i == len(values) else None)
    return convert


def _clip(b, node, attrs):
    lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)     # opset < 11: attributes
    if len(node.input) > 1 and node.input[1]:
        lo = float(b.array(node.input[1]))
    if len(node.input) > 2 and node.input[2]:
        hi = float(b.array(node.input[2]))
    b.op("Clamp", _inputs(b, node)[:1], {"min": float(lo), "max": float(hi)}, out=node.output[0])


def _leaky_relu(b, node, attrs):
    alpha = float(attrs.get("alpha", 0.01))
    if not 0.0 <= alpha <= 1.0:
        raise b.error(f"LeakyRelu alpha {alpha} is outside [0, 1], where max(x, alpha*x) holds")
    x = _inputs(b, node)[0]
    scaled = b.op("Multiply", [x, _scalar(b, alpha, "alpha")])
    b.op("Maximum", [x, scaled], out=node.output[0])


def _hard_sigmoid(b, node, attrs):
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    x = _inputs(b, node)[0]
    affine = b.op("Add", [b.op("Multiply", [x, _scalar(b, alpha, "alpha")]), _scalar(b, beta, "beta")])
    b.op("Clamp", [affine], {"min": 0.0, "max": 1.0}, out=node.output[0])


def _prelu(b, node, attrs):
    # x >= 0: x; x < 0: slope * x  ==  relu(x) + slope * min(x, 0)
    x, slope = _inputs(b, node)
    negative = b.op("Minimum", [x, _scalar(b, 0.0, "zero")])
    b.op("Add", [b.op("Relu", [x]), b.op("Multiply", [negative, slope])], out=node.output[0])


def _reciprocal(b, node, attrs):
    b.op("Divide", [_scalar(b, 1.0, "one"), _inputs(b, node)[0]], out=node.output[0])


def _elu(b, node, attrs):
    b.op("Elu", _inputs(b, node), {"alpha": float(attrs.get("alpha", 1.0))}, out=node.output[0])


def _gelu(b, node, attrs):
    approximation = attrs.get("approximate", "none")
    b.op("Gelu", _inputs(b, node), {"approximation": "tanh" if approximation == "tanh" else "erf"},
         out=node.output[0])


def _where(b, node, attrs):
    cond, x, y = node.input
    condition = b.value(cond)
    b.op("Select", [condition, b.value(x), b.value(y)], out=node.output[0])


def _passthrough(b, node, attrs):
    """Identity, Dropout (inference: its first output is its input)."""
    b.alias(node.output[0], node.input[0])


def _cast(b, node, attrs):
    from onnx import helper
    cast_value(b, node, np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])))


def supported_ops() -> list[str]:
    from vpuc.onnx_import.convert_copy import COPY_CONVERTERS
    from vpuc.onnx_import.convert_layers import LAYER_CONVERTERS
    from vpuc.onnx_import.convert_nn import NN_CONVERTERS
    # If is no converter: the import inlines the branch a constant condition takes (convert_if.py)
    return sorted(set(CONVERTERS) | set(LAYER_CONVERTERS) | set(NN_CONVERTERS) | set(COPY_CONVERTERS)
                  | {"If"})


CONVERTERS: dict[str, Converter] = {
    **{name: _binary(kind) for name, kind in ELEMENTWISE_BINARY.items()},
    **{name: _unary(kind) for name, kind in ELEMENTWISE_UNARY.items()},
    "Max": _variadic("Maximum"), "Min": _variadic("Minimum"), "Sum": _variadic("Add"),
    "Clip": _clip, "LeakyRelu": _leaky_relu, "HardSigmoid": _hard_sigmoid, "PRelu": _prelu,
    "Reciprocal": _reciprocal, "Elu": _elu, "Gelu": _gelu, "Where": _where,
    "Identity": _passthrough, "Dropout": _passthrough, "Cast": _cast,
    **MATH_CONVERTERS, **NORM_CONVERTERS, **MORE_CONVERTERS, **STRUCT_CONVERTERS,
    **RNN_CONVERTERS,
    **EXTRA_CONVERTERS, **GRID_SAMPLE_CONVERTERS, **ROI_ALIGN_CONVERTERS,
    **STATIC_CONVERTERS, **BITWISE_CONVERTERS,
    **QUANT_CONVERTERS,
}
