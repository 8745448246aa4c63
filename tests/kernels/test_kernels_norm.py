"""reduce_max, log_softmax and mvn over the last logical axis vs numpy: ranks 1-5,
tails, NCHW (axis innermost in memory) and NHWC (axis strided: the group path),
long and short rows, f16/f32 (and both output types for reduce_max), through both
interpreter paths (kernel_harness.run checks the fast path against the exact one)."""

import zlib

import numpy as np
import pytest

from kernel_harness import Tensor, channels_last, dense_strides, run
from kernel_reference import EPS32, assert_within
from vpuc.abi.params import ScalarArg
from vpuc.ir.types import ElemType

DTYPES = [np.float16, np.float32]
IDS = ["f16", "f32"]


def seed(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def random_case(rng, rank, long_rows):
    shape = [int(d) for d in rng.integers(1, 5, rank)]
    shape[-1] = int(rng.integers(33, 90)) if long_rows else int(rng.integers(2, 12))
    perm = channels_last(rank) if rank % 2 == 0 else tuple(range(rank))
    return tuple(shape), perm


def log_softmax_ref(x):
    wide = x.astype(np.float64)
    shifted = wide - wide.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def check_log_softmax(x, out):
    """x - max exact in f32 (f16 inputs) or to eps32 |x - max|; log(sum) to a few ulp
    of f32 with n/4 additions per lane; then one rounding to the type."""
    ref = log_softmax_ref(x)
    wide = x.astype(np.float64)
    n = x.shape[-1] if x.ndim else 1
    z = np.abs(wide - wide.max(-1, keepdims=True))
    lse = np.abs(ref - (wide - wide.max(-1, keepdims=True)))
    bound = (4 + n / 4) * EPS32 * (lse + 1) + 2 * EPS32 * (z + np.abs(ref))
    if out.dtype == np.float16:
        bound = bound + np.abs(np.spacing(ref.astype(np.float16))).astype(np.float64)
    assert_within(out, ref, bound)


def mvn_ref(x, eps, outside):
    wide = x.astype(np.float64)
    mean = wide.mean(-1, keepdims=True)
    var = ((wide - mean) ** 2).mean(-1, keepdims=True)
    scale = 1 / (np.sqrt(var) + eps) if outside else 1 / np.sqrt(var + eps)
    return (wide - mean) * scale


def check_mvn(x, out, eps, outside):
    """f32 sums of n terms (n/4 per lane) for the mean and the variance: the
    deviations carry n eps32 |x|max relative to the spread, the scale a few eps32;
    then one rounding to the type."""
    ref = mvn_ref(x, eps, outside)
    wide = x.astype(np.float64)
    n = x.shape[-1] if x.ndim else 1
    mean = wide.mean(-1, keepdims=True)
    spread = np.sqrt(((wide - mean) ** 2).mean(-1, keepdims=True)) + eps
    big = np.abs(wide).max(-1, keepdims=True)
    bound = (8 + n) * EPS32 * (np.abs(ref) + big / spread)
    if out.dtype == np.float16:
        bound = bound + np.abs(np.spacing(ref.astype(np.float16))).astype(np.float64)
    assert_within(out, ref, bound)


def mvn_scalars(eps, outside):
    return [ScalarArg(ElemType.F32, eps), ScalarArg(ElemType.I32, int(outside))]


@pytest.mark.parametrize("out_dtype", DTYPES, ids=["to-f16", "to-f32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_reduce_max(rank, dtype, out_dtype):
    rng = seed("reduce_max", rank, dtype, out_dtype)
    shape, perm = random_case(rng, rank, long_rows=rank % 2 == 1)
    x = (rng.standard_normal(shape) * 3 - 20).astype(dtype)     # all negative: 0 is wrong
    out_shape = shape[:-1] + (1,)
    result = run("reduce_max", [Tensor(x, perm)], Tensor(np.zeros(out_shape, out_dtype), perm),
                 rng=rng)
    ref = x.max(-1, keepdims=True).astype(out_dtype)
    np.testing.assert_array_equal(result.output, ref)


@pytest.mark.parametrize("long_rows", [False, True], ids=["short", "long"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_log_softmax(rank, dtype, long_rows):
    rng = seed("log_softmax", rank, dtype, long_rows)
    shape, perm = random_case(rng, rank, long_rows)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    result = run("log_softmax", [Tensor(x, perm)], Tensor(np.zeros(shape, dtype), perm), rng=rng)
    check_log_softmax(x, result.output)


@pytest.mark.parametrize("outside", [False, True], ids=["eps-inside", "eps-outside"])
@pytest.mark.parametrize("long_rows", [False, True], ids=["short", "long"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_mvn(rank, dtype, long_rows, outside):
    rng = seed("mvn", rank, dtype, long_rows, outside)
    shape, perm = random_case(rng, rank, long_rows)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)     # a mean to take out
    eps = 1e-5 if not outside else 1e-3
    result = run("mvn", [Tensor(x, perm)], Tensor(np.zeros(shape, dtype), perm),
                 mvn_scalars(eps, outside), rng=rng)
    check_mvn(x, result.output, eps, outside)


def padded_view(shape, perm):
    """Strides of a view with every other element along the memory-innermost dim."""
    parent = list(shape)
    parent[perm[-1]] *= 2
    strides = list(dense_strides(parent, perm))
    strides[perm[-1]] *= 2
    return tuple(strides)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("inner", [5, 40])
def test_strided_views_and_mixed_layouts(layout, inner):
    rng = seed("norm views", layout, inner)
    shape = (2, 3, 4, inner)
    perm = channels_last(4) if layout == "NHWC" else (0, 1, 2, 3)
    other = (0, 1, 2, 3) if layout == "NHWC" else channels_last(4)
    x = (rng.standard_normal(shape) * 3).astype(np.float16)
    for out_perm, in_strides in ((perm, padded_view(shape, perm)), (other, None)):
        result = run("log_softmax", [Tensor(x, perm, in_strides)],
                     Tensor(np.zeros(shape, np.float16), out_perm), rng=rng)
        check_log_softmax(x, result.output)
        result = run("mvn", [Tensor(x, perm, in_strides)],
                     Tensor(np.zeros(shape, np.float16), out_perm), mvn_scalars(1e-5, 0), rng=rng)
        check_mvn(x, result.output, 1e-5, False)
    out_shape = shape[:-1] + (1,)
    result = run("reduce_max", [Tensor(x, perm, padded_view(shape, perm))],
                 Tensor(np.zeros(out_shape, np.float32), perm), rng=rng)
    np.testing.assert_array_equal(result.output, x.max(-1, keepdims=True).astype(np.float32))


def test_a_constant_row_normalizes_to_zero_and_large_inputs_stay_finite():
    x = np.array([[7.0] * 37, [1000.0, -1000.0] * 18 + [0.0]], np.float32)
    out = run("mvn", [Tensor(x)], Tensor(np.zeros(x.shape, np.float32)),
              mvn_scalars(1e-5, 0)).output
    assert (out[0] == 0).all()
    check_mvn(x, out, 1e-5, False)
    y = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4]], np.float32)
    out = run("log_softmax", [Tensor(y)], Tensor(np.zeros(y.shape, np.float32))).output
    assert np.isfinite(out[0]).all()
    check_log_softmax(y, out)


def test_rank_zero():
    scalar = np.asarray(np.float16(3.5))
    assert run("reduce_max", [Tensor(scalar)], Tensor(np.zeros((), np.float32))).output == 3.5
    assert run("log_softmax", [Tensor(scalar)], Tensor(np.zeros((), np.float16))).output == 0
    assert run("mvn", [Tensor(scalar)], Tensor(np.zeros((), np.float16)),
               mvn_scalars(1e-5, 0)).output == 0
