"""The path batch against the exact interpreter: outer loops that call a routine,
branch and run inner loops counted from registers (a library kernel's per-row
loop) give identical memory, registers, instruction counts and cycles -- and
the batch really takes the rows it can prove run one path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime_sim.isa.path_batch as path_batch
from fastpath_testlib import random_fill, run_both
from shave_testlib import WIN_F

# Rows of n f16 elements: per row, the max of (x op c), then x - max stored.  The row
# pointers live in a stack frame (lw / addi / sw per row), the routine is called, its
# inner loops are counted from n (srli), and a masked tail takes the rest.
ROWS = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    lw s5, 12(s0)
    addi sp, sp, -32
    sw s2, 0(sp)
    sw s3, 4(sp)
    sw s5, 8(sp)
    li.f16 s20, -inf
    vbcast.h v20, s20
    li.f16 s21, 0.75
    vbcast.h v21, s21
rows:
    lw s6, 0(sp)
    lw s7, 4(sp)
    lw s8, 8(sp)
    call row
    lw s6, 0(sp)
    addi s6, s6, {in_pitch}
    sw s6, 0(sp)
    lw s7, 4(sp)
    addi s7, s7, {out_pitch}
    sw s7, 4(sp)
    {grow}
    {back}
    addi sp, sp, 32
    halt
row:
    srli s9, s8, 3
    andi s10, s8, 7
    vxor v0, v0, v0
    vmov v0, v20
    mov s12, s6
    beqz s9, row_tail
row_max:
    vld v1, 0(s12)
    {op} v1, v1, v21
    vmax.f16 v0, v0, v1
    addi s12, s12, 16
    loop s9, row_max
row_tail:
    vmask.h m0, s10
    vld.m v1, 0(s12), m0
    {op} v1, v1, v21
    vsel v1, v1, v20, m0
    vmax.f16 v0, v0, v1
    vredmax.f16 s14, v0
    fcvt.f16.f32 s14, s14
    {branch}
    vbcast.h v2, s14
    srli s9, s8, 3
    mov s12, s6
    mov s13, s7
    beqz s9, row_out_tail
row_out:
    vld v1, 0(s12)
    vsub.f16 v1, v1, v2
    vst v1, 0(s13)
    addi s12, s12, 16
    addi s13, s13, 16
    loop s9, row_out
row_out_tail:
    vld.m v1, 0(s12), m0
    vsub.f16 v1, v1, v2
    vst.m v1, 0(s13), m0
    ret
"""
BACK_EDGES = {"bnez": "addi s4, s4, -1\n    bnez s4, rows",
              "loop": "loop s4, rows",
              "bltu": "addi s15, s15, 1\n    bltu s15, s4, rows"}
INPUT, OUTPUT = WIN_F + 0x1000, WIN_F + 0x8000


def rows_source(in_pitch: int, out_pitch: int, *, op: str = "vmul.f16", back: str = "bnez",
                grow: int = 0, branch: str = "") -> str:
    grow_lines = (f"lw s8, 8(sp)\n    addi s8, s8, {grow}\n    sw s8, 8(sp)" if grow else "")
    return ROWS.format(in_pitch=in_pitch, out_pitch=out_pitch, op=op, back=BACK_EDGES[back],
                       grow=grow_lines, branch=branch)


@pytest.mark.parametrize("back", sorted(BACK_EDGES))
@pytest.mark.parametrize("n", [0, 5, 8, 29, 64])
def test_rows_run_as_one_path_batch(n, back):
    rows = 12
    pitch = 2 * n + 6
    words = [INPUT, OUTPUT, rows, n]
    fast, loops, _ = run_both(rows_source(pitch, pitch + 2, back=back), words,
                              random_fill(n), min_path_iterations=1)
    # the first row runs in the interpreter (its inner loops batched), the rest in one batch
    assert loops.batches >= 1 and fast.batched_iterations >= rows - 1


def test_rows_whose_length_changes_stop_where_the_path_changes():
    """n grows by 3 per row: the inner loops' counts change every few rows, so each batch
    stops where a guard (an inner loop's count, the tail's branch) first differs."""
    fast, loops, _ = run_both(rows_source(160, 160, grow=3), [INPUT, OUTPUT, 20, 9],
                              random_fill(3), min_path_iterations=1)
    assert loops.batches >= 2


def test_a_branch_on_data_falls_back_to_the_interpreter():
    branch = "li s16, 0x3c00\n    bltu s14, s16, row_out_tail"
    _, loops, _ = run_both(rows_source(64, 64, branch=branch), [INPUT, OUTPUT, 12, 24],
                           random_fill(4), min_path_iterations=1)
    assert any("branches on data" in reason for reason in loops.declined)


def test_rows_writing_the_next_rows_input_fall_back():
    """Output rows overlap the following input rows: no batch may reorder them."""
    _, loops, _ = run_both(rows_source(32, 32).replace("lw s3, 4(s0)", "addi s3, s2, 16"),
                           [INPUT, OUTPUT, 12, 16], random_fill(5), min_path_iterations=1)
    assert any("another iteration stores" in reason for reason in loops.declined)


def test_too_few_rows_are_left_to_the_inner_batches():
    fast, loops, _ = run_both(rows_source(64, 64), [INPUT, OUTPUT, 3, 24], random_fill(6))
    assert all(not reason.startswith("path: the path") for reason in loops.declined)


def test_a_step_limit_inside_the_rows_stops_at_the_same_instruction():
    run_both(rows_source(64, 64), [INPUT, OUTPUT, 40, 24], random_fill(7), max_steps=2000,
             min_path_iterations=1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 40), st.integers(1, 24), st.sampled_from([0, 2, 16, 48, 96, -64]),
       st.sampled_from([0, 2, 16, 48, 96, -64]), st.sampled_from(sorted(BACK_EDGES)),
       st.sampled_from(["vmul.f16", "vadd.f16", "vmax.f16", "vsub.f16"]),
       st.sampled_from([0, 0, 1, -1, 8]), st.integers(1, 7), st.booleans(),
       st.integers(0, 2 ** 16))
def test_random_row_loops(n, rows, in_extra, out_extra, back, op, grow, chunk, entered, seed):
    """Random row lengths, pitches (overlapping, negative, zero), back-edges, growing rows,
    loops entered by a jump or by falling through: whatever the batch takes or refuses,
    the outcome is the interpreter's."""
    pitch = 2 * n
    in_pitch, out_pitch = pitch + in_extra, pitch + out_extra
    source = rows_source(in_pitch, out_pitch, op=op, back=back, grow=grow)
    if entered:
        source = source.replace("    vbcast.h v21, s21\nrows:",
                                "    vbcast.h v21, s21\n    j rows\nrows:")
    inputs = INPUT + (0x3000 if in_pitch < 0 else 0)
    outputs = OUTPUT + (0x3000 if out_pitch < 0 else 0)
    if grow < 0:
        n = max(n, rows)                        # a row length never below 0
    run_both(source, [inputs, outputs, rows, n], random_fill(seed), min_path_iterations=1,
             chunk=chunk)


@pytest.mark.parametrize("rows", [1, 2, 4, 12])
def test_a_loop_entered_by_a_taken_branch_is_batched_from_its_first_row(rows):
    """``j rows`` enters the loop forward: the path batch takes every row, the first too
    (entered by falling through, the first row runs in the interpreter)."""
    source = rows_source(64, 64).replace("    vbcast.h v21, s21\nrows:",
                                         "    vbcast.h v21, s21\n    j rows\n    nop\nrows:")
    fast, loops, _ = run_both(source, [INPUT, OUTPUT, rows, 24], random_fill(rows),
                              min_path_iterations=1)
    if rows > 1:                # one row: the walk sees the back-edge fall through
        assert fast.batched_iterations == rows and loops.batches == 1


# --- the library kernels' row loops: every field of the result ----------------------------------

@pytest.mark.parametrize("name", ["softmax", "mvn", "reduce_mean", "log_softmax", "reduce_max"])
@pytest.mark.parametrize("dtype, rows, n, channels_last", [
    (np.float16, 40, 197, False), (np.float32, 24, 50, False), (np.float16, 30, 33, False),
    (np.float16, 37, 12, True), (np.float32, 19, 20, True), (np.float16, 64, 9, True)])
def test_library_row_loops_batch_along_their_path(name, dtype, rows, n, channels_last):
    """Long rows (one at a time) and groups of 8 strided rows (R not innermost): memory,
    cycles, counts and registers as the interpreter's, and most rows in path batches."""
    from runtime_sim.isa.invoke import invoke_kernel
    from vpuc.abi.params import MemRefArg, ScalarArg, layout_window_e
    from vpuc.ir.types import ElemType
    from vpuc.kernel_library import load_library_kernel

    obj = load_library_kernel(name)
    elem = ElemType.F16 if dtype == np.float16 else ElemType.F32
    item = np.dtype(dtype).itemsize
    rng = np.random.default_rng(rows * n)
    cmx = np.zeros(1 << 17, np.uint8)
    x = (rng.standard_normal(rows * n) * 3).astype(dtype)
    cmx[:x.nbytes] = x.view(np.uint8)
    perm = (0, 2, 1) if channels_last else (0, 1, 2)     # channels last: R = dim 2 strided
    shape = (1, rows, n)

    def memref(offset, dims):
        strides, step = [0, 0, 0], 1
        for dim in reversed(perm):
            strides[dim] = step
            step *= dims[dim]
        return MemRefArg(WIN_F + offset, elem, dims, perm, tuple(s * item * 8 for s in strides))

    reduces = name.startswith("reduce")
    out_shape = (1, rows, 1) if reduces else shape
    scalars = [ScalarArg(ElemType.F32, 1e-5), ScalarArg(ElemType.I32, 0)] if name == "mvn" else []
    image = layout_window_e(obj.data, [memref(0, shape), memref(0x10000, out_shape)] + scalars,
                            0x1E000000)
    results = []
    for fast in (False, True):
        memory = cmx.copy()
        results.append((memory, invoke_kernel(obj, memory, image.image, image.args_offset,
                                               image.args_size, fast=fast)))
    (exact_cmx, exact), (fast_cmx, fast) = results
    assert exact.scalar_regs[0] == 0, "kernel status"
    assert np.array_equal(fast_cmx, exact_cmx)
    for field in exact.__dataclass_fields__:
        if field != "batched_iterations":
            assert getattr(fast, field) == getattr(exact, field), field
    if not (channels_last or n < 32):
        assert fast.batched_iterations >= rows - 1          # rows one at a time
    elif rows // 8 >= 4:
        assert fast.batched_iterations >= rows // 8         # full groups of 8 rows


def test_a_stack_word_that_faults_is_reported_where_the_interpreter_reports_it():
    """The walk reads a promoted word's value; unmapped, the interpreter must fault there."""
    source = rows_source(64, 64).replace(
        "    vbcast.h v21, s21\nrows:\n    lw s6, 0(sp)",
        "    vbcast.h v21, s21\n    li s19, 64\n    j rows\nrows:\n    lw s6, 0(s19)")
    error, _, _ = run_both(source, [INPUT, OUTPUT, 12, 24], random_fill(8), min_path_iterations=1)
    assert isinstance(error, str) and "lw s6, 0(s19)" in error


def test_a_walk_is_replayed_only_while_its_registers_and_stack_words_hold():
    """Entered by ``j rows`` with the argument registers cleared, the loop head sees the
    same registers whatever the buffers: only the row pointers on the stack differ.  The
    same invocation replays the walk (``entry_cache``), and so does one with moved
    buffers (the row pointers relocated, ``path_relocate``); another row count or
    length, or a branch the other way walks afresh; every outcome is the interpreter's."""
    source = rows_source(64, 64, branch="bnez s18, row_out_tail").replace(
        "    vbcast.h v21, s21\nrows:",
        "    vbcast.h v21, s21\n    lw s18, 16(s0)\n    li s2, 0\n    li s3, 0\n    j rows\nrows:")

    def invoke(words):
        fast, loops, _ = run_both(source, words, random_fill(9), min_path_iterations=1)
        return fast, loops.proofs

    base = [INPUT, OUTPUT, 12, 24, 0]
    fast, proofs = invoke(base)
    proofs.clear()                      # other tests may have run this very kernel
    assert invoke(base)[0].batched_iterations == 12
    hits, misses = proofs.hits, proofs.misses
    assert invoke(base)[0].batched_iterations == 12 and proofs.hits == hits + 1
    assert proofs.misses == misses
    for moved in ([INPUT + 32, OUTPUT, 12, 24, 0], [INPUT, OUTPUT - 64, 12, 24, 0],
                  [INPUT + 0x800, OUTPUT + 0x402, 12, 24, 0]):
        hits = proofs.hits
        assert invoke(moved)[0].batched_iterations == 12
        assert proofs.hits == hits + 1 and proofs.misses == misses, moved
    for changed in ([INPUT, OUTPUT, 9, 24, 0], [INPUT, OUTPUT, 12, 17, 0],
                    [INPUT, OUTPUT, 12, 24, 1]):
        misses = proofs.misses
        invoke(changed)
        assert proofs.misses == misses + 1, changed


def test_a_stack_word_used_as_a_count_is_never_relocated():
    """The row length lives on the stack too (its register cleared): a changed length
    changes only a stack word, but one that counts the inner loops: walked afresh."""
    source = rows_source(96, 96).replace(
        "    vbcast.h v21, s21\nrows:",
        "    vbcast.h v21, s21\n    li s2, 0\n    li s3, 0\n    li s5, 0\n    j rows\nrows:")

    def invoke(words):
        fast, loops, _ = run_both(source, words, random_fill(11), min_path_iterations=1)
        return fast, loops.proofs

    base = [INPUT, OUTPUT, 12, 40]
    proofs = invoke(base)[1]
    proofs.clear()
    invoke(base)
    for words in ([INPUT, OUTPUT, 12, 33], [INPUT + 64, OUTPUT, 12, 40], [INPUT, OUTPUT, 12, 9]):
        invoke(base)                    # the remembered walk: the base invocation's
        hits, misses = proofs.hits, proofs.misses
        invoke(words)
        moved_only = words[3] == 40
        assert (proofs.hits, proofs.misses) == ((hits + 1, misses) if moved_only
                                                else (hits, misses + 1)), words


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 40), st.integers(2, 16), st.sampled_from([0, 2, 16, 48]),
       st.sampled_from([-0x400, -2, 2, 16, 0x1000, 0x2222]),
       st.sampled_from([-0x200, 0, 6, 0x1800]), st.integers(0, 2 ** 16))
def test_random_moved_buffers_replay_the_walk(n, rows, extra, moved_in, moved_out, seed):
    """Random row lengths, pitches and buffer moves, the row pointers only on the stack:
    each invocation after the first relocates the walk, as the interpreter runs it."""
    source = rows_source(2 * n + extra, 2 * n + extra).replace(
        "    vbcast.h v21, s21\nrows:",
        "    vbcast.h v21, s21\n    li s2, 0\n    li s3, 0\n    j rows\nrows:")
    for words in ([INPUT, OUTPUT, rows, n], [INPUT + moved_in, OUTPUT + moved_out, rows, n],
                  [INPUT - moved_out, OUTPUT + moved_in, rows, n]):
        run_both(source, words, random_fill(seed), min_path_iterations=1)


@pytest.mark.parametrize("moves", [[(32, 0), (0, -64), (32, 0), (0, -64), (32, 0)],
                                   [(0x800, 0x402), (0, 0), (0x800, 0x402)]])
def test_buffers_back_at_a_slot_replay_the_walk_relocated_there(monkeypatch, moves):
    """A layer's blocks cycle through a few buffer slots: a walk relocated to row pointers
    seen before is the one made then (``path_relocate``: its inner loops and checks kept),
    and every invocation is the interpreter's."""
    source = rows_source(64, 64).replace(
        "    vbcast.h v21, s21\nrows:",
        "    vbcast.h v21, s21\n    li s2, 0\n    li s3, 0\n    j rows\nrows:")
    walks: list = []                  # the walks themselves: no id is reused while held
    execute = path_batch.execute

    def recorded(walk, *args):
        walks.append(walk)
        return execute(walk, *args)
    monkeypatch.setattr(path_batch, "execute", recorded)
    run_both(source, [INPUT, OUTPUT, 12, 24], random_fill(12), min_path_iterations=1)
    first = {}
    for moved_in, moved_out in moves:
        walks.clear()
        run_both(source, [INPUT + moved_in, OUTPUT + moved_out, 12, 24], random_fill(12),
                 min_path_iterations=1)
        assert len(walks) == 1
        assert first.setdefault((moved_in, moved_out), walks[0]) is walks[0]
    assert len({id(walk) for walk in first.values()}) == len(first)
    # no walk reaches itself: a cache that drops one frees it by reference counting
    for walk in first.values():
        assert not _reaches(walk, walk)


def _reaches(start, target, limit: int = 200_000) -> bool:
    """Whether ``target`` is among the data ``start`` refers to, directly or not (code,
    classes and modules left out: through their globals everything reaches everything)."""
    import gc
    import types
    code = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
            types.MethodType)
    seen, todo = {id(start)}, list(gc.get_referents(start))
    while todo and len(seen) < limit:
        obj = todo.pop()
        if obj is target:
            return True
        if id(obj) not in seen and gc.is_tracked(obj) and not isinstance(obj, code):
            seen.add(id(obj))
            todo.extend(gc.get_referents(obj))
    return False
