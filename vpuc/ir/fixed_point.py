"""A float requantization scale as the PPE's fixed-point (mult, shift).

The NPU compiler's ``QuantizationApproximation`` (openvinotoolkit/npu_plugin,
src/vpux_compiler/src/utils/quantization.cpp, ``approximate<uint16_t>(15, target)``):
``frexp`` splits the scale into a mantissa in [0.5, 1) and an exponent; ``mult`` is the
mantissa times 2^15 truncated (a C++ cast), ``shift = 15 - exponent``, so
``mult * 2^-shift`` is the scale less under one unit of ``mult``: a relative error
below 2^-14.  NPU37XX has no post-shift, so a scale of 2^15 or more (a shift below 0)
is refused, as the NPU compiler refuses it; a shift past the register's 63 too.
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.diagnostics import VpucError

MULT_BITS = 15
MAX_SHIFT = 63          # ppe_scale_shift: 6 bits


def fixed_point_scale(scale: float) -> tuple[int, int]:
    """(mult, shift) with ``mult * 2^-shift`` the largest such value not above ``scale``'s
    15-bit mantissa (``scale`` > 0)."""
    if not (scale > 0 and math.isfinite(scale)):
        raise VpucError(f"requantization scale {scale!r}; expected a positive finite number")
    mantissa, exponent = math.frexp(scale)
    mult = int(mantissa * (1 << MULT_BITS))
    shift = MULT_BITS - exponent
    if not 0 <= shift <= MAX_SHIFT:
        raise VpucError(f"requantization scale {scale!r} needs a PPE shift of {shift}; "
                        f"NPU37XX's is 0..{MAX_SHIFT} (no post-shift)")
    return mult, shift


# A shift past 48 rounds every product of a 32-bit sum and a 16-bit mult (below 2^47) as
# 48 does (to 0), and keeps ``floor << shift`` inside int64
SHIFT_CAP = 48


def round_shift(product: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``product / 2^shift`` rounded half to even, in int64 (``shift`` broadcast against
    ``product``): the PPE's ``round_mode(RNE)`` after its scale multiply."""
    s = np.minimum(shift, SHIFT_CAP)
    floor = product >> s
    rest = product - (floor << s)
    half = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0)
    up = (s > 0) & ((rest > half) | ((rest == half) & (floor & 1 == 1)))
    return floor + up
