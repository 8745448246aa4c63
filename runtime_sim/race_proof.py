"""A proof, before the run, that a program has no data race: the race detector's fast path.

A race is a pair of units touching a common byte, one of them writing, that
happens-before (``race_clock``) leaves unordered.  Both are functions of the
program alone, so whether any race exists is decided before the run, in numpy
over columns:

* a topological order of the happens-before graph (a run that starts each
  unit as soon as the graph allows: ``rank``) and every unit's start clock
  (``HappensBefore``'s clocks, the online detector's, as bit sets of positions);
* the unordered pairs, read off the clocks: the units of queue q that are not
  ordered before v and rank before it are the positions past what v's start
  clock knows ended in q, up to the last one ranked before v (a queue starts
  its units in order, so its ranks grow with position);
* the pairs whose units' page masks meet (``page_masks``: 64 bits per unit of
  the memory pages its accesses touch, and of those it writes; a pair sharing
  a written byte always meets, so only pairs that cannot race are dropped);
* for each pair left, every access of one against every access of the other
  (``race_columns``): same memory, spans meeting, one writing; a strided
  region's exact bytes are compared only where the spans meet
  (``LiveAccesses.overlap``).

A well-synchronized program has few unordered pairs per unit, so this is
linear in its units.  When no pair races the detector skips its per-unit
checks (nothing could be reported, and a failure has no race to explain).
When one does, or the unordered pairs are too many (a program with few
barriers), or a buffer is dynamic (its dims, and so its bytes, are set during
the run), or the barriers form a cycle (the run deadlocks), the online
detector runs as before and reports exactly what it always did.
"""

from __future__ import annotations

from itertools import repeat
from operator import add, and_, itemgetter, or_, xor

import numpy as np

from runtime_sim.plan import Plan
from runtime_sim.race_access import strided_rows
from runtime_sim.race_columns import Columns
from runtime_sim.race_live import bytes_shared

PAIRS_PER_UNIT = 64       # beyond this many unordered pairs per unit, the online check decides


class Footprint:
    """The bytes of one access for the proof: memory, span and, for a strided region,
    its exact byte intervals (``rows``), computed only when a pair's spans meet (most
    never do: the online detector's groups compute them up front)."""

    __slots__ = ("key", "lo", "hi", "_region", "_rows")

    def __init__(self, key: tuple, lo: int, hi: int, region) -> None:
        self.key, self.lo, self.hi, self._region, self._rows = key, lo, hi, region, None

    @property
    def rows(self) -> np.ndarray | None:
        if self._region is not None:
            self._rows, self._region = strided_rows(self._region, self.lo), None
        return self._rows


def footprint_overlap(a: Footprint, b: Footprint) -> tuple[int, int] | None:
    """The first and past-the-last byte both touch, or None (``LiveAccesses.overlap``)."""
    if not (a.lo < b.hi and b.lo < a.hi):
        return None
    if a.rows is None and b.rows is None:
        return max(a.lo, b.lo), min(a.hi, b.hi)
    return bytes_shared(a, b)


def happens_before_order(plan: Plan) -> tuple[list[bool], list[int], list[list[int]]] | None:
    """(per queue whether several engines serve it, units in a topological order of
    happens-before, each unit's start clock), or None when the barriers form a cycle.
    Each unit starts once its queue predecessor did and its barriers' producers ended,
    and ends at once: the clocks depend only on the graph, not on when units end.

    A start clock is ``HappensBefore``'s as sets: per queue, a Python int whose bit ``i``
    says position ``i`` is known to have ended (a one-engine queue's is always
    ``0..last``, its clock entry; a multi-engine queue's is its prefix and mask).  The
    union of two clocks is then the bitwise or of their entries, done in C for every
    queue at once (``HappensBefore`` merges masks one queue at a time in Python)."""
    waits, updates, queue_units = plan.waits, plan.updates, plan.queue_units
    multi = [engines > 1 for engines in plan.queue_engines]
    empty = [0] * len(queue_units)
    last: list[list | None] = [None] * len(queue_units)   # the clock a queue's next unit starts from
    barrier: list[list | None] = [None] * len(plan.barrier_names)
    users = list(plan.consumer_count)                      # consumers yet to start
    producers_left = list(plan.producer_count)
    waiting_on: list[list[int] | None] = [None] * len(producers_left)   # barrier -> queues
    head = [0] * len(queue_units)
    order: list[int] = []
    starts: list = [None] * plan.size
    todo = list(range(len(queue_units)))
    while todo:
        q = todo.pop()
        units, h = queue_units[q], head[q]
        several = multi[q]
        while h < len(units):
            u = units[h]
            for b in waits[u]:
                if producers_left[b]:
                    queues = waiting_on[b]
                    if queues is None:
                        waiting_on[b] = [q]
                    elif q not in queues:
                        queues.append(q)
                    break
            else:
                clock = last[q]                 # start: the queue's and the barriers' clocks
                for b in waits[u]:
                    other = barrier[b]
                    if other is not None and other is not clock:
                        clock = other if clock is None else list(map(or_, clock, other))
                    users[b] -= 1
                    if not users[b]:
                        barrier[b] = None       # its last consumer has its clock
                if clock is None:
                    clock = empty
                starts[u] = clock
                ended = list(clock)             # end: the start clock plus u itself
                ended[q] |= 1 << h
                # a multi-engine queue's next unit starts after this one started, a
                # one-engine queue's after it ended
                last[q] = clock if several else ended
                for b in updates[u]:
                    other = barrier[b]
                    barrier[b] = ended if other is None else list(map(or_, other, ended))
                order.append(u)
                h += 1
                for b in updates[u]:
                    producers_left[b] -= 1
                    if not producers_left[b] and waiting_on[b] is not None:
                        todo.extend(waiting_on[b])
                        waiting_on[b] = None
                continue
            break
        head[q] = h
    if len(order) < plan.size:
        return None
    return multi, order, starts


def race_free(plan: Plan, columns: Columns) -> bool:
    """Whether no two units of ``plan`` race; ``columns`` holds every unit's accesses
    (``race_columns``).  False also when it cannot tell."""
    found = happens_before_order(plan)
    if found is None:
        return False
    multi, order, starts = found
    pairs = _unordered_pairs(plan, multi, order, starts)
    if pairs is None:
        return False
    return not _racing(columns, plan.size, pairs[0], pairs[1])


def _unordered_pairs(plan: Plan, multi: list[bool], order: list[int],
                     starts: list[list[int]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(earlier, later): every pair of units where ``earlier`` ranks before ``later`` and
    does not happen before it; None when there are more than ``PAIRS_PER_UNIT`` per unit."""
    n = plan.size
    if not n or not multi:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rank = np.empty(n, np.int64)
    rank[np.fromiter(order, np.int64, n)] = np.arange(n, dtype=np.int64)
    # Start clocks as a matrix of the last position of each queue's prefix known ended
    # (one below its trailing ones: a one-engine queue's entry is all prefix); a
    # multi-engine queue's positions known ended past its prefix are looked at below.
    ended = np.empty((n, len(multi)), np.int64)
    past_prefix = np.zeros((n, len(multi)), bool)
    for q, m in enumerate(multi):               # a column per queue: no test per entry
        column = list(map(itemgetter(q), starts))
        if m:       # b ^ (b + 1): the trailing ones and the bit above; b & (b + 1): the rest
            above = list(map(add, column, repeat(1, n)))
            ended[:, q] = np.fromiter(map(int.bit_length, map(xor, column, above)),
                                      np.int64, n) - 2
            past_prefix[:, q] = np.fromiter(map(and_, column, above), bool, n)
        else:
            ended[:, q] = np.fromiter(map(int.bit_length, column), np.int64, n) - 1
    ranked_before = np.empty_like(ended)
    units_of = [np.asarray(units, np.int64) for units in plan.queue_units]
    for q, units in enumerate(units_of):
        ranked_before[:, q] = np.searchsorted(rank[units], rank)
    first = ended + 1
    count = np.maximum(ranked_before - first, 0).reshape(-1)
    total = int(count.sum())
    if total > PAIRS_PER_UNIT * max(n, 1):
        return None
    cell = np.repeat(np.arange(count.size, dtype=np.int64), count)
    later, queue = cell // len(multi), cell % len(multi)
    position = first.reshape(-1)[cell] + np.arange(total, dtype=np.int64) - np.repeat(
        np.cumsum(count) - count, count)
    queue_base = np.cumsum([0] + [len(units) for units in units_of])[:-1]
    earlier = np.concatenate(units_of + [np.zeros(0, np.int64)])[queue_base[queue] + position]
    # A position past the prefix known ended: that pair is ordered after all.
    check = np.flatnonzero(past_prefix.reshape(-1)[cell])
    if len(check):
        keep = np.ones(total, bool)
        keep[check] = [not (starts[v][q] >> p) & 1 for v, q, p in zip(
            later[check].tolist(), queue[check].tolist(), position[check].tolist())]
        earlier, later = earlier[keep], later[keep]
    return earlier, later


def _racing(columns: Columns, n: int, earlier: np.ndarray, later: np.ndarray) -> bool:
    """Whether some pair (earlier[i], later[i]) shares a byte, one of the two writing."""
    if not len(columns.unit) or not len(earlier):
        return False
    key, write, lo, hi = columns.key, columns.write, columns.lo, columns.hi
    # Only pairs whose masks meet can share a byte (most pairs of a synchronized program
    # touch other pages, or other memories): the rest need no access against access.
    for page_bits in MASK_PAGE_BITS:
        touched, written = page_masks(columns, n, page_bits)
        meets = ((written[earlier] & touched[later]) | (touched[earlier] & written[later])) != 0
        earlier, later = earlier[meets], later[meets]
        if not len(earlier):
            return False
    per_unit = np.bincount(columns.unit, minlength=n)
    unit_first = np.cumsum(per_unit) - per_unit
    # Every access of ``earlier`` against every access of ``later``.
    width = per_unit[later]
    count = per_unit[earlier] * width
    total = int(count.sum())
    pair = np.repeat(np.arange(len(earlier), dtype=np.int64), count)
    k = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    row, column = np.divmod(k, width[pair])
    i = unit_first[earlier][pair] + row
    j = unit_first[later][pair] + column
    # one memory and a writer first (few pairs are left), then the spans of those
    same = np.flatnonzero((key[i] == key[j]) & (write[i] | write[j]))
    i, j = i[same], j[same]
    meet = (lo[i] < hi[j]) & (lo[j] < hi[i])
    handles = columns.handles
    prints: dict[int, Footprint] = {}       # a strided access's rows, computed once

    def footprint(a: int) -> Footprint:
        found = prints.get(a)
        if found is None:
            found = prints[a] = Footprint(None, int(lo[a]), int(hi[a]), handles[a])
        return found
    for a, b in zip(i[meet].tolist(), j[meet].tolist()):
        if handles[a] is None and handles[b] is None:
            return True
        if footprint_overlap(footprint(a), footprint(b)) is not None:
            return True
    return False


# The page masks' granules, 4, 16 and 64 KiB: a large access fills a fine mask (a
# MobileNetV3's pairs left 13,736 -> 6,946 by the first, 1,767 by all three).
MASK_PAGE_BITS = (12, 14, 16)


def page_masks(columns: Columns, n: int, page_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, 64-bit masks of the (memory, page of ``2**page_bits`` bytes) cells its
    accesses touch and write: page ``p`` of memory ``k`` is bit ``(p + 23 k) % 64``, an
    access sets the bits of its pages (all 64 past 64 pages).  Two accesses sharing a byte
    share that byte's bit, so units whose masks do not meet (a writer's against the
    other's) share no byte written."""
    first = columns.lo >> page_bits
    pages = ((columns.hi - 1) >> page_bits) - first + 1
    one = np.uint64(1)
    run = np.where(pages >= 64, ~np.uint64(0),
                   (one << np.minimum(pages, 63).astype(np.uint64)) - one)
    turn = ((first + 23 * columns.key) % 64).astype(np.uint64)
    back = (np.uint64(64) - turn) % np.uint64(64)          # a turn of 0 shifts nothing back
    mask = (run << turn) | np.where(turn == 0, np.uint64(0), run >> back)
    touched = np.zeros(n, np.uint64)
    written = np.zeros(n, np.uint64)
    if len(mask):
        units, starts = np.unique(columns.unit, return_index=True)
        touched[units] = np.bitwise_or.reduceat(mask, starts)
        written[units] = np.bitwise_or.reduceat(np.where(columns.write, mask, np.uint64(0)),
                                                starts)
    return touched, written
