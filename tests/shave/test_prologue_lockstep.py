"""Straight-line blocks of several invocations in lockstep (``isa/prologue.py``): a
software-pipelined kernel's prologue and epilogue run once for all the invocations paused
at them, and every invocation's registers, memory, counts and cycles are what it gives
alone; blocks that may not run so (loads and stores, a lone invocation) run alone, and an
error is the one the failing invocation raises alone."""

from __future__ import annotations

import numpy as np
import pytest

import runtime_sim.isa.invoke as invoke_module
from runtime_sim.isa.invoke import invoke_kernel, invoke_together
from runtime_sim.isa.prologue import run_blocks_together
from shave_testlib import WIN_F
from test_together import CMX, _calls, together_and_alone
from vpuc.diagnostics import VpucError

F32_BITS = {x: int(np.float32(x).view(np.uint32)) for x in (0.75, 1.25, -2.0)}

# A prologue of 14 straight instructions (scalar loads of the arguments, a vector load,
# arithmetic with a per-invocation scale), a software-pipelined body, an epilogue of 7
# (arithmetic, a store, a value left in v9 and s11).
PIPELINED_SCALED = """
    .global k
k:
    lw s2, 0(s0)                # source
    lw s3, 4(s0)                # destination
    lw s4, 8(s0)                # iterations
    lw s6, 12(s0)               # scale (f32 bits): differs between invocations
    vbcast.w v7, s6
    li.f32 s9, 1.5
    vbcast.w v8, s9
    vld v1, 0(s2)               # prologue: stage 1 of iteration 0
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vmul.f32 v2, v2, v7
    vmul.f32 v3, v3, v7
    addi s2, s2, 16
    add s11, s3, s6
body:
    vadd.f32 v4, v2, v8         # stage 2 of the previous iteration
    vadd.f32 v5, v3, v8
    vcvt.f16.f32 v6, v4, v5
    vst v6, 0(s3)
    vld v1, 0(s2)               # stage 1 of this one
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vmul.f32 v2, v2, v7
    vmul.f32 v3, v3, v7
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    vadd.f32 v4, v2, v8         # epilogue: stage 2 of the last
    vadd.f32 v5, v3, v8
    vcvt.f16.f32 v6, v4, v5
    vst v6, 0(s3)
    vsub.f32 v9, v4, v5
    vmul.f32 v9, v9, v7
    addi s11, s11, 1
    halt
"""

# one straight block that loads after it stored: never run in lockstep
LOAD_AFTER_STORE = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    vld v1, 0(s2)
    vadd.f32 v2, v1, v1
    vst v2, 0(s3)
    vld v3, 16(s2)
    vadd.f32 v4, v3, v2
    vst v4, 16(s3)
    halt
"""


@pytest.fixture
def lockstep_counts(monkeypatch):
    """How many invocations' blocks each ``run_blocks_together`` ran in lockstep."""
    counts: list[int] = []

    def counted(pending):
        counts.append(run_blocks_together(pending))
        return counts[-1]
    monkeypatch.setattr(invoke_module, "run_blocks_together", counted)
    return counts


def _words(count: int, rows: int, scales: list[float]) -> list[list[int]]:
    return [[WIN_F + 0x1000 + i * 0x1000, WIN_F + 0x8000 + i * 0x1000, rows,
             F32_BITS[scales[i % len(scales)]]] for i in range(count)]


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("rows", [2, 9, 60])
def test_prologue_and_epilogue_run_once_for_all(count, rows, lockstep_counts):
    """Differing pointers, trip counts' data and scales: the prologue and the epilogue
    of every invocation run in lockstep, each invocation's results its own."""
    together_and_alone(PIPELINED_SCALED, _words(count, rows, [0.75, 1.25, -2.0]),
                       seed=rows)
    assert sum(lockstep_counts) == 2 * count        # prologue and epilogue, every one


def test_same_arguments_but_pointers_share_their_values(lockstep_counts):
    """Registers every invocation holds as one object stay one value (not stacked)."""
    together_and_alone(PIPELINED_SCALED, _words(3, 20, [1.25]), seed=3)
    assert sum(lockstep_counts) == 6


def test_a_block_that_loads_after_it_stores_runs_alone(lockstep_counts):
    words = [[WIN_F + 0x1000 + i * 0x100, WIN_F + 0x8000 + i * 0x100] for i in range(3)]
    together_and_alone(LOAD_AFTER_STORE, words, seed=4)
    assert sum(lockstep_counts) == 0 and lockstep_counts    # paused, then run alone


def test_a_lone_invocation_runs_its_blocks_alone(lockstep_counts):
    together_and_alone(PIPELINED_SCALED, _words(1, 20, [0.75]), seed=5)
    assert sum(lockstep_counts) == 0


def _errors(words: list[list[int]]) -> tuple[VpucError, VpucError, int]:
    """The error of the first failing invocation alone (in order), and the one run
    together raises."""
    cmx = np.zeros(CMX, np.uint8)
    alone = None
    for index, call in enumerate(_calls(PIPELINED_SCALED, words, cmx)):
        try:
            invoke_kernel(**call)
        except VpucError as exc:
            alone = (exc, index)
            break
    assert alone is not None
    with pytest.raises(VpucError) as together:
        invoke_together(_calls(PIPELINED_SCALED, words, np.zeros(CMX, np.uint8)))
    return alone[0], together.value, alone[1]


def test_a_prologue_fault_names_its_own_invocation():
    """The 3rd of 4 reads past the end of WIN_F in its prologue: its own error, named by
    its index, as alone."""
    words = _words(4, 20, [0.75, 1.25])
    words[2][0] = WIN_F + CMX - 8
    alone, together, index = _errors(words)
    assert index == 2 and together.together_index == 2
    assert str(together) == str(alone)


def test_an_epilogue_fault_names_its_own_invocation():
    """The 3rd of 4 stores its last vector (the epilogue's) past the end of WIN_F."""
    rows = 20
    words = _words(4, rows, [0.75, 1.25])
    words[2][1] = WIN_F + CMX - rows * 16
    alone, together, index = _errors(words)
    assert index == 2 and together.together_index == 2
    assert "vst" in str(alone) and str(together) == str(alone)
