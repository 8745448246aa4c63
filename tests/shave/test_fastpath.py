"""The fast path against the exact interpreter: identical memory, registers,
instruction counts and cycles -- and the same errors -- on hand-written loops
that it batches, loops it must refuse, and random straight-line bodies."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime_sim.isa import load_kernel, run
from runtime_sim.isa.fastpath import FastLoops
from shave_testlib import WIN_E, WIN_F, make_memory
from test_shave_assembler import CLAMP
from vpuc.diagnostics import VpucError
from vpuc.shave import assemble

ARGS = WIN_E                       # the kernels read their arguments as u32 words here


def run_both(source: str, words: list[int], fill=None, *, sizes=(4096, 4096, 65536),
             max_steps: int = 1_000_000, **fast_options):
    """Run ``source`` exactly and through the fast path; assert identical outcomes.
    Returns (fast result or error text, the fast path's FastLoops, WIN_F after)."""
    obj = assemble(source, "loop.s")
    outcomes = []
    for fast in (False, True):
        memory, arrays = make_memory(*sizes)
        if fill is not None:
            fill(arrays)
        args = struct.pack(f"<{len(words)}I", *[w & 0xFFFFFFFF for w in words])
        arrays["WIN_E"][:len(args)] = np.frombuffer(args, np.uint8)
        loaded = load_kernel(obj, memory)
        loops = FastLoops(loaded.program, **fast_options) if fast else False
        try:
            result = run(loaded.program, memory, entry=loaded.entry(), args_addr=ARGS,
                         args_size=len(args), max_steps=max_steps, fast=loops)
        except VpucError as exc:
            result = str(exc)
        outcomes.append((result, {k: v.copy() for k, v in arrays.items()}, loops))
    (exact, exact_mem, _), (fast, fast_mem, loops) = outcomes
    if isinstance(exact, str) or isinstance(fast, str):
        assert fast == exact
    else:
        for name in exact.__dataclass_fields__:
            if name != "batched_iterations":
                assert getattr(fast, name) == getattr(exact, name), name
        assert exact.batched_iterations == 0
    for window in exact_mem:
        assert np.array_equal(fast_mem[window], exact_mem[window]), window
    return fast, loops, fast_mem["WIN_F"]


def random_fill(seed: int):
    def fill(arrays):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(len(arrays["WIN_F"]) // 2) * 4).astype(np.float16)
        arrays["WIN_F"][:] = x.view(np.uint8)
    return fill


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


STRIDED = """
    .global k
k:
    lw s2, 0(s0)            # source
    lw s3, 4(s0)            # destination
    lw s4, 8(s0)            # iterations
    lw s5, 12(s0)           # source row pitch (bytes)
    li s7, 4                # destination lane stride
    slli s6, s5, 3          # eight rows per vector
    li.f16 s12, 0.5
    vbcast.h v4, s12
body:
    vlds.h v1, 0(s2), s5    # one column, eight rows
    vfma.f16 v2, v1, v4, v1
    vsts.h v2, 2(s3), s7    # every other half-word
    lhu s9, 6(s2)
    muli s10, s9, 3
    sh s10, 0(s3)
    vlds.m.w v3, 8(s2), s5, m0
    vsts.m.w v3, 40(s3), s7, m0
    add s2, s2, s6
    addi s3, s3, 64
    loop s4, body
    halt
"""


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

def _counted(prologue: str, step: str, back_edge: str) -> str:
    return f"""
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
{prologue}
body:
    vld v1, 0(s2)
    vmul.f16 v1, v1, v1
    vst v1, 0(s3)
    addi s2, s2, 16
    addi s3, s3, 16
{step}
    {back_edge}
    halt
"""


# (name) -> prologue, induction step, back-edge, iterations batched (all of them: the
# interpreter offers the loop on falling into its head)
BACK_EDGES = {
    "bne-end-pointer": ("    addi s5, s2, 1600", "", "bne s2, s5, body", 100),
    "bltu-end-pointer": ("    addi s5, s2, 1599", "", "bltu s2, s5, body", 100),
    "bnez-countdown": ("    li s4, 100", "    addi s4, s4, -1", "bnez s4, body", 100),
    "blt-signed-up": ("    li s4, -50\n    li s5, 100", "    addi s4, s4, 3", "blt s4, s5, body",
                      50),
    "bge-down": ("    li s4, 200\n    li s5, 3", "    addi s4, s4, -2", "bge s4, s5, body", 99),
    "bgeu-down": ("    li s4, 99\n    li s6, 1", "    sub s4, s4, s6", "bgeu s4, s6, body", 99),
    "bne-two-inductions": ("    li s4, 0\n    li s5, 300", "    addi s4, s4, 5\n    addi s5, s5, 2",
                           "bne s4, s5, body", 100),
    "beq-runs-twice": ("    li s4, 6\n    li s5, 7", "    addi s4, s4, 1", "beq s4, s5, body", 2),
}


@pytest.mark.parametrize("name", BACK_EDGES)
def test_conditional_back_edges(name):
    prologue, step, back_edge, batched = BACK_EDGES[name]
    fast, _, _ = run_both(_counted(prologue, step, back_edge), [WIN_F, WIN_F + 0x8000],
                          random_fill(6))
    assert fast.batched_iterations == batched


def test_loop_never_ending_hits_max_steps_at_the_same_instruction():
    source = _counted("    li s4, 4\n    li s5, 7", "    addi s4, s4, 2", "bne s4, s5, body")
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


RECURRENCE = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
body:
    vld v1, 0(s2)
    vld v2, OFFSET(s3)
    vadd.f16 v1, v1, v2
    vst v1, 0(s3)
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    halt
"""


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


PIPELINED = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    li.f16 s9, 0.5
    vbcast.h v7, s9
    vld v5, 0(s2)               # prologue: stage 1 of iteration 0
    addi s2, s2, 16
body:
    vmul.f16 v6, v5, v7         # stage 2 of the previous iteration (reads the carried v5)
    vst v6, -16(s3)
    vld v5, 0(s2)               # stage 1 of this one
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    vmul.f16 v6, v5, v7         # epilogue
    vst v6, -16(s3)
    halt
"""


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
    source = _counted(prologue, step, back_edge)
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


# --- random straight-line bodies ----------------------------------------------------------------

VECTOR_OPS = ["vadd.f16", "vsub.f16", "vmul.f16", "vmax.f16", "vmin.f32", "vadd.f32",
              "vand", "vxor", "vadd.i32", "vmin.u8", "vsub.i16", "vmul.i16", "vcvt.f16.f32",
              "vdiv.f16"]
UNARY_OPS = ["vabs.f16", "vneg.f32", "vcvtl.f32.f16", "vcvth.f32.f16", "vrcp.f16", "vexp.f16",
             "vmov"]


# The random loop kernels' common start: the three argument words (source, destination,
# count) and the scalar and vector constants their drawn bodies may read.
def _random_kernel_head(seed: int) -> list[str]:
    return ["    .global k", "k:", "    lw s2, 0(s0)", "    lw s3, 4(s0)", "    lw s4, 8(s0)",
            "    li.f16 s20, 1.25", "    vbcast.h v20, s20", "    li s21, 0x3f800000",
            "    vbcast.w v21, s21", f"    li s22, {-6 if seed % 2 else 10}"]


# The back-edges a drawn loop closes with (``bltu`` against the end address in s23).
_BACK_EDGES = {"loop": ["    loop s4, body"],
               "bnez": ["    addi s4, s4, -1", "    bnez s4, body"],
               "bltu": ["    bltu s2, s23, body"]}


@st.composite
def straight_line_body(draw):
    """A loop body over two walking pointers: mostly well-formed (registers
    defined before use), sometimes carrying a value or aliasing memory."""
    defined_v, defined_s = ["v20", "v21"], ["s20"]
    lines = []
    for _ in range(draw(st.integers(1, 10))):
        choice = draw(st.integers(0, 9))
        pick_v = st.sampled_from(defined_v + (["v3"] if draw(st.integers(0, 9)) == 0 else []))
        dest_v = draw(st.sampled_from(["v1", "v2", "v3", "v4"]))
        off = draw(st.sampled_from([0, 2, 16, 32, -16, 48]))
        if choice in (0, 1):
            lines.append(f"vld {dest_v}, {off}(s2)")
        elif choice == 2:
            lines.append(f"{draw(st.sampled_from(VECTOR_OPS))} {dest_v}, {draw(pick_v)}, "
                         f"{draw(pick_v)}")
        elif choice == 3:
            lines.append(f"{draw(st.sampled_from(UNARY_OPS))} {dest_v}, {draw(pick_v)}")
        elif choice == 4:
            lines.append(f"vst {draw(pick_v)}, {off}(s3)")
            continue
        elif choice == 5:
            lines.append(f"lhu s9, {off}(s2)")
            lines.append(f"add s10, s9, {draw(st.sampled_from(defined_s))}")
            lines.append(f"sh s10, {off + 64}(s3)")
            defined_s += ["s9", "s10"]
            continue
        elif choice == 6:
            lines.append(f"vmask.h m1, s4")
            lines.append(f"vst.m {draw(pick_v)}, {off}(s3), m1")
            continue
        elif choice == 7:
            lines.append(f"vcmplt.f16 m2, {draw(pick_v)}, {draw(pick_v)}")
            lines.append(f"vsel {dest_v}, {draw(pick_v)}, {draw(pick_v)}, m2")
        elif choice == 8:
            lines.append(f"vlds.h {dest_v}, {off}(s2), s22")
        else:
            lines.append(f"vext.h s11, {draw(pick_v)}, {draw(st.integers(0, 7))}")
            lines.append(f"vins.h {draw(pick_v)}, s11, {draw(st.integers(0, 7))}")
            continue
        if dest_v not in defined_v:
            defined_v.append(dest_v)
    src_step = draw(st.sampled_from([16, 32, 8, -16]))
    dst_step = draw(st.sampled_from([16, 64, 0, -32]))
    edges = ["loop", "bnez", "bltu"] if src_step > 0 else ["loop", "bnez"]
    back_edge = draw(st.sampled_from(edges))
    return (lines, src_step, dst_step, draw(st.integers(1, 40)), draw(st.integers(1, 9)),
            back_edge)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), st.integers(0, 2 ** 16))
def test_random_straight_line_bodies(body, seed):
    lines, src_step, dst_step, count, chunk, back_edge = body
    closing = _BACK_EDGES[back_edge]
    source = "\n".join([
        *_random_kernel_head(seed),
        f"    muli s23, s4, {src_step}", "    add s23, s23, s2",
        "body:", *[f"    {line}" for line in lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}", *closing, "    halt"])
    src = WIN_F + 0x1000 if src_step > 0 else WIN_F + 0x5000
    dst = WIN_F + 0x8000 if dst_step >= 0 else WIN_F + 0xC000
    run_both(source, [src, dst, count], random_fill(seed), chunk=chunk, min_iterations=1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), straight_line_body(), st.integers(1, 5), st.integers(0, 2 ** 16))
def test_random_nested_counted_loops(inner, outer, trip, seed):
    """An outer loop around a counted inner loop (trip set by li): the outer
    batch unrolls the inner one; values, memory, counts and cycles as the interpreter's."""
    inner_lines, src_step, dst_step, count, chunk, _ = inner
    outer_lines, out_src, out_dst, _, _, _ = outer
    source = "\n".join([
        *_random_kernel_head(seed), "    mov s5, s4",
        "outer:", *[f"    {line}" for line in outer_lines],
        f"    li s6, {trip}",
        "inner:", *[f"    {line}" for line in inner_lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}", "    loop s6, inner",
        f"    addi s2, s2, {out_src}", f"    addi s3, s3, {out_dst}", "    loop s5, outer",
        "    halt"])
    src, dst = WIN_F + 0x3000, WIN_F + 0x9000
    run_both(source, [src, dst, min(count, 12)], random_fill(seed), chunk=chunk,
             min_iterations=1)


SCAN_OPS = ["vadd.f32", "vmax.f32", "vmin.f32", "vmax.f16", "vmin.f16"]


def special_fill(seed: int):
    """Random halves, with NaNs (quiet and signalling, either sign), infinities and
    zeros of both signs sprinkled in when the random seed asks for them."""
    def fill(arrays):
        random_fill(seed)(arrays)
        if seed % 3:
            rng = np.random.default_rng(seed)
            halves = arrays["WIN_F"].view(np.uint16)
            where = rng.integers(0, len(halves), len(halves) // 64)
            halves[where] = rng.choice([0x7E00, 0xFE01, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0000,
                                        0x7FFF, 0x3C00], len(where))
    return fill


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), st.lists(st.tuples(st.integers(0, 12),
                                                st.sampled_from(["v10", "v11", "v12"]),
                                                st.sampled_from(["v1", "v2", "v20", "v21", "v5"])),
                                      min_size=1, max_size=6),
       st.lists(st.sampled_from(SCAN_OPS), min_size=3, max_size=3), st.booleans(),
       st.integers(0, 2 ** 16))
def test_random_accumulating_loops(body, accumulations, scan_ops, pipelined, seed):
    """Accumulators (``OP acc, acc, x``) in a random body, some fed by a value the
    previous iteration loaded (software-pipelined): sums of f32 must keep their
    sequential order, max/min their NaN rules -- values and cycles as the interpreter's."""
    lines, src_step, dst_step, count, chunk, back_edge = body
    lines = list(lines)
    for position, acc, x in accumulations:        # one operation per accumulator
        op = scan_ops[int(acc[1:]) - 10]
        lines.insert(min(position, len(lines)), f"{op} {acc}, {acc}, {x}")
    if pipelined:
        lines.append("vld v5, 16(s2)")         # read above, in the next iteration
    closing = _BACK_EDGES[back_edge]
    source = "\n".join([
        *_random_kernel_head(seed),
        f"    muli s23, s4, {src_step}", "    add s23, s23, s2",
        "    vld v10, 0(s2)", "    vld v11, 32(s2)", "    vld v12, 64(s2)", "    vld v5, 96(s2)",
        "body:", *[f"    {line}" for line in lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}", *closing, "    halt"])
    src = WIN_F + 0x1000 if src_step > 0 else WIN_F + 0x5000
    dst = WIN_F + 0x8000 if dst_step >= 0 else WIN_F + 0xC000
    run_both(source, [src, dst, count], special_fill(seed), chunk=chunk, min_iterations=1)


ROW_SUM = """
    .global k
k:
    lw s2, 0(s0)
    lw s4, 8(s0)
    vxor v3, v3, v3
    vxor v4, v4, v4
body:
    vld v1, 0(s2)
    vcvtl.f32.f16 v5, v1
    vcvth.f32.f16 v6, v1
    vadd.f32 v3, v3, v5
    vadd.f32 v4, v4, v6
    vmax.f16 v7, v7, v1
    addi s2, s2, 16
    loop s4, body
    vadd.f32 v3, v3, v4
    vredsum.f32 s14, v3
    halt
"""


@pytest.mark.parametrize("seed", [3, 4])         # without and with NaNs
@pytest.mark.parametrize("chunk", [1, 7, 16384])
def test_sum_and_max_reductions_are_batched_in_order(chunk, seed):
    fast, loops, _ = run_both(ROW_SUM, [WIN_F, 0, 500], special_fill(seed), chunk=chunk)
    assert fast.batched_iterations == 500


def test_scan_fold_is_sequential_not_pairwise():
    from runtime_sim.isa.loop_scan import Accumulator, fold
    from runtime_sim.isa.sem_vector import VECTOR_OPS
    rng = np.random.default_rng(0)
    xs = (rng.standard_normal((4096, 4)) * 10 ** rng.uniform(-3, 6, (4096, 4))).astype(np.float32)
    add = VECTOR_OPS["vadd.f32"]
    acc = Accumulator(35, "vadd.f32", add, (0,))
    start = np.zeros(16, np.uint8)
    got = fold(acc, start, {0: xs.view(np.uint8).reshape(-1, 16)}, len(xs))
    expected = start
    for row in xs.view(np.uint8).reshape(-1, 16):
        expected = add(expected, row)
    assert bytes(got) == bytes(expected)
    pairwise = np.add.reduce(np.ascontiguousarray(xs.T), axis=1)     # along contiguous lanes
    assert bytes(got) != bytes(pairwise.view(np.uint8))


# --- the library kernels: every field of the result, not just memory and cycles ------------------

def _library_case(name: str, seed: int):
    """(object, CMX, WIN_E image) for a random strided / broadcast / tail case."""
    from vpuc.abi.params import MemRefArg, ScalarArg, layout_window_e
    from vpuc.ir.types import ElemType
    from vpuc.kernel_library import load_library_kernel

    rng = np.random.default_rng(seed)
    obj = load_library_kernel(name)
    dtype, elem = [(np.float16, ElemType.F16), (np.float32, ElemType.F32)][seed % 2]
    shape = (2, 3, int(rng.integers(5, 40)))
    binary = name in ("add", "sub", "mul", "max", "min")
    cmx = np.zeros(1 << 16, np.uint8)
    cmx[:0x8000] = rng.integers(0, 256, 0x8000, dtype=np.uint8) & 0x3F   # finite floats
    item, bits = np.dtype(dtype).itemsize, np.dtype(dtype).itemsize * 8
    perm = (0, 1, 2) if seed % 3 else (0, 2, 1)

    def memref(offset, dims, pitch):            # element strides per logical dim
        strides = [0, 0, 0]
        step = pitch
        for dim in reversed(perm):
            strides[dim] = step * (dims[dim] != 1)
            step *= dims[dim]
        return MemRefArg(WIN_F + offset, elem, dims, perm, tuple(s * bits for s in strides))

    inputs = [memref(64, shape, 2 if seed % 4 == 0 else 1)]
    if binary:
        inputs.append(memref(0x4000 + 2 * item, (shape[0], 1, shape[2]), 1))
    output = memref(0x8000 + item, shape, 1)
    if name in ("reduce_sum", "reduce_mean"):
        output = memref(0x8000 + item, shape[:2] + (1,), 1)
    scalars = [ScalarArg(ElemType.F16, -0.5), ScalarArg(ElemType.F16, 1.5)] if name == "clamp" \
        else []
    image = layout_window_e(obj.data, inputs + [output] + scalars, 0x1E000000)
    return obj, cmx, image


LIBRARY = ["clamp", "relu", "sigmoid", "tanh", "gelu", "swish", "hswish", "add", "mul", "max",
           "softmax", "reduce_sum", "reduce_mean", "convert", "copy"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", LIBRARY)
def test_library_kernels_identical_on_both_paths(name, seed):
    pytest.importorskip("vpuc.kernel_library")
    from runtime_sim.isa.invoke import invoke_kernel
    from vpuc.kernel_library import library_names
    if name not in library_names():
        pytest.skip(f"kernels/{name}.s is not there yet")
    obj, cmx, image = _library_case(name, seed)
    results = []
    for fast in (False, True):
        memory = cmx.copy()
        result = invoke_kernel(obj, memory, image.image, image.args_offset, image.args_size,
                               fast=fast)
        results.append((memory, result))
    (exact_cmx, exact), (fast_cmx, fast) = results
    assert np.array_equal(fast_cmx, exact_cmx)
    for field in exact.__dataclass_fields__:
        if field != "batched_iterations":
            assert getattr(fast, field) == getattr(exact, field), field
    assert exact.scalar_regs[0] == 0, "kernel status"


def test_f16_widening_is_numpy_cast_for_every_bit_pattern():
    """The semantics widen f16 through a table (for speed); it must be the cast."""
    from runtime_sim.isa.semantics import SEMANTICS
    from vpuc.shave.isa import BY_MNEMONIC

    patterns = np.arange(1 << 16, dtype=np.uint16)
    vectors = patterns.view(np.uint8).reshape(-1, 16)
    expected = patterns.view(np.float16).astype(np.float32).view(np.uint32).reshape(-1, 8)
    low = SEMANTICS[BY_MNEMONIC["vcvtl.f32.f16"].opcode].fn(vectors).view(np.uint32)
    high = SEMANTICS[BY_MNEMONIC["vcvth.f32.f16"].opcode].fn(vectors).view(np.uint32)
    assert np.array_equal(np.concatenate([low, high], axis=1), expected)
    add = SEMANTICS[BY_MNEMONIC["vadd.f16"].opcode].fn
    zero = np.zeros(16, np.uint8)
    with np.errstate(all="ignore"):        # the caller silences numpy, as the interpreter does
        same = (patterns.view(np.float16).astype(np.float32) + np.float32(0)).astype(np.float16)
        batched, single = add(vectors, zero), add(vectors[5], zero)
    assert np.array_equal(batched.view(np.uint16).reshape(-1), same.view(np.uint16))
    assert np.array_equal(single, batched[5])                                # unbatched alike


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), st.integers(0, 2 ** 16), st.sampled_from([16, 48, 4096]),
       st.sampled_from([-3, 1, 7]))
def test_random_loops_replay_their_entry_proofs(body, seed, moved, more):
    """The same kernel invoked again (``entry_cache``): the same registers replay the
    entry's proof, a moved buffer is a new entry or the proof relocated (when the pointers
    only address memory), a larger trip count is a new entry and a smaller one a new
    entry or the relocated proof of a later iteration that had that many left; every invocation is the
    interpreter's, bit for bit and cycle for cycle."""
    lines, src_step, dst_step, count, chunk, back_edge = body
    source = "\n".join([
        *_random_kernel_head(seed),
        f"    muli s23, s4, {src_step}", "    add s23, s23, s2",
        "body:", *[f"    {line}" for line in lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}",
        *_BACK_EDGES[back_edge], "    halt"])
    src = WIN_F + 0x1000 if src_step > 0 else WIN_F + 0x5000
    dst = WIN_F + 0x8000 if dst_step >= 0 else WIN_F + 0xC000

    def invoke(words):
        return run_both(source, words, random_fill(seed), chunk=chunk, min_iterations=1)[1]

    proofs = invoke([src, dst, count]).proofs
    proofs.clear()                     # earlier examples may have run this very kernel
    loops = invoke([src, dst, count])
    entered = loops.batches > 0            # a refused walk is not remembered: walked again
    hits = proofs.hits
    assert invoke([src, dst, count]).proofs is proofs
    assert proofs.hits > hits or not entered
    misses, relocated = proofs.misses, proofs.relocated
    invoke([src + moved, dst + moved, count])
    assert proofs.misses > misses or proofs.relocated > relocated or not entered
    misses, relocated = proofs.misses, proofs.relocated
    other = count + more if count + more >= 2 else count + 1
    invoke([src, dst, other])
    if other > count:                  # a trip count no entry has seen: a new entry
        assert proofs.misses > misses or not entered
    else:   # the count left at a later iteration of an earlier entry, its pointers moved on
        assert proofs.misses > misses or proofs.relocated > relocated or not entered


HARDSWISH_LIKE = """
    .global k
k:
    lw s2, 0(s0)            # source
    lw s3, 4(s0)            # destination
    lw s4, 8(s0)            # iterations
    li.f32 s5, 3.0
    vbcast.w v8, s5
    li.f32 s5, 6.0
    vbcast.w v9, s5
    li.f32 s5, 0.1666666
    vbcast.w v10, s5
    li s5, 0
    vbcast.w v11, s5
body:
    vld v1, 0(s2)
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vadd.f32 v4, v2, v8
    vadd.f32 v5, v3, v8
    vmax.f32 v4, v4, v11
    vmax.f32 v5, v5, v11
    vmin.f32 v4, v4, v9
    vmin.f32 v5, v5, v9
    vmul.f32 v4, v4, v2
    vmul.f32 v5, v5, v3
    vmul.f32 v4, v4, v10
    vmul.f32 v5, v10, v5
    vcvt.f16.f32 v6, v4, v5
    vst v6, 0(s3)
    addi s2, s2, 16
    addi s3, s3, 16
    loop s4, body
    halt
"""


@pytest.mark.parametrize("n,chunk", [(2, 16384), (300, 16384), (1000, 256)])
def test_constants_repeated_to_the_rows_give_the_same_bits(n, chunk):
    """A body using broadcast constants in several elementwise operations: the chunk
    runner repeats them to its rows (``loop_chunk._tiled``) and the operations take
    their batch forms; memory, registers and cycles are the interpreter's."""
    fast, loops, _ = run_both(HARDSWISH_LIKE, [WIN_F, WIN_F + 0x8000, n], special_fill(n),
                              chunk=chunk)
    assert fast.batched_iterations == n
    (runner,) = [plan.runner for plan in loops.plans.values()
                 if getattr(plan, "runner", None) is not None]
    assert len(runner.tiled) == 4            # v8..v11, each read twice or more


def test_batch_operands_repeat_one_vector_to_the_rows_only():
    from runtime_sim.isa.loop_chunk import batch_operands
    vector = np.arange(16, dtype=np.uint8)
    rows = np.arange(5 * 16, dtype=np.uint8).reshape(5, 16)
    scalar = np.uint32(7)
    tiled = batch_operands([rows, vector, scalar], 5)
    assert tiled[0] is rows and tiled[2] is scalar
    assert tiled[1].shape == (5, 16) and (tiled[1] == vector).all()
    assert not tiled[1].flags.writeable           # shared by every batch of 5 rows
    assert batch_operands([vector, vector], 5)[0] is vector       # no batch: as they were
    assert batch_operands([rows, vector], 4)[1] is vector         # not this many rows


def test_batch_operands_leave_one_vector_against_very_long_batches():
    from runtime_sim.isa.loop_chunk import MAX_TILED_ROWS, batch_operands
    vector = np.arange(16, dtype=np.uint8)
    rows = np.zeros((MAX_TILED_ROWS + 1, 16), np.uint8)
    assert batch_operands([rows, vector], len(rows))[1] is vector     # the cache stays small


def test_a_reloaded_constant_is_a_batch_of_rows_however_many():
    from runtime_sim.isa.loop_bounds import Affine
    from runtime_sim.isa.loop_chunk import MAX_TILED_ROWS, progression_view
    memory, arrays = make_memory()
    arrays["WIN_F"][:16] = np.arange(16, dtype=np.uint8)
    for rows in (3, MAX_TILED_ROWS + 1):
        view = progression_view(memory, Affine(WIN_F, 0), 0, rows, 0, False)
        assert view.shape == (rows, 16) and (view == np.arange(16)).all()


def test_a_relocated_entrys_footprints_are_a_fresh_affine_passs(monkeypatch):
    """The footprints entry_facts moves along with the pointers (one shift per group) are
    the ones the affine pass computes afresh at the moved pointers, and a moved count is
    never served from the remembered entry (a different key: a fresh pass)."""
    import runtime_sim.isa.fastpath as fastpath_module
    from runtime_sim.isa.entry_cache import entry_facts
    seen = []

    def recording(cache, *args, **kwargs):
        facts = entry_facts(cache, *args, **kwargs)
        seen.append((cache.relocated, cache.misses, facts.footprints))
        return facts

    monkeypatch.setattr(fastpath_module, "entry_facts", recording)
    n, args = 1003, 0x4600BC00
    loops = run_both(CLAMP, [WIN_F, WIN_F + 0x8000, n, args], random_fill(19))[1]
    moved = [WIN_F + 0x40, WIN_F + 0x8400, n, args]
    seen.clear()
    run_both(CLAMP, moved, random_fill(19))
    relocated = [fps for count, _, fps in seen if fps is not None]
    assert seen and loops.proofs.relocated > 0
    loops.proofs.clear()
    seen.clear()
    run_both(CLAMP, moved, random_fill(19))
    fresh = [fps for _, _, fps in seen if fps is not None]
    assert relocated and relocated == fresh
    # another length: a miss (a fresh pass), never a relocation of the remembered entry
    before = loops.proofs.relocated, loops.proofs.misses
    run_both(CLAMP, [WIN_F + 0x40, WIN_F + 0x8400, n - 8, args], random_fill(19))
    assert loops.proofs.misses > before[1]
