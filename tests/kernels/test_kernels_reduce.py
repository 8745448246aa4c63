"""softmax, reduce_sum and reduce_mean over the last logical axis vs numpy: ranks 1-5,
tails, NCHW (axis innermost in memory) and NHWC (axis strided), strided views, long
and short rows (both of the kernels' row strategies), f16/f32 in and out."""

import zlib

import numpy as np
import pytest

from kernel_harness import Tensor, channels_last, dense_strides, run
from kernel_reference import check_reduction, check_softmax

DTYPES = [np.float16, np.float32]
IDS = ["f16", "f32"]


def seed(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def random_case(rng, rank, long_rows):
    shape = [int(d) for d in rng.integers(1, 5, rank)]
    shape[-1] = int(rng.integers(33, 90)) if long_rows else int(rng.integers(2, 12))
    perm = channels_last(rank) if rank % 2 == 0 else tuple(range(rank))
    return tuple(shape), perm


def reduced(shape):
    return shape[:-1] + (1,)


@pytest.mark.parametrize("long_rows", [False, True], ids=["short", "long"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_softmax(rank, dtype, long_rows):
    rng = seed("softmax", rank, dtype, long_rows)
    shape, perm = random_case(rng, rank, long_rows)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    result = run("softmax", [Tensor(x, perm)], Tensor(np.zeros(shape, dtype), perm), rng=rng)
    check_softmax(x, result.output)


@pytest.mark.parametrize("out_dtype", DTYPES, ids=["to-f16", "to-f32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", ["reduce_sum", "reduce_mean"])
def test_reductions(name, rank, dtype, out_dtype):
    rng = seed(name, rank, dtype, out_dtype)
    shape, perm = random_case(rng, rank, long_rows=rank % 2 == 1)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    result = run(name, [Tensor(x, perm)], Tensor(np.zeros(reduced(shape), out_dtype), perm),
                 rng=rng)
    check_reduction(x, result.output, mean=name == "reduce_mean")


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
    rng = seed("views", layout, inner)
    shape = (2, 3, 4, inner)
    perm = channels_last(4) if layout == "NHWC" else (0, 1, 2, 3)
    x = (rng.standard_normal(shape) * 3).astype(np.float16)
    result = run("softmax", [Tensor(x, perm, padded_view(shape, perm))],
                 Tensor(np.zeros(shape, np.float16), perm), rng=rng)
    check_softmax(x, result.output)
    other = (0, 1, 2, 3) if layout == "NHWC" else channels_last(4)
    result = run("softmax", [Tensor(x, perm)], Tensor(np.zeros(shape, np.float16), other), rng=rng)
    check_softmax(x, result.output)
    result = run("softmax", [Tensor(x, perm)],
                 Tensor(np.zeros(shape, np.float16), perm, padded_view(shape, perm)), rng=rng)
    check_softmax(x, result.output)
    for name in ("reduce_sum", "reduce_mean"):
        result = run(name, [Tensor(x, perm, padded_view(shape, perm))],
                     Tensor(np.zeros(reduced(shape), np.float32), perm), rng=rng)
        check_reduction(x, result.output, mean=name == "reduce_mean")
        out_shape = reduced(shape)
        result = run(name, [Tensor(x, perm)], Tensor(np.zeros(out_shape, np.float16), perm,
                                                     padded_view(out_shape, perm)), rng=rng)
        check_reduction(x, result.output, mean=name == "reduce_mean")


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4]], np.float32)
    result = run("softmax", [Tensor(x)], Tensor(np.zeros(x.shape, np.float32)))
    check_softmax(x, result.output)
    assert np.isfinite(result.output).all()


def test_single_long_row_and_rank_zero():
    rng = seed("row")
    x = rng.standard_normal(1000).astype(np.float16)
    check_softmax(x, run("softmax", [Tensor(x)], Tensor(np.zeros(1000, np.float16))).output)
    out = run("reduce_mean", [Tensor(x)], Tensor(np.zeros(1, np.float32))).output
    check_reduction(x, out, mean=True)
    scalar = np.asarray(np.float16(3.5))
    assert run("softmax", [Tensor(scalar)], Tensor(np.zeros((), np.float16))).output == 1
    assert run("reduce_sum", [Tensor(scalar)], Tensor(np.zeros((), np.float32))).output == 3.5
