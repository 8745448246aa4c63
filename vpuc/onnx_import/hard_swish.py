"""HardSwish written out by exporters before opset 14 recognized back into one node.

HardSwish (``x * relu6(x + 3) / 6``) is an ONNX op from opset 14; before it exporters
write it as

    y = Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5))          (PyTorch)
    y = Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)                (TensorFlow, Keras: relu6)

or with the division as ``Mul`` by 1/6, on either side of the product (OpenVINO's
``HSwishFusion`` matches the same forms: src/common/transformations,
``common_optimizations/hswish_fusion``).  One HSwish is what the DPU's ACT SHAVE
epilogue computes after a convolution (MobileNetV3's layers); written out, the HardSigmoid
becomes a scale, a shift and a clamp, and the product a second elementwise pass:
MobileNetV3-Small at opset 13 simulates 859,333 cycles written out and 580,790 as
HardSwish.  The match needs the constants exactly (f32: 1/6 as 0.16666667), the
intermediates read by the pattern alone, and ``x`` not a constant.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vpuc.onnx_import.builder import onnx_node
from vpuc.onnx_import.patterns import constant_nodes

SIXTH = float(np.float32(1 / 6))


def fuse_hard_swishes(nodes: list, known: dict[str, np.ndarray], keep: set[str],
                      merged_from: dict | None = None) -> list:
    """``nodes`` with each written-out HardSwish replaced by a HardSwish node; ``keep`` are
    values that must stay visible (the graph outputs)."""
    from onnx import helper
    constants = {**constant_nodes(nodes), **known}
    producer = {out: n for n in nodes for out in n.output}
    readers = Counter(name for n in nodes for name in n.input if name)
    dead: set[int] = set()
    replace: dict[int, object] = {}
    for last in nodes:
        if last.op_type not in ("Mul", "Div") or id(last) in dead:
            continue
        match = _match(last, producer, constants)
        if match is None:
            continue
        x, parts = match
        if x in constants or any(readers[n.output[0]] != 1 or n.output[0] in keep
                                 or id(n) in dead or id(n) in replace for n in parts):
            continue
        replace[id(last)] = helper.make_node("HardSwish", [x], [last.output[0]],
                                             name=last.name or last.output[0])
        dead.update(id(n) for n in parts)
        if merged_from is not None:
            covered = {id(n) for n in parts} | {id(last)}
            merged_from[last.output[0]] = tuple(onnx_node(n) for n in nodes if id(n) in covered)
    return [replace.get(id(n), n) for n in nodes if id(n) not in dead]


def _scalar(name: str, constants) -> float | None:
    """A constant of one element and at most one dim (a [1, 1, 1, 1] one would broadcast a
    lower-rank x to rank 4, which HardSwish(x) does not)."""
    value = constants.get(name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 and value.ndim <= 1 else None


def _factors(node, producer, constants, depth: int = 0):
    """``node`` (a Mul, or a Div by a constant) as (its run-time factors, the product of its
    constant factors, the nodes it was read through); None when it is not one."""
    if node.op_type == "Div":
        divisor = _scalar(node.input[1], constants)
        if divisor is None or not divisor:
            return None
        values, scale, through = _operand(node.input[0], producer, constants, depth)
        return values, scale / divisor, through
    if node.op_type != "Mul":
        return None
    values, scale, through = [], 1.0, []
    for name in node.input:
        more, factor, seen = _operand(name, producer, constants, depth)
        values, scale, through = values + more, scale * factor, through + seen
    return values, scale, through


def _operand(name: str, producer, constants, depth: int):
    value = _scalar(name, constants)
    if value is not None:
        return [], value, []
    inner = producer.get(name)
    if depth == 0 and inner is not None and inner.op_type in ("Mul", "Div"):
        found = _factors(inner, producer, constants, depth + 1)
        if found is not None:
            values, scale, through = found
            return values, scale, through + [inner]
    return [name], 1.0, []


def _match(last, producer, constants):
    """(x, the nodes the HardSwish replaces besides ``last``) when ``last`` ends one."""
    found = _factors(last, producer, constants)
    if found is None:
        return None
    values, scale, through = found
    if len(values) != 2:
        return None
    for x, gate in (values, values[::-1]):
        gating = producer.get(gate)
        if gating is None:
            continue
        if gating.op_type == "HardSigmoid" and gating.input[0] == x and abs(scale - 1.0) < 1e-7 \
                and _attribute(gating, "alpha", 0.2) == SIXTH and _attribute(gating, "beta", 0.5) == 0.5:
            return x, through + [gating]
        if gating.op_type == "Clip" and abs(scale - SIXTH) <= 1e-7 and _relu6(gating, constants):
            shift = producer.get(gating.input[0])
            if shift is not None and shift.op_type == "Add" and x in shift.input \
                    and _scalar(shift.input[1] if shift.input[0] == x else shift.input[0], constants) == 3.0:
                return x, through + [gating, shift]
    return None


def _relu6(clip, constants) -> bool:
    """Whether ``clip`` clamps to [0, 6] (bounds as inputs, from opset 11, or attributes)."""
    bounds = [_scalar(clip.input[i], constants) if len(clip.input) > i and clip.input[i] else None
              for i in (1, 2)]
    if bounds == [None, None]:
        bounds = [_attribute(clip, "min", None), _attribute(clip, "max", None)]
    return bounds == [0.0, 6.0]


def _attribute(node, name: str, default):
    from onnx import helper
    for attr in node.attribute:
        if attr.name == name:
            return float(np.float32(helper.get_attribute_value(attr)))
    return default
