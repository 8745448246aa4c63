"""Fuzz cases of the normalizations, reductions and elementwise ops vpuc composes from its
graph ops (vpuc/onnx_import/convert_norm.py, convert_math.py, group_norm_pattern.py): one
op each, its attributes drawn over their ranges, at an opset drawn where it exists.  The
``op`` family draws them as one of its kinds; the ``normred`` family is nothing else (a
campaign of these ops alone, ``bench/onnx_fuzz.py --normred N``).

Inputs are made so both sides compute on the same values: scaled by powers of two (exact
in f16 and f32), Floor'ed for Hardmax's ties, kept positive for ReduceLogSum.
"""

from __future__ import annotations

import numpy as np

from tests.fuzz import onnx_forms as forms

UNARY_SINCE = {"Selu": 11, "Celu": 12, "Softsign": 11, "ThresholdedRelu": 11, "Sign": 11,
               "Ceil": 11, "Round": 11, "Sin": 11, "Cos": 11}
REDUCTIONS = ("ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
              "ReduceProd")


def _scaled(m, x: str, power: int) -> str:
    return m.node("Mul", [x, m.init(np.float32(2.0 ** power))])


def normred_case(m):
    r = m.rng
    kind = r.choice(["unary", "unary", "reduce", "reduce", "groupnorm", "pytorch_groupnorm",
                     "hardmax", "mod"])
    rank = r.randint(2, 4)
    shape = [r.randint(1, 6) for _ in range(rank)]
    if kind == "unary":
        op = r.choice(sorted(UNARY_SINCE))
        m.opset = forms.draw_opset(m, UNARY_SINCE[op])
        attrs = {}
        if op == "Selu":
            attrs = {"alpha": r.choice([1.67326, 0.5, 2.0]), "gamma": r.choice([1.0507, 1.0, 0.75])}
        elif op in ("Celu", "ThresholdedRelu"):
            attrs = {"alpha": r.choice([1.0, 0.3, 0.7, 2.0])}
        x = _scaled(m, "x", r.choice([2, 4])) if op in ("Sin", "Cos") else "x"
        x = _scaled(m, x, 1) if op == "Round" else x
        return m.model(shape, m.node(op, [x], **attrs))
    if kind == "reduce":
        op = r.choice(REDUCTIONS)
        m.opset = forms.draw_opset(m)
        axes = [a - rank if r.random() < 0.3 else a for a in sorted(r.sample(range(rank), r.randint(0, rank)))]
        x = "x"
        if op == "ReduceLogSum":                 # a positive sum: |x| + 1
            x = m.node("Add", [m.node("Abs", [x]), m.init(np.float32(1.0))])
        elif op == "ReduceLogSumExp":
            x = _scaled(m, x, 3)
        noop = not axes and r.random() < 0.5
        return m.model(shape, forms.reduce(m, op, x, axes or None, keepdims=r.choice([0, 1]), noop=noop))
    if kind in ("groupnorm", "pytorch_groupnorm"):
        groups = r.choice([1, 2, 3])
        shape = [r.randint(1, 2), groups * r.choice([1, 2, 4])] + [r.randint(1, 6) for _ in range(rank - 1)]
        c = shape[1]
        eps = r.choice([1e-5, 1e-3])
        if kind == "groupnorm":
            m.opset = forms.draw_opset(m, 18)
            per = c if m.opset >= 21 else groups
            scale = m.init(m.np.uniform(0.5, 1.5, per).astype(np.float32))
            y = m.node("GroupNormalization", ["x", scale, m.weight((per,), 10)], num_groups=groups, epsilon=eps)
            return m.model(shape, y, out_shape=shape)
        m.opset = forms.draw_opset(m)
        grouped = m.node("Reshape", ["x", m.ints([shape[0], groups, -1])])
        normed = m.node("InstanceNormalization", [grouped, m.init(np.ones(groups, np.float32)),
                                                  m.init(np.zeros(groups, np.float32))], epsilon=eps)
        back = m.node("Reshape", [normed, m.ints(shape)])
        per_channel = [c] + [1] * (len(shape) - 2)
        y = m.node("Mul", [back, m.init(m.np.uniform(0.5, 1.5, per_channel).astype(np.float32))])
        return m.model(shape, m.node("Add", [y, m.weight(per_channel, 10)]))
    if kind == "hardmax":                       # integers: many tied maxima
        m.opset = forms.draw_opset(m)
        x = m.node("Floor", [_scaled(m, "x", 1)])
        attrs = {} if r.random() < 0.3 else {"axis": r.randint(-rank, rank - 1)}
        return m.model(shape, m.node("Hardmax", [x], **attrs))
    m.opset = forms.draw_opset(m)
    divisor_shape = [d if r.random() < 0.5 else 1 for d in shape][r.randint(0, rank - 1):]
    magnitudes = m.np.uniform(0.25, 2.0, divisor_shape) * m.np.choice([-1, 1], divisor_shape)
    divisor = m.init(magnitudes.astype(np.float16).astype(np.float32))
    return m.model(shape, m.node("Mod", [_scaled(m, "x", 2), divisor], fmod=1))
