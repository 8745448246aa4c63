"""Random ONNX models for the differential fuzz against onnxruntime (``bench/onnx_fuzz.py``,
``tests/fuzz/test_onnx_fuzz.py``).

Three families, each a model made from ``(family, seed, index)`` alone, so any case
can be remade:

- ``op``: one node of an op vpuc imports, with attributes drawn over their ranges
  (pads, strides, dilations, groups, ceil_mode, negative axes and steps, coordinate
  modes), at odd sizes; the structural ops (Einsum, Attention, RotaryEmbedding, ArgMax,
  CumSum, the gathers, outputs that are the input or a constant: ``onnx_struct.py``) among them;
- ``cnn``: 2 to 7 layers of a CNN (conv, depthwise, grouped, BatchNorm, activations,
  pools, squeeze-excite, residual, concat, resize, a classifier head); a grouped layer is
  ShuffleNet's: 2 to 4 groups of channels off the DPU's multiple of 16, after a dense 1x1
  (so the value they read is held in CMX with padded channels), then perhaps the channel
  shuffle (Reshape, Transpose, Reshape);
- ``transformer``: 1 to 3 blocks of attention (1 to 4 heads; also as Einsum, or the opset-23
  Attention op with RotaryEmbedding: ``onnx_struct.attention_block``), GELU MLPs and layer norms;
- ``normred``: one of the normalizations, reductions and elementwise ops vpuc composes
  (``onnx_normred.py``; the ``op`` family draws them too);
- ``extra``: one of the ops of convert_extra.py and convert_scatter.py (tf_crop_and_resize,
  Trilu, LpPool, CenterCropPad, OneHot, the scatters, TopK, CumProd, GridSample: ``onnx_extra.py``;
  the ``op`` family draws them too);
- ``more``: one of the normalizations, elementwise, boolean, trigonometric and hyperbolic
  ops of convert_more.py and convert_trig.py (``onnx_more.py``; the ``op`` family draws
  them too);
- ``rnn``: one LSTM, GRU or RNN node, unrolled at import (``onnx_rnn.py``);
- ``gather``: Gather on run-time indices, an int64 or int32 input ``ids`` (and a bool mask
  input) beside ``x`` (``onnx_gather.py``);
- ``quant``: a quantized layer in the QDQ form, fake-quantized input and output and integer
  weights behind a DequantizeLinear (``onnx_quant.py``);
- ``large``: 1 to 3 layers whose weights or activations do not fit a tile's CMX (a 3x3
  convolution of up to 512 channels, a 112x112 map, a MatMul of K up to 4096), which
  the lowering must split over output channels, rows or K; VGG's 3x3 layers on 28x28 and
  56x56 maps, whose weights are cut over output channels and maps over rows at once.

Why the families missed two bugs of the zoo's topologies: ``op`` draws groups only on
its one layer, of at most 8 channels, reading the network's input from DDR, and ``cnn``
had dense and depthwise layers only, so no grouped layer ever read a value held with
padded channels (ShuffleNet's groups of 34 of 136 ran past the 144 held); ``large`` drew
its 3x3 layers on maps of at most 15x15, where a tile's row blocks all fit beside the
weight chunks (VGG-19's 56x56 ones overflowed CMX).

Every case has one float input named ``x`` (the ``gather`` family's also integer and bool
ones, which ``onnx_check`` feeds through ``onnx_gather.extra_feeds``) and one output.  Weights are scaled by
1/sqrt(fan-in), so activations stay of order one through the layers.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz import onnx_forms as forms
from tests.fuzz.onnx_extra import extra_case
from tests.fuzz.onnx_gather import gather_case
from tests.fuzz.onnx_more import more_case
from tests.fuzz.onnx_networks import cnn_case, large_case, transformer_case
from tests.fuzz.onnx_normred import normred_case
from tests.fuzz.onnx_quant import quant_case
from tests.fuzz.onnx_rnn import rnn_case
from tests.fuzz.onnx_struct import struct_case

FAMILIES = ("op", "cnn", "transformer", "large", "forms", "normred", "more", "rnn", "extra",
            "gather", "quant")
# each family's random stream: fixed numbers, so a family added later leaves every other
# family's cases as they were
_STREAM = {"op": 0, "cnn": 1, "transformer": 2, "large": 3, "forms": 4, "normred": 0x4E52_0000,
           "more": 0x4D4F_0000, "rnn": 0x524E_0000,
           "extra": 0x4558_0000, "gather": 0x4741_0000,
           "quant": 0x5144_0000}


class _Model:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        # the opset and the exporter's style of each op form: a stream of their own, so
        # a case's sizes and weights are the same at every opset
        self.forms = random.Random(seed ^ 0x5EED_0F5E7)
        self.opset = forms.OLDEST
        self.nodes: list = []
        self.inits: list = []

    def init(self, array) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, values) -> str:
        return self.init(np.asarray(values, np.int64))

    def weight(self, shape, fan_in: int) -> str:
        return self.init((self.np.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    def node(self, op: str, inputs, n_out: int = 1, **attrs) -> str:
        outs = [f"t{len(self.nodes)}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, **attrs))
        return outs[-1]

    def model(self, shape, out: str, out_shape=None) -> onnx.ModelProto:
        """The model of the nodes so far; ``out_shape`` where shape inference cannot tell it
        (a Reshape to a computed shape, as exporters write one)."""
        graph = helper.make_graph(self.nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = helper.find_min_ir_version_for(model.opset_import)
        return model


def make(family: str, seed: int, index: int) -> onnx.ModelProto:
    """The case ``index`` of ``family`` in the campaign ``seed``."""
    m = _Model(seed * 1_000_003 + index * 5 + _STREAM[family])
    return {"op": _one_op, "cnn": cnn_case, "transformer": transformer_case, "large": large_case,
            "forms": forms.forms_case, "normred": normred_case, "more": more_case,
            "rnn": rnn_case,
            "extra": extra_case,
            "gather": gather_case,
            "quant": quant_case}[family](m)


# ------------------------------------------------------------------ one op

def _one_op(m: _Model) -> onnx.ModelProto:
    r = m.rng
    kind = r.choice(["conv", "conv", "pool", "resize", "slice", "reduce", "softmax", "transpose",
                     "struct", "struct",
                     "extra",
                     "split", "pad", "gemm", "matmul", "flatten", "gather", "unary", "binary",
                     "deconv", "space", "norm", "concat", "where", "squeeze", "global", "copy",
                     "normred", "more"])
    if kind == "normred":
        return normred_case(m)
    if kind == "more":
        return more_case(m)
    if kind == "struct":
        return struct_case(m)
    if kind == "extra":
        return extra_case(m)
    rank = r.randint(2, 4)
    shape = [r.randint(1, 6) for _ in range(rank)]
    m.opset = forms.draw_opset(m)
    if kind == "conv":
        c = r.choice([1, 3, 4, 8]); g = r.choice([d for d in (1, 2, c) if c % d == 0])
        k, s, d = r.choice([1, 2, 3, 5]), r.choice([1, 2, 3]), r.choice([1, 2])
        hw = [r.randint(k * d, 13), r.randint(k * d, 13)]
        attrs = dict(kernel_shape=[k, k], strides=[s, r.choice([1, s])], group=g)
        if r.random() < 0.3:
            attrs["auto_pad"] = r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
        else:
            attrs.update(pads=[r.randint(0, k - 1) for _ in range(4)], dilations=[d, 1])
        oc = g * r.choice([1, 2, 5])
        y = m.node("Conv", ["x", m.weight((oc, c // g, k, k), c // g * k * k), m.weight((oc,), 10)], **attrs)
        return m.model([1, c] + hw, y)
    if kind == "pool":
        op, k, s = r.choice(["MaxPool", "AveragePool"]), r.choice([1, 2, 3]), r.choice([1, 2, 3])
        attrs = dict(kernel_shape=[k, r.choice([1, k])], strides=[s, r.choice([1, s])],
                     pads=[r.randint(0, k - 1) for _ in range(4)])
        if m.opset < 19:        # onnxruntime's pools before 19 take pads below the kernel only
            attrs["pads"] = [min(p, attrs["kernel_shape"][i % 2] - 1) for i, p in enumerate(attrs["pads"])]
        attrs["ceil_mode"] = r.choice([0, 1])
        if op == "AveragePool":
            attrs["count_include_pad"] = r.choice([0, 1])
        return m.model([1, 3, r.randint(k, 11), r.randint(k, 11)], m.node(op, ["x"], **attrs))
    if kind == "resize":
        mode = r.choice(["nearest", "linear"])
        attrs = dict(mode=mode, coordinate_transformation_mode=r.choice(
            ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]))
        if mode == "nearest":
            attrs["nearest_mode"] = r.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
        sizes = [1, 2, r.randint(1, 12), r.randint(1, 12)]   # sizes: no tie under inexact scales
        return m.model([1, 2, r.randint(1, 9), r.randint(1, 9)], forms.resize(m, "x", sizes=sizes, **attrs))
    if kind == "slice":
        axes = r.sample(range(rank), r.randint(1, rank))
        steps = [r.choice([1, 1, 2, -1, -2]) for _ in axes]
        starts = [r.randint(-shape[a] - 2, shape[a] + 2) for a in axes]
        ends = [r.choice([r.randint(-shape[a] - 2, shape[a] + 2), 2 ** 62, -2 ** 62]) for a in axes]
        axes = [a - rank if r.random() < 0.3 else a for a in axes]
        ins = ["x", m.ints(starts), m.ints(ends), m.ints(axes), m.ints(steps)]
        return m.model(shape, m.node("Slice", ins))
    if kind == "reduce":
        op = r.choice(["ReduceMean", "ReduceSum", "ReduceMax"])
        axes = [a - rank if r.random() < 0.3 else a for a in sorted(r.sample(range(rank), r.randint(1, rank)))]
        return m.model(shape, forms.reduce(m, op, "x", axes, keepdims=r.choice([0, 1])))
    if kind == "softmax":
        op = r.choice(["Softmax", "LogSoftmax"])
        return m.model(shape, m.node(op, ["x"], axis=r.randint(-rank, rank - 1)))
    if kind == "transpose":
        perm = list(range(rank)); r.shuffle(perm)
        return m.model(shape, m.node("Transpose", ["x"], perm=perm))
    if kind == "split":
        axis = r.randint(-rank, rank - 1)
        shape[axis] *= 2
        return m.model(shape, forms.split(m, "x", axis, [shape[axis] // 2] * 2, equal=True)[-1])
    if kind == "pad":
        mode = r.choice(["constant", "reflect", "edge"] + (["wrap"] if m.opset >= 19 else []))
        return m.model(shape, forms.pad(m, "x", forms.draw_pads(r, shape, mode),
                                        0.5 if mode == "constant" else None, mode))
    if kind == "copy":
        return _copy_op(m, shape)
    if kind == "gemm":
        ta, tb = r.choice([0, 1]), r.choice([0, 1])
        mm, k, n = r.randint(1, 6), r.randint(1, 40), r.randint(1, 40)
        b = m.weight((n, k) if tb else (k, n), k)
        c = m.weight(r.choice([(n,), (mm, n), (1,), (mm, 1)]), 10)
        y = m.node("Gemm", ["x", b, c], transA=ta, transB=tb, alpha=r.choice([1.0, 0.5]), beta=r.choice([1.0, 2.0]))
        return m.model([k, mm] if ta else [mm, k], y)
    if kind == "matmul":
        n = r.randint(1, 40)
        return m.model(shape, m.node("MatMul", ["x", m.weight((shape[-1], n), shape[-1])]))
    if kind == "flatten":
        return m.model(shape, m.node("Flatten", ["x"], axis=r.randint(-rank, rank)))
    if kind == "gather":
        axis = r.randint(-rank, rank - 1)
        size = shape[axis]
        idx = [r.randint(-size, size - 1) for _ in range(r.randint(1, 3))]
        return m.model(shape, m.node("Gather", ["x", m.ints(idx)], axis=axis))
    if kind == "deconv":
        c, k, st = r.choice([1, 4, 8]), r.choice([1, 2, 3, 4]), r.choice([1, 2, 3])
        g = r.choice([d for d in (1, 2, c) if c % d == 0])
        oc = g * r.choice([1, 3])
        attrs = dict(kernel_shape=[k, k], strides=[st, st], group=g,
                     pads=[r.randint(0, k - 1) for _ in range(4)])
        if st > 1 and r.random() < 0.3:
            attrs["output_padding"] = [r.randint(0, st - 1), 0]
        hw = [r.randint(1, 9), r.randint(1, 9)]
        for i, size in enumerate(hw):       # pads that would leave no output row crop less
            full = (size - 1) * st + k + attrs.get("output_padding", [0, 0])[i]
            while attrs["pads"][i] + attrs["pads"][i + 2] >= full:
                attrs["pads"][i + 2 if attrs["pads"][i + 2] else i] -= 1
        y = m.node("ConvTranspose", ["x", m.weight((c, oc // g, k, k), c * k * k), m.weight((oc,), 10)], **attrs)
        return m.model([1, c] + hw, y)
    if kind == "space":
        bs = r.choice([2, 3])
        if r.random() < 0.5:
            y = m.node("DepthToSpace", ["x"], blocksize=bs, mode=r.choice(["DCR", "CRD"]))
            return m.model([1, bs * bs * r.randint(1, 3), r.randint(1, 5), r.randint(1, 5)], y)
        return m.model([1, r.randint(1, 4), bs * r.randint(1, 4), bs * r.randint(1, 4)],
                       m.node("SpaceToDepth", ["x"], blocksize=bs))
    if kind == "norm":
        if r.random() < 0.5:
            c = shape[1] if rank >= 3 else 3
            shape = shape if rank >= 3 else [1, 3, 5]
            y = m.node("InstanceNormalization", ["x", m.init(m.np.uniform(0.5, 1.5, c).astype(np.float32)),
                                                 m.weight((c,), 10)], epsilon=1e-5)
            return m.model(shape, y)
        return m.model(shape, forms.layer_norm(m, "x", shape, r.randint(-rank, rank - 1)))
    if kind == "concat":
        axis = r.randint(-rank, rank - 1)
        other = list(shape); other[axis] = r.randint(1, 4)
        y = m.node("Concat", [m.node("Relu", ["x"]), m.weight(other, 1), "x"], axis=axis)
        return m.model(shape, y)
    if kind == "where":
        cmp = r.choice(["Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"])
        if cmp.endswith("OrEqual"):          # from opset 12
            m.opset = forms.draw_opset(m, 12)
        cond = m.node(cmp, ["x", m.init(np.float32(r.choice([0.0, 0.5])))])
        return m.model(shape, m.node("Where", [cond, "x", m.node("Neg", ["x"])]))
    if kind == "squeeze":
        at = r.randint(0, rank)
        y = m.node("Relu", [forms.axes_node(m, "Unsqueeze", "x", [at], 13)])
        return m.model(shape, forms.axes_node(m, "Squeeze", y, [at], 13))
    if kind == "global":
        shape = [1, r.randint(1, 20), r.randint(1, 30), r.randint(1, 30)]
        return m.model(shape, m.node(r.choice(["GlobalAveragePool", "GlobalMaxPool"]), ["x"]))
    if kind == "unary":
        op = r.choice(["Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu",
                       "Erf", "Softplus", "Mish", "Abs", "Neg", "Exp", "Floor", "Log", "Sqrt"])
        attrs = {"alpha": 0.3} if op in ("LeakyRelu", "Elu", "HardSigmoid") else {}
        x = m.node("Abs", ["x"]) if op in ("Log", "Sqrt") else "x"
        if op == "HardSwish":                # the op from opset 14, its patterns before
            return m.model(shape, forms.hard_swish(m, x))
        if op == "Mish":
            m.opset = forms.draw_opset(m, 18)
        return m.model(shape, m.node(op, [x], **attrs))
    op = r.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
    other = [d if r.random() < 0.6 else 1 for d in shape][r.randint(0, rank - 1):]
    b = m.init(m.np.uniform(0.5, 1.5, other).astype(np.float32))
    x = m.node("Abs", ["x"]) if op == "Pow" else "x"
    return m.model(shape, m.node(op, [x, b]))


# ------------------------------------------------------------------ CNNs

def _copy_op(m: _Model, shape: list[int]) -> onnx.ModelProto:
    """Tile, Expand (alone, or read by an elementwise op, which broadcasts it itself), and
    an empty Slice among a Concat's operands (it vanishes from it)."""
    r, rank = m.rng, len(shape)
    kind = r.choice(["tile", "expand", "expand_add", "empty_concat"])
    if kind == "tile":
        repeats = [r.randint(1, 3) for _ in shape]
        repeats[r.randrange(rank)] = r.randint(2, 3)        # all 1 would return x itself
        return m.model(shape, m.node("Tile", ["x", m.ints(repeats)]))
    if kind in ("expand", "expand_add"):
        shape = [r.choice([1, d]) for d in shape]
        target = [r.choice([1, r.randint(1, 4)]) if d == 1 else r.choice([1, d]) for d in shape]
        target = [r.randint(1, 3) for _ in range(r.randint(0, 1))] + target
        y = m.node("Expand", ["x", m.ints(target)])
        if kind == "expand_add":
            y = m.node("Add", [y, "x"])
        return m.model(shape, y)
    axis = r.randint(-rank, rank - 1)
    start = r.randint(0, shape[axis])
    nothing = m.node("Slice", ["x", m.ints([start]), m.ints([start]), m.ints([axis])])
    ins = ["x", nothing, m.node("Relu", ["x"])]
    r.shuffle(ins)
    return m.model(shape, m.node("Concat", ins, axis=axis))
