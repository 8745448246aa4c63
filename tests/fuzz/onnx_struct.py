"""Fuzz cases of the structural ops vpuc rewrites at import (vpuc/onnx_import/convert_einsum.py,
convert_attention.py, convert_struct.py, output_copies.py): one op each, its attributes
drawn over their ranges.  The ``op`` family draws them as one of its kinds
(``struct_case``); the ``transformer`` family's attention blocks as Einsum or the opset-23
Attention op, with RotaryEmbedding on Q and K (``attention_block``).

ArgMax and ArgMin read ``Floor(2x)``: small integers, so rows hold tied extremes and the
index the attribute picks is what is checked.  Their output is declared int64 (ONNX's type).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tests.fuzz import onnx_forms as forms

EINSUMS = (  # (equation, the operand shapes' labels: the input first)
    "bid,de->bie", "ij,jk->ik", "bhid,bhjd->bhij", "bhij,bhjd->bhid", "bij,bkj->bik",
    "...ij,jk->...ik", "ij->ji", "ijk->ki", "ij,j->i", "i,j->ij", "abc,cd,de->ae", "ij,ij->i",
    "bij->bj", "ij,kj",
)


def struct_case(m):
    r = m.rng
    kind = r.choice(["einsum", "einsum", "arg", "arg", "cumsum", "gather_elements", "gather_nd",
                     "attention", "attention", "rotary", "rotary", "output"])
    if kind == "einsum":
        return _einsum(m)
    if kind == "arg":
        rank = r.randint(1, 4)
        shape = [r.randint(1, 6) for _ in range(rank)]
        m.opset = forms.draw_opset(m, 12)
        x = m.node("Floor", [m.node("Mul", ["x", m.init(np.float32(2.0))])])
        attrs = {"keepdims": r.choice([0, 1]), "select_last_index": r.choice([0, 1])}
        if r.random() < 0.8:
            attrs["axis"] = r.randint(-rank, rank - 1)
        model = m.model(shape, m.node(r.choice(["ArgMax", "ArgMin"]), [x], **attrs))
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
        return model
    rank = r.randint(1, 4)
    shape = [r.randint(1, 6) for _ in range(rank)]
    if kind == "cumsum":
        m.opset = forms.draw_opset(m)
        axis = m.init(np.asarray(r.randint(-rank, rank - 1), r.choice([np.int64, np.int32])))
        return m.model(shape, m.node("CumSum", ["x", axis], exclusive=r.choice([0, 1]), reverse=r.choice([0, 1])))
    if kind == "gather_elements":
        m.opset = forms.draw_opset(m)
        axis = r.randint(-rank, rank - 1)
        size = shape[axis]
        index_shape = [r.randint(1, d) for d in shape]
        index_shape[axis] = r.randint(1, 6)
        indices = m.np.integers(-size, size, index_shape)
        return m.model(shape, m.node("GatherElements", ["x", m.ints(indices)], axis=axis))
    if kind == "gather_nd":
        m.opset = forms.draw_opset(m, 12)
        batch = r.randint(0, rank - 1)
        depth = r.randint(1, rank - batch)
        lead = shape[:batch] + [r.randint(1, 3) for _ in range(r.randint(0, 2))]
        indices = np.stack([m.np.integers(-shape[batch + i], shape[batch + i], lead)
                            for i in range(depth)], axis=-1)
        out_shape = lead + shape[batch + depth:]       # where ONNX's inference leaves it out
        return m.model(shape, m.node("GatherND", ["x", m.ints(indices)], batch_dims=batch), out_shape=out_shape)
    if kind == "attention":
        return _attention(m)
    if kind == "rotary":
        return _rotary(m)
    m.opset = forms.draw_opset(m)                # an output that is the input, or a constant
    if r.random() < 0.5:
        return m.model(shape, m.node("Identity", ["x"]))
    return m.model(shape, m.node("Add", [m.weight(shape, 1), m.weight(shape, 1)]))


def _einsum(m):
    r = m.rng
    m.opset = forms.draw_opset(m, 12)
    equation = r.choice(EINSUMS)
    sizes = {c: r.randint(1, 7) for c in "abcdehijk"}
    lhs = equation.split("->")[0].split(",")
    dots = [r.randint(1, 4) for _ in range(r.randint(0, 2))]
    shapes = [dots * ("..." in term) + [sizes[c] for c in term.replace("...", "")] for term in lhs]
    if "..." in lhs[0]:                      # the dots lead the input's labels
        shapes[0] = dots + [sizes[c] for c in lhs[0].replace("...", "")]
    operands = ["x"] + [m.weight(s, max(s[0], 1)) for s in shapes[1:]]
    return m.model(shapes[0], m.node("Einsum", operands, equation=equation))


def _attention(m):
    r = m.rng
    m.opset = 23
    kv_heads = r.choice([1, 2])
    heads = kv_heads * r.choice([1, 2])
    sq, skv, d = r.randint(1, 9), r.randint(1, 9), r.choice([4, 8, 16])
    three = r.random() < 0.5
    attrs = {}
    if three:
        attrs = {"q_num_heads": heads, "kv_num_heads": kv_heads}
    kv_shape = (1, skv, kv_heads * d) if three else (1, kv_heads, skv, d)
    ins = ["x", m.weight(kv_shape, 1), m.weight(kv_shape, 1)]
    if r.random() < 0.3:
        attrs["is_causal"] = 1
    if r.random() < 0.3:
        attrs["scale"] = r.choice([0.1, 0.5, 1.0])
    mask = r.choice([None, "bool", "float"])
    if mask == "bool":                       # every row keeps key 0, so none is masked whole
        keep = m.np.random((sq, skv)) < 0.7
        keep[:, 0] = True
        ins.append(m.init(keep))
    elif mask == "float":
        ins.append(m.init(m.np.standard_normal((1, 1, sq, skv)).astype(np.float32)))
    x_shape = [1, sq, heads * d] if three else [1, heads, sq, d]
    return m.model(x_shape, m.node("Attention", ins, **attrs))


def _rotary(m):
    r = m.rng
    m.opset = 23
    heads, d, seq, batch = r.choice([1, 2, 3]), r.choice([4, 8, 12]), r.randint(1, 7), r.randint(1, 2)
    rotary = r.choice([0, d // 2 - (d // 2) % 2 or 2, d])
    half = (rotary or d) // 2
    attrs = {"interleaved": r.choice([0, 1])}
    if rotary:
        attrs["rotary_embedding_dim"] = rotary
    three = r.random() < 0.5
    if three:
        attrs["num_heads"] = heads
    positions = r.random() < 0.5
    cache_shape = (seq + 3, half) if positions else (batch, seq, half)
    angles = m.np.uniform(0, 6.3, cache_shape)
    ins = ["x", m.init(np.cos(angles).astype(np.float32)), m.init(np.sin(angles).astype(np.float32))]
    if positions:
        ins.append(m.ints(m.np.integers(0, seq + 3, (batch, seq))))
    shape = [batch, seq, heads * d] if three else [batch, heads, seq, d]
    return m.model(shape, m.node("RotaryEmbedding", ins, **attrs), out_shape=shape)


def attention_block(m, h, seq: int, heads: int, dh: int, linear):
    """Self-attention over ``h`` ``[1, seq, heads * dh]``: the opset-23 Attention op (with
    RotaryEmbedding on Q and K half of the time) at opset 23, Einsum from 12."""
    r, d = m.rng, heads * dh
    q, k, v = (linear(h, d, d) for _ in range(3))
    if m.opset >= 23:
        if r.random() < 0.5:
            angles = m.np.uniform(0, 6.3, (seq, dh // 2))
            cos, sin = (m.init(f(angles).astype(np.float32)) for f in (np.cos, np.sin))
            q, k = (m.node("RotaryEmbedding", [t, cos, sin, m.ints([list(range(seq))])], num_heads=heads,
                           interleaved=r.choice([0, 1])) for t in (q, k))
        return m.node("Attention", [q, k, v], q_num_heads=heads, kv_num_heads=heads,
                      is_causal=r.choice([0, 1]))
    split = [m.node("Reshape", [t, m.ints([1, seq, heads, dh])]) for t in (q, k, v)]
    scores = m.node("Einsum", split[:2], equation="bihd,bjhd->bhij")
    scores = m.node("Mul", [scores, m.init(np.float32(1 / np.sqrt(dh)))])
    o = m.node("Einsum", [m.node("Softmax", [scores], axis=-1), split[2]], equation="bhij,bjhd->bihd")
    return m.node("Reshape", [o, m.ints([1, seq, d])])
