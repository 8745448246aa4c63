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
