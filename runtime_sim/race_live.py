"""The race detector's live accesses, found through the bytes they touch.

Accesses are grouped by the exact bytes they touch (a *group*: memory, span
and, for a strided region, its byte intervals).  A group that has live
accesses is indexed by its byte intervals (its span when it has more than
``MAX_ROWS`` of them), in sorted lists per memory and per power-of-four length,
so the intervals meeting a given one are a bisection and a short walk away.
A unit's access finds there the live groups whose intervals meet its own, and
only for a pair that could race (another unit, one of them writing, not
ordered before) asks whether the two share a byte -- the exact, and costly,
test of two strided groups is made at most once per pair and usually never.

Accesses that can no longer matter are dropped: an access ordered before a
later write covering its bytes (any conflict with it is a conflict with that
write too, or is ordered after both), and a read ordered before a later read
covering its bytes.  A group whose last access is dropped leaves the index.
So a long pipeline over a few buffers keeps a few live accesses per buffer,
each check looks at those few, and the whole run stays linear in its accesses
(``visits`` counts the live accesses looked at: the tests pin it).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable

import numpy as np

PAGE_BITS = 14            # 16 KiB pages: races are reported in page order
MAX_ROWS = 16             # a group with more byte intervals is indexed by its span

Entry = tuple[int, bool, str, int]          # (unit, writes, name, sequence)
Access = tuple["Group", bool, str]          # (group, writes, name)
Found = tuple[Entry, "Group", tuple[int, bool, str], "Group", tuple[int, int]]


class Group:
    """Accesses to one exact set of bytes; ``live`` holds the ones that may still race."""

    __slots__ = ("key", "lo", "hi", "rows", "index", "live", "writes", "cells", "indexed")

    def __init__(self, key: tuple, lo: int, hi: int, rows: np.ndarray | None,
                 index: int) -> None:
        self.key, self.lo, self.hi, self.rows, self.index = key, lo, hi, rows, index
        self.live: list[Entry] = []
        self.writes = 0                 # how many of ``live`` write
        self.indexed = False            # its intervals are in the index (it has live accesses)
        # The intervals it is indexed by: (first byte, past the last, length class).
        if hi <= lo:
            cells: list = []
        elif rows is None or len(rows) > MAX_ROWS:
            cells = [(lo, hi)]
        else:
            cells = rows.tolist()
        self.cells = [(a, b, ((b - a).bit_length() + 1) >> 1) for a, b in cells]


class LiveAccesses:
    def __init__(self) -> None:
        self.groups: dict[tuple, Group] = {}
        # memory -> length class -> [longest, first bytes, sorted (first byte, past the
        # last, group index, group)] of the intervals of the groups with live accesses;
        # class c holds lengths below 4**c: a long interval does not widen short searches.
        self.index: dict[tuple, dict[int, list]] = {}
        self.shared: dict[tuple[int, int], tuple[int, int] | None] = {}
        self.sequence = 0
        self.visits = 0           # live accesses looked at
        self.overlaps = 0         # exact byte tests made

    def group(self, key: tuple, lo: int, hi: int, rows: np.ndarray | None) -> Group:
        ident = (key, lo, hi) if rows is None else (key, lo, hi, rows.tobytes())
        found = self.groups.get(ident)
        if found is None:
            found = self.groups[ident] = Group(key, lo, hi, rows, len(self.groups))
        return found

    def overlap(self, a: Group, b: Group) -> tuple[int, int] | None:
        """The first and past-the-last byte both groups touch, or None (one test per pair)."""
        if a.rows is None and b.rows is None:
            return (max(a.lo, b.lo), min(a.hi, b.hi)) if a.lo < b.hi and b.lo < a.hi else None
        if a.index < b.index:
            a, b = b, a
        pair = (a.index, b.index)
        found = self.shared.get(pair, False)
        if found is False:
            self.overlaps += 1
            found = self.shared[pair] = (bytes_shared(a, b) if a.lo < b.hi and b.lo < a.hi
                                         else None)
        return found

    def check(self, unit: int, accesses: list[Access],
              before: Callable[[int], bool]) -> list[Found]:
        """Record ``unit``'s accesses; return its races with the live accesses, each as
        (entry, its group, access, its group, shared bytes), in report order: access by
        access, then by first shared page and age (the order of a page-by-page scan)."""
        ordered: dict[int, bool] = {}
        races: list[Found] = []
        visits = 0
        nears: list[list[Group]] = []
        near_of = self._near
        for group, write, name in accesses:
            near = near_of(group)
            nears.append(near)
            found = None
            for other in near:
                if not (write or other.writes):
                    continue                # reads meeting reads: no race
                live = other.live
                visits += len(live)
                for entry in live:
                    u = entry[0]
                    if u == unit or not (write or entry[1]):
                        continue
                    known = ordered.get(u)
                    if known is None:
                        known = ordered[u] = before(u)
                    if not known:
                        shared = self.overlap(group, other)
                        if shared is None:
                            break           # no byte in common: nothing of ``other`` races
                        if found is None:
                            found = []
                        found.append((max(group.lo, other.lo) >> PAGE_BITS, entry[3], entry,
                                      other, shared))
            if found:
                found.sort(key=lambda f: f[:2])
                races += [(entry, other, (unit, write, name), group, shared)
                          for _, _, entry, other, shared in found]
        entered: list[Group] = []           # groups this unit's accesses made live
        for (group, write, name), near in zip(accesses, nears):
            self.sequence += 1
            if group.hi <= group.lo:
                continue                    # touches no byte: never races, never retires
            if group.rows is None:          # only an access covering its whole span retires
                lo, hi = group.lo, group.hi
                if entered:
                    near = near + [g for g in entered if g.key == group.key and g not in near]
                for other in near:
                    live = other.live
                    if not live or other.lo < lo or hi < other.hi or (
                            other.rows is not None and self.overlap(group, other) is None):
                        continue
                    visits += len(live)
                    kept = []
                    for entry in live:      # retire what this access covers and follows
                        if write or not entry[1]:
                            u = entry[0]
                            if u == unit:
                                continue
                            known = ordered.get(u)
                            if known is None:
                                known = ordered[u] = before(u)
                            if known:
                                continue
                        kept.append(entry)
                    if len(kept) < len(live):
                        other.live = kept
                        other.writes = sum(entry[1] for entry in kept)
                        if not kept and other is not group:     # ``group`` stays
                            self._leave(other)
            if not group.indexed:
                self._enter(group)
                entered.append(group)
            group.live.append((unit, write, name, self.sequence))
            group.writes += write
        self.visits += visits
        return races

    def linked(self, group: Group, others: list[Group]) -> list[tuple[Group, tuple[int, int]]]:
        """The groups of ``others`` sharing a byte with ``group``, with the bytes they share,
        self first, then the older groups in the order a page scan met them when ``group``
        was made, then the younger ones in the order they were made."""
        found = []
        for other in dict.fromkeys(others):
            if group.hi <= group.lo or other.hi <= other.lo or other.key != group.key:
                continue
            shared = self.overlap(group, other)
            if shared is None:
                continue
            if other is group:
                rank: tuple = (0,)
            elif other.index < group.index:
                rank = (1, max(group.lo, other.lo) >> PAGE_BITS, other.index)
            else:
                rank = (2, other.index)
            found.append((rank, other, shared))
        found.sort(key=lambda f: f[0])
        return [(other, shared) for _, other, shared in found]

    def _near(self, group: Group) -> list[Group]:
        """The groups with live accesses whose indexed intervals meet ``group``'s."""
        index = self.index.get(group.key)
        if not index:
            return []
        if len(index) == 1 and len(group.cells) == 1:     # the common case, without loops
            lo, hi, _ = group.cells[0]
            for longest, starts, cells in index.values():
                start = bisect_left(starts, lo - longest + 1)
                near = [other for _, last, _, other in cells[start:bisect_left(starts, hi, start)]
                        if last > lo]
                return near if len(near) < 2 else list(dict.fromkeys(near))
        near = []
        for lo, hi, _ in group.cells:
            for longest, starts, cells in index.values():
                # No interval starting before lo - longest + 1 reaches past lo.
                start = bisect_left(starts, lo - longest + 1)
                for _, last, _, other in cells[start:bisect_left(starts, hi, start)]:
                    if last > lo:
                        near.append(other)
        return near if len(near) < 2 else list(dict.fromkeys(near))

    def _enter(self, group: Group) -> None:
        group.indexed = True
        index = self.index.get(group.key)
        if index is None:
            index = self.index[group.key] = {}
        for lo, hi, length in group.cells:
            cell = (lo, hi, group.index, group)
            found = index.get(length)
            if found is None:
                index[length] = [hi - lo, [lo], [cell]]
                continue
            if hi - lo > found[0]:      # only grows until the class empties: a wider search
                found[0] = hi - lo
            _, starts, cells = found
            i = bisect_left(cells, cell[:3])
            starts.insert(i, lo)
            cells.insert(i, cell)

    def _leave(self, group: Group) -> None:
        group.indexed = False
        index = self.index[group.key]
        for lo, hi, length in group.cells:
            _, starts, cells = index[length]
            i = bisect_left(cells, (lo, hi, group.index))
            del starts[i], cells[i]
            if not cells:
                del index[length]


def bytes_shared(a: Group, b: Group) -> tuple[int, int] | None:
    """The hull of the bytes two groups both touch (at least one strided), or None."""
    if a.rows is None or b.rows is None:
        dense, rows = (a, b.rows) if a.rows is None else (b, a.rows)
        return _dense_rows(dense.lo, dense.hi, rows)
    rows_a, rows_b = a.rows, b.rows
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


def _dense_rows(lo: int, hi: int, rows: np.ndarray) -> tuple[int, int] | None:
    """[lo, hi) against sorted disjoint rows: the rows it meets are one contiguous run."""
    first = int(np.searchsorted(rows[:, 1], lo, side="right"))   # first row ending after lo
    last = int(np.searchsorted(rows[:, 0], hi, side="left")) - 1  # last row starting before hi
    if first > last:
        return None
    return max(lo, int(rows[first, 0])), min(hi, int(rows[last, 1]))
