"""Several invocations of a kernel run in step (``invoke.invoke_together``), their
batches of one loop plan as one batch of all their rows (``loop_chunk_many``): each
invocation's memory, registers, counts and cycles are what it gives alone, and what
cannot run as one batch (gathers, invariants that differ) runs alone."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from runtime_sim.isa.invoke import invoke_kernel, invoke_together
from shave_testlib import WIN_F
from fastpath_testlib import HARDSWISH_LIKE, PIPELINED, ROW_SUM, STRIDED, random_fill
from test_loop_views import _UNROLLED, _reloading
from vpuc.diagnostics import VpucError
from vpuc.shave.assembler import assemble

CMX = 1 << 16
FIELDS = ("cycles", "instructions", "stall_cycles", "opcode_counts", "scalar_regs",
          "vector_regs", "mask_regs", "exit_pc", "batched_iterations")


def _calls(source: str, words: list[list[int]], cmx: np.ndarray) -> list[dict]:
    obj = assemble(source, "k.s")
    calls = []
    for args in words:
        image = struct.pack(f"<{len(args)}I", *[w & 0xFFFFFFFF for w in args])
        calls.append(dict(obj=obj, cmx=cmx, window_e=image, args_offset=0,
                          args_size=len(image)))
    return calls


def together_and_alone(source: str, words: list[list[int]], seed: int = 0):
    """Run the invocations with ``words`` as their arguments one after another, then in
    step on a fresh copy of the same CMX; assert the same results and CMX bytes.
    Returns the in-step run's FastLoops."""
    arrays = {"WIN_F": np.zeros(CMX, np.uint8)}
    random_fill(seed)(arrays)
    alone_cmx, together_cmx = arrays["WIN_F"].copy(), arrays["WIN_F"].copy()
    alone = [invoke_kernel(**call) for call in _calls(source, words, alone_cmx)]
    loops: list = []
    together = invoke_together(_calls(source, words, together_cmx), loops)
    for one, other in zip(alone, together):
        for name in FIELDS:
            assert getattr(other, name) == getattr(one, name), name
    assert np.array_equal(together_cmx, alone_cmx)
    return loops


def _blocks(count: int, size: int, rows: int, *extra: int) -> list[list[int]]:
    """Arguments of ``count`` invocations on disjoint blocks: (source, destination, rows)."""
    return [[WIN_F + 0x1000 + i * size, WIN_F + 0x8000 + i * size, rows, *extra]
            for i in range(count)]


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("rows", [2, 7, 100])
def test_elementwise_blocks_run_as_one_batch(count, rows):
    loops = together_and_alone(HARDSWISH_LIKE, _blocks(count, 0x1000, rows), seed=rows)
    assert all(fast.together == 1 for fast in loops)


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("rows", [3, 50])
def test_pipelined_blocks_shift_each_own_carried_rows(count, rows):
    """The carried register's row before each block's first is its own prologue's."""
    words = [[WIN_F + 0x1000 + i * 0x1000, WIN_F + 0x8010 + i * 0x1000, rows]
             for i in range(count)]
    loops = together_and_alone(PIPELINED, words, seed=12)
    assert all(fast.together == 1 for fast in loops)


@pytest.mark.parametrize("seed", [3, 4])             # without and with NaNs
def test_accumulators_fold_each_blocks_own_rows(seed):
    loops = together_and_alone(ROW_SUM, [[WIN_F + 0x1000 + i * 0x800, 0, 40] for i in range(3)],
                               seed=seed)
    assert all(fast.together == 1 for fast in loops)


@pytest.mark.parametrize("rows", [1, 7, 100])
def test_unrolled_windows_and_reloaded_constants(rows):
    together_and_alone(_UNROLLED.format(step=64), _blocks(3, 0x1000, rows), seed=5)
    loops = together_and_alone(_reloading(6), [     # 96 bytes a row, constants shared
        [WIN_F + 0x100 + i * 0x2800, WIN_F + 0x8000 + i * 0x2800, rows, WIN_F + 0x7800]
        for i in range(3)], seed=6)
    assert all(fast.together == (rows > 1) for fast in loops)


@pytest.mark.parametrize("count", [2, 3])
def test_gathers_and_scalar_accesses_run_together(count):
    """Strided and scalar loads and stores are no views of rows: each invocation's rows
    go to its own memory (``StackedMemory``), all in one batch."""
    words = [[WIN_F + i * 0x100, WIN_F + 0xA000 + i * 0x1000, 50, 64]
             for i in range(count)]
    loops = together_and_alone(STRIDED, words, seed=2)
    assert all(fast.batched_iterations == 50 and fast.together == 1 for fast in loops)


# a word of the invocation's own WIN_E image, loaded every iteration at one address
# (s0: the same in every invocation), scales what each row stores
OWN_WORD = STRIDED.replace("muli s10, s9, 3", "lw s11, 16(s0)\n    mul s10, s9, s11")


def test_a_word_at_one_address_is_each_invocations_own():
    words = [[WIN_F + i * 0x100, WIN_F + 0xA000 + i * 0x1000, 50, 64, 3 + 4 * i]
             for i in range(3)]
    loops = together_and_alone(OWN_WORD, words, seed=9)
    assert all(fast.together == 1 for fast in loops)


SCALED = HARDSWISH_LIKE.replace("li.f32 s5, 3.0", "lw s5, 12(s0)")


def test_invariants_that_differ_run_alone():
    """A vector broadcast from an argument: the same in two blocks (one batch), not in a
    third (its batch runs alone)."""
    three = np.float32(3.0).view(np.uint32)
    words = _blocks(3, 0x1000, 20, int(three))
    words[2][3] = int(np.float32(2.5).view(np.uint32))
    loops = together_and_alone(SCALED, words, seed=8)
    assert [fast.together for fast in loops] == [1, 1, 0]


def test_an_error_names_the_invocation_it_came_from():
    words = _blocks(3, 0x1000, 20)
    words[1][0] = WIN_F + CMX - 64          # reads past the end of WIN_F
    alone_cmx = np.zeros(CMX, np.uint8)
    with pytest.raises(VpucError) as alone:
        invoke_kernel(**_calls(HARDSWISH_LIKE, words[1:2], alone_cmx)[0])
    with pytest.raises(VpucError) as together:
        invoke_together(_calls(HARDSWISH_LIKE, words, np.zeros(CMX, np.uint8)))
    assert together.value.together_index == 1
    assert str(together.value) == str(alone.value)
