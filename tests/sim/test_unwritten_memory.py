"""Bytes no task wrote read as NaN in a run with numerics (runtime_sim.memory.UNWRITTEN).

Zeros made a result that depends on unwritten memory look plausible: tests compared an
unlowered graph module's all-zero outputs with an all-zero reference and passed."""

from __future__ import annotations

import numpy as np

from runtime_sim.simulator import simulate
from tests.sim.simlib import compile_vir

PROGRAM = """module @unwritten arch NPU37XX

input %in : 1x16x4x4xf16 NCHW
output %out : 1x16x8x4xf16 NCHW
cmx %buf : 1x16x8x4xf16 NCHW tile 0
view %top = %buf[0:1, 0:16, 0:4, 0:4]

barrier %loaded

tasks DMA {
  load: dma %in -> %top channel 0 updates(%loaded)
  store: dma %buf -> %out channel 0 waits(%loaded)
}
"""


def test_a_read_of_unwritten_cmx_is_nan_and_the_written_half_exact(tmp_path):
    path = tmp_path / "unwritten.vir"
    path.write_text(PROGRAM)
    program = compile_vir(path)
    x = np.arange(256, dtype=np.float32).reshape(1, 16, 4, 4) / 8
    out = simulate(program, inputs={"in": x}).outputs["out"].astype(np.float32)
    assert np.array_equal(out[:, :, :4], x.astype(np.float16).astype(np.float32))
    assert np.isnan(out[:, :, 4:]).all()


def test_a_timing_only_run_gives_the_same_cycles(tmp_path):
    path = tmp_path / "unwritten.vir"
    path.write_text(PROGRAM)
    program = compile_vir(path)
    assert simulate(program, timing_only=True).cycles == simulate(program).cycles
