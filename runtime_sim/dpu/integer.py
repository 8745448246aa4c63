"""The DPU's integer mode: exact int32 sums and the PPE's per-channel requantization.

NPU37XX's integer datapath (docs/vir.md, "The DPU's integer mode"):

- The MPE multiplies u8/i8 activations by i8 weights and accumulates in int32.  The IDU
  pads a window with the input's zero point, so a padded cell contributes ``zp * w``,
  which the NPU compiler's bias (``bias - zp * sum(w)``) cancels.  Here the sum is
  computed as ``sum((x - zp) * w) + zp * sum(w)``: the same integer, with the padded cells
  zero, so the float convolution can compute it.  It runs as a float64 GEMM, exact
  whatever the BLAS's order while every partial sum stays below 2^53 (|x - zp| <= 255,
  |w| <= 128: K up to 2^37 taps), then becomes int64.
- The PPE adds the i32 bias, then either requantizes each output channel c by its
  fixed-point scale, ``mult[c] * 2^-shift[c]``, rounding half to even (``PPEIntRound
  round_mode(RNE)``), adds the output zero point and clamps (relu: at the zero point),
  saturating to u8/i8; or converts the int32 value to f32 (``ppe_i32_convert``), multiplies
  by the channel's f32 scale and rounds once to f16.

A sum beyond int32 saturates (the accumulator is 32 bits; real layers stay far below:
K * 255 * 128 < 2^31 for K < 65,793).
"""

from __future__ import annotations

import numpy as np

from runtime_sim.dpu import ops
from runtime_sim.dpu.numerics import PostOp, apply_post_op, round_to
from vpuc.diagnostics import VpucError
from vpuc.ir.fixed_point import MAX_SHIFT, round_shift

_F64 = np.dtype(np.float64)
_I32 = np.iinfo(np.int32)
MULT_RANGE = (-(1 << 15), (1 << 15) - 1)     # ppe_scale_mult: a signed 16-bit field
SHIFT_RANGE = (0, MAX_SHIFT)                 # ppe_scale_shift: 6 bits


def integer_sums(op: str, x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                 in_zero_point: int, *, stride=(1, 1), padding=(0, 0, 0, 0),
                 dilation=(1, 1), variant: ops.Variant | None = None) -> np.ndarray:
    """The int32 sums (+ bias) of a ``conv``, ``dwconv`` or ``matmul`` over the output box
    ``variant`` (all of it when None), as int64: NCHW boxes, or [rows, columns] for a
    matmul (weights [N, K])."""
    if x.dtype.kind not in "iu" or weights.dtype.kind not in "iu":
        raise VpucError(f"DPU integer mode: input {x.dtype} and weights {weights.dtype}; "
                        "expected integers")
    shifted = x.astype(_F64) - float(in_zero_point)
    w = weights.astype(_F64)
    if op == "matmul":
        sums = ops.matmul(shifted, w, None, transpose_b=True, out_dtype=_F64, variant=variant)
    else:
        conv = ops.conv2d if op == "conv" else ops.depthwise_conv2d
        sums = conv(shifted, w, None, stride=stride, padding=padding, dilation=dilation,
                    out_dtype=_F64, variant=variant)
    channels = slice(None) if variant is None else slice(variant.z_start, variant.z_end + 1)
    sums = sums.astype(np.int64)
    weight_sums = weights.reshape(weights.shape[0], -1).astype(np.int64).sum(axis=1)
    per_channel = in_zero_point * weight_sums[channels]
    if bias is not None:
        per_channel = per_channel + bias.reshape(-1).astype(np.int64)[channels]
    sums += _along(per_channel, 1, sums.ndim)     # channels: axis 1 of both layouts
    np.clip(sums, _I32.min, _I32.max, out=sums)
    return sums


def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def requantize(sums: np.ndarray, mult: np.ndarray, shift: np.ndarray, out_zero_point: int,
               post_op: PostOp | None, out_dtype: np.dtype, axis: int = 1) -> np.ndarray:
    """The PPE's integer pipeline: ``round_half_even(sums * mult / 2^shift) + zero point``,
    relu (the zero point as the low bound) or clamp (bounds in stored values), saturated
    to ``out_dtype`` (u8/i8); ``mult``/``shift`` per channel along ``axis``."""
    mult = np.asarray(mult, np.int64).reshape(-1)
    shift = np.asarray(shift, np.int64).reshape(-1)
    for values, (low, high), name in ((mult, MULT_RANGE, "mult"), (shift, SHIFT_RANGE, "shift")):
        if len(values) and (values.min() < low or values.max() > high):
            bad = values[(values < low) | (values > high)][0]
            raise VpucError(f"DPU integer mode: a requantization {name} of {bad} is outside "
                            f"the PPE's [{low}, {high}]")
    values = round_shift(sums * _along(mult, axis, sums.ndim),
                         _along(shift, axis, sums.ndim)) + out_zero_point
    info = np.iinfo(out_dtype)
    low, high = info.min, info.max
    if post_op is not None and post_op.kind == "relu":
        low = max(low, out_zero_point)
    elif post_op is not None and post_op.kind == "clamp":
        low, high = max(low, int(post_op.low)), min(high, int(post_op.high))
    np.clip(values, low, high, out=values)
    return values.astype(out_dtype)


def dequantize(sums: np.ndarray, scale: np.ndarray, post_op: PostOp | None,
               axis: int = 1) -> np.ndarray:
    """The PPE's float pipeline after an integer sum: the int32 value as f32, times the
    channel's f32 scale, the post-op, one rounding to f16."""
    values = sums.astype(np.float32) * _along(np.asarray(scale, np.float32), axis, sums.ndim)
    apply_post_op(values, post_op)
    return round_to(values, np.float16)
