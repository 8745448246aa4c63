"""Decomposed layer normalization recognized back into one LayerNormalization node.

Exporters before opset 17 (and PyTorch's own decomposition) write LayerNorm as

    mean = ReduceMean(x, axes)          d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2), axes)  y = Div(d, Sqrt(Add(var, eps)))
    [y = Add(Mul(y, gamma), beta)]

(OpenVINO's MVN fusion matches the same graph).  One normalization instead of
seven elementwise and reduction ops is what a fused kernel computes, with one
read of x instead of three.  The match requires constant axes equal in both
ReduceMeans and ending at the last axis, a constant exponent 2 and epsilon,
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


def fuse_layer_norms(nodes: list, known: dict[str, np.ndarray], keep: set[str],
                     merged_from: dict | None = None) -> list:
    """``nodes`` with each decomposed layer norm replaced by a LayerNormalization node
    (its scale and bias added to ``known``); ``keep`` are values that must stay visible."""
    from onnx import helper
    producer = {out: n for n in nodes for out in n.output}
    readers = Counter(name for n in nodes for name in n.input if name)
    dead: set[int] = set()
    replace: dict[int, object] = {}

    def private(name, count=1):
        return readers[name] == count and name not in keep

    for div in nodes:
        match = _match(div, producer, known) if div.op_type == "Div" else None
        if match is None:
            continue
        x, axes, eps, parts = match
        if not all(private(n.output[0], 2 if n.op_type == "Sub" else 1) for n in parts):
            continue
        out_name, scale, bias, affine = div.output[0], None, None, []
        mul = _only_reader(nodes, out_name, readers, keep)
        if mul is not None and mul.op_type == "Mul" and _other(mul, out_name) in known:
            scale, out_name, affine = known[_other(mul, out_name)], mul.output[0], [mul]
            add = _only_reader(nodes, out_name, readers, keep)
            if add is not None and add.op_type == "Add" and _other(add, out_name) in known:
                bias, out_name, affine = known[_other(add, out_name)], add.output[0], [mul, add]
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


def _match(div, producer, known):
    """(x, axes, eps, the nodes it replaces) when ``div`` ends a decomposed layer norm."""
    sub, sqrt = producer.get(div.input[0]), producer.get(div.input[1])
    if not (sub and sqrt and sub.op_type == "Sub" and sqrt.op_type == "Sqrt"):
        return None
    add = producer.get(sqrt.input[0])
    if not (add and add.op_type == "Add"):
        return None
    var_mean, eps = producer.get(add.input[0]), _scalar(add.input[1], known)
    if not (var_mean and var_mean.op_type == "ReduceMean" and eps is not None):
        return None
    square, mean = producer.get(var_mean.input[0]), producer.get(sub.input[1])
    if not (square and square.op_type == "Pow" and _scalar(square.input[1], known) == 2.0
            and square.input[0] == sub.output[0] and mean and mean.op_type == "ReduceMean"
            and mean.input[0] == sub.input[0]):
        return None
    axes = _axes(mean, known)
    # LayerNormalization normalizes over [axis, rank): negative axes contiguous up to -1
    if (not axes or axes != _axes(var_mean, known) or sorted(axes) != list(range(min(axes), 0))
            or not (_keepdims(mean) and _keepdims(var_mean))):
        return None
    return sub.input[0], axes, eps, [mean, sub, square, var_mean, add, sqrt]


def _other(node, value: str) -> str:
    return node.input[1] if node.input[0] == value else node.input[0]


def _only_reader(nodes, value, readers, keep):
    if readers[value] != 1 or value in keep:
        return None
    return next((n for n in nodes if value in n.input), None)
