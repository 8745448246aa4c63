"""Happens-before for the race detector, computed online with vector clocks.

``u`` happens before ``v`` iff a chain of barriers and queue order leads from
the end of ``u`` to the start of ``v`` -- exactly ``vpuc.analysis.schedule``'s
relation (its graph: ``start(u) -> end(u)``; ``end(p) -> b`` for each barrier
``p`` updates; ``b -> start(c)`` for each barrier with producers ``c`` waits
on; in a queue ``end(prev) -> start(next)``, or ``start(prev) -> start(next)``
when several engines serve it).  The schedule computes a clock for every node
of that graph before the run; here only the clocks the run needs are kept,
computed as units start and end, which they do in an order that respects the
graph (a unit starts after its barriers' producers ended and after its queue
predecessor started, or ended for a one-engine queue):

* start(u) = the union of its queue predecessor's clock and the clocks of the
  barriers it waits on; end(u) = start(u) plus u itself;
* a barrier's clock is the union of its producers' end clocks, kept until its
  last consumer has started.

A clock has one entry per queue: for a one-engine queue the last position
known to have ended (positions end in order there); for a multi-engine queue
(prefix, mask): positions up to ``prefix`` ended, and bit ``i`` of ``mask``
says position ``prefix + 1 + i`` did.  Masks are unbounded Python ints, so
the answer is exact and no graph search is ever needed.  A last entry says
whether any mask may be set: without masks, the union of two clocks is their
elementwise ``max``, done in C.  Clocks are never modified once made, so they
are shared freely.
"""

from __future__ import annotations

from runtime_sim.plan import Plan


class HappensBefore:
    def __init__(self, plan: Plan) -> None:
        self.queue_of, self.waits, self.updates = plan.queue_of, plan.waits, plan.updates
        queues = len(plan.queue_units)
        self.multi = [engines > 1 for engines in plan.queue_engines]
        self.multi_queues = [q for q in range(queues) if self.multi[q]]
        self.empty = [(-1, 0) if m else -1 for m in self.multi] + [False]
        self.position = [0] * plan.size
        for units in plan.queue_units:
            for i, u in enumerate(units):
                self.position[u] = i
        self.last: list[list | None] = [None] * queues   # the clock the queue's next unit starts from
        self.barrier: list[list | None] = [None] * len(plan.barrier_names)
        self.barrier_users = list(plan.consumer_count)    # consumers yet to start
        self.running: dict[int, list] = {}
        self.current: list = self.empty                    # the start clock of the unit starting

    def start(self, u: int) -> None:
        clock = self.last[self.queue_of[u]]
        barrier, users = self.barrier, self.barrier_users
        for b in self.waits[u]:
            other = barrier[b]
            if other is not None:
                clock = other if clock is None else merge(clock, other, self.multi_queues)
            users[b] -= 1
            if not users[b]:
                barrier[b] = None           # its last consumer has its clock
        if clock is None:
            clock = self.empty
        q = self.queue_of[u]
        if self.multi[q]:
            self.last[q] = clock
        self.running[u] = clock
        self.current = clock

    def end(self, u: int) -> None:
        clock = list(self.running.pop(u))
        q, position = self.queue_of[u], self.position[u]
        if self.multi[q]:
            clock[q] = entry = mark(clock[q], position)
            if entry[1]:
                clock[-1] = True
        else:
            clock[q] = max(clock[q], position)
            self.last[q] = clock
        barrier = self.barrier
        for b in self.updates[u]:
            other = barrier[b]
            barrier[b] = clock if other is None else merge(other, clock, self.multi_queues)

    def before(self, a: int) -> bool:
        """Whether unit ``a`` happens before the unit that started last."""
        q = self.queue_of[a]
        entry = self.current[q]
        position = self.position[a]
        if self.multi[q]:
            prefix, mask = entry
            return position <= prefix or bool((mask >> (position - prefix - 1)) & 1)
        return position <= entry


def merge(a: list, b: list, multi_queues: list[int]) -> list:
    """The union of two clocks (``multi_queues``: the queues whose entries are masks)."""
    if a is b:
        return a
    merged = list(map(max, a, b))
    if merged[-1]:                      # a mask may be set: max is not the union
        for q in multi_queues:
            x, y = a[q], b[q]
            if (x[1] or y[1]) and x != y:
                merged[q] = _union(x, y)
    return merged


def _normalize(prefix: int, mask: int) -> tuple[int, int]:
    # Fold the run of ended positions just past the prefix into the prefix.
    run = (~mask & (mask + 1)).bit_length() - 1
    return prefix + run, mask >> run


def _union(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    prefix = max(a[0], b[0])
    return _normalize(prefix, (a[1] >> (prefix - a[0])) | (b[1] >> (prefix - b[0])))


def mark(entry: tuple[int, int], position: int) -> tuple[int, int]:
    prefix, mask = entry
    offset = position - prefix - 1
    if offset < 0:
        return entry
    return _normalize(prefix, mask | (1 << offset))


def ordered_after(plan: Plan, u: int) -> list[bool]:
    """For every unit v: does ``u`` happen before ``v`` (a path from end(u) to start(v))?
    A search over the whole graph, for the one question a failed run asks
    (``RaceDetector.explain``), not for the per-start checks."""
    position = [0] * plan.size
    for units in plan.queue_units:
        for i, v in enumerate(units):
            position[v] = i
    consumers = plan.consumers
    started = [False] * plan.size       # start(v) reached; end(v) follows from it
    ended = [False] * plan.size
    todo = [(True, u)]                  # (end node?, unit)
    ended[u] = True
    while todo:
        is_end, v = todo.pop()
        q = plan.queue_of[v]
        units, multi = plan.queue_units[q], plan.queue_engines[q] > 1
        after = position[v] + 1
        nxt = units[after] if after < len(units) else None
        reached: list[tuple[bool, int]] = []
        if is_end:
            reached += [(False, c) for b in plan.updates[v] for c in consumers[b]]
            if nxt is not None and not multi:
                reached.append((False, nxt))
        else:
            reached.append((True, v))
            if nxt is not None and multi:
                reached.append((False, nxt))
        for node in reached:
            seen = ended if node[0] else started
            if not seen[node[1]]:
                seen[node[1]] = True
                todo.append(node)
    return started
