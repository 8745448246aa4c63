"""ACT SHAVE numerics run later than their cycles, several invocations together.

The blocks of a layer invoke one kernel on the same shapes at different CMX slots,
two SHAVEs per tile and both tiles at once; run one at a time, each pays the fast
path's per-instruction numpy calls for its few rows.  So when an ACT task starts,
a task of a class (``ShaveEngine.class_of``: the kernel and its WIN_E image but
for the memrefs' ``dataAddr``) whose cycles an earlier invocation already gave is
charged those cycles and its numerics are queued, and so is a DMA that touches
what the queue touches (the store of a queued invocation's result, a load over an
input a queued one reads; a DMA's cycles never depend on data).  Any other task
that touches bytes the queue writes, or writes bytes it reads, runs the queue
first (a DPU task reading a queued result), as does the end of the run.

The queue is in levels: a queued task's level is above the level of every queued
task it conflicts with (one writes what the other touches), so tasks of one level
never conflict; an ACT invocation takes the lowest level at or above that which
holds its class.  The queue runs level by level, in each the invocations of a class
together (``ShaveEngine.run_together``: one numpy pass per loop over them), then its
DMAs in start order.  Nothing can tell: of two conflicting tasks the earlier runs
first, and the order of two that do not conflict does not matter, so every task
sees the bytes it would have seen.  Conflicts are decided on each access's hull (a
strided view as its whole span), which may only order more.  A DMA of a dynamic
tensor (its dims pass on) or whose bytes lie outside its memory (its fault is
reported at its start) runs at its start, after the queue.

The cycles charged are checked against the ones the run counts; a difference
(a kernel whose cycles depend on data or on where its buffers lie) raises
``CyclesDiffer``, and the simulation is run again without deferring.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Callable

from runtime_sim.engines.dma import run_transfer
from runtime_sim.engines.shave import ShaveEngine
from runtime_sim.memory import Memory
from runtime_sim.plan import ACT, DMA, DPU, Plan
from vpuc.diagnostics import VpucError

KIND_NAMES = {DMA: "DMA", DPU: "DPU", ACT: "ACT"}


class CyclesDiffer(Exception):
    """A deferred invocation took other cycles than it was charged."""


class DeferredActs:
    """The queue of one simulation (see the module docstring)."""

    def __init__(self, plan: Plan, memory: Memory, shave: ShaveEngine,
                 failed: Callable[[int, VpucError], VpucError]) -> None:
        self.plan, self.memory, self.shave, self.failed = plan, memory, shave, failed
        self.queue: list[tuple[int, object, int, int]] = []   # (unit, class, cycles, level)
        self.dmas: list[tuple[int, int]] = []                 # (unit, level), in start order
        # what the queue touches, by memory: [(lo, hi, written, level)]
        self.touched: dict[object, list[tuple[int, int, bool, int]]] = {}
        self.class_levels: dict[object, list[int]] = {}      # the levels holding a class
        # the unit starting (``before``): the lowest level it may take, whether it
        # conflicts with the queue
        self._starting: tuple[int, int, bool] = (-1, 0, False)
        # per unit, what it may touch ((memory, lo, hi, writes), ...), made on first use
        self._unit_hulls: list = [None] * plan.size
        self._dpu: dict[int, tuple] = {}            # id(DPU task) -> its operands' hulls
        self.flushes = 0
        self.deferred = 0           # ACT invocations queued
        self.deferred_dmas = 0
        self.groups: list[tuple[int, ...]] = []        # the units of each run_together
        self.forced: Counter = Counter()   # what ran the queue: "DMA", "DPU", "ACT", "kept"

    def before(self, u: int) -> bool:
        """Unit ``u`` starts: run the queue first if ``u`` touches what it must not (an
        ACT task: ``run_now``, when it is not queued).  True when ``u`` is a DMA to queue
        instead (``defer_dma``)."""
        self._starting = (u, 0, False)
        if not self.queue and not self.dmas:
            return False
        try:
            hulls = self._hulls(u)
        except VpucError:       # u's own numerics report it, named by u: run the queue first
            self.flush()
            return False
        touched = self.touched
        level, conflict = 0, False
        for key, lo, hi, writes in hulls:
            queued = touched.get(key)
            if queued is None:
                continue
            for q_lo, q_hi, q_writes, q_level in queued:
                if lo < q_hi and q_lo < hi and (writes or q_writes):
                    conflict = True
                    if q_level >= level:
                        level = q_level + 1
        if not conflict:
            return False
        kind = self.plan.kind[u]
        if kind == ACT:             # queued above what it conflicts with, or run_now
            self._starting = (u, level, True)
            return False
        if kind == DMA and self._dma_may_wait(u):
            self._starting = (u, level, True)
            return True
        self.forced[KIND_NAMES[kind]] += 1
        self.flush()
        return False

    def run_now(self, u: int) -> None:
        """ACT task ``u``, started, runs at its start (its cycles are not known): the queue
        first if it conflicts with it."""
        started, _, conflict = self._starting
        if started == u and conflict:
            self.forced["ACT"] += 1
            self.flush()

    def _dma_may_wait(self, u: int) -> bool:
        """Whether DMA ``u`` may be queued: static regions within their memories."""
        memory = self.memory
        dynamic = memory.dynamic
        for region in self.plan.dma_regions(u):
            if region.root.name in dynamic:
                return False
        for key, lo, hi, _ in self._hulls(u):
            if lo < 0 or hi > len(memory.arrays[key]):
                return False
        return True

    def _hulls(self, u: int) -> tuple:
        """(memory, lo, hi, writes) of what ``u`` may touch: a DMA's source and
        destination, a DPU task's whole operands (not each variant's box), an ACT task's
        bound CMX; worked out once per unit."""
        found = self._unit_hulls[u]
        if found is not None:
            return found
        plan = self.plan
        kind, task = plan.kind[u], plan.task[u]
        span = self.memory.span
        if kind == DMA:         # the regions its numerics use next, resolved once
            src, dst = plan.dma_regions(u)
            found = ((*span(src), False), (*span(dst), True))
        elif kind == DPU:       # shared by the task's variants
            found = self._dpu.get(id(task))
            if found is None:
                found = self._dpu[id(task)] = tuple(
                    (*span(region), name.startswith("out"))
                    for name, region in plan.dpu_regions(u).items())
        else:
            bindings = self.shave.bindings(task)
            cmx = ("cmx", task.tile)
            found = tuple([(cmx, lo, hi, False) for lo, hi in bindings.reads]
                          + [(cmx, lo, hi, True) for lo, hi in bindings.writes])
        self._unit_hulls[u] = found
        return found

    def _touch(self, u: int, level: int) -> None:
        touched = self.touched
        for key, lo, hi, writes in self._hulls(u):
            queued = touched.get(key)
            if queued is None:
                touched[key] = [(lo, hi, writes, level)]
            else:
                queued.append((lo, hi, writes, level))

    def defer(self, u: int, cycles: int) -> None:
        """Queue ``u``'s numerics, charged ``cycles``, at the lowest level holding its class
        at or above the lowest it may take (``before(u)`` found it)."""
        started, lowest, _ = self._starting
        if started != u or not (self.queue or self.dmas):
            lowest = 0      # the queue ran since (a kept value's record): nothing to follow
        key = self.shave.class_of(self.plan.work[u])
        levels = self.class_levels.get(key)
        if levels is None:
            levels = self.class_levels[key] = []
        at = bisect_left(levels, lowest)
        if at < len(levels):
            level = levels[at]
        else:
            level = lowest
            levels.append(level)
        self.queue.append((u, key, cycles, level))
        self.deferred += 1
        self._touch(u, level)

    def defer_dma(self, u: int) -> bool:
        """Queue DMA ``u``'s numerics (``before(u)`` said it may wait) unless the queue has
        run since: False when it must run now."""
        if not self.queue and not self.dmas:
            return False
        level = self._starting[1]
        self.dmas.append((u, level))
        self.deferred_dmas += 1
        self._touch(u, level)
        return True

    def flush_over(self, key: object, lo: int, hi: int) -> None:
        """Run the queue if it writes any of bytes [lo, hi) of memory ``key`` (a kept
        value about to be recorded must hold its queued writes)."""
        for q_lo, q_hi, q_writes, _ in self.touched.get(key, ()):
            if q_writes and lo < q_hi and q_lo < hi:
                self.forced["kept"] += 1
                self.flush()
                return

    def flush(self) -> None:
        """Run every queued task, level by level: in each the invocations of a class
        together, then the DMAs in start order."""
        if not self.queue and not self.dmas:
            return
        queue, self.queue = self.queue, []
        dmas, self.dmas = self.dmas, []
        self.touched, self.class_levels = {}, {}
        self.flushes += 1
        levels: dict[int, tuple[dict, list]] = {}
        for u, key, cycles, level in queue:
            classes = levels.setdefault(level, ({}, []))[0]
            classes.setdefault(key, []).append((u, cycles))
        for u, level in dmas:
            levels.setdefault(level, ({}, []))[1].append(u)
        for level in sorted(levels):
            classes, transfers = levels[level]
            for members in classes.values():
                self._run_class(members)
            for u in transfers:
                self._run_dma(u)

    def _run_class(self, members: list[tuple[int, int]]) -> None:
        plan, work = self.plan, self.plan.work
        self.groups.append(tuple(u for u, _ in members))
        items = [(_namer(plan, u), work[u]) for u, _ in members]
        try:
            took = self.shave.run_together(items)
        except VpucError as exc:
            u = members[getattr(exc, "together_index", 0)][0]
            raise self.failed(u, exc) from None
        for (u, charged), cycles in zip(members, took):
            if cycles != charged:
                raise CyclesDiffer(f"{plan.names[u]}: {cycles} SHAVE cycles, charged "
                                   f"{charged}")

    def _run_dma(self, u: int) -> None:
        plan = self.plan
        src, dst = plan.dma_regions(u)
        try:
            run_transfer(plan.task[u], src, dst, self.memory)
        except VpucError as exc:        # as the run at its start reports it
            raise self.failed(u, VpucError(f"{plan.names[u]}: {exc.diagnostics[0].message}",
                                           plan.loc[u])) from None


def _namer(plan: Plan, u: int) -> Callable[[], str]:
    return lambda: plan.names[u]
