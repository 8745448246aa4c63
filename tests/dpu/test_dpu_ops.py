"""The DPU op set against loop references, variants tiling outputs, and MAC counts."""

from __future__ import annotations

import numpy as np
import pytest

import dpu_reference as ref
from runtime_sim.dpu import (PostOp, Variant, add, avgpool, conv2d, depthwise_conv2d, full_variant, macs,
                             matmul, maxpool, mul, split_output)
from tests.tolerances import assert_stored_sums_close, assert_sums_close
from vpuc.diagnostics import VpucError


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def test_conv2d_padding_is_top_bottom_left_right():
    x, w, bias = _random((1, 3, 6, 7), 1), _random((4, 3, 3, 2), 2), _random(4, 3)
    got = conv2d(x, w, bias, stride=(2, 1), padding=(2, 0, 1, 3), dilation=(1, 2), post_op="relu")
    expected = ref.conv_fwd(x, w, (2, 1), (2, 1), (0, 3), (1, 2), 1) + bias.reshape(-1, 1, 1)
    np.testing.assert_allclose(got, np.maximum(expected, 0), rtol=1e-12, atol=1e-12)


def test_depthwise_conv2d():
    x, w = _random((2, 4, 5, 5), 4), _random((4, 1, 3, 3), 5)
    got = depthwise_conv2d(x, w, stride=2, padding=1)
    expected = ref.conv_fwd(x, w, (2, 2), (1, 1), (1, 1), (1, 1), 4)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_f16_conv2d_output_type():
    x, w = _random((1, 16, 8, 8), 6).astype(np.float16), (_random((8, 16, 3, 3), 7) * 0.1).astype(np.float16)
    got = conv2d(x, w, padding=1)
    assert got.dtype == np.float16
    expected = ref.conv_fwd(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-3, atol=2e-3)


def test_matmul_both_weight_layouts():
    a, b, bias = _random((5, 7), 8), _random((7, 3), 9), _random(3, 10)
    expected = ref.matmul(a, b) + bias
    np.testing.assert_allclose(matmul(a, b, bias), expected, rtol=1e-12)
    weights_nk = np.ascontiguousarray(b.T)
    np.testing.assert_allclose(matmul(a, weights_nk, bias, transpose_b=True), expected, rtol=1e-12)
    clamped = matmul(a, b, bias, post_op=PostOp.clamp(-1, 1))
    np.testing.assert_allclose(clamped, np.clip(expected, -1, 1), rtol=1e-12)


def test_eltwise_add_mul_with_post_op():
    a, b = _random((1, 3, 4, 5), 11), _random((1, 3, 4, 5), 12)
    np.testing.assert_allclose(add(a, b, post_op=PostOp.leaky_relu(0.25)),
                               np.where(a + b < 0, 0.25 * (a + b), a + b), rtol=1e-15)
    np.testing.assert_allclose(mul(a, b, post_op="tanh"), np.tanh(a * b), rtol=1e-15)
    scale = _random((1, 3, 1, 1), 13)
    np.testing.assert_allclose(mul(a, scale), a * scale, rtol=1e-15)
    f16 = add(a.astype(np.float16), b.astype(np.float16))
    assert f16.dtype == np.float16
    np.testing.assert_array_equal(f16, (a.astype(np.float16).astype(np.float32)
                                        + b.astype(np.float16).astype(np.float32)).astype(np.float16))


@pytest.mark.parametrize("kernel, stride, pads", [
    ((2, 2), (2, 2), (0, 0, 0, 0)),
    ((3, 3), (2, 2), (1, 1, 1, 1)),
    ((3, 2), (1, 2), (2, 0, 1, 1)),
    ((7, 6), (1, 1), (0, 0, 0, 0)),         # global: one window per channel, one reduction
    ((8, 6), (1, 1), (1, 0, 0, 0)),         # global with a padded row
])
def test_pools_match_loops(kernel, stride, pads):
    x = _random((2, 3, 7, 6), 14)
    np.testing.assert_allclose(maxpool(x, kernel, stride, pads), ref.pool(x, kernel, stride, pads, "max"))
    np.testing.assert_allclose(avgpool(x, kernel, stride, pads), ref.pool(x, kernel, stride, pads, "avg"),
                               rtol=1e-12)
    np.testing.assert_allclose(avgpool(x, kernel, stride, pads, exclude_pad=False),
                               ref.pool(x, kernel, stride, pads, "avg", exclude_pad=False), rtol=1e-12)


def test_maxpool_never_picks_padding():
    x = -np.ones((1, 1, 3, 3), dtype=np.float16)
    np.testing.assert_array_equal(maxpool(x, 3, 1, 1), -np.ones((1, 1, 3, 3)))


X = _random((2, 6, 9, 8), 20).astype(np.float16)
W = (_random((6, 3, 3, 3), 21) * 0.2).astype(np.float16)
W_DW = _random((6, 1, 3, 3), 22).astype(np.float16)
B = _random(6, 23).astype(np.float16)
OPS = {
    "conv2d": (lambda v=None, x=X, w=W, b=B: conv2d(x, w, b, stride=(1, 2), padding=(1, 0, 2, 1),
                                                    dilation=(2, 1), groups=2, post_op="relu", variant=v)),
    "depthwise": lambda v=None, x=X, w=W_DW: depthwise_conv2d(x, w, padding=1, variant=v),
    "add": lambda v=None: add(X, X[:, :1], post_op="sigmoid", variant=v),
    "mul": lambda v=None: mul(X, X, variant=v),
    "maxpool": lambda v=None: maxpool(X, (3, 2), (2, 1), (1, 1, 0, 1), variant=v),
    "avgpool": lambda v=None: avgpool(X, 3, 2, 1, variant=v),
    "global_avgpool": lambda v=None: avgpool(X, (9, 8), variant=v),
    "global_maxpool": lambda v=None: maxpool(X, (9, 8), variant=v),
}
# The convolutions are f32 GEMMs that a variant blocks differently from the whole
# output: their operands, and the terms per sum (products + bias).  The other ops
# combine operands or window taps one at a time in a fixed order: same bits.
GEMMS = {"conv2d": ((X, W, B), W[0].size + 1), "depthwise": ((X, W_DW), W_DW[0].size)}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("grid", [(1, 1, 1), (3, 2, 1), (2, 3, 4), (1, 1, 6)])
def test_variants_tile_the_output_exactly(op, grid):
    full = OPS[op]()
    _, c, h, w = full.shape        # a global pool's 1x1 output splits over channels only
    variants = split_output(full.shape, min(grid[0], w), min(grid[1], h), min(grid[2], c))
    assembled = np.zeros_like(full)
    written = np.zeros(full.shape, dtype=int)
    for variant in variants:
        part = OPS[op](variant)
        assert part.shape == (full.shape[0],) + variant.shape()
        variant.store(assembled, part)
        written[variant.slices()] += 1
    assert (written == 1).all()
    if op in GEMMS:
        operands, terms = GEMMS[op]
        magnitude = OPS[op](None, *(np.abs(a).astype(np.float64) for a in operands))
        assert_stored_sums_close(assembled, full, magnitude, terms, np.float32, np.float16)
    else:
        np.testing.assert_array_equal(assembled, full)


def test_matmul_variants():
    a, b = _random((7, 5), 24), _random((5, 6), 25)
    full = matmul(a, b)
    assembled = np.zeros_like(full)
    for variant in split_output((1, 6, 7, 1), parts_y=3, parts_z=2):
        variant.store(assembled, matmul(a, b, variant=variant))
    # float64 GEMMs of other shapes may sum the K = 5 products in another order.
    assert_sums_close(assembled, full, np.abs(a) @ np.abs(b), terms=5, dtype=np.float64)


def test_macs():
    assert macs("conv2d", (1, 64, 56, 56), kernel=(3, 3), in_channels=64) == 56 * 56 * 64 * 64 * 9
    assert macs("conv2d", (1, 64, 56, 56), kernel=(3, 3), in_channels=64, groups=4) == 56 * 56 * 64 * 16 * 9
    assert macs("depthwise_conv2d", (1, 32, 10, 10), kernel=(3, 3)) == 32 * 100 * 9
    assert macs("matmul", (8, 16), in_channels=32) == 8 * 16 * 32
    assert macs("add", (1, 16, 4, 4)) == 256
    assert macs("maxpool", (1, 16, 4, 4), kernel=(2, 2)) == 1024
    # A variant's MACs are its share of the workload.
    variant = Variant(0, 0, 0, 27, 55, 31)
    part = macs("conv2d", (1,) + variant.shape(), kernel=(3, 3), in_channels=64)
    assert part * 4 == macs("conv2d", (1, 64, 56, 56), kernel=(3, 3), in_channels=64)


def test_full_variant_and_split_output():
    assert full_variant((1, 4, 3, 2)) == Variant(0, 0, 0, 1, 2, 3)
    assert len(split_output((1, 4, 3, 2), 2, 3, 4)) == 24


@pytest.mark.parametrize("call, message", [
    (lambda: conv2d(X, W, padding=(1, 2)), "top, bottom, left, right"),
    (lambda: conv2d(X[0], W), "NCHW"),
    (lambda: conv2d(X, W, groups=2, variant=Variant(0, 0, 0, 8, 0, 0)), "x range"),
    (lambda: depthwise_conv2d(X, W), "depthwise weights"),
    (lambda: matmul(_random((3, 4), 0), _random((3, 4), 0)), "K mismatch"),
    (lambda: matmul(_random((3, 4), 0), _random((4, 2), 0), np.zeros(3)), "bias shape"),
    (lambda: add(X, X[:, :, :2]), "does not broadcast"),
    (lambda: maxpool(X, 2, 2, 2), "smaller than the kernel"),
    (lambda: avgpool(X, (2,)), "pool kernel"),
    (lambda: maxpool(X, 2, stride=0), "stride"),
    (lambda: macs("softmax", (1, 1, 1, 1)), "unknown op"),
    (lambda: split_output((1, 2, 2, 2), parts_x=3), "cannot split"),
    (lambda: add(X, X, post_op="gelu"), "unknown post-op"),
    (lambda: add(X, X, out_dtype="e4m3"), "unsupported element type"),
])
def test_invalid_arguments_raise(call, message):
    with pytest.raises(VpucError, match=message):
        call()
