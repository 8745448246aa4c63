"""The fuzz's network families (``onnx_models``): ``cnn`` (2 to 7 layers of a CNN, ShuffleNet's
grouped layers and channel shuffle among them), ``transformer`` (1 to 3 attention blocks,
GELU MLPs and layer norms) and ``large`` (layers whose weights or activations do not fit
a tile's CMX).  Each takes the case's ``onnx_models._Model``."""

from __future__ import annotations

import numpy as np
import onnx

from tests.fuzz import onnx_forms as forms
from tests.fuzz.onnx_struct import attention_block


def conv(m, x: str, c: int, oc: int, k: int, s: int, group: int = 1) -> str:
    p = k // 2
    return m.node("Conv", [x, m.weight((oc, c // group, k, k), c // group * k * k), m.weight((oc,), 10)],
                  kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=group)


def cnn_case(m) -> onnx.ModelProto:
    r = m.rng
    c = r.choice([3, 8, 16, 24]); h = r.choice([7, 8, 15, 16, 23, 32]); w = r.choice([h, h + 3, 9])
    shape, cur = [1, c, h, w], "x"
    m.opset = forms.draw_opset(m)
    for _ in range(r.randint(2, 7)):
        kind = r.choice(["conv", "conv", "dw", "group", "act", "pool", "se", "res", "concat",
                         "resize", "head"])
        if kind in ("conv", "dw"):
            k, s = r.choice([1, 3, 3, 5]), r.choice([1, 1, 2])
            oc = c if kind == "dw" else r.choice([8, 16, 24, 32, 48])
            cur = conv(m, cur, c, oc, k, s, group=c if kind == "dw" else 1)
            c, h, w = oc, (h - 1) // s + 1, (w - 1) // s + 1
            if r.random() < 0.3:
                cur = forms.batch_norm(m, cur, c)
        elif kind == "group":
            cur, c = shuffle_unit(m, cur, c, h, w)
        elif kind == "act":
            op = r.choice(["Relu", "Sigmoid", "HardSwish", "Tanh", "LeakyRelu", "HardSigmoid", "Erf"])
            cur = forms.hard_swish(m, cur) if op == "HardSwish" else m.node(op, [cur])
        elif kind == "pool" and min(h, w) >= 3:
            k, s = r.choice([2, 3]), r.choice([1, 2])
            cur = m.node(r.choice(["MaxPool", "AveragePool"]), [cur], kernel_shape=[k, k], strides=[s, s])
            h, w = (h - k) // s + 1, (w - k) // s + 1
        elif kind == "se":
            sq = max(4, c // 4)
            e = m.node("Relu", [conv(m, m.node("GlobalAveragePool", [cur]), c, sq, 1, 1)])
            e = m.node("HardSigmoid", [conv(m, e, sq, c, 1, 1)], alpha=1 / 6, beta=0.5)
            cur = m.node("Mul", [cur, e])
        elif kind == "res":
            cur = m.node("Add", [cur, m.node("Relu", [conv(m, cur, c, c, 3, 1)])])
        elif kind == "concat":
            cur = m.node("Concat", [cur, conv(m, cur, c, 8, 1, 1)], axis=1)
            c += 8
        elif kind == "resize" and h <= 32:
            cur = forms.resize(m, cur, scales=[1, 1, 2, 2], mode=r.choice(["nearest", "linear"]))
            h, w = 2 * h, 2 * w
        elif kind == "head":
            n = r.choice([10, 17, 64])
            cur = m.node("Gemm", [m.node("Flatten", [m.node("GlobalAveragePool", [cur])]),
                                  m.weight((n, c), c), m.weight((n,), 10)], transB=1)
            if r.random() < 0.5:
                cur = m.node("Softmax", [cur], axis=-1)
            break
    return m.model(shape, cur)


def shuffle_unit(m, x: str, c: int, h: int, w: int) -> tuple[str, int]:
    """ShuffleNet's grouped layer: a dense 1x1 to ``groups`` x ``per`` channels (its
    output, read only by DPU layers, is held in CMX padded to the multiple of 16), a 1x1
    or 3x3 convolution of that many groups, per-group channels off the multiple, then
    perhaps the channel shuffle; the output and its channels."""
    r = m.rng
    groups, per = r.choice([2, 3, 4]), r.choice([5, 12, 20, 34])
    oc = groups * per
    y = conv(m, x, c, oc, 1, 1)
    y = conv(m, y, oc, oc, r.choice([1, 3]), 1, group=groups)
    if r.random() < 0.5:
        y = m.node("Reshape", [y, m.ints([1, groups, per, h, w])])
        y = m.node("Reshape", [m.node("Transpose", [y], perm=[0, 2, 1, 3, 4]),
                               m.ints([1, oc, h, w])])
    return y, oc


# ------------------------------------------------------------------ transformers

def transformer_case(m) -> onnx.ModelProto:
    r = m.rng
    seq, heads, dh = r.choice([5, 16, 17, 33]), r.choice([1, 2, 3, 4]), r.choice([8, 16, 24])
    d = heads * dh

    def norm(v):
        return forms.layer_norm(m, v, [1, seq, d], -1)

    def linear(v, i, o):
        return m.node("Add", [m.node("MatMul", [v, m.weight((i, o), i)]), m.weight((o,), 100)])

    def split_heads(v):
        return m.node("Transpose", [m.node("Reshape", [v, m.ints([1, seq, heads, dh])])], perm=[0, 2, 1, 3])

    cur = "x"
    m.opset = forms.draw_opset(m)
    for _ in range(r.randint(1, 3)):
        kind = r.choice(["attention", "mlp", "norm", "attention_op"])
        if kind == "attention_op" and m.opset >= 12:       # Einsum, or the Attention op at 23
            cur = m.node("Add", [cur, linear(attention_block(m, norm(cur), seq, heads, dh, linear), d, d)])
        elif kind == "attention":
            h = norm(cur)
            q, k, v = (split_heads(linear(h, d, d)) for _ in range(3))
            scores = m.node("Mul", [m.node("MatMul", [q, m.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                                    m.init(np.float32(1 / np.sqrt(dh)))])
            o = m.node("MatMul", [m.node("Softmax", [scores], axis=-1), v])
            o = m.node("Reshape", [m.node("Transpose", [o], perm=[0, 2, 1, 3]), m.ints([1, seq, d])])
            cur = m.node("Add", [cur, linear(o, d, d)])
        elif kind == "mlp":
            f = r.choice([2, 4])
            y = linear(norm(cur), d, d * f)
            if r.random() < 0.5:      # GELU: the op from opset 20, the forms exporters write
                y = forms.gelu(m, y)
            else:
                op = r.choice(["Gelu", "Relu", "Sigmoid"])
                y = forms.gelu(m, y) if op == "Gelu" else m.node(op, [y])
            cur = m.node("Add", [cur, linear(y, d * f, d)])
        else:
            cur = norm(cur)
    return m.model([1, seq, d], cur)


# ------------------------------------------------------------------ large layers

def large_case(m) -> onnx.ModelProto:
    r = m.rng
    kind = r.choice(["wide", "tall", "matmul", "vgg"])
    m.opset = forms.draw_opset(m)
    if kind == "vgg":       # after a 1x1, so the 3x3 layers read a value computed in NHWC
        hw = r.choice([28, 56])         # VGG's stages 3 (256 channels) and 4 (512)
        oc = 256 if hw == 56 else 512
        c = r.choice([oc // 2, oc])
        cur = m.node("Relu", [conv(m, "x", 16, c, 1, 1)])
        for _ in range(r.randint(1, 2)):
            cur = m.node("Relu", [conv(m, cur, c, oc, 3, 1)])
            c = oc
        return m.model([1, 16, hw, hw], cur)
    if kind == "matmul":
        rows, k, n = r.choice([1, 7, 64]), r.choice([1024, 2304, 4096]), r.choice([256, 1000])
        y = m.node("MatMul", ["x", m.weight((k, n), k)])
        if r.random() < 0.5:
            y = m.node("Relu", [m.node("Add", [y, m.weight((n,), 100)])])
        return m.model([1, rows, k], y)
    if kind == "wide":
        c, hw = r.choice([128, 256, 384]), r.choice([7, 14, 15])
        shape, cur = [1, c, hw, hw], "x"
        for _ in range(r.randint(1, 2)):
            oc, s = r.choice([256, 512]), r.choice([1, 2])
            cur = m.node("Relu", [conv(m, cur, c, oc, 3, s)])
            c = oc
        return m.model(shape, cur)
    c, hw = r.choice([3, 16, 32]), r.choice([96, 112, 127])
    shape = [1, c, hw, hw]
    cur = conv(m, "x", c, r.choice([16, 32, 64]), r.choice([3, 7]), r.choice([1, 2]))
    m.opset = forms.draw_opset(m)
    op = r.choice(["Relu", "HardSwish", "Sigmoid"])
    cur = forms.hard_swish(m, cur) if op == "HardSwish" else m.node(op, [cur])
    if r.random() < 0.5:
        cur = m.node("MaxPool", [cur], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return m.model(shape, cur)
