"""``fuse_pool``: a convolution's MaxPool successor runs on the convolution's output blocks
in CMX (ResNet's stem and its 3x3 stride-2 pool), the convolution's output never in DDR."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from tests.tolerances import (assert_within_bound, conv_magnitude, stored_sum_bound, sum_bound,
                              unit_roundoff)
from vpuc import api
from vpuc.fusion import lower_graph
from vpuc.ir.graph import GraphIndex
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaTask, DpuOp, DpuTask
from vpuc.ir.symbols import SymbolTable
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn
from vpuc.reference.graph import constant_value

# (input channels, size, stem channels): 3 channels fold the stem's width
# (``lower_dpu_fold_width``), 8 run it as a window convolution on the permuted input, as
# does a width of 70 (not a multiple of the fold's 4), whose 35 stem rows end in a block
# the pool pads below
CASES = [(3, 64, 16), (8, 40, 32), (3, 70, 16)]


def _stem_model(tmp_path, channels: int, size: int, width: int) -> tuple[str, dict]:
    m = ModelBuilder(3)
    x = m.input("input", [1, channels, size, size])
    y = _conv_bn(m, x, channels, width, 7, stride=2)
    y = m.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    m.output(_conv_bn(m, y, width, width, 3))
    path = m.save(tmp_path / "stem.onnx", "stem")
    rng = np.random.default_rng(11)
    return path, {"input": rng.standard_normal((1, channels, size, size)).astype(np.float32)}


# a budget for the layers' blocks that leaves values kept in CMX no room
# (``resident.resident_room``): the stem's output would go through DDR, as at 224 x 224
NO_ROOM = (2 << 20) - (64 << 10)


def _run(path, feeds, cmx_budget=NO_ROOM):
    program = api.compile(path, schedule="default", cmx_budget=cmx_budget)
    inputs = {b.name: feeds[b.name].astype(np.float16) for b in program.module.buffers
              if b.kind is BufferKind.INPUT}
    return program, next(iter(api.simulate(program, inputs).outputs.values()))


def _ddr_bytes(program) -> int:
    """Bytes the program's DMAs move to or from DDR."""
    symbols = SymbolTable(program.module)
    total = 0
    for tl in program.module.task_lists:
        for t in tl.tasks:
            if isinstance(t, DmaTask):
                regions = [symbols.region(t.src), symbols.region(t.dst)]
                total += sum(r.type.nbytes for r in regions if r.kind is not BufferKind.CMX)
    return total


def _two_blockings_bound(program, x, got, want):
    """|got - want| allowed between two lowerings of the stem -> MaxPool -> 3x3 layer that
    sum the same f32 terms in other orders (``tests/tolerances.py``): each stem output,
    stored as f16, within e1 = 2 gamma_K1 M1 + 2 u16 M1 of the other's (M1: the sum of
    |terms| with the bias, an upper bound of |value|); the pool is a selection, so a pooled
    value is within the largest e1 of its window; the 3x3 layer carries that through |w2| and
    adds its own two orders and roundings over its M2 (the pooled M1 as |input|)."""
    graph = program.source_graph
    index = GraphIndex(graph)
    layers = []
    for conv in (op for op in graph.ops if op.kind == "Convolution"):
        add = next(index.consumers(conv.result))
        bias = next(o for o in add.operands if o != conv.result)
        w = constant_value(index.producer(conv.operands[1])).astype(np.float64)
        b = constant_value(index.producer(bias)).astype(np.float64).reshape(-1)
        layers.append((w, b, list(conv.attrs["pads_begin"]) + list(conv.attrs["pads_end"]),
                       list(conv.attrs["strides"])))
    (w1, b1, pads1, strides1), (w2, b2, pads2, strides2) = layers
    u16, eta16 = unit_roundoff(np.float16), float(np.finfo(np.float16).smallest_subnormal)
    m1 = conv_magnitude(w1, b1, pads1, strides1)(x.astype(np.float16).astype(np.float64))
    m1 = m1 * (1 + 2 * u16)
    e1 = sum_bound(m1, w1[0].size + 1, np.float32) + 2 * u16 * m1 + eta16
    def pool(a):        # the 3x3 stride-2 window's largest (a >= 0: zero padding will do)
        return sliding_window_view(np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)]), (3, 3),
                                   axis=(2, 3))[:, :, ::2, ::2].max(axis=(-2, -1))
    carried = conv_magnitude(w2, np.zeros_like(b2), pads2, strides2)(pool(e1))
    m2 = conv_magnitude(w2, b2, pads2, strides2)(pool(m1))
    shape = m2.shape
    return (stored_sum_bound(got.reshape(shape), want.reshape(shape), m2, w2[0].size + 1,
                             np.float32, np.float16) + carried).reshape(got.shape)


@pytest.mark.parametrize("channels,size,width", CASES)
def test_the_stem_is_pooled_in_cmx_and_computes_the_same(tmp_path, monkeypatch, channels, size,
                                                         width):
    path, feeds = _stem_model(tmp_path, channels, size, width)
    fused, got = _run(path, feeds)
    labels = [t.label or "" for tl in fused.module.task_lists for t in tl.tasks]
    pools = [t for tl in fused.module.task_lists for t in tl.tasks
             if isinstance(t, DpuTask) and t.op is DpuOp.MAXPOOL]
    assert pools and all(".convolution.pool" in (t.label or "") for t in pools)
    assert not any(x.startswith("maxpool") for x in labels)       # no segment of its own
    # the stem's output (1 x width x size/2 x size/2) is no DDR buffer
    stem = (1, width, size // 2, size // 2)
    assert not [b for b in fused.module.buffers
                if b.kind is BufferKind.DDR and tuple(b.type.dims) == stem]

    import vpuc.fusion.fuse_epilogue as fuse_epilogue
    monkeypatch.setattr(fuse_epilogue, "pool_fusable", lambda *_: False)
    # apart, the stem's output crosses DDR: the room measured on the program (which would
    # keep this small model's stem output in CMX) left out
    monkeypatch.setattr(lower_graph, "measured_program", lambda *a, **k: None)
    apart, want = _run(path, feeds)
    # both lowerings fold the stem alike, and compute the same sums; only their blocks
    # (and so BLAS's summation order) differ
    assert any(".fold" in x for x in labels) == any(
        ".fold" in (t.label or "") for tl in apart.module.task_lists for t in tl.tasks)
    assert_within_bound(got, want, _two_blockings_bound(fused, feeds["input"], got, want))
    # the stem's output no longer goes to DDR and back
    saved = _ddr_bytes(apart) - _ddr_bytes(fused)
    assert saved >= 2 * np.prod(stem) * 2 * 0.9

    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    out = got.astype(np.float32).reshape(ref.shape)
    # f16 inputs and weights, two layers each rounding its output to f16 (2^-11 relative)
    # and the next summing 9 * width such values: within 16 f16 steps of the output's peak
    assert np.max(np.abs(out - ref)) <= 16 * 2.0 ** -10 * np.max(np.abs(ref))


def test_a_stem_output_that_fits_cmx_is_kept_there_not_pooled_on_its_blocks(tmp_path):
    """``fuse_pool.worth_fusing``: a value ``resident.py`` may keep in CMX is written and read
    there in place, which costs no copy: the pool stays a segment of its own."""
    path, feeds = _stem_model(tmp_path, *CASES[0])
    program, _ = _run(path, feeds, cmx_budget=None)
    labels = [t.label or "" for tl in program.module.task_lists for t in tl.tasks]
    assert not any(".convolution.pool" in x for x in labels)
    assert any(x.startswith("maxpool") for x in labels)
