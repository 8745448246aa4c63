"""The runtime: FIFO queues, barriers and physical barrier reuse, driven by events.

Rules (docs/simulator.md, "Runtime semantics"):

* Each queue (a DMA channel, a tile's DPU, a tile's ACT SHAVEs) starts its
  units in list order; a unit starts when an engine of its queue is free, every
  barrier it waits on has no producers left, and every barrier it waits on or
  updates is the one its physical barrier currently holds.
* A unit occupies its engine for the dispatch cost plus its work, both charged
  by the cost model (``vpuc.cost``: ``dma_data_start``, ``act_invocation_end``;
  a DPU variant's ``dpu_variant_cycles`` are in the plan).
* When a unit ends, each barrier it updates loses a producer and each barrier
  it waits on loses a consumer.  A barrier with neither left is done; its
  physical barrier then moves on to its next virtual barrier (module order).
* Time jumps from event to event (a heap of timestamps).  When nothing runs
  and units remain, the run is deadlocked.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable

from runtime_sim.engines.dma import DdrSharing
from runtime_sim.plan import ACT, DMA, Plan
from vpuc.cost.dma import dma_data_start
from vpuc.cost.shave import act_invocation_end
from vpuc.diagnostics import Diagnostic, Severity, VpucError

END, DMA_DATA, DMA_DONE = 0, 1, 2


@dataclass
class Timeline:
    start: list[float]
    end: list[float]
    engine: list[int]              # engine index within the unit's queue
    stall: list[float]             # cycles the unit waited at its queue head on barriers
    cause: list[int]               # the unit whose end let this one start (-1: none)
    total: float = 0.0
    ddr_times: list[float] = field(default_factory=list)    # DDR bandwidth in use (bytes per
    ddr_rates: list[float] = field(default_factory=list)    # cycle) from each time on
    events: int = 0

    @property
    def ddr_samples(self) -> list[tuple[float, float]]:
        return list(zip(self.ddr_times, self.ddr_rates))


class DeadlockError(VpucError):
    """Nothing can progress: every queue head waits on a barrier that will never fire."""


def _fmt(t: float) -> str:
    return f"{t:,.0f}"


class Runtime:
    def __init__(self, plan: Plan, *, on_start: Callable[[int, float], None] | None = None,
                 on_end: Callable[[int], None] | None = None,
                 act_cycles: Callable[[int, float], float] | None = None,
                 act_known: list | None = None,
                 max_cycles: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.plan = plan
        self.on_start = on_start
        self.on_end = on_end
        self.act_cycles = act_cycles
        # Per unit, an ACT task's SHAVE cycles when already known (None: ask act_cycles).
        self.act_known = act_known
        self.max_cycles = max_cycles
        self.progress = progress

    def run(self) -> Timeline:  # noqa: C901 -- the event loop is kept in one frame for speed
        plan = self.plan
        n = plan.size
        start = [0.0] * n
        end = [-1.0] * n
        engine_of = [0] * n
        stall = [0.0] * n
        cause = [-1] * n
        ready_at = [-1.0] * n
        waits, updates, work = plan.waits, plan.updates, plan.work
        queue_kind = plan.queue_kind
        dma_fixed, act_fixed = plan.arch.dispatch["DMA"], plan.arch.dispatch["ACT_SHAVE"]
        queue_of, queue_units = plan.queue_of, plan.queue_units
        barrier_phys, phys_lists = plan.barrier_phys, plan.phys_lists
        cons_left = list(plan.consumer_count)
        # A barrier's state: its producers left while its physical barrier holds it (>= 0),
        # -1 - producers left while it does not (< 0).  So a unit may wait on ``b`` iff
        # ``state[b] == 0`` and may update it iff ``state[b] >= 0`` (rule 1).  Each physical
        # barrier holds one virtual barrier at a time (``active``; -1 when none is left);
        # virtual barriers nobody uses are skipped: they are done as soon as they are held.
        state = [-1 - count for count in plan.producer_count]
        phys_pos = [0] * len(phys_lists)
        active = [-1] * len(phys_lists)
        for p, lst in enumerate(phys_lists):
            pos = 0
            while pos < len(lst) and state[lst[pos]] == -1 and not cons_left[lst[pos]]:
                pos += 1
            phys_pos[p] = pos
            if pos < len(lst):
                active[p] = b = lst[pos]
                state[b] = -1 - state[b]
        bar_waiters: list = [None] * len(barrier_phys)   # barrier -> queues waiting on it
        phys_waiters: list[list[int]] = [[] for _ in active]
        head = [0] * len(queue_units)
        lengths = [len(units) for units in queue_units]
        free = [list(range(e - 1, -1, -1)) for e in plan.queue_engines]  # lowest index last
        on_start, on_end, act_cycles = self.on_start, self.on_end, self.act_cycles
        act_known = self.act_known if self.act_known is not None else [None] * n
        shave_cycle = plan.arch.shave_cycle
        sharing = DdrSharing(plan.arch.ddr_bytes_per_cycle)
        join, leave, ddr_active = sharing.join, sharing.leave, sharing.active
        ddr_times, ddr_rates = sharing.times, sharing.rates
        # A transfer moving data alone (the common case) is DdrSharing.join_alone and
        # leave_alone inline, with its rate computed once per Transfer (they are shared).
        solos: dict[int, tuple[float, float, float]] = {}
        dma_token = [0] * n          # the sequence number of a DMA's live DMA_DONE event
        heap: list = []
        push, pop = heapq.heappush, heapq.heappop
        seq = 0

        done = 0
        t = 0.0
        max_cycles = float("inf") if self.max_cycles is None else self.max_cycles
        progress = self.progress
        progress_every = max(1, n // 200)
        no_queues = ()
        woken = range(len(queue_units))   # at 0, every queue tries its head
        by = -1                           # the unit whose end woke the queues
        while True:
            # Start what can start, queue by queue in index order: the unit at a queue's
            # head, while an engine is free and its barriers are programmed and ready.
            for q in woken:
                engines = free[q]
                if not engines:
                    continue
                units = queue_units[q]
                h = head[q]
                length = lengths[q]
                kind = queue_kind[q]
                while h < length:
                    u = units[h]
                    for b in waits[u]:
                        if state[b]:
                            if state[b] > 0:
                                queues = bar_waiters[b]
                                if queues is None:
                                    bar_waiters[b] = [q]
                                elif q not in queues:
                                    queues.append(q)
                            else:
                                waiting = phys_waiters[barrier_phys[b]]
                                if q not in waiting:
                                    waiting.append(q)
                            break
                    else:
                        for b in updates[u]:
                            if state[b] < 0:
                                waiting = phys_waiters[barrier_phys[b]]
                                if q not in waiting:
                                    waiting.append(q)
                                break
                        else:
                            h += 1
                            head[q] = h
                            engine_of[u] = engines.pop()
                            start[u] = t
                            cause[u] = by
                            if ready_at[u] >= 0:
                                stall[u] = t - ready_at[u]
                            if on_start is not None:
                                on_start(u, t)
                            seq += 1
                            if kind == DMA:
                                push(heap, (dma_data_start(t, work[u], dma_fixed), seq,
                                            DMA_DATA, u))
                            elif kind == ACT:
                                cycles = act_known[u]
                                if cycles is None:
                                    cycles = act_cycles(u, t)
                                push(heap, (act_invocation_end(t, cycles, shave_cycle,
                                                               act_fixed), seq, END, u))
                            else:
                                push(heap, (t + work[u][0], seq, END, u))
                            if engines:
                                continue
                            break
                    if ready_at[u] < 0:
                        ready_at[u] = t
                    break
            if not heap:
                break
            t, token, what, u = pop(heap)
            if t > max_cycles:
                raise self._over_limit(t, start, end, head)
            if what:
                if what == DMA_DATA:
                    if ddr_active:
                        for v, finish in join(u, t, work[u]):
                            seq += 1
                            dma_token[v] = seq
                            push(heap, (finish, seq, DMA_DONE, v))
                    else:
                        transfer = work[u]
                        solo = solos.get(id(transfer))
                        if solo is None:
                            solo = solos[id(transfer)] = sharing.solo(transfer)
                        nbytes, rate, used = solo
                        sharing.last = t
                        ddr_active[u] = [nbytes, rate, transfer.cap, transfer.ddr_sides]
                        if used != ddr_rates[-1]:
                            ddr_times.append(t)
                            ddr_rates.append(used)
                        seq += 1
                        dma_token[u] = seq
                        push(heap, (t + nbytes / rate, seq, DMA_DONE, u))
                    woken = no_queues
                    continue
                if dma_token[u] != token:
                    woken = no_queues
                    continue  # re-timed since this event was pushed
                if len(ddr_active) == 1:
                    ddr_active.clear()
                    sharing.last = t
                    if ddr_rates[-1] != 0.0:
                        ddr_times.append(t)
                        ddr_rates.append(0.0)
                else:
                    for v, finish in leave(u, t):
                        seq += 1
                        dma_token[v] = seq
                        push(heap, (finish, seq, DMA_DONE, v))
            # The unit ends: free its engine, count its barriers down.  A barrier with no
            # producers and no consumers left is done: its physical barrier moves on to
            # its next virtual barrier (the same code twice, inline for speed).
            end[u] = t
            done += 1
            if on_end is not None:
                on_end(u)
            q = queue_of[u]
            engines = free[q]
            engines.append(engine_of[u])
            if len(engines) > 1:
                engines.sort(reverse=True)
            woken = [q]
            for b in updates[u]:
                left = state[b] - 1              # >= 0: it was held when u started
                state[b] = left
                if not left:
                    queues = bar_waiters[b]
                    if queues is not None:
                        woken.extend(queues)
                        bar_waiters[b] = None
                    if not cons_left[b]:
                        state[b] = -1
                        p = barrier_phys[b]
                        lst = phys_lists[p]
                        pos, last = phys_pos[p] + 1, len(lst)
                        while pos < last and state[lst[pos]] == -1 and not cons_left[lst[pos]]:
                            pos += 1
                        phys_pos[p] = pos
                        if pos < last:
                            active[p] = held = lst[pos]
                            state[held] = -1 - state[held]
                        else:
                            active[p] = -1
                        if phys_waiters[p]:
                            woken.extend(phys_waiters[p])
                            phys_waiters[p].clear()
            for b in waits[u]:
                left = cons_left[b] - 1
                cons_left[b] = left
                if not left and not state[b]:
                    state[b] = -1
                    p = barrier_phys[b]
                    lst = phys_lists[p]
                    pos, last = phys_pos[p] + 1, len(lst)
                    while pos < last and state[lst[pos]] == -1 and not cons_left[lst[pos]]:
                        pos += 1
                    phys_pos[p] = pos
                    if pos < last:
                        active[p] = held = lst[pos]
                        state[held] = -1 - state[held]
                    else:
                        active[p] = -1
                    if phys_waiters[p]:
                        woken.extend(phys_waiters[p])
                        phys_waiters[p].clear()
            if len(woken) == 2:
                a, b = woken
                if a > b:
                    woken = (b, a)
                elif a == b:
                    woken = (a,)
            elif len(woken) > 2:
                woken = sorted(set(woken))
            by = u
            if progress is not None and not done % progress_every:
                progress(done, n)
        if done < n:
            prod_left = [left if left >= 0 else -1 - left for left in state]
            raise self._deadlock(t, end, head, prod_left, active)
        # Every event pushed was popped (each push took a sequence number).
        return Timeline(start, end, engine_of, stall, cause, max(end, default=0.0),
                        sharing.times, sharing.rates, seq)

    # ------------------------------------------------------------ failures
    def _blocked_heads(self, end, head) -> list[int]:
        plan = self.plan
        heads = []
        for q, units in enumerate(plan.queue_units):
            if head[q] < len(units):
                heads.append(units[head[q]])
        return heads

    def _deadlock(self, t: float, end, head, prod_left, active) -> DeadlockError:
        plan = self.plan
        heads = self._blocked_heads(end, head)
        waiting = sum(len(units) - head[q] for q, units in enumerate(plan.queue_units))
        lines = []
        for u in heads:
            reasons = []
            for b in plan.waits[u] + plan.updates[u]:
                p = plan.barrier_phys[b]
                holder = active[p]
                if holder != b and len(plan.phys_lists[p]) > 1:
                    held = (f"still holds %{plan.barrier_names[holder]}" if holder >= 0
                            else "has no virtual barrier left")
                    reasons.append(f"%{plan.barrier_names[b]} is not programmed yet "
                                   f"({plan.phys_labels[p]} {held})")
            for b in plan.waits[u]:
                if prod_left[b]:
                    left = [plan.names[v] for v in plan.producers[b] if end[v] < 0]
                    who = ", ".join(left[:4]) + (", ..." if len(left) > 4 else "")
                    reasons.append(f"waits on %{plan.barrier_names[b]}: {prod_left[b]} producer"
                                   f"{'s' if prod_left[b] != 1 else ''} left ({who})"
                                   if left else f"waits on %{plan.barrier_names[b]}, which no "
                                   "task updates")
            where = plan.queue_names[plan.queue_of[u]]
            lines.append(f"{plan.names[u]} ({where}): " + "; ".join(reasons or ["blocked"]))
        behind = waiting - len(heads)
        message = (f"deadlock at cycle {_fmt(t)}: nothing is running and no task can start; "
                   f"{waiting} task{'s' if waiting != 1 else ''} never ran. Blocked at the head "
                   "of their queues:\n  " + "\n  ".join(lines))
        if behind:
            message += f"\n  ({behind} more queued behind them)"
        loc = plan.loc[heads[0]] if heads else None
        return DeadlockError([Diagnostic(Severity.ERROR, loc, message)])

    def _over_limit(self, t: float, start, end, head) -> VpucError:
        plan = self.plan
        running = [u for q, units in enumerate(plan.queue_units) for u in units[:head[q]]
                   if end[u] < 0]
        waiting = sum(len(units) - head[q] for q, units in enumerate(plan.queue_units))
        names = ", ".join(plan.names[u] for u in running[:6])
        names += ", ..." if len(running) > 6 else ""
        return VpucError(f"the run passed --max-cycles {_fmt(self.max_cycles)} (next event at cycle "
                         f"{_fmt(t)}); {len(running)} task{'s' if len(running) != 1 else ''} running"
                         f"{' (' + names + ')' if running else ''}, {waiting} not started")


