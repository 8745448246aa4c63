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


def conv(x, w, kernel, stride, pad, dilation):
    out = None
    for i, j, tap in _taps(x, kernel, stride, pad, dilation, 0.0):
        part = np.einsum("nchw,oc->nohw", tap, w[:, :, i, j])
        out = part if out is None else out + part
    return out


def dwconv(x, w, kernel, stride, pad, dilation):
    out = None
    for i, j, tap in _taps(x, kernel, stride, pad, dilation, 0.0):
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
