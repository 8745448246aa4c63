"""Data races: two units touching the same bytes, one of them writing, unordered by barriers.

Checked when a unit starts, against the accesses of units that started before
it (finished or still running), using happens-before (``race_clock``: ``a`` is
ordered before ``b`` iff a chain of barriers and queue order leads from the end
of ``a`` to the start of ``b``, as ``vpuc.analysis.schedule`` defines it).  A
running unit never happens before the one starting, so touching the bytes it
writes is always reported; so is an unordered pair that happened not to
overlap in this run.

Accesses are grouped by the exact bytes they touch (a *group*: memory, span
and, for a strided region, its byte intervals).  When a group is first seen,
it is linked to every group sharing a byte with it (found through a 16 KiB
page index), with the bytes they share; a check then visits only the accesses
of linked groups.  Accesses that can no longer matter are dropped: an access
ordered before a later write covering its bytes (any conflict with it is a
conflict with that write too, or is ordered after both), and a read ordered
before a later read covering its bytes.  So a long pipeline over a few buffers
keeps a few live accesses per buffer and the check stays linear.

When a unit fails (a fault, garbage dims in a dynamic tensor's shape metadata,
a kernel status), ``explain`` looks for the race behind it: the races found so
far, and those of the failed unit with units that have not started yet but are
not ordered after it -- its accesses are checked before it runs, but such a
race would only be seen when the other unit starts, which it never does.
"""

from __future__ import annotations

import time

import numpy as np

from runtime_sim.memory import Memory
from runtime_sim.plan import Plan
from runtime_sim.race_access import Accesses, Span
from runtime_sim.race_clock import HappensBefore, ordered_after
from vpuc.diagnostics import Diagnostic, Severity, VpucError

PAGE_BITS = 14            # 16 KiB pages
DEFAULT_LIMIT = 20        # races reported before the rest are only counted


class RaceError(VpucError):
    """Races that made a unit fail: reported instead of the failure they caused."""


class _Group:
    """Accesses to one exact set of bytes: ``live`` holds (unit, writes, name, sequence);
    ``links`` (group, shared bytes (lo, hi), whether this group covers that one), self
    included."""

    __slots__ = ("key", "lo", "hi", "rows", "live", "links")

    def __init__(self, key: tuple, lo: int, hi: int, rows: np.ndarray | None) -> None:
        self.key, self.lo, self.hi, self.rows = key, lo, hi, rows
        self.live: list[tuple[int, bool, str, int]] = []
        self.links: list[tuple[_Group, tuple[int, int], bool]] = []


class RaceDetector:
    def __init__(self, plan: Plan, memory: Memory, limit: int = DEFAULT_LIMIT) -> None:
        clock = time.perf_counter()
        self.plan = plan
        self.limit = limit
        self.clock = HappensBefore(plan)
        self.accesses = Accesses(plan, memory, self._group)
        self.groups: dict[tuple, _Group] = {}
        self.pages: dict[tuple, list[_Group]] = {}
        self.races: list[Diagnostic] = []
        self.count = 0
        self.sequence = 0
        self._pairs: set[tuple[int, int]] = set()
        self._started = [False] * plan.size
        self.seconds = time.perf_counter() - clock     # wall time spent on races

    def end(self, unit: int) -> None:
        """The runtime's hook at a unit's end."""
        clock = time.perf_counter()
        self.clock.end(unit)
        self.seconds += time.perf_counter() - clock

    def check(self, unit: int) -> None:
        """The runtime's hook at a unit's start: check its accesses, then record them."""
        clock = time.perf_counter()
        hb = self.clock
        hb.start(unit)
        self._started[unit] = True
        before = hb.before
        accesses = self.accesses(unit)
        ordered: dict[int, bool] = {}
        for group, write, name in accesses:
            found = None
            for other, shared, _ in group.links:
                for entry in other.live:
                    u = entry[0]
                    if u == unit or not (write or entry[1]):
                        continue
                    known = ordered.get(u)
                    if known is None:
                        known = ordered[u] = before(u)
                    if not known:
                        if found is None:
                            found = []
                        found.append((max(group.lo, other.lo) >> PAGE_BITS, entry[3], entry,
                                      other, shared))
            if found:
                # In the order of a page-by-page scan: by first shared page, then by age.
                found.sort(key=lambda f: f[:2])
                for _, _, entry, other, shared in found:
                    self._report(entry, other, (unit, write, name), group, shared)
        for group, write, name in accesses:
            self.sequence += 1
            if group.rows is None:   # only an access covering its whole span retires others
                for other, _, covers in group.links:
                    if covers and other.live:
                        other.live = [e for e in other.live
                                      if not (write or not e[1])
                                      or (e[0] != unit and not _ordered(e[0], ordered, before))]
            group.live.append((unit, write, name, self.sequence))
        self.seconds += time.perf_counter() - clock

    # ------------------------------------------------------------ groups
    def _group(self, span: Span) -> _Group:
        key, lo, hi, rows = span
        ident = (key, lo, hi) if rows is None else (key, lo, hi, rows.tobytes())
        group = self.groups.get(ident)
        if group is not None:
            return group
        group = self.groups[ident] = _Group(key, lo, hi, rows)
        if hi <= lo:
            return group            # touches no byte: never conflicts, never covers
        shared = _overlap(group, group)
        group.links.append((group, shared, rows is None))
        seen: set[int] = set()
        for page in range(lo >> PAGE_BITS, ((hi - 1) >> PAGE_BITS) + 1):
            bucket = self.pages.setdefault((key, page), [])
            for other in bucket:
                if id(other) in seen or other.hi <= lo or hi <= other.lo:
                    continue
                seen.add(id(other))
                shared = _overlap(group, other)
                if shared is None:
                    continue
                group.links.append((other, shared, rows is None and lo <= other.lo
                                    and other.hi <= hi))
                other.links.append((group, shared, other.rows is None and other.lo <= lo
                                    and hi <= other.hi))
            bucket.append(group)
        return group

    # ------------------------------------------------------------ reports
    def _report(self, first: tuple, first_group: _Group, second: tuple, second_group: _Group,
                overlap: tuple[int, int]) -> None:
        pair = (min(first[0], second[0]), max(first[0], second[0]))
        if pair in self._pairs:
            return
        self._pairs.add(pair)
        self.count += 1
        if len(self.races) >= self.limit:
            return
        plan = self.plan
        lo, hi = overlap

        def who(access: tuple) -> str:
            unit, write, name = access[:3]
            queue = plan.queue_names[plan.queue_of[unit]]
            return f"{plan.names[unit]} ({queue}) {'writes' if write else 'reads'} %{name}"

        message = (f"race on {Memory.describe(first_group.key)} bytes {lo:#x}..{hi - 1:#x}: "
                   f"{who(first)} and {who(second)}, and no barrier orders the two tasks")
        locs = plan.loc
        self.races.append(Diagnostic(Severity.ERROR, locs[second[0]], message,
                                     ((locs[first[0]], f"{plan.names[first[0]]} is here"),)))

    def explain(self, unit: int, failure: VpucError) -> VpucError:
        """The error to report when ``unit`` failed with ``failure``: the races that may
        have caused it, with the failure as a note; ``failure`` itself if there are none."""
        self._pending_races(unit)
        if not self.races:
            return failure
        diag = failure.diagnostics[0]
        note = (diag.loc, f"the run then stopped: {diag.message}")
        first = self.races[0]
        races = [Diagnostic(first.severity, first.loc, first.message, first.notes + (note,))]
        return RaceError(races + self.diagnostics()[1:])

    def _pending_races(self, unit: int) -> None:
        """Races of ``unit`` with the units that have not started and are not ordered
        after it."""
        after = ordered_after(self.plan, unit)
        mine = self.accesses(unit)
        for v in range(self.plan.size):
            if self._started[v] or after[v]:
                continue
            for group, write, name in self.accesses(v):
                for other, shared, _ in group.links:
                    for mine_group, mine_write, mine_name in mine:
                        if mine_group is other and (write or mine_write):
                            self._report((unit, mine_write, mine_name), other,
                                         (v, write, name), group, shared)

    def diagnostics(self) -> list[Diagnostic]:
        found = list(self.races)
        if self.count > len(found):
            found.append(Diagnostic(Severity.ERROR, None, f"{self.count - len(found)} more "
                                    "races not shown"))
        return found


def _ordered(unit: int, ordered: dict[int, bool], before) -> bool:
    known = ordered.get(unit)
    if known is None:
        known = ordered[unit] = before(unit)
    return known


def _overlap(a: _Group, b: _Group) -> tuple[int, int] | None:
    """The first and past-the-last byte both spans touch, or None if they share none."""
    if a.rows is None and b.rows is None:
        return max(a.lo, b.lo), min(a.hi, b.hi)
    rows_a = a.rows if a.rows is not None else np.array([[a.lo, a.hi]], np.int64)
    rows_b = b.rows if b.rows is not None else np.array([[b.lo, b.hi]], np.int64)
    lo_a, hi_a, lo_b, hi_b = rows_a[:, 0], rows_a[:, 1], rows_b[:, 0], rows_b[:, 1]
    first = np.searchsorted(hi_b, lo_a, side="right")      # first b row ending after a starts
    valid = first < len(lo_b)
    hit = valid.copy()
    hit[valid] = lo_b[first[valid]] < hi_a[valid]
    if not hit.any():
        return None
    low = int(np.maximum(lo_a[hit], lo_b[first[hit]]).min())
    last = np.searchsorted(lo_b, hi_a, side="left") - 1     # last b row starting before a ends
    ok = last >= 0
    ok[ok] = hi_b[last[ok]] > lo_a[ok]
    high = int(np.minimum(hi_a[ok], hi_b[last[ok]]).max())
    return low, high
