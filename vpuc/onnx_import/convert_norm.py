"""GroupNormalization and the reductions without a library kernel, composed from graph ops.

- GroupNormalization (opsets 18 and 21): the channels viewed as ``[N, G, C/G * spatial]``,
  MVN over the last axis (InstanceNormalization's way, on the reshaped view), the view
  reshaped back, times the scale plus the bias per channel.  Opset 18 gives the scale and
  bias per group (each repeated over its group's channels), 21 per channel; the node
  ``group_norm_pattern.py`` makes of PyTorch's written-out form, at any opset, per channel.
- The reductions, each exact or within a few roundings of the graph's type (the tests
  state each bound, tests/onnx_import/test_norm_reduce.py):
  ReduceMin ``-ReduceMax(-x)`` (exact), ReduceL1 ``ReduceSum(|x|)``, ReduceSumSquare
  ``ReduceSum(x * x)``, ReduceL2 ``Sqrt(ReduceSum(x * x))``, ReduceLogSum
  ``Log(ReduceSum(x))``, ReduceLogSumExp ``m + Log(ReduceSum(Exp(x - m)))`` with ``m`` the
  maximum (never overflowing).  With ``noop_with_empty_axes`` and no axes the reduction
  is over the empty set, so only the elementwise steps remain (ONNX: ReduceSumSquare is
  then ``x * x``, ReduceLogSum ``Log(x)``).
- ReduceProd in f32 (an f16 graph converts in and out): ``exp(sum(log|x|))`` with the sign
  of the count of negative terms; the logarithms' f32 rounding and the sum's carry into the
  product's relative error as ``(2^-23 + gamma_n) sum |log |x||``, below an f16 rounding
  while that sum is below about 2^12.
"""

from __future__ import annotations

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_math import f32_constant, f32_result, in_f32, odd


def _group_norm(b: GraphBuilder, node, attrs) -> None:
    shape = b.shape(node.input[0])
    if len(shape) < 2:
        raise b.error(f"GroupNormalization needs an input of rank >= 2 (N, C, ...); got {list(shape)}")
    groups, channels = int(attrs["num_groups"]), shape[1]
    if groups < 1 or channels % groups:
        raise b.error(f"num_groups = {groups} does not divide the {channels} channels")
    attrs.get("stash_type", 1)    # the MVN kernel keeps its statistics in f32 whatever the type
    eps = float(attrs.get("epsilon", 1e-5))
    scale, bias = (b.array(name).astype(np.float32).reshape(-1) for name in node.input[1:3])
    if scale.size != bias.size or scale.size not in (channels, groups):
        raise b.error(f"GroupNormalization's scale and bias have {scale.size} and {bias.size} values; "
                      f"expected one per channel ({channels}) or, before opset 21, one per group ({groups})")
    if scale.size != channels:       # opset 18's form: per group, over the group's channels
        if b.opset >= 21:
            raise b.error(f"GroupNormalization at opset {b.opset} takes one scale per channel "
                          f"({channels}); got {scale.size}")
        scale, bias = np.repeat(scale, channels // groups), np.repeat(bias, channels // groups)
    grouped = b.op("Reshape", [b.value(node.input[0])],
                   {"shape": (shape[0], groups, int(np.prod(shape[1:])) // groups)})
    normalized = b.op("MVN", [grouped], {"axes": (2,), "eps": eps})
    normalized = b.op("Reshape", [normalized], {"shape": tuple(shape)})
    per_channel = (1, channels) + (1,) * (len(shape) - 2)
    y = b.op("Multiply", [normalized, b.constant(scale.reshape(per_channel), node.output[0] + ".scale")])
    b.op("Add", [y, b.constant(bias.reshape(per_channel), node.output[0] + ".bias")], out=node.output[0])


def reduction_axes(b: GraphBuilder, node, attrs) -> list[int] | None:
    """The axes a Reduce* node reduces, in [0, rank); None where ``noop_with_empty_axes``
    makes the reduction one over the empty set."""
    rank = len(b.shape(node.input[0]))
    if "axes" in attrs:                                  # an attribute before opset 18
        axes = list(attrs["axes"])
    elif len(node.input) > 1 and node.input[1]:
        axes = [int(a) for a in np.asarray(b.array(node.input[1])).reshape(-1)]
    else:
        axes = []
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    axes = [b.axis(a, rank) for a in axes]
    if len(set(axes)) != len(axes):
        raise b.error(f"axes {sorted(axes)} name an axis twice")
    return sorted(axes)


class _Reduction:
    """One Reduce* node's reductions over the same axes; each a no-op over the empty set."""

    def __init__(self, b: GraphBuilder, node, attrs) -> None:
        self.b, self.node = b, node
        self.axes = reduction_axes(b, node, attrs)
        self.keep_dims = bool(attrs.get("keepdims", 1))

    def reduce(self, kind: str, value: str, keep_dims: bool | None = None, out: str | None = None) -> str:
        if self.axes is None:
            return value
        keep = self.keep_dims if keep_dims is None else keep_dims
        return self.b.op(kind, [value], {"axes": tuple(self.axes), "keep_dims": keep}, out=out)


def _reduce_min(b, node, attrs):
    r = _Reduction(b, node, attrs)
    x = b.value(node.input[0])
    if r.axes is None:
        b.alias(node.output[0], node.input[0])
        return
    b.op("Negative", [r.reduce("ReduceMax", b.op("Negative", [x]))], out=node.output[0])


def _reduce_l1(b, node, attrs):
    r = _Reduction(b, node, attrs)
    magnitude = b.op("Abs", [b.value(node.input[0])], out=node.output[0] if r.axes is None else None)
    if r.axes is not None:
        r.reduce("ReduceSum", magnitude, out=node.output[0])


def _reduce_sum_square(b, node, attrs):
    r = _Reduction(b, node, attrs)
    x = b.value(node.input[0])
    square = b.op("Multiply", [x, x], out=node.output[0] if r.axes is None else None)
    if r.axes is not None:
        r.reduce("ReduceSum", square, out=node.output[0])


def _reduce_l2(b, node, attrs):
    r = _Reduction(b, node, attrs)
    x = b.value(node.input[0])
    if r.axes is None:                      # sqrt(x * x) over the empty set: |x|, exactly
        b.op("Abs", [x], out=node.output[0])
        return
    b.op("Sqrt", [r.reduce("ReduceSum", b.op("Multiply", [x, x]))], out=node.output[0])


def _reduce_log_sum(b, node, attrs):
    r = _Reduction(b, node, attrs)
    b.op("Log", [r.reduce("ReduceSum", b.value(node.input[0]))], out=node.output[0])


def _reduce_log_sum_exp(b, node, attrs):
    r = _Reduction(b, node, attrs)
    x = b.value(node.input[0])
    if r.axes is None:                      # log(exp(x)) over the empty set: x
        b.alias(node.output[0], node.input[0])
        return
    peak = r.reduce("ReduceMax", x, keep_dims=True)
    shifted = b.op("Exp", [b.op("Subtract", [x, peak])])     # <= 1: no overflow
    total = b.op("Log", [r.reduce("ReduceSum", shifted)])
    if not r.keep_dims:
        peak = b.op("Reshape", [peak], {"shape": b.types[total].dims})
    b.op("Add", [peak, total], out=node.output[0])


def _reduce_prod(b, node, attrs):
    """In f32: ``exp(sum(log|x|))``, negative where an odd number of terms is (their count
    exact below 2^24), 0 where a term is (log 0 = -inf)."""
    r = _Reduction(b, node, attrs)
    if r.axes is None:                      # the product over the empty set of each element
        b.alias(node.output[0], node.input[0])
        return
    x = in_f32(b, b.value(node.input[0]))
    c = lambda v, hint: f32_constant(b, v, hint)

    def product(out):
        magnitude = b.op("Exp", [r.reduce("ReduceSum", b.op("Log", [b.op("Abs", [x])]))])
        negative = b.op("Select", [b.op("Less", [x, c(0.0, "zero")]), c(1.0, "one"), c(0.0, "zero")])
        flips = odd(b, r.reduce("ReduceSum", negative), c)
        sign = b.op("Subtract", [c(1.0, "one"), b.op("Multiply", [flips, c(2.0, "two")])])
        return b.op("Multiply", [magnitude, sign], out=out)
    f32_result(b, node, product)


NORM_CONVERTERS = {
    "GroupNormalization": _group_norm,
    "ReduceMin": _reduce_min, "ReduceL1": _reduce_l1, "ReduceL2": _reduce_l2,
    "ReduceSumSquare": _reduce_sum_square, "ReduceLogSum": _reduce_log_sum,
    "ReduceLogSumExp": _reduce_log_sum_exp, "ReduceProd": _reduce_prod,
}
