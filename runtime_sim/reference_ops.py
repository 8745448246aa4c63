"""Straightforward numpy references of the DPU ops, for ``vpuc run --reference``.

Deliberately independent of ``runtime_sim.dpu`` (which is GEMM over views with
masks): explicit zero padding and one strided slice per kernel tap.  All
arithmetic is float32 (float64 for f64 tensors); the caller rounds once.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.tasks import DpuOp, PostOp, PostOpKind


def _taps(x: np.ndarray, kernel, stride, pad, dilation, fill: float):
    """Yield (i, j, slice of the padded input feeding every output for tap (i, j))."""
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = kernel, stride, pad, dilation
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    oh = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, padded[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                               j * dw:j * dw + sw * (ow - 1) + 1:sw]


def conv(x, w, kernel, stride, pad, dilation, fill=0.0):
    out = None
    for i, j, tap in _taps(x, kernel, stride, pad, dilation, fill):
        part = np.einsum("nchw,oc->nohw", tap, w[:, :, i, j])
        out = part if out is None else out + part
    return out


def dwconv(x, w, kernel, stride, pad, dilation, fill=0.0):
    out = None
    for i, j, tap in _taps(x, kernel, stride, pad, dilation, fill):
        part = tap * w[:, 0, i, j].reshape(1, -1, 1, 1)
        out = part if out is None else out + part
    return out


def maxpool(x, kernel, stride, pad):
    out = None
    for _, _, tap in _taps(x, kernel, stride, pad, (1, 1), -np.inf):
        out = tap.copy() if out is None else np.maximum(out, tap)
    return out


def avgpool(x, kernel, stride, pad):
    """Mean over the real (unpadded) cells of each window."""
    total = count = None
    ones = np.ones_like(x)
    for (_, _, tap), (_, _, real) in zip(_taps(x, kernel, stride, pad, (1, 1), 0.0),
                                         _taps(ones, kernel, stride, pad, (1, 1), 0.0)):
        total = tap.copy() if total is None else total + tap
        count = real.copy() if count is None else count + real
    return total / count


def post_op(values: np.ndarray, post: PostOp | None) -> np.ndarray:
    if post is None:
        return values
    kind, params = post.kind, post.params
    if kind is PostOpKind.RELU:
        return np.maximum(values, 0)
    if kind is PostOpKind.LRELU:
        return np.where(values < 0, values * params[0], values)
    if kind is PostOpKind.CLAMP:
        return np.clip(values, params[0], params[1])
    if kind is PostOpKind.SIGMOID:
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-values))
    return np.tanh(values)


def dpu_op(op: DpuOp, inputs: list[np.ndarray], weights, bias, window, post: PostOp | None):
    """The whole op's output, in the compute type, before rounding."""
    kernel, stride, pad, dilation = window
    x = inputs[0]
    if op is DpuOp.CONV:
        out = conv(x, weights, kernel, stride, pad, dilation)
    elif op is DpuOp.DWCONV:
        out = dwconv(x, weights, kernel, stride, pad, dilation)
    elif op is DpuOp.MATMUL:
        out = x @ weights.T
    elif op is DpuOp.ADD:
        out = x + inputs[1]
    elif op is DpuOp.MUL:
        out = x * inputs[1]
    elif op is DpuOp.PERMUTE:      # its output's zero channels: Reference._dpu
        out = x
    elif op is DpuOp.MAXPOOL:
        out = maxpool(x, kernel, stride, pad)
    else:
        out = avgpool(x, kernel, stride, pad)
    if bias is not None:
        shape = [1] * out.ndim
        shape[1] = -1
        out = out + bias.reshape(shape)
    return post_op(out, post)


def integer_dpu_op(op: DpuOp, x, weights, bias, window, quant, scale, post: PostOp | None,
                   out_dtype: np.dtype) -> np.ndarray:
    """The integer mode's whole output, stored values: int64 sums over the input padded
    with its zero point plus the bias, then ``round_half_even(sum * mult / 2^shift)`` by
    exact floor division (or the f32 scale, to f16), the zero point, relu/clamp,
    saturation."""
    kernel, stride, pad, dilation = window
    x, w = x.astype(np.int64), weights.astype(np.int64)
    zp = quant.in_zero_point
    if op is DpuOp.CONV:
        sums = conv(x, w, kernel, stride, pad, dilation, fill=zp)
    elif op is DpuOp.DWCONV:
        sums = dwconv(x, w, kernel, stride, pad, dilation, fill=zp)
    else:
        sums = x @ w.T
    shape = [1] * sums.ndim
    shape[1] = -1
    if bias is not None:
        sums = sums + bias.astype(np.int64).reshape(shape)
    info32 = np.iinfo(np.int32)
    sums = np.clip(sums, info32.min, info32.max)
    if out_dtype == np.float16:
        values = sums.astype(np.float32) * scale.astype(np.float32).reshape(shape)
        return post_op(values, post).astype(np.float16)
    mult = scale[:, 0].astype(np.int64).reshape(shape)
    divisor = np.left_shift(np.int64(1), np.minimum(scale[:, 1], 48).astype(np.int64))
    divisor = divisor.reshape(shape)
    product = sums * mult
    quotient, remainder = np.divmod(product, divisor)
    twice = 2 * remainder
    quotient = quotient + ((twice > divisor) | ((twice == divisor) & (quotient % 2 == 1)))
    values = quotient + quant.out_zero_point
    info = np.iinfo(out_dtype)
    low, high = info.min, info.max
    if post is not None and post.kind is PostOpKind.RELU:
        low = max(low, quant.out_zero_point)
    elif post is not None and post.kind is PostOpKind.CLAMP:
        low, high = max(low, int(post.params[0])), min(high, int(post.params[1]))
    return np.clip(values, low, high).astype(out_dtype)
