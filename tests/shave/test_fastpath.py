"""The fast path against the exact interpreter: identical memory, registers,
instruction counts and cycles -- and the same errors -- on hand-written loops
that it batches, conditional back-edges, and loops it must refuse (nested loops and
faults: ``test_fastpath_nested.py``; random bodies: ``test_fastpath_random.py``; the
library kernels: ``test_fastpath_library.py``; what they share: ``fastpath_testlib.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from shave_testlib import WIN_F
from test_shave_assembler import CLAMP
from fastpath_testlib import (BACK_EDGES, PIPELINED, RECURRENCE, STRIDED, counted_loop,
                             random_fill, run_both)


# --- kernels it batches -----------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 24, 100, 1003, 2047])
def test_clamp_with_tail(n):
    fast, _, _ = run_both(CLAMP, [WIN_F, WIN_F + 0x8000, n, 0x4600BC00], random_fill(n))
    # from the loop's first iteration (the interpreter falls into its head), when it
    # runs at least twice (min_iterations)
    assert fast.batched_iterations == (n // 8 if n // 8 >= 2 else 0)


def test_chunks_of_any_size_give_the_same_result():
    for chunk in (1, 3, 64):
        fast, _, _ = run_both(CLAMP, [WIN_F, WIN_F + 0x8000, 999, 0x4600BC00], random_fill(1),
                              chunk=chunk, min_iterations=1)
        assert fast.batched_iterations == 999 // 8


@pytest.mark.parametrize("pitch", [64, 34, -64])
def test_strided_and_scalar_accesses(pitch):
    start = WIN_F + (0x8000 if pitch < 0 else 0)
    fast, _, _ = run_both(STRIDED, [start, WIN_F + 0xA000, 50, pitch], random_fill(2))
    assert fast.batched_iterations == 50


MASKED = """
    .global k
k:
    lw s2, 0(s0)            # source
    lw s3, 4(s0)            # destination
    lw s4, 8(s0)            # elements left
    lw s8, 12(s0)           # one word of mask bits per vector
    addi s7, s4, 7
    srli s7, s7, 3          # vectors, the last one partial
    beqz s7, done
body:
    vmask.h m1, s4          # min(left, 8) lanes
    vld.m v1, 0(s2), m1
    vneg.f16 v1, v1
    vcmplt.f16 m2, v1, v7
    vsel v1, v1, v7, m2
    mand m3, m1, m2
    vst.m v1, 0(s3), m1
    mget s9, m3
    sw s9, 0(s8)
    addi s8, s8, 4
    addi s2, s2, 16
    addi s3, s3, 16
    addi s4, s4, -8
    loop s7, body
done:
    halt
"""


@pytest.mark.parametrize("n", [5, 64, 203])
def test_masked_tail_inside_the_loop(n):
    fast, _, _ = run_both(MASKED, [WIN_F, WIN_F + 0x8000, n, WIN_F + 0xC000], random_fill(3))
    vectors = -(-n // 8)
    assert fast.batched_iterations == (vectors if vectors >= 2 else 0)


def test_masked_tail_at_the_very_end_of_the_window():
    """The last partial vector's full 16 bytes would leave WIN_F: the batch stops
    before it, the interpreter runs it (its inactive bytes are never accessed)."""
    n, end = 203, WIN_F + 65536
    fast, _, _ = run_both(MASKED, [end - 2 * n, WIN_F + 0x8000, n, WIN_F + 0xC000],
                          random_fill(4))
    assert fast.batched_iterations == -(-n // 8) - 1


PAIRS = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
body:
    ld s10, 0(s2)
    add s12, s10, s11
    mulhu s13, s10, s11
    sd s12, 0(s3)
    sw s13, 8(s3)
    vld v1, 0(s2)
    vredmax.f16 s14, v1
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vexp.f32 v2, v2
    vdiv.f32 v3, v3, v2
    vcvt.f16.f32 v4, v2, v3
    vext.h s15, v4, 3
    vins.h v4, s14, 0
    vst v4, 16(s3)
    addi s2, s2, 16
    addi s3, s3, 32
    loop s4, body
    halt
"""


def test_pairs_conversions_and_slow_units():
    fast, _, _ = run_both(PAIRS, [WIN_F, WIN_F + 0x4000, 200], random_fill(5))
    assert fast.batched_iterations == 200
    assert fast.stall_cycles > 0


# --- conditional back-edges ------------------------------------------------------------------


@pytest.mark.parametrize("name", BACK_EDGES)
def test_conditional_back_edges(name):
    prologue, step, back_edge, batched = BACK_EDGES[name]
    fast, _, _ = run_both(counted_loop(prologue, step, back_edge), [WIN_F, WIN_F + 0x8000],
                          random_fill(6))
    assert fast.batched_iterations == batched


def test_loop_never_ending_hits_max_steps_at_the_same_instruction():
    source = counted_loop("    li s4, 4\n    li s5, 7", "    addi s4, s4, 2", "bne s4, s5, body")
    source = source.replace("addi s2, s2, 16", "addi s2, s2, 0").replace(
        "addi s3, s3, 16", "addi s3, s3, 0")
    error, _, _ = run_both(source, [WIN_F, WIN_F + 0x8000], random_fill(7), max_steps=5000)
    assert "did not halt within 5000 instructions" in error


def test_max_steps_inside_a_long_batchable_loop():
    error, _, _ = run_both(CLAMP, [WIN_F, WIN_F + 0x8000, 4000, 0x4600BC00], random_fill(8),
                           max_steps=1234)
    assert "did not halt within 1234 instructions" in error


def test_loop_ending_the_text_runs_off_the_end_as_the_interpreter_does():
    source = "    .global k\nk:\n    li s4, 50\nbody:\n    addi s5, s5, 3\n    loop s4, body\n"
    error, _, _ = run_both(source, [])
    assert "ran past the end of .text" in error


# --- loops it must refuse --------------------------------------------------------------------

ACCUMULATE = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    li s10, 0
body:
    vld v1, 0(s2)
    vredsum.f16 s11, v1
    fadd s10, s10, s11
    addi s2, s2, 16
    loop s4, body
    sw s10, 0(s3)
    halt
"""


def test_accumulating_loop_falls_back():
    fast, loops, _ = run_both(ACCUMULATE, [WIN_F, WIN_F + 0x8000, 100], random_fill(9))
    assert fast.batched_iterations == 0
    assert any("s10 carries a value" in reason for reason in loops.declined)


@pytest.mark.parametrize("offset, batched", [(-16, False), (-8, False), (-32, False),
                                             (0, True), (16, False), (-4096, True)])
def test_stores_feeding_later_loads_fall_back(offset, batched):
    """out[i] = x[i] + out[i-1] reads what the previous iteration stored; reading
    the bytes this iteration will store (offset 0, in place) is fine."""
    source = RECURRENCE.replace("OFFSET", str(offset))
    fast, loops, _ = run_both(source, [WIN_F, WIN_F + 0x8000, 200], random_fill(10))
    assert (fast.batched_iterations > 0) == batched
    if not batched:
        assert "an iteration accesses bytes another iteration stores" in loops.declined


def test_two_stores_to_overlapping_bytes_in_different_iterations_fall_back():
    source = RECURRENCE.replace("    vld v2, OFFSET(s3)\n", "").replace(
        "    vst v1, 0(s3)\n", "    vst v1, 0(s3)\n    vst v1, 8(s3)\n")
    fast, loops, _ = run_both(source, [WIN_F, WIN_F + 0x8000, 200], random_fill(11))
    assert fast.batched_iterations == 0
    assert "an iteration accesses bytes another iteration stores" in loops.declined


@pytest.mark.parametrize("chunk", [1, 3, 16384])
def test_software_pipelined_loop_is_batched_in_two_passes(chunk):
    # 50 iterations + the epilogue store 51 vectors; stores trail s3 by one vector
    fast, loops, win_f = run_both(PIPELINED, [WIN_F, WIN_F + 0x8010, 50], random_fill(12),
                                  chunk=chunk)
    assert fast.batched_iterations >= 48
    rng = np.random.default_rng(12)                      # random_fill(12)'s data
    x = (rng.standard_normal(65536 // 2) * 4).astype(np.float16)[:51 * 8]
    got = np.frombuffer(win_f[0x8000:0x8000 + 51 * 16].tobytes(), np.float16)
    assert np.array_equal(got, (x.astype(np.float32) * 0.5).astype(np.float16))


def test_software_pipelined_store_after_its_pointer_step():
    # stage 2 (the store) reads s3 after the body stepped it: read as the induction it is
    head, rest = PIPELINED.split("body:\n")
    _, tail = rest.split("    loop s4, body\n")
    source = head + "\n".join([
        "body:",
        "    vmul.f16 v6, v5, v7",
        "    addi s3, s3, 16",
        "    vst v6, -32(s3)",
        "    vld v5, 0(s2)",
        "    addi s2, s2, 16",
        "    loop s4, body", ""]) + tail
    fast, loops, win_f = run_both(source, [WIN_F, WIN_F + 0x8010, 50], random_fill(12), chunk=7)
    assert fast.batched_iterations >= 48


def test_software_pipelined_loop_reordering_aliased_bytes_falls_back():
    # in place, with the store one vector *ahead*: stage 2 (the store) would overwrite the
    # bytes stage 1 (the load) of the same iteration reads later in the body
    fast, loops, _ = run_both(PIPELINED.replace("vst v6, -16(s3)\n    vld", "vst v6, 0(s3)\n    vld"),
                              [WIN_F, WIN_F, 50], random_fill(12))
    assert fast.batched_iterations == 0
    assert loops.declined


def test_data_dependent_address_falls_back():
    source = RECURRENCE.replace("    vld v2, OFFSET(s3)\n", "    lhu s9, 0(s2)\n"
                                "    andi s9, s9, 0xff0\n    add s9, s9, s2\n"
                                "    vld v2, 0(s9)\n")
    fast, loops, _ = run_both(source, [WIN_F, WIN_F + 0x8000, 50], random_fill(13))
    assert fast.batched_iterations == 0
    assert any("not affine" in reason for reason in loops.declined)
