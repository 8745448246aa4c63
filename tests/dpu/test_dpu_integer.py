"""The DPU's integer mode (runtime_sim/dpu/integer.py) against int64 numpy references.

Integer arithmetic throughout, so every comparison is bit-exact: the sums against an
explicit int64 convolution over the input padded with its zero point, the requantization
against Python's exact rationals rounded half to even.  The fixed-point requantization is
also compared with onnxruntime's float one (``round_half_even(sum * scale) + zero point``):
they may differ by one step, and only where ``sum * scale`` lies within the fixed-point
scale's error of a tie (docs/vir.md, "The DPU's integer mode").
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from runtime_sim.dpu import Variant
from runtime_sim.dpu.integer import dequantize, integer_sums, requantize
from runtime_sim.dpu.numerics import PostOp
from vpuc.diagnostics import VpucError
from vpuc.ir.fixed_point import fixed_point_scale


def _conv_int64(x, w, bias, zp, stride, pad, dilation, groups=1):
    """sum over taps of x_padded * w + bias, in int64, the padded cells holding ``zp``."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = stride, pad, dilation
    padded = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr)),
                    constant_values=zp)
    oc, icg, kh, kw = w.shape
    oh = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
    ocg = oc // groups
    out = np.zeros((x.shape[0], oc, oh, ow), np.int64)
    for g in range(groups):
        xs = padded[:, g * icg:(g + 1) * icg]
        ws = w[g * ocg:(g + 1) * ocg].astype(np.int64)
        for i in range(kh):
            for j in range(kw):
                tap = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                         j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", tap, ws[:, :, i, j])
    return out + bias.astype(np.int64).reshape(1, -1, 1, 1)


def _rne(value: Fraction) -> int:
    """``value`` rounded half to even, exactly."""
    floor = value.numerator // value.denominator
    rest = value - floor
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2):
        return floor + 1
    return floor


def _folded(bias, w, zp):
    """The NPU compiler's bias: the input zero point folded in (bias - zp * sum(w))."""
    return bias - zp * w.reshape(w.shape[0], -1).astype(np.int64).sum(1)


@pytest.mark.parametrize("dtype,zp", [(np.uint8, 131), (np.int8, -7)])
@pytest.mark.parametrize("stride,pad,dilation", [((1, 1), (1, 1, 1, 1), (1, 1)),
                                                 ((2, 1), (2, 0, 1, 3), (1, 2))])
def test_conv_sums_are_the_int64_convolution_over_zero_point_padding(dtype, zp, stride, pad,
                                                                     dilation):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, 24, 9, 10), dtype=dtype)
    w = rng.integers(-128, 128, (32, 24, 3, 3), dtype=np.int8)
    bias = _folded(rng.integers(-5000, 5000, 32), w, zp).astype(np.int32)
    got = integer_sums("conv", x, w, bias, zp, stride=stride, padding=pad, dilation=dilation)
    want = _conv_int64(x, w, bias, zp, stride, pad, dilation)
    np.testing.assert_array_equal(got, want)
    # a variant's box is the same integers
    box = Variant(1, 2, 5, 3, 4, 20)
    part = integer_sums("conv", x, w, bias, zp, stride=stride, padding=pad,
                        dilation=dilation, variant=box)
    np.testing.assert_array_equal(part, want[:, 5:21, 2:5, 1:4])


def test_the_folded_bias_makes_padded_cells_contribute_nothing():
    """With the zero point folded into the bias, a padded cell adds 0: the sums are those of
    ``x - zp`` padded with zeros (the real-valued convolution's numerator)."""
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 8, 5, 5), dtype=np.uint8)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    zp = 100
    got = integer_sums("conv", x, w, _folded(np.zeros(8, np.int64), w, zp).astype(np.int32), zp,
                       padding=(1, 1, 1, 1))
    centred = _conv_int64((x.astype(np.int64) - zp), w, np.zeros(8), 0, (1, 1), (1, 1, 1, 1),
                          (1, 1))
    np.testing.assert_array_equal(got, centred)


def test_depthwise_and_matmul_sums():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (2, 16, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (16, 1, 3, 3), dtype=np.int8)
    bias = rng.integers(-999, 999, 16).astype(np.int32)
    got = integer_sums("dwconv", x, w, bias, 5, stride=(2, 2), padding=(1, 1, 1, 1))
    np.testing.assert_array_equal(got, _conv_int64(x, w, bias, 5, (2, 2), (1, 1, 1, 1), (1, 1),
                                                   groups=16))
    a = rng.integers(0, 256, (7, 40), dtype=np.uint8)
    fc = rng.integers(-128, 128, (12, 40), dtype=np.int8)
    fc_bias = rng.integers(-999, 999, 12).astype(np.int32)
    want = (a.astype(np.int64) - 9) @ fc.T.astype(np.int64) + 9 * fc.astype(np.int64).sum(1) \
        + fc_bias
    np.testing.assert_array_equal(integer_sums("matmul", a, fc, fc_bias, 9), want)
    np.testing.assert_array_equal(
        integer_sums("matmul", a, fc, fc_bias, 9, variant=Variant(0, 2, 4, 0, 5, 10)),
        want[2:6, 4:11])


def test_sums_beyond_2_to_the_24_are_exact():
    """K = 4096 taps of 255 * 127: sums of about 1.3e8, where float32 has steps of 8 or
    more; the integer mode is exact (float32 accumulation would not be)."""
    a = np.full((2, 4096), 255, np.uint8)
    a[1, ::3] = 254
    w = np.full((3, 4096), 127, np.int8)
    w[1, 1::2] = 126
    want = a.astype(np.int64) @ w.T.astype(np.int64)
    assert want.max() > 1 << 24
    np.testing.assert_array_equal(integer_sums("matmul", a, w, None, 0), want)
    # some of these sums have no float32 representation: an f32 datapath could not hold them
    assert (want.astype(np.float32).astype(np.int64) != want).any()


def test_requantize_rounds_half_to_even_exactly():
    sums = np.array([[3, 5, -3, -5, 7, 1, -1, 0, 2 ** 31 - 1, -2 ** 31]], np.int64).T
    # one channel: sums * 1 / 2 -> 1.5, 2.5, -1.5, -2.5, 3.5, 0.5, -0.5, 0, huge, -huge
    got = requantize(sums.reshape(1, -1), np.array([1]), np.array([1]), 0, None,
                     np.dtype(np.int8), axis=0)
    assert got.reshape(-1).tolist() == [2, 2, -2, -2, 4, 0, 0, 0, 127, -128]


@pytest.mark.parametrize("out_dtype,zp", [(np.uint8, 77), (np.int8, -20)])
def test_requantize_against_exact_rationals(out_dtype, zp):
    rng = np.random.default_rng(4)
    channels = 24
    sums = rng.integers(-300_000, 300_000, (1, channels, 6, 5))
    sums[0, :, 0, 0] = 0
    mult = rng.integers(16384, 32768, channels)
    shift = rng.integers(20, 30, channels)
    sums[0, :, 0, 1] = 1 << (shift - 1)          # exact ties: sum * mult / 2^shift = mult / 2
    got = requantize(sums, mult, shift, zp, None, np.dtype(out_dtype))
    info = np.iinfo(out_dtype)
    want = np.empty_like(sums)
    for c in range(channels):
        for index in np.ndindex(sums[0, c].shape):
            value = Fraction(int(sums[(0, c) + index]) * int(mult[c]), 1 << int(shift[c]))
            want[(0, c) + index] = min(max(_rne(value) + zp, info.min), info.max)
    np.testing.assert_array_equal(got, want)


def test_relu_clamps_at_the_zero_point_and_clamp_in_stored_values():
    sums = np.arange(-40, 40, dtype=np.int64).reshape(1, 1, 8, 10)
    one = (np.array([1]), np.array([0]))
    relu = requantize(sums, *one, -10, PostOp.relu(), np.dtype(np.int8))
    assert relu.min() == -10 and relu.max() == 29
    clamped = requantize(sums, *one, 0, PostOp.clamp(-5, 7), np.dtype(np.int8))
    assert clamped.min() == -5 and clamped.max() == 7
    with pytest.raises(VpucError, match="mult of 40000 is outside the PPE's"):
        requantize(sums, np.array([40000]), np.array([0]), 0, None, np.dtype(np.int8))


def test_dequantize_is_one_f32_product_rounded_to_f16():
    sums = np.array([[[[1000, -77, 123457]]]], np.int64).reshape(1, 1, 1, 3)
    scale = np.array([0.0123], np.float32)
    got = dequantize(sums, scale, None)
    want = (sums.astype(np.float32) * np.float32(0.0123)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_fixed_point_scale_is_the_npu_compilers_approximation():
    for scale in (1e-4, 0.0123, 0.5, 0.75, 1.0, 3.3, 1000.0):
        mult, shift = fixed_point_scale(scale)
        assert 1 << 14 <= mult < 1 << 15
        approx = mult / 2.0 ** shift
        assert approx <= scale and (scale - approx) / scale < 2.0 ** -14
    assert fixed_point_scale(0.5) == (16384, 15)
    with pytest.raises(VpucError, match="needs a PPE shift of -1"):
        fixed_point_scale(2.0 ** 15)


def test_fixed_point_and_float_requantization_differ_by_one_step_only_near_ties():
    """onnxruntime requantizes with the float scale M: RNE(sum * M) + zp.  The PPE uses
    M' = mult * 2^-shift, M - M' < M * 2^-14.  For an unsaturated output |sum * M| < 2^8,
    so |sum * M - sum * M'| < 2^8 * 2^-14 = 2^-6: the two roundings differ only when a tie
    k + 1/2 lies between sum * M' and sum * M, by one step."""
    rng = np.random.default_rng(5)
    differing = 0
    for _ in range(20):
        scale = float(rng.uniform(1e-5, 1e-3))
        mult, shift = fixed_point_scale(scale)
        sums = rng.integers(-120_000, 120_000, 20_000)
        sums = sums[np.abs(sums * scale) < 127]
        fixed = requantize(sums.reshape(1, -1), np.array([mult]), np.array([shift]), 0, None,
                           np.dtype(np.int8), axis=0).astype(np.int64).reshape(-1)
        exact = sums * scale
        floating = np.clip(np.rint(exact), -128, 127).astype(np.int64)
        diff = fixed - floating
        assert np.abs(diff).max() <= 1
        near_tie = np.abs(np.abs(exact - np.floor(exact)) - 0.5) <= np.abs(exact) * 2.0 ** -14
        assert not (diff != 0)[~near_tie].any()
        differing += int((diff != 0).sum())
    assert differing < 0.01 * 20 * 20_000
