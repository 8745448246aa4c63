"""Fuzz cases of the normalizations, elementwise, boolean, trigonometric and hyperbolic ops
of vpuc/onnx_import/convert_more.py and convert_trig.py: one op each (the boolean ones
between comparisons and a Cast to float, the model's output being float), attributes drawn
over their ranges, at an opset drawn where the op exists.  The ``op`` family draws them as
one of its kinds; the ``more`` family is nothing else (``bench/onnx_fuzz.py --more N``).

Inputs are made so both sides compute on the same values: scaled by powers of two (exact in
f16 and f32) into the domains of Asin, Acos and Atanh (``x / 8``, inside +-1 for any normal
draw short of 8 sigma), Acosh's (``1 + |x|``, which f16 rounds: acosh near 1 is steep, so
``|x|`` is doubled first, away from 1) and away from where f16 overflows (Sinh, Cosh of at
most 2^3 |x|).
"""

from __future__ import annotations

import numpy as np

from tests.fuzz import onnx_forms as forms

# op: (the opset it appears at in its current meaning, the power of two scaling x)
TRIG = {"Tan": (7, 0), "Atan": (7, 1), "Asin": (7, -3), "Acos": (7, -3), "Sinh": (9, 0),
        "Cosh": (9, 0), "Asinh": (9, 3), "Atanh": (9, -3)}


def _scaled(m, x: str, power: int) -> str:
    return x if power == 0 else m.node("Mul", [x, m.init(np.float32(2.0 ** power))])


def _as_float(m, flag: str) -> str:
    return m.node("Cast", [flag], to=1)


def _compare(m, x: str) -> str:
    return m.node(m.rng.choice(["Greater", "Less"]), [x, m.init(np.float32(m.rng.choice([-0.5, 0.0, 0.7])))])


def more_case(m):
    r = m.rng
    kind = r.choice(["trig", "trig", "acosh", "lp", "mvn", "rms", "mean", "swish", "shrink",
                     "special", "logic", "cast_like"])
    rank = r.randint(2, 4)
    shape = [r.randint(1, 6) for _ in range(rank)]
    if kind == "trig":
        op = r.choice(sorted(TRIG))
        since, power = TRIG[op]
        m.opset = forms.draw_opset(m, since)
        return m.model(shape, m.node(op, [_scaled(m, "x", power)]))
    if kind == "acosh":
        m.opset = forms.draw_opset(m, 9)
        x = m.node("Add", [_scaled(m, m.node("Abs", ["x"]), 1), m.init(np.float32(1.0))])
        return m.model(shape, m.node("Acosh", [x]))
    if kind == "lp":
        m.opset = forms.draw_opset(m)
        attrs = {"p": r.choice([1, 2])}
        if r.random() < 0.7:
            attrs["axis"] = r.randint(-rank, rank - 1)
        return m.model(shape, m.node("LpNormalization", ["x"], **attrs))
    if kind == "mvn":                  # ONNX's default axes [0, 2, 3] need rank 4
        m.opset = forms.draw_opset(m, 13)
        shape = [r.randint(1, 3)] + [r.randint(2, 6) for _ in range(3)]
        axes = sorted(r.sample(range(4), r.randint(1, 3))) if r.random() < 0.5 else [0, 2, 3]
        return m.model(shape, m.node("MeanVarianceNormalization", ["x"], axes=axes))
    if kind == "rms":
        m.opset = forms.draw_opset(m)
        axis = r.randint(-rank, rank - 1)
        scale = m.np.uniform(0.5, 1.5, shape[axis % rank:]).astype(np.float32)
        return m.model(shape, forms.rms_norm(m, "x", m.init(scale), axis, rank, r.choice([1e-5, 1e-3])))
    if kind == "mean":
        m.opset = forms.draw_opset(m)
        others = [m.weight(shape[r.randint(0, rank - 1):], 1) for _ in range(r.randint(0, 2))]
        return m.model(shape, m.node("Mean", ["x", m.node("Abs", ["x"])] + others))
    if kind == "swish":                # opset 24, above what the other cases draw
        m.opset = 24
        return m.model(shape, m.node("Swish", ["x"], alpha=r.choice([1.0, 0.5, 1.702])))
    if kind == "shrink":
        m.opset = forms.draw_opset(m)
        return m.model(shape, m.node("Shrink", ["x"], lambd=r.choice([0.0, 0.3, 0.5, 1.0]),
                                     bias=r.choice([0.0, 0.1, 0.5])))
    if kind == "special":              # NaN where x < 0, inf where floor(x) is 0
        op = r.choice(["IsNaN", "IsInf"])
        m.opset = forms.draw_opset(m, 13 if op == "IsNaN" else 11)
        if op == "IsNaN":
            return m.model(shape, _as_float(m, m.node("IsNaN", [m.node("Sqrt", ["x"])])))
        inverse = m.node("Div", [m.init(np.float32(r.choice([1.0, -1.0]))), m.node("Floor", ["x"])])
        attrs = {name: r.choice([0, 1]) for name in ("detect_positive", "detect_negative") if r.random() < 0.5}
        return m.model(shape, _as_float(m, m.node("IsInf", [inverse], **attrs)))
    if kind == "logic":
        m.opset = forms.draw_opset(m)
        a, b = _compare(m, "x"), _compare(m, m.node("Abs", ["x"]))
        op = r.choice(["And", "Or", "Xor", "Not"])
        y = m.node("Not", [a]) if op == "Not" else m.node(op, [a, b])
        return m.model(shape, _as_float(m, y))
    m.opset = forms.draw_opset(m, 15)
    flag = m.node("CastLike", ["x", m.init(np.asarray(True))])
    return m.model(shape, m.node("Mul", [m.node("CastLike", [flag, m.init(np.float32(0))]), "x"]))
