"""Group normalization written out before opset 18, recognized back into one node.

PyTorch exports ``nn.GroupNorm`` below opset 18 as

    g = Reshape(x, [N, G, -1])
    n = InstanceNormalization(g, ones(G), zeros(G), epsilon)
    y = Add(Mul(Reshape(n, shape(x)), scale[C, 1, ...]), bias[C, 1, ...])

Imported node by node that is a Reshape, MVN, a Multiply by ones and an Add of zeros,
a Reshape, and the affine: two elementwise passes too many.  One GroupNormalization node
(``convert_norm.py``, scale and bias per channel) computes the same values.  The match
requires what makes the two equal: the InstanceNormalization's scale exactly ones and
bias exactly zeros, the first Reshape grouping whole channels of ``x`` ([N, G, C/G *
spatial]), the second restoring ``x``'s shape, the Mul and Add by constants that vary
along the channels only, and no other reader of the intermediates.  Without its Mul and
Add (``affine=False``) the scale is ones and the bias zeros.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vpuc.onnx_import.builder import onnx_node
from vpuc.onnx_import.patterns import constant_nodes


def fuse_group_norms(nodes: list, known: dict[str, np.ndarray], keep: set[str],
                     merged_from: dict, shapes: dict[str, tuple[int, ...]]) -> list:
    """``nodes`` with each written-out group norm replaced by a GroupNormalization node
    (its per-channel scale and bias added to ``known``); ``keep``: values that must stay
    visible; ``shapes``: the static shape of each value ONNX's shape inference knows."""
    from onnx import helper
    constants = {**constant_nodes(nodes), **known}
    producer = {out: n for n in nodes for out in n.output}
    readers = Counter(name for n in nodes for name in n.input if name)
    reader_of = {name: n for n in nodes for name in n.input if name}
    dead: set[int] = set()
    replace: dict[int, object] = {}

    def only_reader(value, op_type):
        node = reader_of.get(value)
        if readers[value] != 1 or value in keep or node is None or node.op_type != op_type:
            return None
        return node

    for norm in nodes:
        match = _match(norm, producer, constants, shapes, only_reader)
        if match is None:
            continue
        x, groups, eps, parts, scale, bias = match
        out_name = parts[-1].output[0]
        known[f"{out_name}.gn_scale"], known[f"{out_name}.gn_bias"] = scale, bias
        replace[id(parts[0])] = helper.make_node(
            "GroupNormalization", [x, f"{out_name}.gn_scale", f"{out_name}.gn_bias"], [out_name],
            name=norm.name or out_name, num_groups=groups, epsilon=eps)
        dead.update(id(n) for n in parts[1:])
        covered = {id(n) for n in parts}
        merged_from[out_name] = tuple(onnx_node(n) for n in nodes if id(n) in covered)
    return [replace.get(id(n), n) for n in nodes if id(n) not in dead]


def _match(norm, producer, constants, shapes, only_reader):
    """(x, G, epsilon, the nodes replaced in graph order, scale [C], bias [C]) when the
    InstanceNormalization ``norm`` is the middle of a written-out group norm."""
    if norm.op_type != "InstanceNormalization" or len(norm.input) != 3:
        return None
    grouping = producer.get(norm.input[0])
    if grouping is None or grouping.op_type != "Reshape":
        return None
    x, grouped = grouping.input[0], shapes.get(grouping.output[0])
    shape = shapes.get(x)
    if shape is None or grouped is None or len(shape) < 2 or len(grouped) != 3:
        return None
    n, channels, groups = shape[0], shape[1], grouped[1]
    if grouped[0] != n or groups < 1 or channels % groups or not only_reader(grouping.output[0], norm.op_type):
        return None
    unit, zero = (constants.get(name) for name in norm.input[1:3])
    if unit is None or zero is None or not (np.all(unit == 1) and np.all(zero == 0)):
        return None
    back = only_reader(norm.output[0], "Reshape")
    if back is None or shapes.get(back.output[0]) != tuple(shape):
        return None
    parts, end = [grouping, norm, back], back.output[0]
    scale, bias = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    for op_type in ("Mul", "Add"):
        step = only_reader(end, op_type)
        other = None if step is None else (step.input[1] if step.input[0] == end else step.input[0])
        values = None if other is None else _per_channel(constants.get(other), len(shape), channels)
        if values is None:
            break
        if op_type == "Mul":
            scale = values
        else:
            bias = values
        parts.append(step)
        end = step.output[0]
    eps = next((a.f for a in norm.attribute if a.name == "epsilon"), 1e-5)
    return x, int(groups), float(eps), parts, scale, bias


def _per_channel(value, rank: int, channels: int) -> np.ndarray | None:
    """``value``'s C values when it broadcasts against [N, C, ...] varying along C only."""
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > rank:
        return None
    dims = (1,) * (rank - value.ndim) + tuple(value.shape)
    if any(d != 1 for i, d in enumerate(dims) if i != 1) or dims[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)
