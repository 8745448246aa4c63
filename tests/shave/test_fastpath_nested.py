"""The fast path against the exact interpreter on nested loops (the generator's
broadcasts, unrolled inner loops) and on faults inside a batched loop."""

from __future__ import annotations

import numpy as np
import pytest

from shave_testlib import WIN_F
from test_shave_assembler import CLAMP
from fastpath_testlib import BACK_EDGES, RECURRENCE, counted_loop, random_fill, run_both


# --- nested loops ------------------------------------------------------------------------------

NESTED = """
    .global k
k:
    lw s2, 0(s0)            # source rows
    lw s3, 4(s0)            # destination rows
    lw s4, 8(s0)            # rows
    lw s5, 12(s0)           # vectors per row
    lw s6, 16(s0)           # source pitch
    li.f16 s12, -1.5
    vbcast.h v3, s12
    beqz s4, done
outer:
    mov s8, s2
    mov s9, s3
    mov s10, s5
inner:
    vld v1, 0(s8)
    vmul.f16 v1, v1, v3
    vst v1, 0(s9)
    addi s8, s8, 16
    addi s9, s9, 16
    loop s10, inner
    add s2, s2, s6
    slli s11, s5, 4
    add s3, s3, s11
    loop s4, outer
done:
    halt
"""


def test_nested_loops_batch_the_inner_one_then_the_rows_along_their_path():
    """The inner loop's count is a register, so the outer body is no straight-line plan:
    the first row batches its inner loop (from its head: 9), the 11 others run as one
    path batch from the outer loop's back-edge."""
    fast, loops, _ = run_both(NESTED, [WIN_F, WIN_F + 0x8000, 12, 9, 160], random_fill(14))
    assert fast.batched_iterations == 9 + 11
    assert loops.batches == 2
    assert any("trip count (s10) is not set by li" in reason for reason in loops.declined)


def test_nested_loops_without_the_path_batch_batch_every_inner_loop():
    fast, loops, _ = run_both(NESTED, [WIN_F, WIN_F + 0x8000, 12, 9, 160], random_fill(14),
                              min_path_iterations=100)
    assert fast.batched_iterations == 12 * 9       # each row's inner loop, from its head
    assert loops.batches == 12


# The generator's broadcast multiply (squeeze-excite scale): per channel, an inner
# loop of a fixed trip count set by li, then a masked tail.
NESTED_COUNTED = """
    .global k
k:
    lw s4, 0(s0)            # source
    lw s5, 4(s0)            # per-channel scales
    lw s6, 8(s0)            # destination
    lw s7, 12(s0)           # channels
    li s1, MASKBITS
    vmask.h m0, s1
outer:
    vld v0, 0(s4)
    vldb.h v1, 0(s5)
    vmul.f16 v0, v0, v1
    vst v0, 0(s6)
    addi s4, s4, 16
    addi s6, s6, 16
    li s8, TRIP
inner:
    vld v0, 0(s4)
    vldb.h v1, 0(s5)
    addi s4, s4, 16
    vmul.f16 v2, v0, v1
    vst v2, 0(s6)
    addi s6, s6, 16
    loop s8, inner
    vld.m v0, 0(s4), m0
    vldb.h v1, 0(s5)
    vmul.f16 v2, v0, v1
    vst.m v2, 0(s6), m0
    addi s4, s4, STEP
    addi s6, s6, STEP
    addi s5, s5, 2
    loop s7, outer
    halt
"""


@pytest.mark.parametrize("trip, mask_bits", [(1, 1), (2, 1), (3, 0), (8, 4)])
def test_nested_counted_loop_is_unrolled_into_the_outer_batch(trip, mask_bits):
    step = 2 * (mask_bits or 1)
    source = (NESTED_COUNTED.replace("TRIP", str(trip)).replace("MASKBITS", str(mask_bits))
              .replace("STEP", str(step)))
    fast, loops, _ = run_both(source, [WIN_F, WIN_F + 0x7000, WIN_F + 0x8000, 40],
                              random_fill(trip))
    # the first channel runs in the interpreter (the fast path is asked at back-edges)
    assert loops.batches >= 1 and fast.batched_iterations >= 39


# Three counted loops (the generator's rank-3 broadcast): the outermost batch unrolls
# the middle loop, and each middle pass unrolls the innermost one again.
NESTED_THREE = """
    .global k
k:
    lw s4, 0(s0)            # source
    lw s5, 4(s0)            # destination
    lw s7, 8(s0)            # outer trip
    li.f16 s12, -1.5
    vbcast.h v3, s12
outer:
    li s8, MIDDLE
middle:
    li s9, INNER
inner:
    vld v1, 0(s4)
    vmul.f16 v1, v1, v3
    vst v1, 0(s5)
    addi s4, s4, 16
    addi s5, s5, 16
    loop s9, inner
    addi s5, s5, 32
    loop s8, middle
    addi s4, s4, 48
    loop s7, outer
    halt
"""


@pytest.mark.parametrize("middle, inner", [(2, 8), (3, 2), (1, 5), (4, 1)])
def test_three_nested_counted_loops_unroll_every_pass(middle, inner):
    source = NESTED_THREE.replace("MIDDLE", str(middle)).replace("INNER", str(inner))
    fast, loops, _ = run_both(source, [WIN_F, WIN_F + 0x8000, 12], random_fill(middle * inner))
    assert loops.batches >= 1 and fast.batched_iterations >= 11


RELOADED = """
    .global k
k:
    lw s2, 0(s0)            # source
    lw s3, 4(s0)            # destination
    lw s4, 8(s0)            # vectors
    lw s5, 12(s0)           # one vector of scales, reloaded every iteration
body:
    vld v1, 0(s2)
    vld v2, 0(s5)
    addi s5, s5, 16         # the pointer steps and steps back: 0 per iteration
    vmul.f16 v1, v1, v2
    vst v1, 0(s3)
    addi s5, s5, -16
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    halt
"""


@pytest.mark.parametrize("scales", [0x4000, 0xFFF0])
def test_a_constant_reloaded_every_iteration_is_read_once(scales):
    """``vld`` at an induction register of step 0: every row the same 16 bytes (no
    iteration stores them, or the overlap check refuses the batch); at the window's end
    the batch still runs (the 16 bytes are inside it)."""
    fast, _, win_f = run_both(RELOADED, [WIN_F, WIN_F + 0x8000, 40, WIN_F + scales],
                              random_fill(21))
    assert fast.batched_iterations == 40
    x = np.frombuffer(win_f[:40 * 16].tobytes(), np.float16).reshape(40, 8)
    scale = np.frombuffer(win_f[scales:scales + 16].tobytes(), np.float16)
    got = np.frombuffer(win_f[0x8000:0x8000 + 40 * 16].tobytes(), np.float16).reshape(40, 8)
    # an f16 x f16 product is exact in f32, so one rounding to f16: exact by construction
    with np.errstate(all="ignore"):
        assert np.array_equal(got.view(np.uint16), (x.astype(np.float32) * scale.astype(
            np.float32)).astype(np.float16).view(np.uint16))
    # storing into the constant from another iteration: refused, the interpreter's result
    fast, loops, _ = run_both(RELOADED.replace("vst v1, 0(s3)", "vst v1, -16(s5)"),
                              [WIN_F, WIN_F + 0x8000, 40, WIN_F + scales], random_fill(21))
    assert fast.batched_iterations == 0
    assert "an iteration accesses bytes another iteration stores" in loops.declined


def test_moved_buffers_relocate_the_remembered_affine_pass():
    """A block's buffers move between invocations, its counts do not: the first entry's
    affine pass serves the others with its footprints moved along with the pointers, and
    the checks on them are made again: the batch stops before a fault at the same
    iteration, and refuses buffers that now overlap.  Every run is the interpreter's."""
    n, args = 1003, 0x4600BC00
    loops = run_both(CLAMP, [WIN_F, WIN_F + 0x8000, n, args], random_fill(19))[1]
    proofs = loops.proofs
    proofs.clear()
    run_both(CLAMP, [WIN_F, WIN_F + 0x8000, n, args], random_fill(19))
    misses, relocated = proofs.misses, proofs.relocated
    fast, _, _ = run_both(CLAMP, [WIN_F + 0x40, WIN_F + 0x8400, n, args], random_fill(19))
    assert fast.batched_iterations == n // 8
    assert (proofs.misses, proofs.relocated) == (misses, relocated + 1)
    # the source moved to the end of WIN_F: the batch stops short, the interpreter faults
    error, _, _ = run_both(CLAMP, [WIN_F + 65536 - 16 * 37, WIN_F, n, args], random_fill(19))
    assert "outside the mapped part of WIN_F" in error
    assert proofs.relocated == relocated + 2
    # the output one vector ahead of the input: each iteration stores what the next loads
    fast, loops, _ = run_both(CLAMP, [WIN_F, WIN_F + 16, n, args], random_fill(19))
    assert fast.batched_iterations == 0
    assert "an iteration accesses bytes another iteration stores" in loops.declined
    assert proofs.relocated == relocated + 3


def test_an_end_pointer_compared_by_the_back_edge_is_not_relocated():
    """``bne s2, s5``: the source pointer decides the trip count, so a moved source is a
    new entry (the affine pass again), never the old proof shifted."""
    prologue, step, back_edge, batched = BACK_EDGES["bne-end-pointer"]
    source = counted_loop(prologue, step, back_edge)
    loops = run_both(source, [WIN_F, WIN_F + 0x8000], random_fill(20))[1]
    misses, relocated = loops.proofs.misses, loops.proofs.relocated
    fast, _, _ = run_both(source, [WIN_F + 0x100, WIN_F + 0x8000], random_fill(20))
    assert fast.batched_iterations == batched
    assert loops.proofs.misses == misses + 1 and loops.proofs.relocated == relocated


def test_masked_access_reaching_past_the_window_is_batched_by_its_active_bytes():
    # Each vld.m reads 2 active bytes of 16: the hull of the set bits stays inside
    # WIN_F up to the last element, where a 16-byte hull would not.
    source = NESTED_COUNTED.replace("TRIP", "1").replace("MASKBITS", "1").replace("STEP", "2")
    size, per_channel = 0x8000, 16 + 16 + 2
    last_byte = 39 * per_channel + 32 + 2         # the last channel's tail, 2 bytes
    fast, loops, _ = run_both(source, [WIN_F + size - last_byte, WIN_F + 0x100,
                                       WIN_F + 0x4000, 40],
                              random_fill(3), sizes=(4096, 4096, size))
    assert fast.batched_iterations == 40


# --- faults inside a batched loop ------------------------------------------------------------

def test_load_fault_reports_the_first_faulting_iteration():
    """The source runs off the end of WIN_F in iteration 36 (from 0): same message,
    same partial output, whichever path ran the iterations before it."""
    n = 8 * 60
    source_start = WIN_F + 65536 - 16 * 37 + 6
    error, _, _ = run_both(CLAMP, [source_start, WIN_F, n, 0x4600BC00], random_fill(15))
    assert "pc 0x1d000050 (.text+0x50) 'vld v3, 0(s2)'" in error
    assert f"load of 16 bytes at {WIN_F + 65536 + 6 - 16:#010x}" in error
    assert "outside the mapped part of WIN_F" in error


def test_store_fault_to_a_read_only_window():
    source = RECURRENCE.replace("    vld v2, OFFSET(s3)\n", "")
    n = 100
    error, _, _ = run_both(source.replace("    lw s3, 4(s0)", "    la s3, k+64"),
                           [WIN_F, 0, n], random_fill(16))
    assert "WIN_D is read-only" in error and "'vst v1, 0(s3)'" in error


def test_store_fault_past_the_mapping_keeps_earlier_stores():
    source = RECURRENCE.replace("    vld v2, OFFSET(s3)\n", "")
    error, _, _ = run_both(source, [WIN_F, WIN_F + 65536 - 16 * 20, 100], random_fill(17))
    assert f"store of 16 bytes at {WIN_F + 65536:#010x}" in error


def test_pending_loads_before_the_loop_stall_it_identically():
    source = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    vld v9, 0(s2)
    vexp.f16 v8, v9
    lw s11, 12(s0)
body:
    vsub.f16 v1, v8, v9
    vst v1, 0(s3)
    sw s11, 16(s3)
    addi s3, s3, 32
    loop s4, body
    halt
"""
    fast, _, _ = run_both(source, [WIN_F, WIN_F + 0x8000, 40, 7], random_fill(18))
    assert fast.batched_iterations == 40
