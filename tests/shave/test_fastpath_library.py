"""The fast path against the exact interpreter on the library kernels: every field of
the result, not just memory and cycles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shave_testlib import WIN_F, make_memory
from test_shave_assembler import CLAMP
from fastpath_testlib import (DRAWN_BACK_EDGES, HARDSWISH_LIKE, random_fill, random_kernel_head,
                             run_both, special_fill, straight_line_body)


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
        *random_kernel_head(seed),
        f"    muli s23, s4, {src_step}", "    add s23, s23, s2",
        "body:", *[f"    {line}" for line in lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}",
        *DRAWN_BACK_EDGES[back_edge], "    halt"])
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
