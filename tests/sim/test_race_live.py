"""The race detector's live accesses (``runtime_sim.race_live``) against the algorithm they
replaced, and their cost.

The oracle below is the detector as it was before the interval index of live groups:
every group linked, when first seen, to every group sharing a byte with it
(found through a page index of all groups), with the shared bytes computed by
numpy for each linked pair; a check visited the live accesses of the linked
groups.  Its verdicts -- which races, in which order, with which bytes; which
accesses stay live -- are the ones to keep.  Random footprints (dense, strided,
empty, across page boundaries, in two memories) and a random happens-before
relation drive both.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.race_live import PAGE_BITS, LiveAccesses

PAGE = 1 << PAGE_BITS


# ------------------------------------------------------------ the oracle (the old algorithm)
class _OldGroup:
    def __init__(self, key, lo, hi, rows):
        self.key, self.lo, self.hi, self.rows = key, lo, hi, rows
        self.live = []
        self.links = []


class _OldLive:
    def __init__(self):
        self.groups, self.pages, self.sequence = {}, {}, 0

    def group(self, key, lo, hi, rows):
        ident = (key, lo, hi) if rows is None else (key, lo, hi, rows.tobytes())
        group = self.groups.get(ident)
        if group is not None:
            return group
        group = self.groups[ident] = _OldGroup(key, lo, hi, rows)
        if hi <= lo:
            return group
        group.links.append((group, _old_overlap(group, group), rows is None))
        seen = set()
        for page in range(lo >> PAGE_BITS, ((hi - 1) >> PAGE_BITS) + 1):
            bucket = self.pages.setdefault((key, page), [])
            for other in bucket:
                if id(other) in seen or other.hi <= lo or hi <= other.lo:
                    continue
                seen.add(id(other))
                shared = _old_overlap(group, other)
                if shared is None:
                    continue
                group.links.append((other, shared, rows is None and lo <= other.lo
                                    and other.hi <= hi))
                other.links.append((group, shared, other.rows is None and other.lo <= lo
                                    and hi <= other.hi))
            bucket.append(group)
        return group

    def check(self, unit, accesses, before):
        ordered, races = {}, []

        def is_before(u):
            if u not in ordered:
                ordered[u] = before(u)
            return ordered[u]

        for group, write, name in accesses:
            found = []
            for other, shared, _ in group.links:
                for entry in other.live:
                    if entry[0] != unit and (write or entry[1]) and not is_before(entry[0]):
                        found.append((max(group.lo, other.lo) >> PAGE_BITS, entry[3], entry,
                                      other, shared))
            found.sort(key=lambda f: f[:2])
            races += [(entry, other, (unit, write, name), group, shared)
                      for _, _, entry, other, shared in found]
        for group, write, name in accesses:
            self.sequence += 1
            if group.rows is None:
                for other, _, covers in group.links:
                    if covers and other.live:
                        other.live = [e for e in other.live if not (write or not e[1])
                                      or (e[0] != unit and not is_before(e[0]))]
            group.live.append((unit, write, name, self.sequence))
        return races

    def linked(self, group, others):
        return [(other, shared) for other, shared, _ in group.links
                if any(other is o for o in others)]


def _old_overlap(a, b):
    if a.rows is None and b.rows is None:
        return max(a.lo, b.lo), min(a.hi, b.hi)
    rows_a = a.rows if a.rows is not None else np.array([[a.lo, a.hi]], np.int64)
    rows_b = b.rows if b.rows is not None else np.array([[b.lo, b.hi]], np.int64)
    lo_a, hi_a, lo_b, hi_b = rows_a[:, 0], rows_a[:, 1], rows_b[:, 0], rows_b[:, 1]
    first = np.searchsorted(hi_b, lo_a, side="right")
    valid = first < len(lo_b)
    hit = valid.copy()
    hit[valid] = lo_b[first[valid]] < hi_a[valid]
    if not hit.any():
        return None
    low = int(np.maximum(lo_a[hit], lo_b[first[hit]]).min())
    last = np.searchsorted(lo_b, hi_a, side="left") - 1
    ok = last >= 0
    ok[ok] = hi_b[last[ok]] > lo_a[ok]
    high = int(np.minimum(hi_a[ok], hi_b[last[ok]]).max())
    return low, high


# ------------------------------------------------------------ random runs
def _span(draw):
    key = draw(st.sampled_from([("DDR",), ("CMX", 0)]))
    lo = draw(st.integers(0, 3 * PAGE)) // 64 * 64
    if draw(st.integers(0, 9)) == 0:
        return key, lo, lo, None                        # touches no byte
    if draw(st.booleans()):
        return key, lo, lo + draw(st.integers(1, PAGE + PAGE // 2)), None
    chunk = draw(st.sampled_from([32, 64, 128, 512]))
    stride = chunk * draw(st.sampled_from([2, 3, 4, 16, 64]))
    count = draw(st.integers(2, 40))                  # more than MAX_ROWS: indexed by span
    starts = lo + stride * np.arange(count, dtype=np.int64)
    rows = np.stack([starts, starts + chunk], axis=1)
    return key, lo, int(rows[-1, 1]), rows


@st.composite
def _runs(draw):
    spans = [_span(draw) for _ in range(draw(st.integers(1, 10)))]
    units = draw(st.integers(1, 24))
    before: list[set[int]] = []
    program = []
    for u in range(units):
        direct = {v for v in range(u) if draw(st.integers(0, 2)) == 0}
        closed = set(direct)
        for v in direct:
            closed |= before[v]
        before.append(closed)
        accesses = [(draw(st.integers(0, len(spans) - 1)), draw(st.booleans()), f"b{i}")
                    for i in range(draw(st.integers(1, 3)))]
        program.append(accesses)
    return spans, before, program


def _ident(group):
    return (group.key, group.lo, group.hi, None if group.rows is None else group.rows.tobytes())


def _comparable(found):
    return [(entry, _ident(other), access, _ident(group), shared)
            for entry, other, access, group, shared in found]


@settings(max_examples=300, deadline=None)
@given(_runs())
def test_the_interval_index_finds_the_races_the_linked_groups_found(run):
    spans, before, program = run
    new, old = LiveAccesses(), _OldLive()
    for unit, accesses in enumerate(program):
        found = []
        for live in (new, old):
            mine = [(live.group(*spans[s]), write, name) for s, write, name in accesses]
            found.append(_comparable(live.check(unit, mine, before[unit].__contains__)))
        assert found[0] == found[1]
        assert all(g.writes == sum(e[1] for e in g.live) for g in new.groups.values())
        assert ({_ident(g): g.live for g in new.groups.values() if g.live}
                == {_ident(g): g.live for g in old.groups.values()
                    if g.live and g.hi > g.lo})
    news, olds = list(new.groups.values()), list(old.groups.values())
    assert [_ident(g) for g in news] == [_ident(g) for g in olds]
    for a_new, a_old in zip(news, olds):     # the order the explanation of a failure reports in
        assert ([(_ident(g), s) for g, s in new.linked(a_new, news)]
                == [(_ident(g), s) for g, s in old.linked(a_old, olds)])


# ------------------------------------------------------------ the cost
def _pipeline(blocks: int) -> LiveAccesses:
    """Double-buffered blocks through CMX, each loaded, computed and stored, in order:
    strided loads of an NCHW input's row blocks (each overlapping every other one's
    span), dense CMX buffers, dense stores."""
    live = LiveAccesses()
    channels, plane = 16, blocks * 256
    for k in range(blocks):
        starts = np.arange(channels, dtype=np.int64) * plane + k * 256
        load = live.group(("DDR",), int(starts[0]), int(starts[-1]) + 256,
                          np.stack([starts, starts + 256], axis=1))
        cmx_in = live.group(("CMX", 0), (k % 2) * 8192, (k % 2) * 8192 + 4096, None)
        cmx_out = live.group(("CMX", 0), 16384 + (k % 2) * 8192, 16384 + (k % 2) * 8192 + 4096,
                             None)
        out = live.group(("DDR",), 1 << 30 | k * 4096, (1 << 30 | k * 4096) + 4096, None)
        steps = [[(load, False, "in"), (cmx_in, True, "a")],
                 [(cmx_in, False, "a"), (cmx_out, True, "b")],
                 [(cmx_out, False, "b"), (out, True, "out")]]
        for i, accesses in enumerate(steps):
            unit = 3 * k + i
            assert live.check(unit, accesses, lambda u, unit=unit: u < unit) == []
    return live


def test_a_long_pipeline_looks_at_a_bounded_number_of_live_accesses_per_unit():
    small, large = _pipeline(100), _pipeline(400)
    # Every load's span meets every earlier load's, and the loads stay live (nothing
    # covers them): indexed by spans, or without the happens-before retiring, visits and
    # exact tests would grow with the square of the blocks.
    for live, blocks in ((small, 100), (large, 400)):
        assert 3 * blocks <= live.visits <= 4 * 3 * blocks      # at most 4 per unit
    assert large.overlaps == small.overlaps == 0       # ordered pairs need no exact test


def test_the_simulators_checks_look_at_as_many_live_accesses_per_unit_at_any_length(
        tmp_path, monkeypatch):
    """bench/gen_program.py at two lengths: its loads read new views of one input and its
    stores write new views of one output, none covering another, so those accesses stay
    live to the end; the live accesses each unit looks at must not grow with them."""
    import sys

    import runtime_sim.race_live as race_live
    import runtime_sim.races as races
    from runtime_sim.simulator import simulate
    from tests.sim.simlib import NO_VERIFY, REPO, compile_vir
    sys.path.insert(0, str(REPO / "bench"))
    from gen_program import generate

    made: list[LiveAccesses] = []
    real_init = race_live.LiveAccesses.__init__

    def init(self):
        real_init(self)
        made.append(self)
    monkeypatch.setattr(race_live.LiveAccesses, "__init__", init)
    monkeypatch.setattr(races, "PROVE_FIRST", False)      # the online checks, every unit
    per_unit = []
    for tasks in (400, 1600):
        path = tmp_path / f"gen{tasks}.vir"
        path.write_text(generate(tasks))
        result = simulate(compile_vir(path, NO_VERIFY), timing_only=True, races=True)
        assert result.races == []
        live = made[-1]
        per_unit.append(live.visits / result.plan.size)
        assert sum(len(g.live) for g in live.groups.values()) > tasks / 2   # the loads, stores
    assert per_unit[1] <= per_unit[0] * 1.05 + 0.1
