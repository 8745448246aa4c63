"""A Concat whose operands DPU layers write in place, and which only DPU layers read, is
held in CMX (``concat_in_place.resident_concats``, ``resident.resident_values``): a small
SqueezeNet fire module (a stem Conv, a 1x1 squeeze, parallel 1x1 and 3x3 expands
concatenated along channels, the next 1x1 squeeze).  Under ``--schedule default`` the
Concat's result is one CMX buffer, the expands' stores CMX -> CMX copies into its slices,
no DMA moves its bytes through DDR, each schedule computes every layer within its derived
bound (``fusion_testlib.layers_within_bounds``), no race is seen, and the cycles drop below those of
the same program with the result in DDR (before this rule).  Along channels (the fire
module's) and along rows, whose operands' writes are strided and contiguous views of it."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_testlib import both_schedules, buffer_roots, layers_within_bounds
from vpuc import api
from vpuc.fusion import resident
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import ModelBuilder

SIZE, C, S = 24, 32, 16


def _model(tmp_path, axis: int) -> str:
    m = ModelBuilder(seed=21, opset=13)
    x = m.input("x", [1, 16, SIZE, SIZE])
    stem = m.node("Relu", [m.node("Conv", [x, m.weight((C, 16, 3, 3)), m.weight((C,), 0.1)],
                                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    squeeze = m.node("Relu", [m.node("Conv", [stem, m.weight((S, C, 1, 1)), m.weight((S,), 0.1)],
                                     kernel_shape=[1, 1])])
    e1 = m.node("Relu", [m.node("Conv", [squeeze, m.weight((C, S, 1, 1)), m.weight((C,), 0.1)],
                                kernel_shape=[1, 1])])
    e3 = m.node("Relu", [m.node("Conv", [squeeze, m.weight((C, S, 3, 3)), m.weight((C,), 0.1)],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    cat = m.node("Concat", [e1, e3], axis=axis)
    channels = 2 * C if axis == 1 else C
    m.output(m.node("Conv", [cat, m.weight((S, channels, 1, 1))], kernel_shape=[1, 1]))
    return m.save(tmp_path / f"fire{axis}.onnx", "fire")


@pytest.fixture(scope="module", params=[1, 2], ids=["channels", "rows"])
def runs(request, tmp_path_factory):
    path = _model(tmp_path_factory.mktemp("fire"), request.param)
    x = np.random.default_rng(8).standard_normal((1, 16, SIZE, SIZE)).astype(np.float16)
    return request.param, both_schedules(path, x, reference=True)


def _concat_buffer(program, axis: int):
    """The buffer the Concat's operands are views of (both expands write into it)."""
    root = buffer_roots(program)
    roots = {root(v.name) for v in program.module.views
             if root(v.name) != v.name}
    buffers = {b.name: b for b in program.module.buffers}
    cat = [buffers[r] for r in roots if r in buffers
           and buffers[r].type.dims[axis] == (2 * C if axis == 1 else 2 * SIZE)
           and buffers[r].kind is not BufferKind.OUTPUT]
    assert len(cat) == 1, [b.name for b in cat]
    return cat[0]


def test_concat_result_is_held_in_cmx(runs):
    axis, runs = runs
    program, sim = runs["default"]
    root = buffer_roots(program)
    cat = _concat_buffer(program, axis)
    assert cat.kind is BufferKind.CMX, (cat.name, cat.kind)
    # both expands write into it: their values are views of it, not CMX buffers of their
    # own that a Concat may read too (``resident.aliased``)
    assert sum(v.base == cat.name and "." not in v.name for v in program.module.views) == 2
    ddr = {b.name for b in program.module.buffers if b.kind is BufferKind.DDR}
    through_ddr = [t.label for tl in program.module.task_lists for t in tl.tasks
                   if isinstance(t, DmaTask) and cat.name in (root(t.src),
                                                              root(t.dst))
                   and (root(t.src) in ddr or root(t.dst) in ddr)]
    assert not through_ddr, through_ddr
    assert not sim.races


def test_each_schedule_computes_every_layer_within_its_bound(runs):
    _, runs = runs
    layers_within_bounds(runs)


def test_fewer_cycles_than_with_the_result_in_ddr(runs, monkeypatch, tmp_path):
    axis, runs = runs
    program, sim = runs["default"]
    monkeypatch.setattr(resident, "resident_concats", lambda values, segments: {})
    in_ddr = api.compile(_model(tmp_path, axis))
    assert _concat_buffer(in_ddr, axis).kind is BufferKind.DDR
    before = api.simulate(in_ddr, timing_only=True).cycles
    assert sim.cycles < before, (sim.cycles, before)
