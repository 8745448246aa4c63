"""Data races: two units touching the same bytes, one of them writing, unordered by barriers.

Checked when a unit starts, against the accesses of units that started before
it (finished or still running), using happens-before (``race_clock``: ``a`` is
ordered before ``b`` iff a chain of barriers and queue order leads from the end
of ``a`` to the start of ``b``, as ``vpuc.analysis.schedule`` defines it).  A
running unit never happens before the one starting, so touching the bytes it
writes is always reported; so is an unordered pair that happened not to
overlap in this run.

The accesses that may still race are kept by ``race_live`` (grouped by the
exact bytes they touch, found through the pages they touch, retired by
happens-before), so the check stays linear in the accesses.

Before the run, ``race_proof`` tries to prove in numpy that no pair of units
races at all (happens-before and the accesses are functions of the program);
when it does, the per-unit checks are skipped (``proven``): there is nothing
they could report.  ``PROVE_FIRST = False`` always runs the online checks.

When a unit fails (a fault, garbage dims in a dynamic tensor's shape metadata,
a kernel status), ``explain`` looks for the race behind it: the races found so
far, and those of the failed unit with units that have not started yet but are
not ordered after it -- its accesses are checked before it runs, but such a
race would only be seen when the other unit starts, which it never does.
"""

from __future__ import annotations

import time

from runtime_sim.memory import Memory
from runtime_sim.plan import Plan
from runtime_sim.race_access import Accesses
from runtime_sim.race_clock import HappensBefore, ordered_after
from runtime_sim.race_live import Group, LiveAccesses
from runtime_sim.race_columns import access_columns
from runtime_sim.race_proof import race_free
from runtime_sim.regions import Regions
from vpuc.diagnostics import Diagnostic, Severity, VpucError

DEFAULT_LIMIT = 20        # races reported before the rest are only counted
PROVE_FIRST = True        # try the proof before the run (tests of the online checks turn it off)


class RaceError(VpucError):
    """Races that made a unit fail: reported instead of the failure they caused."""


class RaceDetector:
    def __init__(self, plan: Plan, memory: Memory, limit: int = DEFAULT_LIMIT,
                 regions: Regions | None = None) -> None:
        clock = time.perf_counter()
        self.plan = plan
        self.limit = limit
        self.clock = HappensBefore(plan)
        self.live = LiveAccesses()
        self.regions = regions if regions is not None else Regions(plan, memory)
        # the live accesses' groups, not through self: no cycle for the collector to find
        live = self.live
        self.accesses = Accesses(plan, memory, lambda span: live.group(*span),
                                 regions=self.regions)
        self.races: list[Diagnostic] = []
        self.count = 0
        self._pairs: set[tuple[int, int]] = set()
        self._started = [False] * plan.size
        self.proven = PROVE_FIRST and not memory.dynamic and self._prove(memory)
        self.seconds = time.perf_counter() - clock     # wall time spent on races

    def _prove(self, memory: Memory) -> bool:
        """Whether no two units can race (``race_proof``).  An access that does not resolve
        leaves the question to the online checks, which report it where the run meets it.
        The proof makes its own columns of accesses (``race_columns``: a strided region's
        rows only computed where spans meet): the online checks number their groups in the
        order units start (the order ``explain`` reports linked groups in), as they always
        did."""
        try:
            return race_free(self.plan, access_columns(self.plan, memory, self.regions))
        except VpucError:           # a region resolved only for its rows: as above
            return False

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
        for found in self.live.check(unit, self.accesses(unit), hb.before):
            self._report(*found)
        self.seconds += time.perf_counter() - clock

    # ------------------------------------------------------------ reports
    def _report(self, first: tuple, first_group: Group, second: tuple, second_group: Group,
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
        if self.proven:
            return failure
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
        mine_groups = [group for group, _, _ in mine]
        for v in range(self.plan.size):
            if self._started[v] or after[v]:
                continue
            for group, write, name in self.accesses(v):
                for other, shared in self.live.linked(group, mine_groups):
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
