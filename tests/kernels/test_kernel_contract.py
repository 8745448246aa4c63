"""The argument contract seen from the kernels: dynamic shapes (dims read from and
written to WIN_F), which row strategy reductions pick, and rejected arguments (a
status in s0, the output untouched)."""

import struct

import numpy as np
import pytest

from kernel_harness import NHWC, Tensor, run
from kernel_reference import check_f32_math, check_reduction, check_softmax
from vpuc.abi.memref import MEMREF_OFFSETS

E_TYPE, E_SHAPE, E_ORDER = 1, 2, 3
RNG = np.random.default_rng(7)


def meta_of(result, tensor):
    """The dims (int32) and strides (int64 bits) a kernel wrote for a dynamic output."""
    rank = tensor.values.ndim
    raw = result.cmx[tensor.meta:tensor.meta + 16 * 12].tobytes()
    dims = list(struct.unpack_from(f"<{rank}i", raw, 0))
    strides = list(struct.unpack_from(f"<{rank}q", raw, 4 * rank + (-4 * rank % 8)))
    return dims, strides


def test_dynamic_gelu_then_reduce_mean_like_the_example():
    # examples/dynamic_shapes.vir at a smaller size: 1x?x24 tokens, 5 of them at run time
    x = (RNG.standard_normal((1, 5, 24)) * 2).astype(np.float16)
    hidden = Tensor(np.zeros(x.shape, np.float16), dynamic=True)
    result = run("gelu", [Tensor(x, dynamic=True)], hidden, rng=RNG)
    check_f32_math("gelu", x, result.output)
    assert meta_of(result, hidden) == ([24, 5, 1], [16, 16 * 24, 16 * 120])
    activations = result.output
    pooled = Tensor(np.zeros((1, 5, 1), np.float16), dynamic=True)
    result = run("reduce_mean", [Tensor(activations, dynamic=True)], pooled, rng=RNG)
    check_reduction(activations, result.output, mean=True)
    assert meta_of(result, pooled) == ([1, 5, 1], [16, 16, 80])


def test_dynamic_nhwc_output_gets_dense_strides_in_its_order():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    out = Tensor(np.zeros(x.shape, np.float32), NHWC, dynamic=True)
    result = run("softmax", [Tensor(x, NHWC)], out, rng=RNG)
    check_softmax(x, result.output)
    # memory order innermost first: C, W, H, N
    assert meta_of(result, out) == ([3, 5, 4, 2], [32, 96, 480, 1920])


@pytest.mark.parametrize("layout, grouped", [("NCHW", False), ("NHWC", True)])
def test_reductions_pick_rows_or_groups(layout, grouped):
    perm = NHWC if layout == "NHWC" else (0, 1, 2, 3)
    x = RNG.standard_normal((1, 4, 3, 50)).astype(np.float16)
    result = run("softmax", [Tensor(x, perm)], Tensor(np.zeros(x.shape, np.float16), perm))
    check_softmax(x, result.output)
    # rows: dense vector loads along W; groups: strided loads, 4 rows per vector
    assert ("vlds.m.h" in result.opcodes) == grouped
    assert ("vredmax.f16" in result.opcodes) == (not grouped)


def test_dense_tensors_are_one_row():
    # a dense 4-D tensor coalesces to one call of compute over all its elements,
    # in either layout: 960 = 60 iterations of 16, no tail, no staging
    x = RNG.standard_normal((2, 3, 4, 40)).astype(np.float16)
    cycles = set()
    for perm in ((0, 1, 2, 3), NHWC):
        result = run("relu", [Tensor(x, perm)], Tensor(np.zeros(x.shape, np.float16), perm))
        assert result.opcodes["vld"] == result.opcodes["vst"] == x.size // 8
        assert not {"vld.m", "vst.m", "vlds.h", "vsts.h"} & set(result.opcodes)
        cycles.add(result.cycles)
    assert len(cycles) == 1


def no_write(name, inputs, output, status, **kwargs):
    result = run(name, inputs, output, expect_status=status, **kwargs)
    assert result.status == status       # (the harness checked nothing was written)


def test_rejected_element_types():
    x16 = np.ones((3, 5), np.float16)
    no_write("relu", [Tensor(x16)], Tensor(np.zeros((3, 5), np.float32)), E_TYPE)
    no_write("add", [Tensor(x16), Tensor(x16.astype(np.float32))],
             Tensor(np.zeros((3, 5), np.float16)), E_TYPE)
    no_write("convert", [Tensor(np.ones((3, 5), np.int16))], Tensor(np.zeros((3, 5), np.float32)),
             E_TYPE)
    no_write("copy", [Tensor(np.ones((3, 5), np.int16))], Tensor(np.zeros((3, 5), np.float16)),
             E_TYPE)
    no_write("softmax", [Tensor(x16)], Tensor(np.zeros((3, 5), np.float32)), E_TYPE)


def test_rejected_shapes():
    a = np.ones((3, 4), np.float16)
    no_write("add", [Tensor(a), Tensor(np.ones((3, 5), np.float16))],
             Tensor(np.zeros((3, 4), np.float16)), E_SHAPE)
    no_write("add", [Tensor(a), Tensor(np.ones((4,), np.float16))],       # rank 1 vs 2
             Tensor(np.zeros((3, 4), np.float16)), E_SHAPE)
    no_write("relu", [Tensor(a)], Tensor(np.zeros((3, 1), np.float16)), E_SHAPE)
    no_write("reduce_sum", [Tensor(a)], Tensor(np.zeros((3, 4), np.float32)), E_SHAPE)
    no_write("softmax", [Tensor(a)], Tensor(np.zeros((3, 1), np.float16)), E_SHAPE)


def test_rejected_dims_order():
    a = np.ones((3, 4), np.float16)
    bad = struct.pack("<Q", 0x13)        # nibble 3 names a dim a rank-2 tensor does not have
    no_write("relu", [Tensor(a, (1, 0))], Tensor(np.zeros((3, 4), np.float16)), E_ORDER,
             patch={MEMREF_OFFSETS["dimsOrder"]: bad})
    no_write("softmax", [Tensor(a)], Tensor(np.zeros((3, 4), np.float16)), E_ORDER,
             patch={32 + MEMREF_OFFSETS["dimsOrder"]: bad})


def test_rank_nine_uses_the_high_dims_order_word():
    # ranks above 8 keep dims order nibbles in the high 32 bits of dimsOrder
    shape = (2, 1, 3, 2, 1, 2, 3, 2, 5)
    x = RNG.standard_normal(shape).astype(np.float16)
    backwards = tuple(reversed(range(9)))
    result = run("copy", [Tensor(x, backwards)], Tensor(np.zeros(shape, np.float16)), rng=RNG)
    assert np.array_equal(result.output, x)
    last_outermost = (8, 0, 1, 2, 3, 4, 5, 6, 7)      # R at memory position 8
    result = run("softmax", [Tensor(x, last_outermost)],
                 Tensor(np.zeros(shape, np.float16), last_outermost), rng=RNG)
    check_softmax(x, result.output)


@pytest.mark.parametrize("name", ["relu", "gelu", "add", "softmax"])
def test_in_place(name):
    # the output may be the input itself: every element is read before it is written
    x = RNG.standard_normal((3, 5, 37)).astype(np.float16)
    source = Tensor(x)
    inputs = [source, Tensor(x[:1, :1, :])] if name == "add" else [source]
    result = run(name, inputs, Tensor(np.zeros(x.shape, np.float16), alias=source), rng=RNG)
    expected = run(name, [Tensor(t.values) for t in inputs], Tensor(np.zeros(x.shape, np.float16)),
                   rng=RNG).output
    assert np.array_equal(result.output, expected)
