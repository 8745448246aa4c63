"""One block for an ACT segment whose blocks' fixed costs outweigh the work they share
(``vpuc/fusion/act_block_count.py``), and the cut kept where the work is large."""

from __future__ import annotations

import numpy as np

from vpuc import api
from vpuc.cost.timing import load_timing
from vpuc.fusion.act_block_count import one_block_pays
from vpuc.fusion.blocked_program import Value
from vpuc.ir.tasks import DmaTask, SwKernelTask
from vpuc.ir.types import DimsOrder, ElemType, TensorType

TIMING = load_timing("NPU37XX")


def _values(dims: tuple, inputs: int, tile: int | None = None) -> list[Value]:
    t = TensorType(dims, ElemType.F16, DimsOrder.identity(len(dims)))
    kind = "ddr" if tile is not None else "input"
    return [Value(f"in{i}", t, kind, tile=tile) for i in range(inputs)] + \
        [Value("out", t, "output")]


def _pays(values, dims, blocks, ops=8, tiles=2, timing=TIMING) -> bool:
    names = {v.name for v in values}
    return one_block_pays(values, names - {"out"}, {"out"}, dims, 0, blocks, True, ops, 0,
                          1, tiles, timing)


def test_a_recurrent_steps_gates_run_as_one_block():
    # an LSTM step's cell update: four 64-element gates read from DDR (893 cycles each a
    # block), a few hundred cycles of kernel work: four blocks pay the latencies four times
    dims = (64,)
    assert _pays(_values(dims, 4), dims, 4)


def test_a_large_segment_keeps_its_cut():
    # 1x16x56x56: 50 k elements of work shared by four ACT SHAVEs outweigh a few latencies
    dims = (16, 56, 56)
    assert not _pays(_values(dims, 2), dims, 4)


def test_a_prime_axis_weighs_the_tail_cut_not_one_block_per_row():
    # the ViT's 197x192 residual Add of two values kept in CMX: the even cut is 197 blocks
    # of one row (one block would beat it), but choose_cut's four blocks and a tail win
    dims = (197, 192)
    assert not _pays(_values(dims, 2, tile=0), dims, 197, ops=1)


def test_the_rule_follows_the_dma_latency():
    # the same small segment splits when DDR reads cost nothing: what one block saves is
    # the blocks' latencies, not its size
    from dataclasses import replace
    dims = (8, 64)
    values = _values(dims, 3)
    assert _pays(values, dims, 4, ops=2)
    fast = replace(TIMING, dma=replace(TIMING.dma, ddr_read_latency=0.0,
                                       ddr_write_latency=0.0),
                   dispatch={**TIMING.dispatch, "DMA": 0.0})
    assert not _pays(values, dims, 4, ops=2, timing=fast)


GRAPH = """module @gates arch NPU37XX
graph @main {
  %i = Parameter() : 1x64xf16
  %f = Parameter() : 1x64xf16
  %g = Parameter() : 1x64xf16
  %c = Parameter() : 1x64xf16
  %si = Sigmoid(%i) : 1x64xf16
  %sf = Sigmoid(%f) : 1x64xf16
  %tg = Tanh(%g) : 1x64xf16
  %a = Multiply(%sf, %c) : 1x64xf16
  %b = Multiply(%si, %tg) : 1x64xf16
  %r = Add(%a, %b) : 1x64xf16
  Result(%r)
}
"""


def test_a_tiny_cell_update_loads_each_operand_once_and_matches_the_reference():
    program = api.compile_text(GRAPH, "<gates>")
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    loads = [t for t in tasks if isinstance(t, DmaTask) and t.label.startswith("load")]
    assert len(loads) == 4, [t.label for t in loads]
    assert len([t for t in tasks if isinstance(t, SwKernelTask)]) == 1
    rng = np.random.default_rng(0)
    feeds = {n: rng.uniform(-2, 2, (1, 64)).astype(np.float16) for n in "ifgc"}
    sim = api.simulate(program, feeds, reference=True)
    assert not sim.races
    # f16 results of a few f32-computed ops: a couple of f16 ulps at |r| <= 3
    np.testing.assert_allclose(sim.outputs["r"].astype(np.float32),
                               sim.reference["r"].astype(np.float32), rtol=2e-3, atol=2e-3)
