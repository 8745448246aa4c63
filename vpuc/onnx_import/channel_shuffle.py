"""Import-time removal of ShuffleNet's channel shuffle by folding it into the next Conv.

ShuffleNet (Zhang et al. 2017) writes its channel shuffle as

    t = Reshape(x, [N, g, k, H, W]);  u = Transpose(t, perm=[0, 2, 1, 3, 4]);
    z = Reshape(u, [N, C, H, W])

so ``z[c'] = x[s(c')]`` with ``s(j g + i) = i k + j``: a per-pixel permutation of the
channels, which the DMA would copy element by element (``DmaMode.PERMUTE``, ~1.5 B per
cycle).  A permutation commutes with channelwise ops once their per-channel parameters
are permuted the other way: ``f(shuffle(x)) = shuffle(f'(x))`` with ``p'[c] =
p[s^-1(c)]`` for Relu and Clip (no parameters), a Mul or Add of a per-channel constant,
and a depthwise Conv (group == C: weights and bias permuted).  The chain of such ops
reading ``z`` ends in a Conv, which reads the unshuffled values instead through
permuted input channels: a grouped Conv becomes a dense one (group 1) whose weights are
the block-diagonal expansion of the grouped ones, columns permuted, ``W'[o, c] =
Wdense[o, s^-1(c)]``.  The extra weights are exact zeros, so every sum is the same set
of nonzero products plus exact zeros: the rewrite is exact in meaning.

Every value between the shuffle and the Conv must be read by the next op of the chain
alone and not be a graph output; otherwise (or for any other reader) the model is left
as it is.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vpuc.onnx_import.builder import onnx_node
from vpuc.onnx_import.fold_channel_affine import Constants, per_channel


def fold_channel_shuffles(nodes: list, known: dict[str, np.ndarray], keep: set[str], opset: int,
                          merged_from: dict, shapes: dict[str, tuple[int, ...]]) -> list:
    """``nodes`` with every channel shuffle whose reader chain ends in a Conv removed and
    folded into that chain (module docstring); ``known`` gains the permuted parameters,
    ``merged_from`` records the shuffle's nodes under the Conv's output; ``keep``: values
    that must stay visible; ``shapes``: the static shapes ONNX's inference gives."""
    producer = {out: n for n in nodes for out in n.output}
    readers = Counter(name for n in nodes for name in n.input if name)
    reader_of = {name: n for n in nodes for name in n.input if name}
    constants = Constants(known, producer, opset)

    def only_reader(value):
        if readers[value] != 1 or value in keep:
            return None
        return reader_of.get(value)

    replace: dict[int, object] = {}
    dead: set[int] = set()
    for first in nodes:
        match = _match_shuffle(first, shapes, constants, only_reader)
        if match is None:
            continue
        x, shuffle_nodes, order = match
        rewritten = _rewrite_chain(shuffle_nodes[-1].output[0], x, order, known, constants,
                                   only_reader)
        if rewritten is None or any(id(n) in replace or id(n) in dead for n, _ in rewritten):
            continue
        for old, new in rewritten:
            replace[id(old)] = new
        dead.update(id(n) for n in shuffle_nodes)
        conv_out = rewritten[-1][1].output[0]
        merged_from[conv_out] = (merged_from.get(conv_out, (onnx_node(rewritten[-1][0]),))
                                 + tuple(onnx_node(n) for n in shuffle_nodes))
    return [replace.get(id(n), n) for n in nodes if id(n) not in dead]


def _match_shuffle(first, shapes, constants: Constants, only_reader):
    """(x, the three nodes, s as an index array) when ``first`` starts a channel shuffle of
    ``x`` [N, C, H, W]."""
    if first.op_type != "Reshape" or len(first.input) < 2:
        return None
    x, shape = first.input[0], shapes.get(first.input[0])
    grouped = constants.get(first.input[1])
    if shape is None or len(shape) != 4 or grouped is None:
        return None
    grouped_shape = shapes.get(first.output[0])
    if grouped_shape is None or len(grouped_shape) != 5:
        return None
    n, groups, per_group, height, width = grouped_shape
    if (n, groups * per_group, height, width) != tuple(shape):
        return None
    transpose = only_reader(first.output[0])
    if transpose is None or transpose.op_type != "Transpose" or _perm(transpose) != [0, 2, 1, 3, 4]:
        return None
    back = only_reader(transpose.output[0])
    if back is None or back.op_type != "Reshape" or shapes.get(back.output[0]) != tuple(shape):
        return None
    order = np.arange(shape[1]).reshape(groups, per_group).T.reshape(-1)   # z[c'] = x[order[c']]
    return x, [first, transpose, back], order


def _perm(node) -> list[int] | None:
    from onnx import helper
    return next((list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"),
                None)


def _rewrite_chain(z: str, x: str, order: np.ndarray, known, constants: Constants, only_reader):
    """[(old node, new node)] for the chain reading the shuffled ``z``, rewritten to read
    the unshuffled ``x``, or None when the chain does not end in a foldable Conv."""
    from onnx import helper
    channels = len(order)
    inverse = np.argsort(order)                       # p'[c] = p[s^-1(c)]
    value, source, out = z, x, []
    while True:
        node = only_reader(value)
        if node is None or (node.op_type not in ("Mul", "Add") and node.input[0] != value):
            return None
        y = node.output[0]
        if node.op_type in ("Relu", "Clip"):
            if node.op_type == "Clip" and any(i and constants.get(i) is None for i in node.input[1:]):
                return None
            new = helper.make_node(node.op_type, [source, *node.input[1:]], [y], name=node.name)
            new.attribute.extend(node.attribute)
        elif node.op_type in ("Mul", "Add") and len(node.input) == 2:
            other = node.input[1 - list(node.input).index(value)]
            raw = constants.get(other)
            factors = per_channel(raw, channels, 4)
            if factors is None:
                return None
            known[f"{y}.unshuffled"] = factors[inverse].reshape(1, channels, 1, 1).astype(raw.dtype)
            new = helper.make_node(node.op_type, [source, f"{y}.unshuffled"], [y], name=node.name)
        elif node.op_type == "Conv":
            new, depthwise = _conv(node, source, inverse, channels, known, constants)
            if new is None:
                return None
            out.append((node, new))
            if not depthwise:
                return out
            value, source = y, y                          # depthwise: the chain goes on
            continue
        else:
            return None
        out.append((node, new))
        value, source = y, y


def _group(conv) -> int:
    return next((a.i for a in conv.attribute if a.name == "group"), 1)


def _conv(conv, source: str, inverse: np.ndarray, channels: int, known, constants: Constants):
    """``conv`` reading the unshuffled ``source``: a depthwise Conv (group == C, one output
    per channel) with its weights and bias permuted, so its output stays shuffled; any
    other Conv dense, with its input columns permuted; and whether it was depthwise.
    (None, False) when its weights are unknown."""
    from onnx import helper
    weights = constants.get(conv.input[1]) if len(conv.input) > 1 else None
    bias = constants.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    if weights is None or weights.ndim < 3 or (len(conv.input) > 2 and conv.input[2] and bias is None):
        return None, False
    groups, y = _group(conv), conv.output[0]
    attrs = [a for a in conv.attribute if a.name != "group"]
    if groups == channels and weights.shape[0] == channels:
        known[f"{y}.unshuffled_weights"] = weights[inverse]
        inputs = [source, f"{y}.unshuffled_weights"]
        if bias is not None:
            known[f"{y}.unshuffled_bias"] = bias[inverse]
            inputs.append(f"{y}.unshuffled_bias")
        new = helper.make_node("Conv", inputs, [y], name=conv.name, group=groups)
        new.attribute.extend(attrs)
        return new, True
    outputs, per_group = weights.shape[0], weights.shape[1]
    if per_group * groups != channels or outputs % groups:
        return None, False
    dense = np.zeros((outputs, channels, *weights.shape[2:]), weights.dtype)
    per_output = outputs // groups
    for g in range(groups):                             # block-diagonal expansion
        rows = slice(g * per_output, (g + 1) * per_output)
        dense[rows, g * per_group:(g + 1) * per_group] = weights[rows]
    known[f"{y}.unshuffled_weights"] = dense[:, inverse]
    inputs = [source, f"{y}.unshuffled_weights", *conv.input[2:]]
    new = helper.make_node("Conv", inputs, [y], name=conv.name)
    new.attribute.extend(attrs)
    return new, False
