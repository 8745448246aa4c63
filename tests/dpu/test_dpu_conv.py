"""Generalized convolution (FWD / BWD_D / BWD_W) against loop references."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dpu_reference as ref
from runtime_sim.dpu import (OutputRegion, PostOp, conv_backward_bias, conv_backward_data,
                             conv_backward_weights, conv_forward, make_problem)
from tests.tolerances import assert_stored_sums_close, assert_sums_close
from vpuc.diagnostics import VpucError

# (src shape, weights shape, stride, pad_before, pad_after, dilation, groups)
CASES = {
    "1d": ((2, 4, 11), (6, 4, 3), (1,), (1,), (1,), (1,), 1),
    "1d_stride_dil_asym": ((1, 3, 13), (2, 3, 3), (2,), (2,), (0,), (2,), 1),
    "2d_plain": ((1, 3, 6, 7), (4, 3, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    "2d_pad_stride": ((2, 4, 7, 8), (5, 4, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    "2d_asym_pad": ((1, 2, 6, 5), (3, 2, 3, 2), (1, 2), (2, 0), (1, 3), (1, 1), 1),
    "2d_dilation": ((1, 2, 9, 9), (3, 2, 3, 3), (1, 1), (2, 1), (2, 1), (2, 3), 1),
    "2d_groups": ((2, 6, 5, 5), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2),
    "2d_depthwise": ((1, 5, 6, 6), (5, 1, 3, 3), (2, 1), (1, 1), (0, 1), (1, 1), 5),
    "2d_depthwise_mult": ((1, 3, 5, 5), (6, 1, 2, 2), (1, 1), (0, 0), (1, 1), (1, 1), 3),
    "2d_stride_gt_kernel": ((1, 2, 7, 7), (2, 2, 1, 2), (3, 2), (0, 0), (0, 1), (1, 1), 1),
    "2d_1x1": ((2, 8, 4, 3), (5, 8, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    "3d": ((1, 2, 4, 5, 5), (3, 2, 2, 3, 3), (1, 2, 1), (1, 1, 1), (0, 1, 1), (1, 1, 2), 1),
    "3d_groups": ((1, 4, 3, 4, 4), (4, 2, 3, 2, 2), (2, 1, 1), (1, 0, 1), (1, 1, 0), (1, 1, 1), 2),
}


def _params(case):
    src_shape, w_shape, stride, before, after, dilation, groups = case
    kwargs = dict(stride=stride, padding=tuple(zip(before, after)), dilation=dilation, groups=groups)
    ref_args = (stride, before, after, dilation, groups)
    return src_shape, w_shape, kwargs, ref_args


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("name", CASES)
def test_forward_matches_loops(name):
    src_shape, w_shape, kwargs, ref_args = _params(CASES[name])
    x, w, bias = _random(src_shape, 1), _random(w_shape, 2), _random(w_shape[0], 3)
    got = conv_forward(x, w, bias, **kwargs)
    expected = ref.conv_fwd(x, w, *ref_args) + bias.reshape([-1] + [1] * (x.ndim - 2))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_regions_match_loops(name):
    """A region reads only its windows' part of src (with the padding they reach): every
    box (first, last, middle outputs) is the loop reference's box."""
    src_shape, w_shape, kwargs, ref_args = _params(CASES[name])
    x, w, bias = _random(src_shape, 6), _random(w_shape, 7), _random(w_shape[0], 8)
    expected = ref.conv_fwd(x, w, *ref_args) + bias.reshape([-1] + [1] * (x.ndim - 2))
    out = (1,) * (5 - expected.ndim) + expected.shape[2:]
    oc = w_shape[0]
    for channels in ((0, 1), (oc - 1, oc), (oc // 3, oc)):
        for pick in (lambda n: (0, 1), lambda n: (n - 1, n), lambda n: (n // 2, n // 2 + max(n // 3, 1))):
            spatial = tuple(pick(n) for n in out)
            region = OutputRegion(channels, spatial)
            got = conv_forward(x, w, bias, region=region, **kwargs)
            box = (slice(None), slice(*channels)) + tuple(slice(*r) for r in spatial[5 - expected.ndim:])
            np.testing.assert_allclose(got, expected[box], rtol=1e-12, atol=1e-12)


def test_region_of_padding_only():
    """Output rows whose windows read only padding (the padding exceeds the kernel) are
    the bias; the columns beside them are cropped as usual."""
    x, w, bias = _random((1, 2, 3, 4), 9), _random((3, 2, 2, 3), 10), _random(3, 11)
    kwargs = dict(padding=((4, 0), (1, 1)))
    expected = ref.conv_fwd(x, w, (1, 1), (4, 1), (0, 1), (1, 1), 1) + bias.reshape(-1, 1, 1)
    region = OutputRegion((1, 3), ((0, 1), (0, 2), (1, 3)))
    got = conv_forward(x, w, bias, region=region, **kwargs)
    np.testing.assert_allclose(got, expected[:, 1:3, 0:2, 1:3], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[:, :, :2], np.broadcast_to(bias[1:3, None, None], (1, 2, 2, 2)))


@pytest.mark.parametrize("name", CASES)
def test_backward_data_matches_transpose_conv_loops(name):
    src_shape, w_shape, kwargs, ref_args = _params(CASES[name])
    dst_shape = make_problem(src_shape, w_shape, **kwargs).dst_shape()
    dy, w = _random(dst_shape, 4), _random(w_shape, 5)
    got = conv_backward_data(dy, w, src_shape, **kwargs)
    np.testing.assert_allclose(got, ref.conv_bwd_data(dy, w, src_shape, *ref_args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_backward_weights_matches_loops(name):
    src_shape, w_shape, kwargs, ref_args = _params(CASES[name])
    dst_shape = make_problem(src_shape, w_shape, **kwargs).dst_shape()
    x, dy = _random(src_shape, 6), _random(dst_shape, 7)
    got = conv_backward_weights(x, dy, w_shape, **kwargs)
    np.testing.assert_allclose(got, ref.conv_bwd_weights(x, dy, w_shape, *ref_args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_adjoint_identity(name):
    """<conv(x, w), dy> == <x, bwd_d(dy, w)> == <w, bwd_w(x, dy)> in float64."""
    src_shape, w_shape, kwargs, _ = _params(CASES[name])
    dst_shape = make_problem(src_shape, w_shape, **kwargs).dst_shape()
    x, w, dy = _random(src_shape, 8), _random(w_shape, 9), _random(dst_shape, 10)
    forward = np.vdot(conv_forward(x, w, **kwargs), dy)
    data = np.vdot(x, conv_backward_data(dy, w, src_shape, **kwargs))
    weights = np.vdot(w, conv_backward_weights(x, dy, w_shape, **kwargs))
    assert data == pytest.approx(forward, rel=1e-12)
    assert weights == pytest.approx(forward, rel=1e-12)


def test_backward_bias():
    dy = _random((2, 3, 4, 5), 11)
    np.testing.assert_allclose(conv_backward_bias(dy), dy.sum(axis=(0, 2, 3)))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_float_inputs_round_once_to_output_type(dtype):
    x = _random((1, 8, 6, 6), 12).astype(dtype)
    w = (_random((4, 8, 3, 3), 13) * 0.2).astype(dtype)
    got = conv_forward(x, w, padding=1)
    assert got.dtype == np.dtype(dtype)
    # One rounding to the output type, plus f32 accumulation error (~1e-6 here).
    expected = ref.conv_fwd(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    tolerance = max(float(ml_dtypes.finfo(dtype).eps), 1e-5)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    as_f32 = conv_forward(x, w, padding=1, out_dtype="f32")
    assert as_f32.dtype == np.float32
    # The same GEMM (same shapes, same process) gives the same f32 sums; only the
    # final rounding differs, so storing the f32 result must give the same bits.
    np.testing.assert_array_equal(as_f32.astype(dtype), got)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_inputs_are_exact(dtype):
    rng = np.random.default_rng(14)
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 3, 5, 5), endpoint=True).astype(dtype)
    w = rng.integers(-128, 127, (2, 3, 3, 3)).astype(np.int8)
    got = conv_forward(x, w, padding=1, out_dtype=np.float32)
    expected = ref.conv_fwd(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(got, expected)


def test_integer_output_rounds_half_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, 300.0, -300.0], dtype=np.float32).reshape(1, 1, 6)
    w = np.ones((1, 1, 1), dtype=np.float32)
    np.testing.assert_array_equal(conv_forward(x, w, out_dtype="u8").ravel(), [0, 2, 2, 0, 255, 0])
    np.testing.assert_array_equal(conv_forward(x, w, out_dtype="i8").ravel(), [0, 2, 2, 0, 127, -128])


@pytest.mark.parametrize("post_op, formula", [
    (None, lambda v: v),
    ("relu", lambda v: np.maximum(v, 0)),
    (PostOp.leaky_relu(0.1), lambda v: np.where(v < 0, 0.1 * v, v)),
    (PostOp.clamp(-0.5, 0.75), lambda v: np.clip(v, -0.5, 0.75)),
    (PostOp.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
    (PostOp.tanh(), np.tanh),
])
def test_bias_and_post_ops(post_op, formula):
    x, w, bias = _random((1, 3, 5, 5), 15), _random((4, 3, 3, 3), 16), _random(4, 17)
    pre = ref.conv_fwd(x, w, (1, 1), (1, 1), (1, 1), (1, 1), 1) + bias.reshape(-1, 1, 1)
    got = conv_forward(x, w, bias, padding=1, post_op=post_op)
    np.testing.assert_allclose(got, formula(pre), rtol=1e-12, atol=1e-12)


def test_sigmoid_is_finite_for_large_inputs():
    x = np.array([-1e4, 0.0, 1e4], dtype=np.float32).reshape(1, 1, 3)
    got = conv_forward(x, np.ones((1, 1, 1), np.float32), post_op="sigmoid")
    np.testing.assert_array_equal(got.ravel(), [0.0, 0.5, 1.0])


def test_regions_tile_the_output():
    """Boxes cut across channel groups and space reassemble the full result."""
    x, w, bias = _random((2, 6, 7, 6), 18), _random((6, 2, 3, 3), 19), _random(6, 20)
    kwargs = dict(stride=(1, 2), padding=((1, 2), (1, 0)), dilation=(2, 1), groups=3)
    full = conv_forward(x, w, bias, post_op="relu", **kwargs)
    assembled = np.full_like(full, np.nan)
    _, oc, oh, ow = full.shape
    for c0, c1 in ((0, 1), (1, 4), (4, oc)):
        for h0, h1 in ((0, 2), (2, oh)):
            for w0, w1 in ((0, 1), (1, ow)):
                region = OutputRegion((c0, c1), ((0, 1), (h0, h1), (w0, w1)))
                assembled[:, c0:c1, h0:h1, w0:w1] = conv_forward(x, w, bias, post_op="relu", region=region,
                                                                 **kwargs)
    # A region's GEMM is blocked differently from the whole one's, so the sums may be
    # added in another order: 2 gamma_K sum|w x| + |bias| apart, K = 2*3*3 products + bias.
    # (relu is exact and 1-Lipschitz: it does not widen the gap.)
    magnitude = conv_forward(np.abs(x), np.abs(w), np.abs(bias), **kwargs)
    assert_sums_close(assembled, full, magnitude, terms=w[0].size + 1, dtype=np.float64)


@pytest.mark.parametrize("region", [None, OutputRegion((8, 24), ((0, 1), (3, 37), (1, 40)))])
def test_blocks_of_rows_are_the_whole_gemm_within_its_sums(monkeypatch, region):
    """With BLAS on one thread a large single-group convolution is computed a block of output
    rows at a time, each block's im2col reused while in cache.  Every output is still one
    length-K dot product in f32, so it is the whole-im2col GEMM's within 2 gamma_K sum|w x|
    and the two f16 roundings (the same bits, as BLAS blocks K the same for any M)."""
    from runtime_sim.dpu import conv
    from vpuc.perf import single_threaded_blas
    rng = np.random.default_rng(21)
    x = rng.standard_normal((1, 32, 40, 40)).astype(np.float16)
    w = (rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float16)
    bias = rng.standard_normal(32).astype(np.float16)
    blocks = []
    real_matmul = np.matmul

    def counting_matmul(*args, **kwargs):
        blocks.append(args[0].shape[0])
        return real_matmul(*args, **kwargs)
    with single_threaded_blas():
        whole = conv_forward(x, w, bias, padding=1, post_op="relu", region=region)
        # 7 output rows of 288 x 40 f32 a block, however small the products
        monkeypatch.setattr(conv, "_BLOCK_BYTES", 288 * 40 * 4 * 7)
        monkeypatch.setattr(conv, "_BLOCK_MIN_MACS", 0)
        monkeypatch.setattr(conv.np, "matmul", counting_matmul)
        blocked = conv_forward(x, w, bias, padding=1, post_op="relu", region=region)
    rows, columns = (40, 40) if region is None else (34, 39)
    assert len(blocks) == -(-rows // 7)                           # 6 or 5 blocks
    assert sum(blocks) == rows * columns
    assert all(b % columns == 0 and 6 <= b // columns <= 7 for b in blocks)  # whole rows, even
    magnitude = conv_forward(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                             np.abs(bias.astype(np.float64)), padding=1, region=region)
    assert blocked.shape == whole.shape and blocked.flags.c_contiguous
    assert_stored_sums_close(blocked, whole, magnitude, terms=w[0].size + 1,
                             accumulate=np.float32, store=np.float16)


@pytest.mark.parametrize("cap", [16 << 20, 0])
def test_blocked_results_do_not_share_the_scratch(monkeypatch, cap):
    """The blocks' product lives in a per-thread buffer the next convolution reuses (or, past
    the cap, a fresh one): a result kept in the compute type (f32 out, one output channel:
    no copy on the way out) must still be the caller's own array."""
    from runtime_sim.dpu import conv
    from vpuc.perf import single_threaded_blas
    rng = np.random.default_rng(22)
    w = rng.standard_normal((1, 8, 3, 3)).astype(np.float32)
    first, second = (rng.standard_normal((1, 8, 24, 24)).astype(np.float32) for _ in range(2))
    monkeypatch.setattr(conv, "_BLOCK_BYTES", 72 * 24 * 4 * 5)
    monkeypatch.setattr(conv, "_BLOCK_MIN_MACS", 0)
    monkeypatch.setattr(conv, "_SCRATCH_CAP_BYTES", cap)
    with single_threaded_blas():
        kept = conv_forward(first, w, padding=1)
        assert conv._im2col_blocks(conv.src_view(make_problem(first.shape, w.shape, padding=1)),
                                   first[:, :, None], w.reshape(1, 1, -1)) is not None
        expected = kept.copy()
        conv_forward(second, w, padding=1)
    np.testing.assert_array_equal(kept, expected)


@pytest.mark.parametrize("call, message", [
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 4, 3, 3))), "input channels per group"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((3, 2, 3, 3)), groups=2), "groups=2"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), stride=0), "stride"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), stride=2.0), "stride"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), dilation=(1, 0)), "dilation"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), padding=(1, 2, 3)), "padding"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), padding=((1, -1), 0)), "padding"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), padding=1.5), "padding"),
    (lambda: conv_forward(np.zeros((1, 3, 2, 2)), np.zeros((2, 3, 3, 3))), "exceeds padded input"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3))), "does not match"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)), np.zeros(3)), "bias shape"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5), np.int64), np.zeros((2, 3, 3, 3))),
     "unsupported element type"),
    (lambda: conv_backward_data(np.zeros((1, 2, 4, 4)), np.zeros((2, 3, 3, 3)), (1, 3, 5, 5)),
     "diff_dst shape"),
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((2, 3, 3, 3)),
                          region=OutputRegion((0, 3), ((0, 1), (0, 3), (0, 3)))), "outside the output"),
])
def test_invalid_arguments_raise(call, message):
    with pytest.raises(VpucError, match=message):
        call()
