"""A DMA whose source runs are shorter than the engine's burst pays a burst per run
(vpuc.cost.dma, "strided"); the simulator finds the runs from the views."""

from __future__ import annotations

import pytest

from runtime_sim.plan import build_plan
from runtime_sim.simarch import sim_arch_for
from vpuc.arch import load_arch
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text

SOURCE = """module @strided arch NPU37XX
input %in : 1x16x8x8xf16 NHWC
view %few = %in[0:1, 0:4, 0:8, 0:8]
view %rows = %in[0:1, 0:16, 0:4, 0:8]
cmx %a : 1x4x8x8xf16 NHWC tile 0
cmx %b : 1x16x4x8xf16 NHWC tile 0
tasks DMA {
  few: dma %few -> %a channel 0
  rows: dma %rows -> %b channel 1
}
"""


@pytest.fixture(scope="module")
def plan():
    module = parse_text(SOURCE, "<strided>")
    ctx = PassContext(load_arch(module.arch))
    PassManager(parse_pipeline("compile")).run(module, ctx)
    program = ctx.artifacts["program"]
    return build_plan(program, sim_arch_for(program.arch))


def test_short_runs_cost_a_burst_each(plan):
    burst = plan.arch.dma.burst_bytes
    few = plan.work[plan.names.index("few")]
    # 4 of 16 channels, innermost in NHWC: 64 runs of 8 bytes, each a whole burst
    assert few.nbytes == 8 * 8 * burst and few.ddr_bytes == 512


def test_whole_rows_are_one_run(plan):
    rows = plan.work[plan.names.index("rows")]
    # 4 of 8 rows with every channel and column: one contiguous block of 1024 bytes
    assert rows.nbytes == 16 * 4 * 8 * 2
