"""The weights table: a layer's bias packed after its constant weights, one DMA.

``lower_dpu_table`` (``packs_bias``, ``box_rows``, ``Table``);
the IR side: a DPU bias may be any region of OC values, read in logical order
(``vpuc/verifier/dpu.py``, ``runtime_sim/engines/dpu.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fusion.dpu_testlib import constant, module
from tests.fusion.test_lower_dpu import check, tasks
from vpuc import api
from vpuc.arch import load_arch
from vpuc.fusion.lower_dpu_table import (CHEAP_BIAS_ROWS, MatrixTable, Table, box_rows, packs_bias,
                                         packs_cheaply)
from vpuc.ir.module import BufferKind
from vpuc.ir.types import ElemType
from vpuc.verifier import verify_module
from vpuc.vir.parser import parse_text


@pytest.mark.parametrize("dims, expected", [
    ((16, 4, 3, 3), (1, 4, 2, 2)),      # a compressed 3x3 convolution: 16 of one row's 36
    ((64, 16, 1, 1), (4, 16, 1, 1)),    # an expanding 1x1: four whole rows
    ((96, 32, 1, 1), (3, 32, 1, 1)),
    ((240, 64, 1, 1), (4, 60, 1, 1)),   # 240 = 4 x 60: four rows of 64, 60 used
    ((32, 64, 1, 1), (1, 32, 1, 1)),    # a reducing 1x1: half a row
    ((16, 1, 3, 3), (4, 1, 2, 2)),      # depthwise 3x3: 2x2 of each of 4 rows
    ((576, 1, 5, 5), (36, 1, 4, 4)),    # depthwise 5x5: 16 of each row's 25
])
def test_box_rows_takes_the_fewest_rows(dims, expected):
    channels, per_out, kh, kw = dims
    rows, a, b, c = box_rows(*dims)
    assert (rows, a, b, c) == expected
    assert rows * a * b * c == channels and a <= per_out and b <= kh and c <= kw
    # no box of the row's extent holding a divisor of the channels takes fewer rows
    sizes = {x * y * z for x in range(1, per_out + 1) for y in range(1, kh + 1)
             for z in range(1, kw + 1) if channels % (x * y * z) == 0}
    assert rows == channels // max(sizes)


def test_the_table_puts_the_bias_in_its_box():
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((64, 16, 1, 1)).astype(np.float32) + 1
    bias = np.arange(1, 65, dtype=np.float32)
    table = Table((64, 16, 1, 1), True)
    assert table.bias_box == (4, 16, 1, 1)
    values = table.values(weights, bias)
    assert values.shape == (64 + 4, 16, 1, 1) == (table.rows, 16, 1, 1)
    assert np.array_equal(values[:64], weights)
    assert np.array_equal(values[64:].reshape(-1), bias)   # logical order, as the DPU reads it
    values = Table((16, 4, 3, 3), True).values(np.zeros((16, 4, 3, 3), np.float32),
                                               np.arange(16, dtype=np.float32))
    assert np.array_equal(values[16:, :4, :2, :2].reshape(-1), np.arange(16))
    assert not values[16:, :, 2:].any() and not values[16:, :, :, 2:].any()


def test_the_matrix_table_puts_each_chunk_then_its_bias():
    """A MatMul's chunks of N = 40 columns (16, 16, 8 padded to 16) over K = 20 (padded to
    32): each chunk's rows zero-padded, then its bias of 16 values as one row of 16."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((40, 20)).astype(np.float32) + 3
    bias = np.zeros(48, np.float32)
    bias[:40] = np.arange(1, 41)
    table = MatrixTable([(0, 16, 16), (16, 32, 16), (32, 40, 16)], 32, True)
    assert MatrixTable.bias_rows(16, 32) == 1 and table.rows == 3 * 17
    values = table.values(weights, bias)
    assert values.shape == (51, 32)
    for j, (c0, c1) in enumerate([(0, 16), (16, 32), (32, 40)]):
        row = 17 * j
        assert table.layout[(c0, c1)] == (row, 16, (1, 16))
        assert np.array_equal(values[row:row + c1 - c0, :20], weights[c0:c1])
        assert not values[row:row + 16, 20:].any() and not values[row + c1 - c0:row + 16].any()
        assert np.array_equal(values[row + 16, :16], bias[c0:c0 + 16])
        assert not values[row + 16, 16:].any()
    # 48 values in rows of at most 16: three rows; without a bias, no rows
    assert MatrixTable.bias_rows(48, 16) == 3
    plain = MatrixTable([(0, 16, 16), (16, 40, 32)], 32, False)
    assert plain.rows == 48 and plain.layout[(16, 40)] == (16, 32, None)
    assert np.array_equal(plain.values(weights, None)[16:40, :20], weights[16:40])


def test_packs_bias_only_when_the_weights_type_holds_it_exactly():
    exact = np.array([0.5, -0.034759521484375, 3.0], np.float32)       # f16 values
    assert packs_bias(exact, ElemType.F16)
    assert not packs_bias(np.array([0.1], np.float32), ElemType.F16)     # rounds in f16
    assert not packs_bias(np.array([70000.0], np.float32), ElemType.F16)  # overflows f16
    assert packs_bias(np.array([0.5, -2.0, 0.15625], np.float32), ElemType.BF16)
    assert not packs_bias(np.array([1.0 + 2 ** -10], np.float32), ElemType.BF16)
    assert not packs_bias(np.array([np.nan], np.float32), ElemType.F16)
    assert not packs_bias(None, ElemType.F16)
    assert not packs_bias(exact, ElemType.U8)


@pytest.mark.parametrize("channels, oc, kernel", [(6, 9, (3, 3)), (20, 72, (1, 1))])
def test_conv_bias_travels_with_its_weights(channels, oc, kernel):
    """A layer of unaligned channels (its weights a padded constant of the lowering's): no
    bias constant and no bias DMA, each tile's one load fills the buffer both operands
    view; the result matches the graph reference (``check``)."""
    body = f"  %x = Parameter() : 1x{channels}x12x12xf16 NHWC\n"
    body += constant("w", (oc, channels) + kernel, 1) + constant("bias", (1, oc, 1, 1), 2)
    body += "  %conv = Convolution{strides = [1, 1], pads_begin = [1, 1], pads_end = [1, 1], " \
            "dilations = [1, 1]}(%x, %w)\n" if kernel == (3, 3) else \
        "  %conv = Convolution{strides = [1, 1], pads_begin = [0, 0], pads_end = [0, 0], " \
        "dilations = [1, 1]}(%x, %w)\n"
    body += "  %b = Add(%conv, %bias)\n  %r = Relu(%b)\n  Result(%r)\n"
    mod, _ = check(module(body))
    consts = [b for b in mod.buffers if b.kind is BufferKind.CONST]
    assert not [b for b in consts if "bias" in b.name]
    views = {v.name: v for v in mod.views}
    dpu = [t for t in tasks(mod, "DPU") if t.weights is not None]
    assert dpu and all(t.bias is not None for t in dpu)
    tables = set()
    for task in dpu:
        assert views[task.weights].base == views[task.bias].base
        tables.add((task.tile, views[task.weights].base))
    loads = [t for t in tasks(mod, "DMA") if "load_w" in (t.label or "")]
    assert len(loads) == len(tables)
    assert not [t for t in tasks(mod, "DMA") if "bias" in (t.label or "")]


def test_packs_cheaply_weighs_the_bias_rows_against_the_f32_bias():
    f16 = ElemType.F16
    assert packs_cheaply((512, 256, 1, 1), f16)      # 2 rows of 256: 1 KB for a 2 KB f32 bias
    assert packs_cheaply((96, 16, 1, 1), f16)        # 6 rows of 16: 192 B for 384 B
    assert not packs_cheaply((512, 512, 3, 3), f16)  # one row of 9 KB for 2 KB: 4.5x
    assert not packs_cheaply((16, 16, 3, 3), f16)
    # the limit itself: one row of I x 2 bytes against 4 x O bytes
    o = 16
    assert packs_cheaply((o, 2 * CHEAP_BIAS_ROWS * o, 1, 1), f16)
    assert not packs_cheaply((o, 2 * CHEAP_BIAS_ROWS * o + 16, 1, 1), f16)


@pytest.mark.parametrize("channels, oc, kernel, packed", [
    (32, 64, (1, 1), True),        # aligned, cheap rows: a table of the lowering's own
    (16, 16, (3, 3), False),       # aligned, a 3x3's wide rows: the graph's weights, f32 bias
])
def test_an_aligned_conv_packs_its_bias_when_cheap(channels, oc, kernel, packed):
    """Aligned channels: the weights are the graph's constant unless the bias packs cheaply
    (``packs_cheaply``); then the lowering declares the table and no bias DMA is left.  The
    result matches the graph reference either way (``check``)."""
    pad = (kernel[0] - 1) // 2
    body = f"  %x = Parameter() : 1x{channels}x8x8xf16 NHWC\n"
    body += constant("w", (oc, channels) + kernel, 1) + constant("bias", (1, oc, 1, 1), 2)
    body += f"  %conv = Convolution{{strides = [1, 1], pads_begin = [{pad}, {pad}], " \
            f"pads_end = [{pad}, {pad}], dilations = [1, 1]}}(%x, %w)\n"
    body += "  %b = Add(%conv, %bias)\n  Result(%b)\n"
    mod, _ = check(module(body))
    bias_loads = [t for t in tasks(mod, "DMA") if "bias" in (t.label or "")]
    views = {v.name: v for v in mod.views}
    dpu = [t for t in tasks(mod, "DPU") if t.weights is not None]
    assert dpu and all(t.bias is not None for t in dpu)
    if packed:
        assert not bias_loads
        assert all(views[t.weights].base == views[t.bias].base for t in dpu)
    else:
        assert bias_loads
        assert not any(t.weights in views and t.bias in views
                       and views[t.weights].base == views[t.bias].base for t in dpu)


PACKED_VIR = """module @m arch NPU37XX
input %xin : 1x16x4x4xf16 NHWC
input %tin : 34x16x1x1xf16 NHWC
output %yout : 1x32x4x4xf16 NHWC
cmx %in : 1x16x4x4xf16 NHWC tile 0
cmx %table : 34x16x1x1xf16 NHWC tile 0
cmx %out : 1x32x4x4xf16 NHWC tile 0
view %w = %table[0:32, 0:16, 0:1, 0:1]
view %bias = %table[32:34, {cols}, 0:1, 0:1]
barrier %loaded
barrier %done
tasks DMA {{
  dma %xin -> %in updates(%loaded)
  dma %tin -> %table updates(%loaded)
  dma %out -> %yout waits(%done)
}}
tasks DPU {{
  conv: dpu conv on tile 0 in(%in) weights(%w) bias(%bias) out(%out) waits(%loaded) updates(%done) {{
    variant start(0, 0, 0) end(3, 3, 15)
    variant start(0, 0, 16) end(3, 3, 31)
  }}
}}
"""


def test_a_bias_of_any_shape_with_one_value_per_channel_verifies():
    arch = load_arch("NPU37XX")
    assert not verify_module(parse_text(PACKED_VIR.format(cols="0:16"), "<t>"), arch).has_errors
    bag = verify_module(parse_text(PACKED_VIR.format(cols="0:15"), "<t>"), arch)
    assert bag.has_errors
    assert "dpu bias %bias has shape (2, 15, 1, 1); expected (32,)" in " ".join(d.message for d in bag.items)


def test_the_dpu_reads_a_packed_bias_in_logical_order():
    """A (2, 16, 1, 1) bias view: channel 16 * row + column, each variant its channels."""
    program = api.compile_text(PACKED_VIR.format(cols="0:16"), "m")
    rng = np.random.default_rng(1)
    x = (rng.integers(-4, 5, (1, 16, 4, 4)) / 4).astype(np.float16)
    w = (rng.integers(-4, 5, (32, 16, 1, 1)) / 8).astype(np.float16)
    bias = (np.arange(32) / 4 - 4).astype(np.float16)
    table = np.concatenate([w, bias.reshape(2, 16, 1, 1)])
    sim = api.simulate(program, inputs={"xin": x, "tin": table})
    assert not sim.result.races
    expected = np.einsum("nchw,oc->nohw", x.astype(np.float32),
                         w[:, :, 0, 0].astype(np.float32)) + bias.reshape(1, 32, 1, 1)
    # multiples of 1/32 below 2**5, summed in f32 with the bias: exact in f16
    assert np.array_equal(sim.outputs["yout"], expected.astype(np.float16))
