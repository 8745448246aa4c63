"""A DPU layer with an ACT SHAVE epilogue: the flow-shop estimate's ACT stage
(``vpuc.cost.blocks``), and row cuts with short first blocks (``lower_dpu_blocks.ramp_cuts``)
chosen when the estimate of the layer's pipelined reader (``reader_cycles``) ends sooner:
the SHAVEs start once the first short block is loaded and computed, not a full one.
MobileNetV3-Small's stem (1x3x224x224) kept every ACT SHAVE idle for its first 8,579
cycles with 12-row blocks; the ramp cut 592,971 cycles to 590,772."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.cost.blocks import (BlockStages, act_on_dpu, pipeline_cycles, pipeline_stores,
                              reader_cycles)
from vpuc.fusion import lower_dpu_blocks
from vpuc.fusion.lower_dpu_blocks import _cheapest_cut, _edges, ramp_cuts
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DpuOp, DpuTask
from vpuc.onnx_import.zoo import mobilenet_v3_small


def test_act_stage_runs_beside_the_next_blocks_dpu():
    """One tile, two blocks of load 1, DPU 2, ACT 10, store 1 (cycles, all exact in
    binary).  With the ACT a stage of its own the DPU computes block 1 (3 -> 5) while the
    SHAVEs run block 0 (3 -> 13); block 1's ACT runs 13 -> 23, its store 23 -> 24.  Charged
    to the DPU, block 1's compute waits for block 0's ACT: 13 -> 25, stored at 26."""
    block = BlockStages(load=1.0, compute=2.0, store=1.0, ddr=0.0, act=10.0)
    assert pipeline_stores([block, block], 1) == (24.0, [14.0, 24.0])
    assert pipeline_cycles([act_on_dpu(block)] * 2, 1) == 26.0
    # a block without an epilogue is the three-stage pipeline it was
    plain = BlockStages(load=1.0, compute=2.0, store=1.0, ddr=0.0)
    assert act_on_dpu(plain) is plain and pipeline_cycles([plain, plain], 1) == 6.0


def test_reader_waits_for_the_rows_it_pipelines_on():
    """Two tiles, blocks of 4 rows each (load 1, ACT 4, no DPU or store time): block 0 is
    stored at 5, block 1 at 6 (its load behind block 0's).  A reader as slow as the
    SHAVEs (T = 8 / 2 = 4) still has the 4 rows after block 0 to do once it is stored:
    5 + 4 * 4 / 8 = 7, later than the layer's own makespan 6."""
    block = BlockStages(load=1.0, compute=0.0, store=0.0, ddr=0.0, act=4.0)
    assert pipeline_cycles([block, block], 2) == 6.0
    assert reader_cycles([block, block], [4, 4], 2) == 7.0


@pytest.mark.parametrize("extent,count,tiles", [(e, c, t) for e in range(2, 40)
                                                 for c in range(2, min(e, 12) + 1)
                                                 for t in (1, 2)])
def test_ramp_cuts_cover_the_rows_first_blocks_shorter(extent, count, tiles):
    for cut in ramp_cuts(extent, count, tiles):
        assert len(cut) == count and cut[0][0] == 0 and cut[-1][1] == extent
        assert all(a[1] == b[0] for a, b in zip(cut, cut[1:]))
        sizes = [b - a for a, b in cut]
        first, rest = sizes[:tiles], sizes[tiles:]
        assert len(set(first)) == 1 and rest
        assert first[0] < min(b - a for a, b in _edges(extent, count)) <= min(rest)
        assert max(rest) - min(rest) <= 1


def test_act_bound_layer_takes_short_first_blocks():
    """24 rows on 2 tiles whose ACT epilogue (1,000 cycles a row) outweighs the DPU (300)
    and the transfers: the count chosen with the epilogue charged to the DPU is 6, and of
    the cuts of 6 blocks the one with 2-row first blocks lets the SHAVEs start soonest
    and its reader end soonest.  Without an epilogue the even cut stays."""
    def cost(rows: int) -> BlockStages:
        return BlockStages(load=300.0 + 100.0 * rows, compute=200.0 + 300.0 * rows,
                           store=100.0 + 50.0 * rows, ddr=0.0, act=100.0 + 1000.0 * rows)

    cut = _cheapest_cut(24, 2, 2, cost, (0.0, 0.0), 2, lambda count, rows: True)
    assert [b - a for a, b in cut] == [2, 2, 5, 5, 5, 5]
    even = _edges(24, 6)

    def reader(c):
        return reader_cycles([cost(b - a) for a, b in c], [b - a for a, b in c], 2)
    assert reader(cut) < reader(even)
    assert pipeline_cycles([cost(b - a) for a, b in cut], 2) \
        < pipeline_cycles([cost(b - a) for a, b in even], 2)

    def no_act(rows: int) -> BlockStages:
        return act_on_dpu(cost(rows))
    assert _cheapest_cut(24, 2, 2, no_act, (0.0, 0.0), 2, lambda c, r: True) == even
    # a ramp whose later blocks do not fit CMX is not taken
    fitting = _cheapest_cut(24, 2, 2, cost, (0.0, 0.0), 2, lambda count, rows: rows <= 4)
    assert max(b - a for a, b in fitting) <= 4


def _stem_rows(program) -> list[int]:
    """The output rows of each of the stem convolution's DPU tasks, in block order."""
    tasks = [t for tl in program.module.task_lists for t in tl.tasks
             if isinstance(t, DpuTask) and t.op is DpuOp.CONV
             and (t.label or "").startswith("batchnormalization_8.convolution.c")]
    rows = []
    for t in sorted(tasks, key=lambda t: int(t.label.rsplit(".c", 1)[1].split(".")[0])):
        ys = [y for v in t.variants for y in (v.start[1], v.end[1])]
        rows.append(max(ys) - min(ys) + 1)
    return rows


def test_mobilenet_stem_ramps_up(tmp_path, monkeypatch):
    """MobileNetV3-Small at 128x128: the stem's HardSwish costs its SHAVEs more than the
    convolution its DPU, so its first block on each tile is shorter than the rest, and
    the network runs in fewer cycles than with the count's cut without ramps
    (``granule_edges``).  Its output is onnxruntime's within the whole-model tolerance of
    ``tests/onnx_import/test_schedules.py``.  (At 96x96, since the classifier's weight
    chunks stopped queueing three deep behind the last expansion, ``schedule_prefetch.
    _left_over``, the stem's blocks no longer decide the total: both cuts take 287,613
    cycles; at 128x128 the ramp saves 459, at 224x224 1,303.)"""
    builder = mobilenet_v3_small(size=128, classes=10)
    path = builder.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, schedule="default")
    rows = _stem_rows(program)
    assert sum(rows) == 64 and rows[0] == rows[1] < min(rows[2:])
    cycles = api.simulate(program, timing_only=True).cycles

    feeds = {v.name: np.random.default_rng(7).standard_normal(
        [d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
        for v in builder.inputs}
    inputs = {b.name: feeds[b.name].astype(np.float16) for b in program.module.buffers
              if b.kind is BufferKind.INPUT}
    got = next(iter(api.simulate(program, inputs).outputs.values())).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    got = got.reshape(want.shape)
    cosine = float(np.dot(got.ravel(), want.ravel())
                   / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))
    monkeypatch.setattr(lower_dpu_blocks, "ramp_cuts", lambda *args: [])
    even = api.compile(path, schedule="default")
    unramped = _stem_rows(even)     # the count's cut without ramps: largest blocks first
    assert len(unramped) == len(rows) and unramped == sorted(unramped, reverse=True)
    assert cycles < api.simulate(even, timing_only=True).cycles
