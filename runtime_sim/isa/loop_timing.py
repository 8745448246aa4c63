"""Exact cycle accounting for a batched loop, without stepping every iteration.

The timing model (``cycles.py``) is data-independent inside a straight-line
loop body, so one iteration's effect on the pipeline depends only on the
pipeline state at its start *relative to* ``now``: how far in the future each
register the body touches becomes ready (values in the past are clamped to 0,
since ``issue`` only uses ``max(now, ready)``).  We step ``issue`` over whole
iterations until that relative state repeats; from then on each period of p
iterations adds the same cycles and stalls, so any iteration count is an
extrapolation.  The final iteration is replayed on the real ``ready`` list, so
every register the body writes ends with exactly the ready time the
interpreter would give it; registers the body only reads are never changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

from runtime_sim.isa.cycles import issue_steps


# Give up looking for a period after this many iterations (then keep stepping).
MAX_TRACE = 4096


@dataclass
class _Trace:
    """Pipeline states after j = 0, 1, ... taken iterations, from one start state."""

    now: list[int]                     # cycles elapsed (relative to the start)
    stalls: list[int]
    rel: list[tuple[int, ...]]         # ready[key] - now, clamped at 0, per key
    period_start: int | None = None    # rel[period_start] == rel[period_start + period]
    period: int | None = None


class LoopTiming:
    def __init__(self, steps: list | None, taken: list[bool] | None = None,
                 tails: list[tuple] | None = None) -> None:
        """``steps``: the interpreter's ``Step`` tuples of the body, back-edge last;
        ``taken``: per step, whether a transfer it makes is taken on the path (a path
        batch's: the refetch penalty after it; a loop body's transfers are none).
        ``tails`` instead of ``steps``: the same steps as ``Program.tails`` holds them,
        ``issue_steps``' inputs with the taken penalty last (a loop's or path's are its
        program's, unpacked once per word: not again per step here)."""
        # per step: ``cycles.issue``'s inputs unpacked for ``issue_steps`` (a library
        # kernel's row path is ~700 steps per iteration), the refetch penalty after it
        if tails is None:
            tails = [(s.sources, s.dests, s.cost.slots[0],
                      s.cost.slots[1] if len(s.cost.slots) > 1 else None, s.cost.issue,
                      s.cost.latency, s.cost.closes_bundle, s.cost.taken_penalty)
                     for s in steps]
        self.penalty = tails[-1][7]
        if taken is None:
            taken = repeat(False)
        self.steps = [t if is_taken or not t[7] else t[:7] + (0,)
                      for t, is_taken in zip(tails, taken)]
        self._written: dict[int, int] = {}      # issue_steps' record, unused here
        # registers and the slots the body uses (a slot is "written" when it issues)
        slots = {t[2] for t in tails}
        slots.update(t[3] for t in tails if t[3] is not None)
        dests = slots.union(*map(itemgetter(1), tails))
        self.keys = sorted(dests.union(*map(itemgetter(0), tails)))
        self.dests = frozenset(dests)
        self._traces: dict[tuple[int, ...], _Trace] = {}
        # (relative state, taken) -> the last iteration's (cycles, stalls, dests' ready
        # relative to its start): issue is translation-invariant, as for the traces
        self._last: dict[tuple, tuple[int, int, tuple[tuple[int, int], ...]]] = {}

    def _iteration(self, ready, now: int, taken: bool) -> tuple[int, int]:
        """One iteration issued from ``now``."""
        now, stalls = issue_steps(self.steps, ready, now, self._written)
        return (now + self.penalty if taken else now), stalls

    def _relative(self, ready, now: int) -> tuple[int, ...]:
        return tuple(max(ready[k] - now, 0) for k in self.keys)

    def _trace(self, start: tuple[int, ...]) -> _Trace:
        trace = self._traces.get(start)
        if trace is not None:
            return trace
        ready = dict(zip(self.keys, start))
        trace = _Trace([0], [0], [start])
        seen = {start: 0}
        now = stalls = 0
        while len(trace.rel) <= MAX_TRACE:
            now, stall = self._iteration(ready, now, True)
            stalls += stall
            if len(trace.rel) == 1:
                self._remember_last(start, now, stall, ready)
            rel = self._relative(ready, now)
            trace.now.append(now)
            trace.stalls.append(stalls)
            trace.rel.append(rel)
            if rel in seen:
                trace.period_start = seen[rel]
                trace.period = len(trace.rel) - 1 - seen[rel]
                break
            seen[rel] = len(trace.rel) - 1
        self._traces[start] = trace
        return trace

    def _remember_last(self, start: tuple[int, ...], now: int, stall: int, ready: dict) -> None:
        """The trace's first iteration, issued from cycle 0 in ``start`` with the back-edge
        taken, is ``advance``'s last iteration from that state (a loop whose state repeats
        after one iteration, most of them, ends in it): remembered for both ways out, so
        the body is not issued again.  Not taken differs only by the refetch penalty."""
        written = tuple((key, ready[key]) for key in self.keys if key in self.dests)
        self._last.setdefault((start, False), (now, stall, written))
        self._last.setdefault((start, True), (now - self.penalty, stall, written))

    def _after(self, trace: _Trace, count: int) -> tuple[int, int, tuple[int, ...]]:
        """(cycles, stalls, relative state) after ``count`` taken iterations."""
        if count < len(trace.rel):
            return trace.now[count], trace.stalls[count], trace.rel[count]
        if trace.period is None:                 # no period found: step the rest
            last = len(trace.rel) - 1
            now, stalls = trace.now[last], trace.stalls[last]
            ready = {k: ahead + now for k, ahead in zip(self.keys, trace.rel[last])}
            for _ in range(count - last):
                now, stall = self._iteration(ready, now, True)
                stalls += stall
            return now, stalls, self._relative(ready, now)
        first, period = trace.period_start, trace.period
        cycles, phase = divmod(count - first, period)
        j = first + phase
        d_now = trace.now[first + period] - trace.now[first]
        d_stalls = trace.stalls[first + period] - trace.stalls[first]
        return trace.now[j] + cycles * d_now, trace.stalls[j] + cycles * d_stalls, trace.rel[j]

    def within(self, ready: list[int], now: int, iterations: int, budget: float) -> int:
        """How many of ``iterations`` can run with every back-edge taken at or before
        cycle ``budget`` (the interpreter's cycle-budget check; ``ready`` unchanged)."""
        trace = self._trace(self._relative(ready, now))
        low, high = 0, iterations               # now after ``low`` iterations is within
        while low < high:
            mid = (low + high + 1) // 2
            if now + self._after(trace, mid)[0] <= budget:
                low = mid
            else:
                high = mid - 1
        return low

    def advance(self, ready: list[int], now: int, iterations: int, exits: bool) -> tuple[int, int]:
        """Account ``iterations`` >= 1 iterations from the loop head; the back-edge is
        taken in all of them except the last when ``exits``.  Updates ``ready``;
        returns (now, stall cycles) as the interpreter would have them."""
        trace = self._trace(self._relative(ready, now))
        elapsed, stalls, rel = self._after(trace, iterations - 1)
        now += elapsed
        last = self._last.get((rel, exits))
        if last is None:
            local = dict(zip(self.keys, rel))
            cycles, stall = self._iteration(local, 0, not exits)
            last = self._last[rel, exits] = (
                cycles, stall, tuple((key, local[key]) for key in self.keys if key in self.dests))
        cycles, stall, written = last
        for key, at in written:
            ready[key] = now + at
        return now + cycles, stalls + stall
