"""ONNX ops written as the opset of a fuzz case spells them (``tests/fuzz/onnx_models.py``).

Real models (the ONNX model zoo, older PyTorch, Paddle and TensorFlow exports) are mostly
at opsets 11 to 13, where many ops take other forms: axes, splits and bounds as
attributes or as inputs, absent inputs as '' or left off, and ops that do not exist yet
written as the patterns exporters use for them (LayerNormalization before 17, Gelu
before 20, HardSwish before 14).  Each case draws its opset from those where its ops
exist (``draw_opset``), half the time from 11 to 13, and every helper here writes its op
in that opset's form, with the exporter's style drawn from ``m.forms`` (a random stream
of its own, so a case's sizes do not depend on its opset).
"""

from __future__ import annotations

import numpy as np

OLDEST, NEWEST = 11, 23


def draw_opset(m, low: int = OLDEST) -> int:
    """An opset from ``low`` (where the case's ops exist) to ``NEWEST``; half of the draws
    from ``low`` to 13, the opsets most real models are at."""
    low = max(low, OLDEST)
    if m.forms.random() < 0.5:
        return m.forms.randint(low, max(low, 13))
    return m.forms.randint(low, NEWEST)


def scalar(m, value: float) -> str:
    """A float scalar as an initializer or a Constant node, as exporters write either."""
    if m.forms.random() < 0.5:
        return m.init(np.float32(value))
    out = f"k{len(m.nodes)}"
    from onnx import helper, numpy_helper
    m.nodes.append(helper.make_node("Constant", [], [out],
                                    value=numpy_helper.from_array(np.asarray(value, np.float32))))
    return out


def axes_node(m, op: str, x: str, axes, since: int, **attrs) -> str:
    """``op`` over ``axes`` (None: left off), an attribute before opset ``since`` and an
    input from it (Squeeze, Unsqueeze, the reductions)."""
    if axes is None:
        return m.node(op, [x], **attrs)
    if m.opset < since:
        return m.node(op, [x], axes=list(axes), **attrs)
    return m.node(op, [x, m.ints(axes)], **attrs)


def reduce(m, op: str, x: str, axes, keepdims: int = 1, noop: bool = False) -> str:
    """A reduction: ReduceSum takes axes as an input from 13, the others from 18, where
    ``noop_with_empty_axes`` appears too."""
    since = 13 if op == "ReduceSum" else 18
    attrs = {"keepdims": keepdims}
    if noop and m.opset >= since:
        attrs["noop_with_empty_axes"] = 1
    return axes_node(m, op, x, axes, since, **attrs)


def rms_norm(m, x: str, scale: str, axis: int, rank: int, eps: float) -> str:
    """RMSNormalization from opset 23; before it, what exporters write for it: Pow(x, 2),
    ReduceMean over the axes from ``axis`` on, Add eps, Sqrt, Div, Mul by the scale."""
    if m.opset >= 23:
        return m.node("RMSNormalization", [x, scale], axis=axis, epsilon=eps)
    square = m.node("Pow", [x, scalar(m, 2.0)])
    mean = reduce(m, "ReduceMean", square, list(range(axis % rank, rank)))
    root = m.node("Sqrt", [m.node("Add", [mean, scalar(m, eps)])])
    return m.node("Mul", [m.node("Div", [x, root]), scale])


def split(m, x: str, axis: int, sizes: list[int], equal: bool) -> list[str]:
    """Split into ``sizes`` (``equal``: the parts ONNX's default gives, which the form may
    then leave unsaid): 'split' an attribute up to 12, an input from 13, and from 18
    ``num_outputs`` when equal."""
    n = len(sizes)
    if equal and m.forms.random() < 0.7:
        attrs = {"num_outputs": n} if m.opset >= 18 else {}
        ins = [x]
    elif m.opset < 13:
        attrs, ins = {"split": list(sizes)}, [x]
    else:
        attrs, ins = {}, [x, m.ints(sizes)]
    m.node("Split", ins, n_out=n, axis=axis, **attrs)
    last = len(m.nodes) - 1
    return [f"t{last}_{i}" for i in range(n)]


def clip(m, x: str, lo: float | None, hi: float | None) -> str:
    """Clip with its bounds as inputs (opset 11 on): a missing one left off or ''."""
    ins = [x, scalar(m, lo) if lo is not None else "", scalar(m, hi) if hi is not None else ""]
    while ins[-1] == "" and m.forms.random() < 0.7:
        ins.pop()
    return m.node("Clip", ins)


def pad(m, x: str, pads: list[int], value: float | None, mode: str = "constant") -> str:
    """Pad with pads as an input (opset 11 on) and the constant value left off, '' or given;
    from 18 sometimes with the axes input, the pads of those axes only."""
    rank = len(pads) // 2
    if m.opset >= 18 and m.forms.random() < 0.3:
        axes = sorted(m.forms.sample(range(rank), m.forms.randint(1, rank)))
        pads = [pads[a] for a in axes] + [pads[rank + a] for a in axes]
        return m.node("Pad", [x, m.ints(pads), scalar(m, value or 0.0), m.ints(axes)], mode=mode)
    ins = [x, m.ints(pads)]
    if value is not None:
        ins.append(scalar(m, value))
    elif m.forms.random() < 0.5:
        ins.append("")
    return m.node("Pad", ins, mode=mode)


def draw_pads(r, shape, mode: str) -> list[int]:
    """Pads from -2 to 3 a side (negative ones crop), keeping an element of every axis; a
    reflection reaches at most the cropped size - 1 (onnxruntime refuses more)."""
    begins, ends = [], []
    for size in shape:
        b, e = r.randint(-2, 3), r.randint(-2, 3)
        while size - max(-b, 0) - max(-e, 0) < 1:
            b, e = b + (b < 0), e + (e < 0)
        kept = size - max(-b, 0) - max(-e, 0)
        if mode == "reflect":
            b, e = min(b, kept - 1), min(e, kept - 1)
        begins.append(b)
        ends.append(e)
    return begins + ends


def resize(m, x: str, scales=None, sizes=None, roi=None, **attrs) -> str:
    """Resize: up to 12 the roi and scales inputs are required (empty tensors when unused),
    from 13 an absent one is ''."""
    def empty():
        return m.init(np.zeros(0, np.float32))
    roi_in = m.init(np.asarray(roi, np.float32)) if roi is not None else (empty() if m.opset < 13 else "")
    if sizes is not None:
        scales_in = empty() if m.opset < 13 or m.forms.random() < 0.3 else ""
        return m.node("Resize", [x, roi_in, scales_in, m.ints(sizes)], **attrs)
    return m.node("Resize", [x, roi_in, m.init(np.asarray(scales, np.float32))], **attrs)


def batch_norm(m, x: str, c: int) -> str:
    """BatchNormalization in inference form; a momentum attribute some exporters write
    (training only: no effect on the result)."""
    stats = [m.init(m.np.uniform(0.5, 1.5, c).astype(np.float32)), m.weight((c,), 100),
             m.weight((c,), 100), m.init(m.np.uniform(0.5, 1.5, c).astype(np.float32))]
    attrs = {"epsilon": m.forms.choice([1e-5, 1e-3])}
    if m.forms.random() < 0.5:
        attrs["momentum"] = m.forms.choice([0.9, 0.99, 0.1])
    return m.node("BatchNormalization", [x] + stats, **attrs)


def layer_norm(m, x: str, shape: list[int], axis: int) -> str:
    """LayerNormalization over [axis, rank) with a scale and bias: the op from 17 (half the
    time), else the decomposition exporters write: ReduceMean, Sub, Pow 2 (or the
    difference times itself), ReduceMean, Add epsilon, Sqrt, then Div or Mul by its
    Reciprocal, then Mul scale and Add bias."""
    rank = len(shape)
    norm = shape[axis % rank:]
    gamma = m.init(m.np.uniform(0.5, 1.5, norm).astype(np.float32))
    beta = m.weight(norm, 100)
    if m.opset >= 17 and m.forms.random() < 0.5:
        return m.node("LayerNormalization", [x, gamma, beta], axis=axis, epsilon=1e-5)
    first = axis % rank
    axes = list(range(first, rank)) if m.forms.random() < 0.5 else list(range(first - rank, 0))
    mean = reduce(m, "ReduceMean", x, axes)
    d = m.node("Sub", [x, mean])
    sq = m.node("Mul", [d, d]) if m.forms.random() < 0.2 else m.node("Pow", [d, scalar(m, 2.0)])
    var = m.node("Add", [reduce(m, "ReduceMean", sq, axes), scalar(m, m.forms.choice([1e-5, 1e-6, 1e-12]))])
    std = m.node("Sqrt", [var])
    y = m.node("Div", [d, std]) if m.forms.random() < 0.6 else m.node("Mul", [d, m.node("Reciprocal", [std])])
    return m.node("Add", [m.node("Mul", [y, gamma]), beta])


def gelu(m, x: str) -> str:
    """GELU: the op from 20 (exact or its tanh approximation), else the Erf form PyTorch
    exports or the tanh approximation written out."""
    style = m.forms.choice(["op", "erf", "erf_half_first", "tanh"] if m.opset >= 20 else
                           ["erf", "erf_half_first", "tanh"])
    if style == "op":
        return m.node("Gelu", [x], approximate=m.forms.choice(["none", "tanh"]))
    if style == "erf":
        e = m.node("Erf", [m.node("Div", [x, scalar(m, float(np.sqrt(2.0)))])])
        return m.node("Mul", [m.node("Mul", [x, m.node("Add", [e, scalar(m, 1.0)])]), scalar(m, 0.5)])
    if style == "erf_half_first":
        e = m.node("Erf", [m.node("Mul", [x, scalar(m, float(1 / np.sqrt(2.0)))])])
        return m.node("Mul", [m.node("Mul", [x, scalar(m, 0.5)]), m.node("Add", [scalar(m, 1.0), e])])
    cube = m.node("Pow", [x, scalar(m, 3.0)]) if m.forms.random() < 0.5 else \
        m.node("Mul", [m.node("Mul", [x, x]), x])
    inner = m.node("Mul", [m.node("Add", [x, m.node("Mul", [cube, scalar(m, 0.044715)])]),
                           scalar(m, float(np.sqrt(2 / np.pi)))])
    half = m.node("Mul", [x, scalar(m, 0.5)])
    return m.node("Mul", [half, m.node("Add", [m.node("Tanh", [inner]), scalar(m, 1.0)])])


def hard_swish(m, x: str) -> str:
    """HardSwish: the op from 14 (half the time), else x * HardSigmoid(x) (alpha 1/6) or
    x * Relu6(x + 3) / 6 with Relu6 as Clip(0, 6), divided or multiplied by 1/6."""
    if m.opset >= 14 and m.forms.random() < 0.5:
        return m.node("HardSwish", [x])
    style = m.forms.choice(["hardsigmoid", "div", "mul"])
    if style == "hardsigmoid":
        return m.node("Mul", [x, m.node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])
    relu6 = clip(m, m.node("Add", [x, scalar(m, 3.0)]), 0.0, 6.0)
    if style == "div":
        return m.node("Div", [m.node("Mul", [x, relu6]), scalar(m, 6.0)])
    return m.node("Mul", [x, m.node("Mul", [relu6, scalar(m, 1 / 6)])])


# ------------------------------------------------------------------ the forms family

def forms_case(m):
    """One op, or the pattern an exporter writes for it, in the form of an opset drawn for
    it: the ops whose form or meaning changed between opsets."""
    r = m.rng
    kind = r.choice(["softmax", "clip", "pad", "resize", "upsample", "batchnorm", "layernorm",
                     "gelu", "hardswish", "reduce", "split", "squeeze", "dropout", "flatten"])
    rank = r.randint(2, 4)
    shape = [r.randint(1, 6) for _ in range(rank)]
    if kind == "softmax":
        op = r.choice(["Softmax", "Softmax", "LogSoftmax", "Hardmax"])
        m.opset = draw_opset(m)
        # before 13 these coerce the input to 2-D at axis (default 1): over every dim from it
        attrs = {} if r.random() < 0.3 else {"axis": r.randint(-rank, rank - 1)}
        return m.model(shape, m.node(op, ["x"], **attrs))
    if kind == "clip":
        m.opset = draw_opset(m)
        lo, hi = r.choice([None, -0.5, 0.0]), r.choice([None, 0.5, 6.0])
        return m.model(shape, clip(m, "x", lo, hi))
    if kind == "pad":
        m.opset = draw_opset(m)
        mode = r.choice(["constant", "constant", "reflect", "edge"] + (["wrap"] if m.opset >= 19 else []))
        value = r.choice([None, 0.5, -1.0]) if mode == "constant" else None
        return m.model(shape, pad(m, "x", draw_pads(r, shape, mode), value, mode))
    if kind == "resize":
        m.opset = draw_opset(m)
        return _resize_case(m)
    if kind == "upsample":            # deprecated from opset 10: opset 9, below what vpuc reads
        m.opset = 9
        y = m.node("Upsample", ["x", m.init(np.asarray([1, 1, 2, 2], np.float32))], mode="nearest")
        return m.model([1, 2, r.randint(1, 5), r.randint(1, 5)], y)
    if kind == "batchnorm":
        m.opset = draw_opset(m)
        c = r.choice([1, 3, 8, 16])
        shape = [1, c] + [r.randint(1, 9) for _ in range(r.randint(1, 2))]
        x = "x"
        if len(shape) == 4 and r.random() < 0.5:
            x = m.node("Conv", ["x", m.weight((c, c, 3, 3), 9 * c)], kernel_shape=[3, 3], pads=[1] * 4)
        return m.model(shape, m.node("Relu", [batch_norm(m, x, c)]))
    if kind == "layernorm":
        m.opset = draw_opset(m)
        shape = [1] + [r.choice([3, 8, 16, 24]) for _ in range(rank - 1)]
        return m.model(shape, layer_norm(m, "x", shape, r.choice([-1, -1, -2]) if rank > 2 else -1))
    if kind == "gelu":
        m.opset = draw_opset(m)
        d = r.choice([8, 16, 24])
        x = m.node("MatMul", ["x", m.weight((d, d), d)]) if r.random() < 0.5 else "x"
        return m.model([1, r.choice([5, 16, 17]), d], gelu(m, x))
    if kind == "hardswish":
        m.opset = draw_opset(m)
        c = r.choice([3, 8, 16])
        x = "x"
        if r.random() < 0.5:
            x = m.node("Conv", ["x", m.weight((c, c, 1, 1), c)], kernel_shape=[1, 1])
        return m.model([1, c, r.randint(2, 12), r.randint(2, 12)], hard_swish(m, x))
    if kind == "reduce":
        m.opset = draw_opset(m)
        op = r.choice(["ReduceMean", "ReduceSum", "ReduceMax"])
        axes = None if r.random() < 0.2 else \
            [a - rank if r.random() < 0.3 else a for a in sorted(r.sample(range(rank), r.randint(1, rank)))]
        return m.model(shape, reduce(m, op, "x", axes, r.choice([0, 1]), noop=r.random() < 0.3))
    if kind == "split":
        m.opset = draw_opset(m)
        axis = r.randint(-rank, rank - 1)
        n = r.randint(2, 3)
        if m.opset >= 18 and r.random() < 0.4:   # num_outputs over a dim it does not divide
            shape[axis] = n * r.randint(1, 3) + r.randint(1, n - 1)
            size = shape[axis]
            chunk = -(-size // n)
            sizes, equal = [chunk] * (n - 1) + [size - chunk * (n - 1)], True
            if sizes[-1] <= 0:
                sizes, shape[axis] = [1] * n, n
        elif r.random() < 0.5:
            shape[axis] = n * r.randint(1, 3)
            sizes, equal = [shape[axis] // n] * n, True
        else:
            sizes = [r.randint(1, 3) for _ in range(n)]
            shape[axis], equal = sum(sizes), False
        parts = split(m, "x", axis, sizes, equal)
        return m.model(shape, m.node("Concat", [m.node("Relu", [parts[-1]]), parts[0]], axis=axis))
    if kind == "dropout":             # inference: the identity, whatever the ratio
        m.opset = draw_opset(m)
        ratio = r.choice([0.1, 0.5])
        if m.opset < 12:
            y = m.node("Dropout", ["x"], ratio=ratio)
        else:
            y = m.node("Dropout", ["x", scalar(m, ratio)] if r.random() < 0.5 else ["x"])
        return m.model(shape, m.node("Relu", [y]))
    if kind == "flatten":             # PyTorch's x.view(x.size(0), -1): a Shape chain
        m.opset = draw_opset(m)
        batch = axes_node(m, "Unsqueeze", m.node("Gather", [m.node("Shape", ["x"]), m.ints(0)], axis=0), [0], 13)
        target = m.node("Concat", [batch, m.ints([-1])], axis=0)
        flat = [shape[0], int(np.prod(shape[1:]))]
        return m.model(shape, m.node("Relu", [m.node("Reshape", ["x", target])]), out_shape=flat)
    m.opset = draw_opset(m)
    at = r.randint(0, rank)
    up = axes_node(m, "Unsqueeze", "x", [at], 13)
    squeezed = axes_node(m, "Squeeze", m.node("Relu", [up]), [at] if r.random() < 0.5 else None, 13)
    return m.model([d if d > 1 else 2 for d in shape] if r.random() < 0.5 else shape, squeezed)


def _resize_case(m):
    r = m.rng
    mode = r.choice(["nearest", "linear"])
    ctm = r.choice(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize"] + (["tf_half_pixel_for_nn"] if m.opset < 18 else []))
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = r.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    h, w = r.randint(2, 9), r.randint(2, 9)
    # in 1/16ths: exact in f16, to which the check rounds onnxruntime's initializers
    roi = [0, 0, 0.125, 0.1875, 1, 1, 0.875, 1.0] if ctm == "tf_crop_and_resize" else None
    if r.random() < 0.5:       # sizes: no tie under inexact scales
        y = resize(m, "x", sizes=[1, 2, r.randint(1, 12), r.randint(1, 12)], roi=roi, **attrs)
    else:                      # powers of two: exact in f16 and in the coordinates
        y = resize(m, "x", scales=[1, 1, r.choice([0.5, 1, 2, 4]), r.choice([0.5, 1, 2])], roi=roi, **attrs)
    return m.model([1, 2, h, w], y)
