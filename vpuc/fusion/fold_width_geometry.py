"""The geometry of a convolution whose width is folded into channels
(``lower_dpu_fold_width``): which folded convolution computes it, and its weights.

Index algebra.  ``k = 16 / C'`` input columns make one folded column: the permuted block
``[R, W, C']`` (NHWC bytes: pixel ``k m + q``'s channel ``c`` at ``(m k + q) C' + c``)
is byte for byte ``[R, W/k, 16]`` whose channel ``q * C' + c`` is pixel ``k m + q``'s
channel ``c``.  A convolution of kernel ``KH x K``, stride ``(sy, sx)``, left pad ``pl``
with ``k % sx == 0`` writes ``P = k / sx`` output columns per folded column: output column
``x = P m + p`` (``0 <= p < P``) reads input columns ``sx x - pl + kx = k m + sx p - pl + kx``
(``0 <= kx < K``), i.e. folded columns ``m + lo .. m + hi`` with
``lo = floor(-pl / k)``, ``hi = floor((sx (P - 1) - pl + K - 1) / k)``.  So the layer is one
convolution on the folded input with kernel ``KH x K'`` (``K' = hi - lo + 1``), stride
``(sy, 1)``, pads top and bottom as they were, left ``-lo`` and right
``OW / P + hi - W / k`` folded columns, and ``P * OC`` output channels, channel
``p * OC + co`` being output column ``P m + p``'s channel ``co``: the folded output
``[R', OW / P, P * OC]`` NHWC is byte for byte ``[R', OW, OC]`` NHWC (``OC`` a multiple
of 16, so no padded channel interleaves).  The folded weights
``W'[p OC + co, q C' + c, ky, j] = W[co, c, ky, kx]`` with
``kx = k (lo + j) + q - sx p + pl`` when ``0 <= kx < K`` and ``c < C``, else zero,
built at compile time.  A zero-padded folded column stands for input columns the original
padding made zero; a real column a tap does not reach meets a zero weight (an inf or NaN
input there would make NaN where the original did not read it: inputs are finite images).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.verifier.dpu import MAX_KERNEL     # the NCE's window side, cited there


@dataclass(frozen=True)
class Fold:
    """The folded convolution's geometry along the width (module docstring)."""
    factor: int                 # k: input columns per folded column
    per: int                    # P: output columns per folded column
    kernel: int                 # K': folded columns a window spans
    pads: tuple[int, int]       # folded (left, right)
    width: int                  # W / k
    out_width: int              # OW / P
    lo: int                     # the first folded column an output's window reads, relative


def fold_geometry(width: int, out_width: int, kernel: int, stride: int, pad_left: int,
                  dilation: int, factor: int) -> Fold | str:
    """The fold of a convolution's width by ``factor``, or why it does not apply."""
    if dilation != 1:
        return f"dilation {dilation}"
    if factor % stride:
        return f"stride {stride} does not divide the fold factor {factor}"
    if width % factor:
        return f"width {width} is not a multiple of the fold factor {factor}"
    per = factor // stride
    if out_width % per:
        return f"output width {out_width} is not a multiple of {per}"
    lo = -(pad_left // factor) if pad_left % factor == 0 else -(pad_left // factor) - 1
    hi = (stride * (per - 1) - pad_left + kernel - 1) // factor
    folded = hi - lo + 1
    left, right = -lo, out_width // per + hi - width // factor
    if folded > MAX_KERNEL:
        return f"folded kernel width {folded} is beyond the NCE's {MAX_KERNEL}"
    if right < 0 or max(left, right) >= folded:
        return f"folded pads ({left}, {right}) do not fit the folded kernel width {folded}"
    return Fold(factor, per, folded, (left, right), width // factor, out_width // per, lo)


def folded_weights(weights: np.ndarray, fold: Fold, stride: int, pad_left: int,
                   pixel_channels: int) -> np.ndarray:
    """``weights`` (OC, C, KH, K) scattered into the folded convolution's
    (P * OC, k * pixel_channels, KH, K'): ``W'[p OC + co, q C' + c, ky, j] = W[co, c, ky, kx]``
    for ``kx = k (lo + j) + q - sx p + pl`` inside the kernel, zero elsewhere."""
    oc, c, kh, kw = weights.shape
    k = fold.factor
    out = np.zeros((fold.per * oc, k * pixel_channels, kh, fold.kernel), weights.dtype)
    for p in range(fold.per):
        for j in range(fold.kernel):
            for q in range(k):
                kx = k * (fold.lo + j) + q - stride * p + pad_left
                if 0 <= kx < kw:
                    out[p * oc:(p + 1) * oc, q * pixel_channels:q * pixel_channels + c, :, j] = \
                        weights[:, :, :, kx]
    return out
