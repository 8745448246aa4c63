"""onnxruntime's QOperator form rewritten into the QDQ form before import.

``quantize_static(..., quant_format=QuantFormat.QOperator)`` writes integer operators
between a QuantizeLinear of the float input and a DequantizeLinear of the result:
``QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B])``,
``QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)`` and, in the
com.microsoft domain, ``QLinearAdd``, ``QLinearGlobalAveragePool`` and ``QGemm``, with
MaxPool and Reshape applied to the integers themselves.  Each integer operator is defined
as its float op between a dequantization of its integer inputs and a quantization of its
result (a bias is int32 in steps of ``x_scale * w_scale``, zero point 0), so each becomes
exactly that::

    DequantizeLinear(x) -> Conv(., DequantizeLinear(w), DequantizeLinear(B)) -> QuantizeLinear

and MaxPool, Reshape and the other ops that only move or select integers (``MOVERS``)
become ``DequantizeLinear -> op -> QuantizeLinear`` with the parameters their input was
quantized with: exact, since they commute with the monotone dequantization, and the
quantization of a value already on the grid gives it back.  Every integer value is then
a ``QuantizeLinear -> DequantizeLinear`` pair of one scale and zero point (the ones a
producer quantizes with are those its readers dequantize with): a fake quantization
(``convert_quant.py``); the weights' and biases' dequantizations are constant folds.
The nodes keep the integer operator's name (provenance).

What stays refused (``convert_quant.qoperator_refusal``): ``MatMulInteger``,
``ConvInteger`` and ``DynamicQuantizeLinear`` (``quantize_dynamic``: activation scales
computed at run time, which a fake quantization of constant scales cannot express), an
input scale that is not one constant, and the other com.microsoft QLinear ops.
"""

from __future__ import annotations

import numpy as np

# integer op -> (float op, the (data, scale, zero point) input triples, the output's
# (scale, zero point) inputs or None for a float output, the bias input or None)
QLINEAR = {
    "QLinearConv": ("Conv", ((0, 1, 2), (3, 4, 5)), (6, 7), 8),
    "QLinearMatMul": ("MatMul", ((0, 1, 2), (3, 4, 5)), (6, 7), None),
    "QLinearAdd": ("Add", ((0, 1, 2), (3, 4, 5)), (6, 7), None),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", ((0, 1, 2),), (3, 4), None),
    "QGemm": ("Gemm", ((0, 1, 2), (3, 4, 5)), (7, 8), 6),
}
# attributes of the integer op that are not the float op's
INTEGER_ONLY_ATTRIBUTES = {"QLinearGlobalAveragePool": ("channels_last",)}
MOVERS = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")
DEFAULT_DOMAINS = ("", "ai.onnx")


def _input(node, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def _size(known: dict, name: str) -> int | None:
    return np.asarray(known[name]).size if name in known else None


def _weight_axis(node, op: str, known: dict, scale: str) -> int | None:
    """The axis a per-channel weight scale runs along: a Conv's output channels (0), a
    MatMul's columns (its last axis), a Gemm's output columns (B's axis 0 under transB)."""
    if (_size(known, scale) or 0) <= 1:
        return None
    if op == "Conv":
        return 0
    if op == "Gemm":
        return 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1
    return -1


def _rewritable(node, op: str, triples, known: dict) -> bool:
    """Constant scales: one value for an activation (the first input; a MatMul's or Add's
    second too), per tensor or per channel for weights; channels first."""
    if any(a.name == "channels_last" and a.i for a in node.attribute):
        return False
    for i, (_, scale, _) in enumerate(triples):
        size = _size(known, _input(node, scale))
        if size is None or (size != 1 and (i == 0 or op == "Add")):
            return False
    return True


def rewrite_qoperators(nodes: list, known: dict) -> list:
    """``nodes`` with the integer operators and the integer moves in the QDQ form
    (module docstring); ``known`` gains each bias's scale."""
    from onnx import helper
    out, params = [], {}           # params: an integer value -> its (scale, zero point)
    for node in nodes:
        spec = QLINEAR.get(node.op_type)
        if node.op_type in MOVERS and node.domain in DEFAULT_DOMAINS and node.input \
                and node.input[0] in params:
            scale, zero_point = params[node.input[0]]
            dq = helper.make_node("DequantizeLinear", [node.input[0], scale, zero_point],
                                  [f"{node.output[0]}.in"], name=node.name)
            moved = helper.make_node(node.op_type, [dq.output[0], *node.input[1:]],
                                     [f"{node.output[0]}.float"], name=node.name)
            moved.attribute.extend(node.attribute)
            q = helper.make_node("QuantizeLinear", [moved.output[0], scale, zero_point],
                                 [node.output[0]], name=node.name)
            params[node.output[0]] = (scale, zero_point)
            out += [dq, moved, q]
            continue
        if node.op_type == "QuantizeLinear" and len(node.input) > 1:
            params[node.output[0]] = (node.input[1], _input(node, 2))
        if spec is None or not _rewritable(node, spec[0], spec[1], known):
            out.append(node)
            continue
        op, triples, result, bias_at = spec
        added, inputs = [], []
        for i, (data, scale, zero_point) in enumerate(triples):
            axis = _weight_axis(node, op, known, _input(node, scale)) if i == 1 else None
            dq = helper.make_node("DequantizeLinear", [_input(node, data), _input(node, scale),
                                                       _input(node, zero_point)],
                                  [f"{node.output[0]}.in{i}"], name=node.name,
                                  **({} if axis is None else {"axis": axis}))
            added.append(dq)
            inputs.append(dq.output[0])
        if bias_at is not None and _input(node, bias_at):
            bias_scale = f"{node.output[0]}.bias_scale"
            known[bias_scale] = (np.asarray(known[_input(node, 1)], np.float32)
                                 * np.asarray(known[_input(node, 4)], np.float32)).reshape(-1)
            per_channel = known[bias_scale].size > 1
            if not per_channel:
                known[bias_scale] = known[bias_scale].reshape(())
            bias = helper.make_node("DequantizeLinear", [_input(node, bias_at), bias_scale],
                                    [f"{node.output[0]}.bias"], name=node.name,
                                    **({"axis": 0} if per_channel else {}))
            added.append(bias)
            inputs.append(bias.output[0])
        quantized = result is not None and _input(node, result[0])
        computed = f"{node.output[0]}.float" if quantized else node.output[0]
        layer = helper.make_node(op, inputs, [computed], name=node.name)
        layer.attribute.extend(a for a in node.attribute
                               if a.name not in INTEGER_ONLY_ATTRIBUTES.get(node.op_type, ()))
        out += added + [layer]
        if quantized:
            scale, zero_point = _input(node, result[0]), _input(node, result[1])
            out.append(helper.make_node("QuantizeLinear", [computed, scale, zero_point],
                                        [node.output[0]], name=node.name))
            params[node.output[0]] = (scale, zero_point)
    return out
