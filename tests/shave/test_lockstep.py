"""Invocations of one kernel interpreted in lockstep (``isa/lockstep.py``, through
``invoke.invoke_together``): each invocation's registers, counts, cycles and memory are
what it gives alone, whether the lockstep runs to the end or the invocations part (a
branch some take, a fault) and go on alone; an error is the one the invocations in
turn would raise."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import runtime_sim.isa.invoke as invoke
import runtime_sim.isa.lockstep as lockstep
from runtime_sim.isa.invoke import invoke_kernel, invoke_together
from shave_testlib import WIN_F
from test_path_many import together_and_alone as library_together_and_alone
from test_together import FIELDS
from vpuc.abi.params import ScalarArg
from vpuc.diagnostics import VpucError
from vpuc.ir.types import ElemType
from vpuc.shave.assembler import assemble

CMX = 1 << 16


@pytest.fixture
def outcomes(monkeypatch) -> list[tuple[str, int]]:
    """How each lockstep ended ("done", or "alone" and the index it parted at); every
    kernel, however short, run in lockstep."""
    monkeypatch.setattr(lockstep, "MIN_SHARED", 0)
    seen = []
    real = invoke.run_lockstep

    def spy(*args):
        how, out = real(*args)
        seen.append((how, None if how == "done" else out[0][6]))
        return how, out
    monkeypatch.setattr(invoke, "run_lockstep", spy)
    return seen


@pytest.mark.parametrize("name", ["mvn", "softmax"])
def test_library_driver_runs_in_lockstep_to_the_end(name, outcomes):
    """Four invocations, each its own pointers and data: the driver's prologue, walker
    and epilogue interpreted once for all, the row loops batched together."""
    blocks = [(0x100 + i * 0x3000, 0xC000 + i * 0x1000, 5, 64) for i in range(4)]
    library_together_and_alone(name, blocks, seed=1)
    assert outcomes == [("done", None)]


def test_registers_that_differ_are_each_invocations_own(outcomes):
    """Each its own eps (a broadcast vector register that differs between them) and
    eps_outside (a branch of the setup taken by some: they part there, same results)."""
    blocks = [(0x100 + i * 0x3000, 0xC000 + i * 0x1000, 5, 64) for i in range(3)]
    eps = [[ScalarArg(ElemType.F32, e), ScalarArg(ElemType.I32, 0)] for e in (1e-5, 0.5, 3.0)]
    library_together_and_alone("mvn", blocks, seed=2, scalars=eps)
    assert outcomes == [("done", None)]
    eps[1][1] = ScalarArg(ElemType.I32, 1)
    library_together_and_alone("mvn", blocks, seed=3, scalars=eps)
    assert outcomes[1][0] == "alone"


@pytest.mark.parametrize("shapes", [[(4, 64), (4, 72), (4, 64), (4, 200)],   # row lengths
                                    [(3, 64), (4, 64), (5, 64), (6, 64)]])  # row counts
def test_control_flow_that_diverges_goes_on_alone(shapes, outcomes):
    """Rows of different lengths part them at the driver's branches, different row
    counts after their row loops (batches of different lengths); each then runs alone
    (its row loops still batched with the others' where they agree)."""
    blocks = [(0x100 + i * 0x3000, 0xC000 + i * 0x1000, rows, width)
              for i, (rows, width) in enumerate(shapes)]
    library_together_and_alone("mvn", blocks, seed=4)
    assert len(outcomes) == 1 and outcomes[0][0] == "alone"


# Two pointers from the arguments, each read; a bad one faults where it is read.
TWO_LOADS = """
    .global k
    .text
k:
    lw      s2, 0(s0)
    lw      s3, 0(s2)
    addi    s3, s3, 1
    lw      s4, 4(s0)
    lw      s5, 0(s4)
    add     s5, s5, s3
    sw      s5, 8(s4)
    halt
"""


def _calls(words: list[list[int]], cmx: np.ndarray) -> list[dict]:
    obj = assemble(TWO_LOADS, "k.s")
    return [dict(obj=obj, cmx=cmx, window_e=struct.pack("<2I", *w), args_offset=0,
                 args_size=8) for w in words]


def _error(words: list[list[int]], together: bool) -> VpucError:
    cmx = np.arange(CMX, dtype=np.uint32).astype(np.uint8)
    with pytest.raises(VpucError) as caught:
        if together:
            invoke_together(_calls(words, cmx))
        else:
            for call in _calls(words, cmx):
                invoke_kernel(**call)
    return caught.value


def test_scalar_code_with_own_pointers_is_each_invocations_own(outcomes):
    words = [[WIN_F + 0x100 * i, WIN_F + 0x2000 + 0x40 * i] for i in range(4)]
    alone_cmx = np.arange(CMX, dtype=np.uint32).astype(np.uint8)
    together_cmx = alone_cmx.copy()
    alone = [invoke_kernel(**call) for call in _calls(words, alone_cmx)]
    together = invoke_together(_calls(words, together_cmx))
    for one, other in zip(alone, together):
        for field in FIELDS:
            assert getattr(other, field) == getattr(one, field), field
    assert np.array_equal(together_cmx, alone_cmx)
    assert outcomes == [("done", None)]


def test_a_fault_in_the_third_of_four_names_it(outcomes):
    words = [[WIN_F + 0x100 * i, WIN_F + 0x2000 + 0x40 * i] for i in range(4)]
    words[2][0] = WIN_F + CMX + 0x100                  # past the end of WIN_F
    error = _error(words, together=True)
    assert error.together_index == 2
    assert str(error) == str(_error(words[2:3], together=False))
    assert outcomes == [("alone", 1)]                  # parted before the faulting load


def test_an_earlier_invocations_later_fault_comes_first(outcomes):
    """In turn, the first invocation runs on to its own fault (its second pointer) before
    the third reaches its first: the lockstep, parted at the third's, gives the same."""
    words = [[WIN_F + 0x100 * i, WIN_F + 0x2000 + 0x40 * i] for i in range(4)]
    words[0][1] = WIN_F + CMX + 0x100
    words[2][0] = WIN_F + CMX + 0x200
    error = _error(words, together=True)
    assert error.together_index == 0
    assert str(error) == str(_error(words[0:1], together=False))
    assert "pc" in str(error) and outcomes == [("alone", 1)]


def test_a_program_with_little_code_outside_its_loops_runs_in_turn(outcomes, monkeypatch):
    """Fewer than ``MIN_SHARED`` instructions outside the fast path's loops (a generated
    kernel's): the invocations run in turn, as before the lockstep (the same results);
    the library kernels' driver has more."""
    monkeypatch.setattr(lockstep, "MIN_SHARED", 150)
    words = [[WIN_F + 0x100 * i, WIN_F + 0x2000 + 0x40 * i] for i in range(4)]
    cmx = np.arange(CMX, dtype=np.uint32).astype(np.uint8)
    alone_cmx, together_cmx = cmx.copy(), cmx.copy()
    alone = [invoke_kernel(**call) for call in _calls(words, alone_cmx)]
    together = invoke_together(_calls(words, together_cmx))
    assert outcomes == []                               # no lockstep
    for one, other in zip(alone, together):
        for field in FIELDS:
            assert getattr(other, field) == getattr(one, field), field
    assert np.array_equal(together_cmx, alone_cmx)
    blocks = [(0x100 + i * 0x3000, 0xC000 + i * 0x1000, 5, 64) for i in range(2)]
    library_together_and_alone("mvn", blocks, seed=1)
    assert outcomes == [("done", None)]


# .rodata read from the WIN_D the invocations share, .data written in each one's WIN_E
SECTIONS = """
    .global k
    .text
k:
    la      s2, counter
    lw      s3, 0(s2)
    lw      s4, 0(s0)
    add     s3, s3, s4
    sw      s3, 0(s2)
    la      s5, konst
    lw      s6, 0(s5)
    add     s3, s3, s6
    lw      s2, 0(s2)
    add     s3, s3, s2
    lw      s7, 4(s0)
    sw      s3, 0(s7)
    halt
    .rodata
konst: .word 1000
    .data
counter: .word 7
"""


@pytest.mark.parametrize("lock", [0, 1000])            # in lockstep, and in turn
def test_invocations_share_code_and_keep_their_own_data(lock, monkeypatch):
    monkeypatch.setattr(lockstep, "MIN_SHARED", lock)
    obj = assemble(SECTIONS, "k.s")
    calls = []
    cmx_alone, cmx_together = np.zeros(CMX, np.uint8), np.zeros(CMX, np.uint8)
    for i in range(3):
        image = struct.pack("<4I2I", 7, 0, 0, 0, 10 * (i + 1), WIN_F + 0x40 * i)
        calls.append(dict(obj=obj, window_e=image, args_offset=16, args_size=8))
    alone = [invoke_kernel(cmx=cmx_alone, **call) for call in calls]
    together = invoke_together([dict(call, cmx=cmx_together) for call in calls])
    for one, other in zip(alone, together):
        for field in FIELDS:
            assert getattr(other, field) == getattr(one, field), field
    assert np.array_equal(cmx_alone, cmx_together)
    stored = cmx_together.view(np.uint32)[[0, 16, 32]].tolist()
    assert stored == [7 + 10 * (i + 1) + 1000 + 7 + 10 * (i + 1) for i in range(3)]
