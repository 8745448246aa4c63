"""lower-graph uses only the DMA channels the architecture has.

Every kind of segment (a DPU layer, a fused ACT SHAVE pipeline, a library kernel, a
DMA copy) compiles for a structure with one DMA channel: every DMA task is then on
channel 0, the program verifies, and its outputs equal those of the two-channel
program bit for bit (the same tasks compute the same values; only their order on
the DMA engine, hence the cycles, differs).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.fusion.dpu_testlib import module
from vpuc import api
from vpuc.arch import load_arch

SOFTMAX = """  %x = Parameter() : 1x4x16x32xf16
  %s = Softmax{axis = 3}(%x)
  %y = Exp(%s)
  Result(%y)
"""
TRANSPOSE = """  %x = Parameter() : 1x64x32x48xf16
  %t = Transpose{order = [0, 3, 1, 2]}(%x)
  %y = Exp(%t)
  Result(%y)
"""
SOURCES = {"graph_conv": "examples/graph_conv.vir", "fused_chain": "examples/fused_chain.vir",
           "softmax": module(SOFTMAX), "transpose": module(TRANSPOSE)}


def dma_channels(program) -> set[int]:
    return {t.channel for tl in program.module.task_lists if tl.executor.name == "DMA"
            for t in tl.tasks}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_one_dma_channel_lowers_onto_channel_zero(name):
    base = load_arch("NPU37XX")
    one = api.compile(SOURCES[name], dataclasses.replace(base, dma_channels=1),
                      report=api.CompileReport())
    two = api.compile(SOURCES[name], base, report=api.CompileReport())
    assert dma_channels(one) == {0}
    assert dma_channels(two) == {0, 1}
    run_one, run_two = api.simulate(one, seed=3), api.simulate(two, seed=3)
    assert run_one.races == [] and run_two.races == []
    assert run_one.outputs.keys() == run_two.outputs.keys()
    for key, value in run_two.outputs.items():
        assert np.array_equal(run_one.outputs[key], value, equal_nan=True), key
