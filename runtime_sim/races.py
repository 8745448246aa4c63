"""Data races: two units touching the same bytes, one of them writing, unordered by barriers.

Checked when a unit starts, against the accesses of units that started before
it (finished or still running), using the schedule's happens-before
(``vpuc.analysis.schedule``): ``a`` is ordered before ``b`` iff a chain of
barriers and queue order leads from the end of ``a`` to the start of ``b``.
A running unit never happens before the one starting, so touching the bytes it
writes is always reported; so is an unordered pair that happened not to
overlap in this run.

Memory is indexed by pages so a check only visits accesses near its bytes, and
accesses that can no longer matter are dropped: an access ordered before a
later write covering its bytes (any conflict with it is a conflict with that
write too, or is ordered after both), and a read ordered before a later read
covering its bytes.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.memory import Memory, byte_intervals
from runtime_sim.plan import Plan
from vpuc.diagnostics import Diagnostic, Severity
from vpuc.ir.symbols import Region

PAGE_BITS = 14            # 16 KiB pages
DEFAULT_LIMIT = 20        # races reported before the rest are only counted


class Access:
    __slots__ = ("unit", "key", "lo", "hi", "write", "region", "rows")

    def __init__(self, unit: int, key: tuple, lo: int, hi: int, write: bool, region: Region,
                 rows: np.ndarray | None) -> None:
        self.unit, self.key, self.lo, self.hi = unit, key, lo, hi
        self.write, self.region, self.rows = write, region, rows


class RaceDetector:
    def __init__(self, plan: Plan, memory: Memory, limit: int = DEFAULT_LIMIT) -> None:
        self.plan = plan
        self.memory = memory
        self.schedule = plan.schedule
        self.limit = limit
        self.pages: dict[tuple, list[Access]] = {}
        self.races: list[Diagnostic] = []
        self.count = 0
        self._pairs: set[tuple[int, int]] = set()
        # Without a happens-before (a cyclic schedule) the run deadlocks; nothing to check.
        self.enabled = self.schedule.clock is not None

    def check(self, unit: int) -> None:
        if not self.enabled:
            return
        reads, writes = self.plan.accesses(unit)
        accesses = [self._access(unit, r, False) for r in reads]
        accesses += [self._access(unit, w, True) for w in writes]
        ordered: dict[int, bool] = {}
        for access in accesses:
            for other in self._near(access):
                if other.unit == unit or not (access.write or other.write):
                    continue
                if other.hi <= access.lo or access.hi <= other.lo:
                    continue
                overlap = _overlap(access, other)
                if overlap is None:
                    continue
                if other.unit not in ordered:
                    ordered[other.unit] = self.schedule.happens_before(other.unit, unit)
                if not ordered[other.unit]:
                    self._report(other, access, overlap)
        for access in accesses:
            self._record(access, ordered)

    # ------------------------------------------------------------ index
    def _access(self, unit: int, region: Region, write: bool) -> Access:
        key, lo, hi = self.memory.span(region)
        rows = None
        if region.span_bytes != region.type.nbytes and region.root.name not in self.memory.dynamic:
            rows = byte_intervals(region, lo)
            if len(rows) == 1:
                rows = None
        return Access(unit, key, lo, hi, write, region, rows)

    def _pages(self, access: Access) -> range:
        return range(access.lo >> PAGE_BITS, ((access.hi - 1) >> PAGE_BITS) + 1)

    def _near(self, access: Access) -> list[Access]:
        seen: dict[int, Access] = {}
        for page in self._pages(access):
            for other in self.pages.get((access.key, page), ()):
                seen.setdefault(id(other), other)
        return list(seen.values())

    def _record(self, access: Access, ordered: dict[int, bool]) -> None:
        unit = access.unit
        happens_before = self.schedule.happens_before

        def retired(other: Access) -> bool:
            if not (access.lo <= other.lo and other.hi <= access.hi
                    and (access.write or not other.write)):
                return False
            if other.unit == unit:
                return True
            if other.unit not in ordered:
                ordered[other.unit] = happens_before(other.unit, unit)
            return ordered[other.unit]

        if access.rows is not None:  # only an access covering its whole span retires others
            retired = None
        for page in self._pages(access):
            bucket = self.pages.setdefault((access.key, page), [])
            if retired is not None and bucket:
                bucket[:] = [other for other in bucket if not retired(other)]
            bucket.append(access)

    # ------------------------------------------------------------ reports
    def _report(self, first: Access, second: Access, overlap: tuple[int, int]) -> None:
        pair = (min(first.unit, second.unit), max(first.unit, second.unit))
        if pair in self._pairs:
            return
        self._pairs.add(pair)
        self.count += 1
        if len(self.races) >= self.limit:
            return
        plan = self.plan
        lo, hi = overlap

        def who(access: Access) -> str:
            queue = plan.queue_names[plan.queue_of[access.unit]]
            verb = "writes" if access.write else "reads"
            return f"{plan.names[access.unit]} ({queue}) {verb} %{access.region.name}"

        message = (f"race on {Memory.describe(first.key)} bytes {lo:#x}..{hi - 1:#x}: "
                   f"{who(first)} and {who(second)}, and no barrier orders the two tasks")
        locs = plan.loc
        self.races.append(Diagnostic(Severity.ERROR, locs[second.unit], message,
                                     ((locs[first.unit],
                                       f"{plan.names[first.unit]} is here"),)))

    def diagnostics(self) -> list[Diagnostic]:
        found = list(self.races)
        if self.count > len(found):
            found.append(Diagnostic(Severity.ERROR, None, f"{self.count - len(found)} more "
                                    "races not shown"))
        return found


def _overlap(a: Access, b: Access) -> tuple[int, int] | None:
    """The first and past-the-last byte both accesses touch, or None if they share none."""
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
