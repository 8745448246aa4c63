"""The room for values kept in CMX measured on a lowered program (``vpuc/fusion/
resident_measure.py``, ``measured_program``): a bottleneck block's value,
read by the next 1x1 convolution and by the residual Add, just misses the room that counts
every segment's blocks at the whole CMX budget, yet fits beside what the blocks actually
hold, so it stays in CMX instead of crossing DDR (ResNet-50's stage 2)."""

from __future__ import annotations

import numpy as np

from vpuc import api
from vpuc.arch import load_arch
from vpuc.fusion import lower_graph
from vpuc.fusion.resident_measure import measured_rooms, pin_low, segment_peaks
from vpuc.fusion.schedule_room import EARLY_CMX_BYTES
from vpuc.ir.module import Buffer, BufferKind
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn

from tests.fusion.dpu_testlib import assert_close

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])
CMX_BYTES = 2 << 20                          # NPU37XX's tile
CHANNELS, SIZE = 256, 28                     # the blocks' values: 401,408 bytes in f16
VALUE_BYTES = CHANNELS * SIZE * SIZE * 2
# the old room, CMX - budget - early constants, 16 KB short of one value (as ResNet-50's
# 802,816-byte values missed 786,432)
BUDGET = CMX_BYTES - EARLY_CMX_BYTES - VALUE_BYTES + (16 << 10)


def _bottlenecks(tmp_path, blocks: int = 2):
    m = ModelBuilder(seed=5)
    y = _conv_bn(m, m.input("x", [1, 64, SIZE, SIZE]), 64, CHANNELS, 1)
    for _ in range(blocks):
        h = _conv_bn(m, y, CHANNELS, 64, 1)
        h = _conv_bn(m, h, 64, 64, 3)
        h = _conv_bn(m, h, 64, CHANNELS, 1, act=None)
        y = m.node("Relu", [m.node("Add", [h, y])])
    m.output(y)
    return m.save(tmp_path / "bottlenecks.onnx", "bottlenecks")


def _kept(program) -> set[str]:
    return {b.name for b in program.module.buffers
            if b.kind is BufferKind.CMX and "." not in b.name}


def _ddr_values(program) -> list:
    return [b for b in program.module.buffers if b.kind is BufferKind.DDR]


def test_a_value_that_just_misses_the_budget_room_stays_in_cmx(tmp_path, monkeypatch):
    path = _bottlenecks(tmp_path)
    measured = api.compile(path, cmx_budget=BUDGET)
    monkeypatch.setattr(lower_graph, "measured_program", lambda *a, **k: None)
    budgeted = api.compile(path, cmx_budget=BUDGET)
    # the old room turns the block values away; the measured one keeps them in CMX
    big = [b for b in _ddr_values(budgeted) if b.type.nbytes == VALUE_BYTES]
    assert big, "the budget's room should have turned a block value away"
    assert {b.name for b in big} <= _kept(measured)
    assert len(_ddr_values(measured)) < len(_ddr_values(budgeted))
    assert api.simulate(measured, timing_only=True).cycles < \
        api.simulate(budgeted, timing_only=True).cycles
    # same values: the schedules cut no layer differently, so one f16 ulp per layer of the
    # seven on the longest path, as tests/fusion/test_resident.py allows per layer
    x = np.random.default_rng(1).standard_normal((1, 64, SIZE, SIZE)).astype(np.float16)
    got, want = (next(iter(api.simulate(p, {"x": x}).outputs.values()))
                 for p in (measured, budgeted))
    assert_close(got, want, ulps=7)


def test_the_measured_room_is_what_a_segments_buffers_leave():
    peaks = {("a.", 0): 300_000, ("a.", 1): 500_000, ("b.", 0): 1_900_000}
    rooms = measured_rooms(peaks, ["a.", "b.", "c."], 2, CMX_BYTES, EARLY_CMX_BYTES, 1000)
    assert rooms[0] == [CMX_BYTES - 300_000 - EARLY_CMX_BYTES,
                        CMX_BYTES - 500_000 - EARLY_CMX_BYTES]
    # never below the conservative room; a tile the segment leaves alone has all but the
    # early constants' reserve; a segment not seen (fused into another) the conservative room
    assert rooms[1] == [1000, CMX_BYTES - EARLY_CMX_BYTES]
    assert rooms[2] == [1000, 1000]


def test_segment_peaks_count_the_buffers_live_at_once(tmp_path):
    program = api.compile(_bottlenecks(tmp_path, blocks=1))
    cmx = [b for b in program.module.buffers if b.kind is BufferKind.CMX and "." in b.name]
    prefixes = sorted({b.name.split(".", 1)[0] + "." for b in cmx})
    peaks = segment_peaks(program.module, load_arch(), prefixes)
    assert {prefix for prefix, _ in peaks} == set(prefixes)
    for (prefix, tile), peak in peaks.items():
        own = [b.type.nbytes for b in cmx if b.tile == tile and b.name.startswith(prefix)]
        # at least the segment's largest buffer, at most every segment's buffers together
        assert max(own) <= peak <= sum(b.type.nbytes for b in cmx if b.tile == tile)


def test_pinned_values_stack_where_their_segments_meet():
    def buffer(name, nbytes, tile):
        return Buffer(name, BufferKind.CMX,
                      TensorType((1, nbytes // 2, 1, 1), ElemType.F16, NHWC), tile=tile)

    class Holder:
        buffers = [buffer("a", 1000, 0), buffer("b", 500, 0), buffer("c", 700, 0),
                   buffer("d", 300, 1)]

    spans = {"a": ["s1.", "s2."], "b": ["s2.", "s3."], "c": ["s4."], "d": ["s2."]}
    pin_low(Holder, ["a", "b", "c", "d"], spans, 64)
    at = {b.name: b.offset for b in Holder.buffers}
    # b meets a at s2: above it, aligned; c meets neither: the bottom again; d's own tile
    assert at == {"a": 0, "b": 1024, "c": 0, "d": 0}
