"""Elementwise library kernels vs numpy: ranks 1-5, tails, both layouts, strided and
transposed views, broadcasting, f16 and f32 -- each case through the interpreter and
the fast path (identical CMX bytes and cycles, checked by the harness)."""

import zlib

import numpy as np
import ml_dtypes
import pytest

from kernel_harness import NCHW, NHWC, Tensor, channels_last, dense_strides, run
from kernel_reference import (BINARY, CLAMP_BOUNDS, EXACT_UNARY, F32_MATH, TANH_F32_ULP,
                              assert_ulp, check_f32_math, gelu_tanh_form)
from vpuc.abi.params import ScalarArg
from vpuc.ir.types import ElemType

BF16 = ml_dtypes.bfloat16

UNARY = sorted(EXACT_UNARY) + sorted(F32_MATH)
DTYPES = [np.float16, np.float32]


def scalars(name):
    return [ScalarArg(ElemType.F16, v) for v in CLAMP_BOUNDS] if name == "clamp" else []


def random_shape(rng, rank, max_inner=40):
    """Small dims, the innermost often not a multiple of the 8 or 4 lanes."""
    shape = [int(d) for d in rng.integers(1, 6, rank)]
    shape[-1] = int(rng.integers(1, max_inner))
    return tuple(shape)


def layout(rank, which):
    return channels_last(rank) if which == "NHWC" and rank >= 2 else tuple(range(rank))


def strided(shape, perm):
    """A view: every other element along the memory-innermost dim, padded rows."""
    parent = list(shape)
    inner = perm[-1]
    parent[inner] = 2 * shape[inner]
    if len(shape) > 1:
        parent[perm[-2]] += 1
    strides = list(dense_strides(parent, perm))
    strides[inner] *= 2
    return tuple(strides)


def values(rng, shape, dtype, scale=4.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def check_unary(name, x, out):
    if name in EXACT_UNARY:
        ref = EXACT_UNARY[name](x)
        assert out.dtype == ref.dtype and np.array_equal(out, ref, equal_nan=True)
        if name == "tanh" and x.dtype == np.float32:
            assert_ulp(out, np.tanh(x.astype(np.float64)).astype(np.float32), TANH_F32_ULP)
    else:
        check_f32_math(name, x, out)


def seed(*parts):
    """A generator per test case, stable across runs (str hashes are salted)."""
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "f32"])
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", UNARY)
def test_unary_random_shapes(name, rank, dtype):
    rng = seed(name, rank, dtype)
    which = "NHWC" if rank % 2 == 0 else "NCHW"
    shape = random_shape(rng, rank)
    perm = layout(rank, which)
    x = values(rng, shape, dtype)
    result = run(name, [Tensor(x, perm)], Tensor(np.zeros(shape, dtype), perm), scalars(name),
                 rng=rng)
    check_unary(name, x, result.output)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "f32"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_strided_and_transposed_views(name, dtype):
    rng = seed(name, "views", dtype)
    shape = (2, 3, 5, 7)
    x = values(rng, shape, dtype)
    # a strided NHWC input into a dense NHWC output
    out = np.zeros(shape, dtype)
    result = run(name, [Tensor(x, NHWC, strided(shape, NHWC))], Tensor(out, NHWC), scalars(name),
                 rng=rng)
    check_unary(name, x, result.output)
    # NCHW in, NHWC out: the kernel walks the output's order, the input transposed
    result = run(name, [Tensor(x, NCHW)], Tensor(out, NHWC), scalars(name), rng=rng)
    check_unary(name, x, result.output)
    # a strided output view: computed in scratch and scattered; the gaps stay untouched
    result = run(name, [Tensor(x, NCHW)], Tensor(out, NCHW, strided(shape, NCHW)), scalars(name),
                 rng=rng)
    check_unary(name, x, result.output)


@pytest.mark.parametrize("name", UNARY)
def test_unary_reversed_strides_and_input_broadcast(name):
    rng = seed(name, "odd")
    x = values(rng, (3, 13), np.float16)
    # negative strides: the input read backwards along both dims
    result = run(name, [Tensor(x, None, (-13, -1))], Tensor(np.zeros((3, 13), np.float16)),
                 scalars(name), rng=rng)
    check_unary(name, x, result.output)
    # a size-1 input dim broadcast to the output's
    row = values(rng, (1, 11), np.float16)
    result = run(name, [Tensor(row)], Tensor(np.zeros((4, 11), np.float16)), scalars(name), rng=rng)
    check_unary(name, np.broadcast_to(row, (4, 11)), result.output)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "f32"])
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting(name, rank, dtype):
    rng = seed(name, rank, dtype)
    shape = random_shape(rng, rank, max_inner=24)
    perm = layout(rank, "NHWC" if rank % 2 else "NCHW")
    b_shape = tuple(d if rng.random() < 0.5 else 1 for d in shape)
    a, b = values(rng, shape, dtype), values(rng, b_shape, dtype)
    result = run(name, [Tensor(a, perm), Tensor(b, perm)], Tensor(np.zeros(shape, dtype), perm),
                 rng=rng)
    assert np.array_equal(result.output, BINARY[name](a, b))
    # and the same shapes the other way round (a broadcast, b full)
    result = run(name, [Tensor(b, perm), Tensor(a, perm)], Tensor(np.zeros(shape, dtype), perm),
                 rng=rng)
    assert np.array_equal(result.output, BINARY[name](b, a))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_a_scalar_strided_and_mixed_layouts(name):
    rng = seed(name, "scalar")
    shape = (2, 3, 4, 9)
    a = values(rng, shape, np.float16)
    for scalar in (np.asarray(np.float16(1.75)), np.full((1, 1, 1, 1), np.float16(-0.5))):
        result = run(name, [Tensor(a, NHWC), Tensor(scalar)],
                     Tensor(np.zeros(shape, np.float16), NHWC), rng=rng)
        assert np.array_equal(result.output, BINARY[name](a, scalar))
    b = values(rng, (1, 3, 1, 9), np.float32)
    a32 = a.astype(np.float32)
    result = run(name, [Tensor(a32, NCHW, strided(shape, NCHW)), Tensor(b, NHWC)],
                 Tensor(np.zeros(shape, np.float32), NHWC), rng=rng)
    assert np.array_equal(result.output, BINARY[name](a32, b))
    result = run(name, [Tensor(a32, NHWC), Tensor(b, NHWC)],
                 Tensor(np.zeros(shape, np.float32), NHWC, strided(shape, NHWC)), rng=rng)
    assert np.array_equal(result.output, BINARY[name](a32, b))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 63, 200])
def test_tails_of_every_length_class(n):
    rng = seed("tails", n)
    for dtype in DTYPES:
        x = values(rng, (n,), dtype)
        for name in ("clamp", "sigmoid"):
            result = run(name, [Tensor(x)], Tensor(np.zeros((n,), dtype)), scalars(name), rng=rng)
            check_unary(name, x, result.output)
        b = values(rng, (n,), dtype)
        assert np.array_equal(run("add", [Tensor(x), Tensor(b)], Tensor(np.zeros((n,), dtype)),
                                  rng=rng).output, x + b)


@pytest.mark.parametrize("pair", [(np.float16, np.float32), (np.float32, np.float16),
                                  (np.float16, np.float16), (np.float32, np.float32),
                                  (np.float32, BF16), (BF16, np.float32), (np.float16, BF16),
                                  (BF16, np.float16), (BF16, BF16)],
                         ids=["f16-f32", "f32-f16", "f16-f16", "f32-f32", "f32-bf16",
                              "bf16-f32", "f16-bf16", "bf16-f16", "bf16-bf16"])
@pytest.mark.parametrize("rank", [1, 3, 4, 5])
def test_convert(pair, rank):
    src, dst = pair
    rng = seed("convert", rank, src, dst)
    shape = random_shape(rng, rank)
    x = values(rng, shape, np.float32 if src == BF16 else src, scale=300.0).astype(src)
    if src == np.float32:
        x.reshape(-1)[:2] = [70000.0, -1e-6]            # overflow to inf, underflow to subnormal
        if dst == BF16:                                  # beyond bf16's range; a tie to even
            x.reshape(-1)[:2] = [3.4e38, 1.0 + 2.0 ** -8]
    if src == BF16 and dst == np.float16:
        x.reshape(-1)[:2] = [BF16(70000.0), BF16(-1e-6)]  # overflow to inf, underflow
    perm = layout(rank, "NHWC")
    with np.errstate(over="ignore"):
        ref = x.astype(np.float32).astype(dst) if BF16 in (src, dst) else x.astype(dst)
    result = run("convert", [Tensor(x, perm)], Tensor(np.zeros(shape, dst), perm), rng=rng)
    assert np.array_equal(result.output, ref)
    result = run("convert", [Tensor(x, tuple(range(rank)), strided(shape, tuple(range(rank))))],
                 Tensor(np.zeros(shape, dst), perm), rng=rng)
    assert np.array_equal(result.output, ref)


@pytest.mark.parametrize("dtype", [np.int16, np.uint32], ids=["i16", "u32"])
def test_copy_is_bitwise_for_integer_types(dtype):
    rng = seed("copy-int", dtype)
    x = rng.integers(0, 30000, (3, 5, 7)).astype(dtype)
    perm = (0, 2, 1)
    result = run("copy", [Tensor(x)], Tensor(np.zeros(x.shape, dtype), perm), rng=rng)
    assert np.array_equal(result.output, x)


def test_gelu_is_the_tanh_approximation():
    x = np.linspace(-6, 6, 2001)
    assert np.allclose(F32_MATH["gelu"][0](x), gelu_tanh_form(x), rtol=1e-12, atol=1e-15)


def test_rank_zero_tensors():
    x = np.asarray(np.float16(-2.5))
    assert run("relu", [Tensor(x)], Tensor(np.zeros((), np.float16))).output == 0
    result = run("sigmoid", [Tensor(np.asarray(np.float32(0.5)))], Tensor(np.zeros((), np.float32)))
    check_unary("sigmoid", np.asarray(np.float32(0.5)), result.output)
