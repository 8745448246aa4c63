"""The numpy meaning of the integer layers (``vpuc/ir/graph_ops_quant.py``).

``QConvolution``'s sums are exact: the products of u8/i8 data and i8 weights summed in
float64, exact below 2^53 (a layer would need 2^37 taps to reach it), then the PPE's
fixed-point requantization in int64: ``round_half_even(acc * mult / 2^shift)``, the
output zero point, relu at the zero point, saturation.  Bit for bit what the DPU's
integer mode computes (``runtime_sim/dpu/integer.py``), so the oracle and the simulator
agree exactly on these layers.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.fixed_point import fixed_point_scale, round_shift


def fixed_point_table(scale: np.ndarray) -> np.ndarray:
    """Each channel's requantization scale as the PPE's ``(mult, shift)``, int32 ``[C, 2]``."""
    return np.array([fixed_point_scale(float(s)) for s in np.asarray(scale).reshape(-1)],
                    np.int32).reshape(-1, 2)


def requantize(acc: np.ndarray, table: np.ndarray, zero_point: int, relu: bool,
               dtype: np.dtype) -> np.ndarray:
    """``acc`` (int64, channels on axis 1) requantized per channel by ``table``'s (mult, shift):
    rounded half to even, plus ``zero_point``, relu at it, saturated to ``dtype``."""
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    mult = table[:, 0].astype(np.int64).reshape(shape)
    shift = table[:, 1].astype(np.int64).reshape(shape)
    info = np.iinfo(dtype)
    low = max(int(info.min), zero_point) if relu else int(info.min)
    return np.clip(round_shift(acc * mult, shift) + zero_point, low,
                   int(info.max)).astype(dtype)


def qconvolution(args: list[np.ndarray], attrs) -> np.ndarray:
    from vpuc.reference.graph import _conv
    x, w, bias, scale = args
    shifted = x.astype(np.float64) - float(attrs["in_zero_point"])    # padding: zero point
    sums = _conv(shifted, w.astype(np.float64), attrs)
    acc = np.rint(sums).astype(np.int64) + bias.astype(np.int64).reshape(1, -1, 1, 1)
    acc = np.clip(acc, np.iinfo(np.int32).min, np.iinfo(np.int32).max)   # the i32 accumulator
    dtype = np.uint8 if attrs["out"].value == "u8" else np.int8
    return requantize(acc, fixed_point_table(scale), int(attrs["out_zero_point"]),
                      bool(attrs["relu"]), np.dtype(dtype))


QUANT_LAYERS = {"QConvolution": qconvolution}
