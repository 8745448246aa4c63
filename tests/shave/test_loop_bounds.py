"""The fast path's closed forms against brute force: trip counts, the first
iteration outside the windows, cross-iteration overlap, cycle extrapolation."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.isa.cycles import Cost, issue
from runtime_sim.isa.loop_bounds import (MOD, Affine, Footprint, cross_iteration_overlap,
                                         first_exit, first_outside, independent, rows_apart)
from runtime_sim.isa.loop_timing import LoopTiming
from runtime_sim.isa.semantics import BRANCH_CONDITIONS

values = st.one_of(st.integers(0, 300), st.integers(MOD - 300, MOD - 1),
                   st.integers(0, MOD - 1), st.sampled_from([1 << 31, (1 << 31) - 1]))
steps = st.one_of(st.integers(-40, 40), st.sampled_from([1 << 31, 3 << 29, 12345678]))


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(sorted(BRANCH_CONDITIONS)), values, steps, values, steps)
def test_first_exit_matches_stepping(mnemonic, a0, da, b0, db):
    a, b = Affine(a0, da % MOD), Affine(b0, db % MOD)
    condition = BRANCH_CONDITIONS[mnemonic]
    operands = (lambda k: (np.uint32(a.at(k)),)) if mnemonic in ("beqz", "bnez") else (
        lambda k: (np.uint32(a.at(k)), np.uint32(b.at(k))))
    if mnemonic in ("beqz", "bnez"):
        b = Affine(0, 0)
    k = first_exit(mnemonic, a, b)
    stepped = next((j for j in range(2000) if not condition(*operands(j))), None)
    if k is None:
        # Only allowed when the loop does not exit soon without wrapping around.
        assert stepped is None or mnemonic in ("blt", "bge", "bltu", "bgeu")
        return
    assert not condition(*operands(k))
    assert all(condition(*operands(j)) for j in range(min(k, 2000)))
    if mnemonic in ("bne", "bnez", "beq", "beqz") or stepped is not None:
        assert k == stepped or (stepped is None and k >= 2000)


footprints = st.builds(Footprint, st.integers(0, 400), st.integers(-24, 24),
                       st.integers(1, 20), st.booleans(), st.just(0))


@settings(max_examples=600, deadline=None)
@given(footprints, footprints, st.integers(1, 25))
def test_cross_iteration_overlap_matches_brute_force(a, b, iterations):
    def touches(fp, k):
        return set(range(fp.low + k * fp.step, fp.low + k * fp.step + fp.length))

    expected = any(touches(a, k) & touches(b, j) for k in range(iterations)
                   for j in range(iterations) if k != j)
    assert cross_iteration_overlap(a, b, iterations) == expected



# rows of accesses: a few buffers, accesses within (or past) a row, pitches alike or not
row_footprints = st.builds(
    lambda buffer, offset, length, pitch, store: Footprint(buffer * 1000 + offset, pitch, length,
                                                            store, 0),
    st.integers(0, 2), st.integers(0, 40), st.integers(1, 20),
    st.sampled_from([0, 16, 32, 48, -32]), st.booleans())


@settings(max_examples=800, deadline=None)
@given(st.lists(st.one_of(row_footprints, footprints), max_size=12), st.integers(1, 20))
def test_rows_apart_only_answers_what_the_pairwise_check_would(fps, iterations):
    """``rows_apart`` (the one-pass shortcut) never says independent where the pairwise
    check (every pair with a store, across iterations) finds an overlap."""
    pairwise = not any((a.is_store or b.is_store) and cross_iteration_overlap(a, b, iterations)
                       for i, a in enumerate(fps) for b in fps[i + 1:])
    if rows_apart(fps, iterations):
        assert pairwise
    assert independent(fps, iterations) == pairwise


@settings(max_examples=600, deadline=None)
@given(footprints, st.integers(1, 60),
       st.lists(st.tuples(st.integers(-50, 600), st.integers(0, 300)), max_size=3))
def test_first_outside_matches_brute_force(fp, iterations, raw_regions):
    regions = [(begin, begin + size) for begin, size in raw_regions]

    def inside(k):
        low = fp.low + k * fp.step
        return any(begin <= low and low + fp.length <= end for begin, end in regions)

    expected = next((k for k in range(iterations) if not inside(k)), iterations)
    assert first_outside(fp, iterations, regions) == expected


class _Step:
    def __init__(self, sources, dests, cost):
        self.sources, self.dests, self.cost = sources, dests, cost


instruction = st.builds(
    _Step, st.lists(st.integers(0, 5), max_size=3).map(tuple),
    st.lists(st.integers(0, 5), max_size=2).map(tuple),
    # registers 0..5, slots 6..8 (6 and 7 a pair, like the two LSUs)
    st.builds(Cost, st.integers(1, 8), st.integers(1, 12), st.integers(0, 2),
              st.sampled_from([(6,), (7,), (6, 7), (8,)]), st.booleans()))


def _stepped(body, taken, ready, iterations, exits) -> tuple[int, int]:
    """``iterations`` of ``body`` issued one instruction at a time from cycle 7 (``issue``),
    the refetch penalty after each taken transfer and on every back edge but an exit."""
    now, stalls = 7, 0
    for j in range(iterations):
        for step, hit in zip(body, taken):
            now, stall = issue(ready, now, step.sources, step.dests, step.cost)
            now += step.cost.taken_penalty if hit else 0
            stalls += stall
        if j < iterations - 1 or not exits:
            now += body[-1].cost.taken_penalty
    return now, stalls


@settings(max_examples=300, deadline=None)
@given(st.lists(instruction, min_size=1, max_size=8), st.lists(st.integers(0, 30), min_size=9,
       max_size=9), st.integers(1, 300), st.booleans())
def test_loop_timing_extrapolation_matches_stepping(body, start_ready, iterations, exits):
    timing = LoopTiming(body)
    ready_fast, ready_slow = list(start_ready), list(start_ready)
    now, stalls = timing.advance(ready_fast, 7, iterations, exits)
    assert (now, stalls) == _stepped(body, [False] * len(body), ready_slow, iterations, exits)
    # registers exactly; a slot only as far as the future sees it (free by ``now`` or not)
    assert ready_fast[:6] == ready_slow[:6]
    assert [max(r, now) for r in ready_fast[6:]] == [max(r, now) for r in ready_slow[6:]]


@settings(max_examples=400, deadline=None)
@given(st.integers(-64, 70000), st.integers(16, 300), st.integers(1, 40), st.booleans(),
       st.sampled_from(["WIN_D", "WIN_F"]))
def test_a_progression_is_the_view_of_its_rows(offset, step, rows, is_write, window):
    """``WindowMemory.progression`` (the fast path's vld / vst of an induction register)
    gives the bytes ``read_rows`` reads and writes where ``write_rows`` writes; None
    exactly when the rows are not all in one window the access may use."""
    from runtime_sim.isa.memory import AccessFault
    from shave_testlib import make_memory
    memory, arrays = make_memory()
    rng = np.random.default_rng(abs(offset) + step + rows)
    for array in arrays.values():
        array[:] = rng.integers(0, 256, array.shape, dtype=np.uint8)
    first = memory.base(window) + offset
    addresses = first + step * np.arange(rows, dtype=np.int64)
    view = memory.progression(first, step, rows, 16, is_write)
    try:
        expected = memory.read_rows(addresses, 16)
        if is_write:
            memory.write_rows(addresses, expected[::-1].copy())
            written = {name: array.copy() for name, array in arrays.items()}
    except AccessFault:
        assert view is None
        return
    assert view is not None
    if is_write:
        view[...] = expected[::-1]
        assert all(np.array_equal(arrays[name], written[name]) for name in arrays)
    else:
        assert np.array_equal(view, expected)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(instruction, st.booleans()), min_size=1, max_size=8),
       st.lists(st.integers(0, 30), min_size=9, max_size=9), st.integers(1, 300),
       st.booleans())
def test_a_paths_timing_with_taken_transfers_matches_stepping(path, start_ready, iterations,
                                                              exits):
    """``LoopTiming`` given the transfers a path takes (the path batch's ``PathTiming``):
    the refetch penalty after each taken one, as ``cycles.issue`` stepped over every
    iteration gives it."""
    body = [step for step, _ in path]
    taken = [hit for _, hit in path[:-1]] + [False]
    timing = LoopTiming(body, taken)
    ready_fast, ready_slow = list(start_ready), list(start_ready)
    now, stalls = timing.advance(ready_fast, 7, iterations, exits)
    assert (now, stalls) == _stepped(body, taken, ready_slow, iterations, exits)
    assert ready_fast[:6] == ready_slow[:6]
    assert [max(r, now) for r in ready_fast[6:]] == [max(r, now) for r in ready_slow[6:]]


def test_timing_from_a_programs_tails_is_the_timing_from_its_steps():
    """``LoopTiming(None, taken, tails)`` (a program's words' issue inputs, as loops and
    path batches build it) equals ``LoopTiming(steps, taken)`` over every run of every
    library kernel's .text, transfers taken or not."""
    from runtime_sim.isa.library_slices import linked
    from vpuc.arch import load_arch
    from vpuc.kernel_library import library_names, load_library_kernel
    arch = load_arch()
    compared = 0
    for name in library_names():
        _, program = linked(load_library_kernel(name), arch)
        steps, tails = program.meta, program.tails
        for start in range(0, len(steps), 7):
            end = min(start + 40, len(steps))
            taken = [program.decoded[i].info.mnemonic.startswith("b") for i in range(start, end)]
            for given in (None, taken):
                a = LoopTiming(steps[start:end], given)
                b = LoopTiming(None, given, tails[start:end])
                assert (a.steps, a.keys, a.dests, a.penalty) == (b.steps, b.keys, b.dests,
                                                                 b.penalty)
                compared += 1
    assert compared > 500
