"""Decomposed layer normalization recognized back into one LayerNormalization node.

Exporters before opset 17 (and PyTorch's own decomposition) write LayerNorm as

    mean = ReduceMean(x, axes)          d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2), axes)  y = Div(d, Sqrt(Add(var, eps)))
    [y = Add(Mul(y, gamma), beta)]

(OpenVINO's MVN fusion matches the same graph), with the forms exporters vary: the
square as ``Mul(d, d)``, the division as ``Mul(d, Reciprocal(Sqrt(...)))`` (TensorFlow's
rsqrt), the exponent, epsilon and axes as initializers or Constant nodes (PyTorch writes
scalars as Constant nodes), the axes counted from the front or the back.  One
normalization instead of seven elementwise and reduction ops is what a fused kernel
computes, with one read of x instead of three.  The match requires constant axes equal
in both ReduceMeans and ending at the last axis, a constant exponent 2 and epsilon,
and no other reader of the intermediates; gamma and beta are folded in when
they are constants of the normalized shape.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vpuc.onnx_import.builder import onnx_node


def _axes(node, known) -> list[int] | None:
    for attr in node.attribute:
        if attr.name == "axes":
            return list(attr.ints)
    if len(node.input) > 1 and node.input[1] in known:
        return [int(a) for a in known[node.input[1]].reshape(-1)]
    return None


def _keepdims(node) -> bool:
    return all(attr.i != 0 for attr in node.attribute if attr.name == "keepdims")


def _scalar(name, known) -> float | None:
    value = known.get(name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def constant_nodes(nodes: list) -> dict[str, np.ndarray]:
    """The values of the Constant nodes among ``nodes`` (exporters' scalars and axes)."""
    from onnx import helper, numpy_helper
    values = {}
    for node in nodes:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        value = helper.get_attribute_value(attr)
        if attr.name == "value":
            values[node.output[0]] = numpy_helper.to_array(value)
        elif attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
            values[node.output[0]] = np.asarray(value)
    return values


def fuse_layer_norms(nodes: list, known: dict[str, np.ndarray], keep: set[str],
                     merged_from: dict | None = None, ranks: dict[str, int] | None = None) -> list:
    """``nodes`` with each decomposed layer norm replaced by a LayerNormalization node
    (its scale and bias added to ``known``); ``keep`` are values that must stay visible;
    ``ranks``: the rank of each value whose shape is known (axes counted from the front)."""
    from onnx import helper
    constants = {**constant_nodes(nodes), **known}
    producer = {out: n for n in nodes for out in n.output}
    readers = Counter(name for n in nodes for name in n.input if name)
    dead: set[int] = set()
    replace: dict[int, object] = {}

    def private(name, count=1):
        return readers[name] == count and name not in keep

    for div in nodes:
        match = _match(div, producer, constants, ranks or {}) if div.op_type in ("Div", "Mul") else None
        if match is None:
            continue
        x, axes, eps, parts = match
        # d = x - mean is read by the square (once, or twice as Mul(d, d)) and the division
        reads_of_d = sum(name == parts[1].output[0] for name in list(parts[2].input) + list(div.input))
        if not all(private(n.output[0], reads_of_d if n is parts[1] else 1) for n in parts):
            continue
        out_name, scale, bias, affine = div.output[0], None, None, []
        mul = _only_reader(nodes, out_name, readers, keep)
        if mul is not None and mul.op_type == "Mul" and _other(mul, out_name) in constants:
            scale, out_name, affine = constants[_other(mul, out_name)], mul.output[0], [mul]
            add = _only_reader(nodes, out_name, readers, keep)
            if add is not None and add.op_type == "Add" and _other(add, out_name) in constants:
                bias, out_name, affine = constants[_other(add, out_name)], add.output[0], [mul, add]
        if any(v is not None and v.ndim > len(axes) for v in (scale, bias)):
            affine, out_name, scale, bias = [], div.output[0], None, None   # not a per-element affine
        known[f"{out_name}.ln_scale"] = (np.ones(1) if scale is None else scale).astype(np.float32)
        inputs = [x, f"{out_name}.ln_scale"]
        if bias is not None:
            known[f"{out_name}.ln_bias"] = bias.astype(np.float32)
            inputs.append(f"{out_name}.ln_bias")
        replace[id(div)] = helper.make_node("LayerNormalization", inputs, [out_name],
                                            name=div.name or out_name, axis=min(axes), epsilon=eps)
        dead.update(id(n) for n in parts + affine)
        if merged_from is not None:        # the decomposition's nodes, in graph order
            covered = {id(n) for n in parts + affine} | {id(div)}
            merged_from[out_name] = tuple(onnx_node(n) for n in nodes if id(n) in covered)
    return [replace.get(id(n), n) for n in nodes if id(n) not in dead]


def _match(div, producer, known, ranks):
    """(x, axes, eps, the nodes it replaces: mean and d = x - mean first, then the square)
    when ``div`` (a Div by the deviation, or a Mul by its Reciprocal) ends a decomposed
    layer norm."""
    sub, sqrt, reciprocal = producer.get(div.input[0]), producer.get(div.input[1]), []
    if div.op_type == "Mul":       # d * Reciprocal(Sqrt(...)), in either order
        if sqrt is None or sqrt.op_type != "Reciprocal":
            sub, sqrt = sqrt, sub
        if sqrt is None or sqrt.op_type != "Reciprocal":
            return None
        reciprocal = [sqrt]
        sqrt = producer.get(sqrt.input[0])
    if not (sub and sqrt and sub.op_type == "Sub" and sqrt.op_type == "Sqrt"):
        return None
    add = producer.get(sqrt.input[0])
    if not (add and add.op_type == "Add"):
        return None
    var_mean, eps = producer.get(add.input[0]), _scalar(add.input[1], known)
    if eps is None:                # epsilon + variance
        var_mean, eps = producer.get(add.input[1]), _scalar(add.input[0], known)
    if not (var_mean and var_mean.op_type == "ReduceMean" and eps is not None):
        return None
    square, mean = producer.get(var_mean.input[0]), producer.get(sub.input[1])
    d = sub.output[0]
    squared = square is not None and (
        square.op_type == "Pow" and _scalar(square.input[1], known) == 2.0 and square.input[0] == d
        or square.op_type == "Mul" and list(square.input) == [d, d])
    if not (squared and mean and mean.op_type == "ReduceMean" and mean.input[0] == sub.input[0]
            and d in div.input):
        return None
    rank = ranks.get(sub.input[0])
    axes, var_axes = _axes(mean, known), _axes(var_mean, known)
    if rank is not None and axes and var_axes:       # axes counted from the back
        axes, var_axes = ([a - rank if a >= 0 else a for a in v] for v in (axes, var_axes))
    # LayerNormalization normalizes over [axis, rank): negative axes contiguous up to -1
    if (not axes or sorted(axes) != sorted(var_axes or []) or sorted(axes) != list(range(min(axes), 0))
            or not (_keepdims(mean) and _keepdims(var_mean))):
        return None
    return sub.input[0], sorted(axes), eps, [mean, sub, square, var_mean, add, sqrt] + reciprocal


def _other(node, value: str) -> str:
    return node.input[1] if node.input[0] == value else node.input[0]


def _only_reader(nodes, value, readers, keep):
    if readers[value] != 1 or value in keep:
        return None
    return next((n for n in nodes if value in n.input), None)
