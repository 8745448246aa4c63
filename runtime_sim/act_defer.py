"""ACT SHAVE numerics run later than their cycles, several invocations together.

The blocks of a layer invoke one kernel on the same shapes at different CMX slots,
two SHAVEs per tile and both tiles at once; run one at a time, each pays the fast
path's per-instruction numpy calls for its few rows.  So when an ACT task starts,
a task of a class (``ShaveEngine.class_of``: the kernel and its WIN_E image but
for the memrefs' ``dataAddr``) whose cycles an earlier invocation already gave is
charged those cycles and its numerics are queued; the queue runs
(``ShaveEngine.run_together``: one numpy pass per loop over the invocations of a
class) before any task starts that touches bytes a queued invocation writes, or
writes bytes one reads, and at the end of the run.  Nothing can tell: every task
sees the bytes it would have seen, and the queued invocations touch bytes no
other queued one writes (an ACT task that would is itself a conflict), so each
computes what it would alone.  Conflicts are decided on each access's hull (a
strided view as its whole span), which may only run the queue early.

The cycles charged are checked against the ones the run counts; a difference
(a kernel whose cycles depend on data or on where its buffers lie) raises
``CyclesDiffer``, and the simulation is run again without deferring.
"""

from __future__ import annotations

from typing import Callable

from runtime_sim.engines.shave import ShaveEngine
from runtime_sim.memory import Memory
from runtime_sim.plan import DMA, DPU, Plan
from vpuc.diagnostics import VpucError


class CyclesDiffer(Exception):
    """A deferred invocation took other cycles than it was charged."""


class DeferredActs:
    """The queue of one simulation (see the module docstring)."""

    def __init__(self, plan: Plan, memory: Memory, shave: ShaveEngine,
                 failed: Callable[[int, VpucError], VpucError]) -> None:
        self.plan, self.memory, self.shave, self.failed = plan, memory, shave, failed
        self.queue: list[tuple[int, object, int]] = []    # (unit, class, cycles charged)
        # what the queue touches, by CMX: [(lo, hi, written)]; a kernel reaches no other
        # memory but its own WIN_E
        self.touched: dict[object, list[tuple[int, int, bool]]] = {}
        self._dpu: dict[int, list] = {}             # id(DPU task) -> its operands' hulls
        self.flushes = 0
        self.deferred = 0
        self.groups: list[tuple[int, ...]] = []        # the units of each run_together

    def before(self, u: int) -> None:
        """Unit ``u`` starts: run the queue first if ``u`` touches what it must not."""
        if not self.queue:
            return
        try:
            hulls = self._hulls(u)
        except VpucError:       # u's own numerics report it, named by u: run the queue first
            self.flush()
            return
        touched = self.touched
        for key, lo, hi, writes in hulls:
            queued = touched.get(key)
            if queued is None:
                continue
            for q_lo, q_hi, q_writes in queued:
                if lo < q_hi and q_lo < hi and (writes or q_writes):
                    self.flush()
                    return

    def _hulls(self, u: int) -> list[tuple]:
        """(memory, lo, hi, writes) of what ``u`` may touch: a DMA's source and
        destination, a DPU task's whole operands (not each variant's box), an ACT task's
        bound CMX."""
        plan = self.plan
        kind, task = plan.kind[u], plan.task[u]
        if kind == DMA:         # the regions its numerics use next, resolved once
            src, dst = plan.dma_regions(u)
            span = self.memory.span
            return [(*span(src), False), (*span(dst), True)]
        if kind == DPU:
            found = self._dpu.get(id(task))
            if found is None:
                found = self._dpu[id(task)] = [
                    (*self.memory.span(region), name == "out")
                    for name, region in plan.dpu_regions(u).items()]
            return found
        bindings = self.shave.bindings(task)
        cmx = ("cmx", task.tile)
        return ([(cmx, lo, hi, False) for lo, hi in bindings.reads]
                + [(cmx, lo, hi, True) for lo, hi in bindings.writes])

    def defer(self, u: int, cycles: int) -> None:
        """Queue ``u``'s numerics, charged ``cycles`` (``before(u)`` ran the queue if
        ``u`` conflicts with it)."""
        self.queue.append((u, self.shave.class_of(self.plan.work[u]), cycles))
        self.deferred += 1
        for key, lo, hi, writes in self._hulls(u):
            self.touched.setdefault(key, []).append((lo, hi, writes))

    def flush(self) -> None:
        """Run every queued invocation, those of a class together."""
        if not self.queue:
            return
        queue, self.queue = self.queue, []
        self.touched = {}
        self.flushes += 1
        classes: dict[object, list[tuple[int, int]]] = {}
        for u, key, cycles in queue:
            classes.setdefault(key, []).append((u, cycles))
        plan, work = self.plan, self.plan.work
        for members in classes.values():
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


def _namer(plan: Plan, u: int) -> Callable[[], str]:
    return lambda: plan.names[u]
