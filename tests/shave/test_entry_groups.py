"""A relocated entry's checks from its origin's per-group work (``entry_cache.LoopFacts``):
footprints moving together keep their overlaps, groups apart cannot overlap, a group's
hull inside the memory holds its members; every answer is the one the footprints
themselves give (``loop_bounds.independent``, ``first_outside``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.isa.entry_cache import LoopFacts
from runtime_sim.isa.loop_bounds import Footprint, first_outside, independent


@st.composite
def grouped_footprints(draw):
    """Groups of footprints at one base each: a buffer's accesses of one row (its step
    mostly the group's, sometimes another), loads and stores."""
    footprints, groups = [], []
    for g in range(draw(st.integers(1, 4))):
        base = draw(st.integers(0, 4096)) * 16
        step = draw(st.sampled_from([16, 32, 64, 128, 0, -64]))
        members = []
        for _ in range(draw(st.integers(1, 5))):
            members.append(len(footprints))
            own = step if draw(st.integers(0, 5)) else draw(st.sampled_from([16, 48, -16]))
            footprints.append(Footprint(base + draw(st.integers(-64, 128)), own,
                                        draw(st.sampled_from([1, 2, 4, 16, 32])),
                                        draw(st.booleans()), len(footprints)))
        groups.append(tuple(members))
    # buffers often move alike (a block's input and output slots one pitch on)
    alike = draw(st.integers(-8192, 8192)) * 16
    moves = [alike if draw(st.booleans()) else draw(st.integers(-8192, 8192))
             * draw(st.sampled_from([1, 16])) for _ in groups]
    return footprints, tuple(groups), moves


def _moved(footprints, groups, moves):
    out = list(footprints)
    for members, d in zip(groups, moves):
        for i in members:
            fp = footprints[i]
            out[i] = Footprint(fp.low + d, fp.step, fp.length, fp.is_store, fp.position)
    return out


@settings(max_examples=400, deadline=None)
@given(grouped_footprints(), st.lists(st.integers(1, 300), min_size=1, max_size=3))
def test_a_moved_entrys_independence_is_its_footprints_own(drawn, counts):
    footprints, groups, moves = drawn
    origin = LoopFacts(footprints, None, groups=groups)
    moved = _moved(footprints, groups, moves)
    relocated = LoopFacts(moved, None, groups=groups, moved=(origin, moves))
    for iterations in counts:
        assert origin.independent(iterations) == independent(footprints, iterations)
        assert relocated.independent(iterations) == independent(moved, iterations)


@settings(max_examples=400, deadline=None)
@given(grouped_footprints(), st.integers(1, 400),
       st.lists(st.tuples(st.integers(-512, 70000), st.integers(1, 40000)), min_size=1,
                max_size=3),
       st.lists(st.tuples(st.integers(-512, 70000), st.integers(1, 40000)), max_size=3))
def test_hulls_bound_the_batch_where_its_footprints_do(drawn, iterations, loads, stores):
    """Regions with gaps a group's hull may straddle while its members do not."""
    footprints, groups, moves = drawn
    regions = {False: [(b, b + n) for b, n in loads], True: [(b, b + n) for b, n in stores]}
    origin = LoopFacts(footprints, None, groups=groups)
    moved = _moved(footprints, groups, moves)
    relocated = LoopFacts(moved, None, groups=groups, moved=(origin, moves))
    for facts, fps in ((origin, footprints), (relocated, moved)):
        expected = min([first_outside(fp, iterations, regions[fp.is_store]) for fp in fps])
        assert facts.inside(iterations, regions) == expected
