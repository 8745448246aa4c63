"""Where each instruction of a modulo-scheduled loop issues: the II and the times sigma.

A modulo schedule (Rau, "Iterative Modulo Scheduling", MICRO 1994) places
every instruction of one iteration at a time ``sigma`` such that, with a new
iteration starting every ``II`` cycles,

- each dependence holds: ``sigma(use) >= sigma(def) + latency`` (the target's
  cycle table; memory accesses of one unrolled copy stay in order, those of
  different copies and iterations never overlap, as for ``schedule``);
- no slot is taken twice in any cycle modulo ``II`` (the LSU pair counts
  twice; a unit busy for ``issue`` cycles takes as many rows);
- no value lives ``II`` cycles or more (``sigma(last use) - sigma(def) < II``):
  the next iteration's copy of its register is written after it is read, so
  the body's registers need no renaming.

``find_interval`` tries ``II`` from the resource bound (the busiest slot's
instructions per trip, ``slot_bound``) up, each by ``place`` (Rau's iterative
placement), and takes the first whose schedule fits its stages and whose
values fit the registers (``max_live``).  What to do with the schedule -- which
loops qualify, the emitted prologue, kernel and epilogue -- is the pass's
(``modulo_schedule.py``).
"""

from __future__ import annotations

import heapq

from vpuc.fusion.generator.cleanup.analysis import block_key
from vpuc.fusion.generator.cleanup.schedule import MEMORY_UNITS, _budgets, _conflict
from vpuc.fusion.generator.cleanup.unroll import _is_step
from vpuc.fusion.generator.kernel_cache import TargetMemo
from vpuc.fusion.generator.mir import Inst


def dependences(body: list[Inst], target) -> tuple[list[dict[int, int]], dict[int, list[int]]]:
    """Per instruction: predecessors -> latency (reads after writes; memory order within a
    copy; a pointer increment after every access through the pointer), and for each
    instruction the ones reading what it defines."""
    preds: list[dict[int, int]] = [dict() for _ in body]
    readers: dict[int, list[int]] = {}
    last_def: dict = {}
    memory: list[int] = []
    for j, inst in enumerate(body):
        if _is_step(inst):
            for i in memory:
                if body[i].mem.base == inst.args[0]:
                    preds[j].setdefault(i, 0)
            continue
        for r in inst.uses():
            if r in last_def:
                i = last_def[r]
                preds[j][i] = max(preds[j].get(i, 0), target.cost(body[i].op).latency)
                readers.setdefault(i, []).append(j)
        if inst.unit in MEMORY_UNITS:
            for i in memory:
                if _conflict(body[i], inst):
                    preds[j].setdefault(i, 0)
            memory.append(j)
        for r in inst.defs():
            last_def[r] = j
    return preds, readers


def place(body: list[Inst], target, ii: int, preds, readers, span: int) -> list[int] | None:
    """Times ``sigma`` for ``body`` at initiation interval ``ii``, or None: Rau's iterative
    modulo scheduling.  Instructions are taken by height (the longest latency path to the
    end of the iteration), each at the first cycle from its earliest start whose row has
    its slot free; when none within ``ii`` cycles has, it takes its earliest start anyway
    and evicts what holds the slot and what its placement now violates, within a budget
    of placements.  Besides the dependences, a reader must come less than ``ii`` cycles
    after the writer (the next iteration's write of the register is later), and an
    iteration fits in ``span`` cycles: an instruction starts early enough for the longest
    latency path after it to end by then."""
    n = len(body)
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]   # i -> (j, delay): s_j >= s_i + delay
    into: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for j in range(n):
        for i, lat in preds[j].items():
            edges[i].append((j, lat))
            into[j].append((i, lat))
            if j in readers.get(i, ()):
                edges[j].append((i, 1 - ii))
                into[i].append((j, 1 - ii))
    height = [0] * n
    for i in range(n - 1, -1, -1):
        height[i] = max([target.cost(body[i].op).latency]
                        + [lat + height[j] for j, lat in edges[i] if j > i])
    costs = [target.cost(x.op) for x in body]
    if any(c.issue > ii for c in costs):
        return None
    # the reservation table: per slot, the instruction holding each row (-1: free), and
    # per instruction the (slot, row) pairs it holds, so an eviction frees them directly
    table = {slot: [-1] * ii for c in costs for slot in c.slots}
    held: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    sigma: list[int | None] = [None] * n
    last: list[int | None] = [None] * n
    # pending instructions, highest first (each is in the heap once: only placed ones
    # are evicted)
    pending = [(-height[i], i) for i in range(n)]
    heapq.heapify(pending)

    def unplace(i: int) -> None:
        for slot, row in held[i]:
            table[slot][row] = -1
        held[i] = []
        sigma[i] = None
        heapq.heappush(pending, (-height[i], i))

    for _ in range(10 * n):
        if not pending:         # evictions may have moved it all later: start in stage 0
            first = min(sigma) // ii * ii  # type: ignore[type-var]
            return [t - first for t in sigma]  # type: ignore[operator]
        op = heapq.heappop(pending)[1]
        cost = costs[op]
        start = max([0] + [sigma[i] + d for i, d in into[op] if sigma[i] is not None])
        deadline = span - height[op]
        if start > deadline:
            return None
        chosen = None
        for t in range(start, min(start + ii, deadline + 1)):
            rows = [(t + k) % ii for k in range(cost.issue)]
            slot = next((sl for sl in cost.slots if all(table[sl][r] < 0 for r in rows)), None)
            if slot is not None:
                chosen = t, slot
                break
        if chosen is None:
            t = start if last[op] is None or start > last[op] else last[op] + 1
            if t > deadline:        # tried every cycle up to the deadline: round again
                t = start
            chosen = t, cost.slots[0]
            for r in [(t + k) % ii for k in range(cost.issue)]:
                if table[chosen[1]][r] >= 0:
                    unplace(table[chosen[1]][r])
        t, slot = chosen
        for r in [(t + k) % ii for k in range(cost.issue)]:
            table[slot][r] = op
            held[op].append((slot, r))
        sigma[op] = last[op] = t
        for j, d in edges[op]:
            if sigma[j] is not None and sigma[j] < t + d:
                unplace(j)
        for i, d in into[op]:
            if sigma[i] is not None and t < sigma[i] + d:
                unplace(i)
    return None


def recurrence_bound(preds: list[dict[int, int]], readers: dict[int, list[int]]) -> int:
    """The smallest II a schedule can have by the values alone: a value is read less than
    II cycles after it is defined, and its readers come at least the longest latency path
    after its definition, so II exceeds that path (Rau's RecMII for the cycles the
    register reuse closes).  Every dependence goes forward in the body."""
    n = len(preds)
    succs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for j in range(n):
        for i, lat in preds[j].items():
            succs[i].append((j, lat))
    bound = 0
    for i, reading in readers.items():
        far = max(reading)
        dist = [-1] * n             # the longest path from i (-1: not reached)
        dist[i] = 0
        for k in range(i, far):
            if dist[k] >= 0:
                for j, lat in succs[k]:
                    if dist[k] + lat > dist[j]:
                        dist[j] = dist[k] + lat
        bound = max(bound, max(dist[j] for j in reading) + 1)
    return bound


def max_live(body: list[Inst], sigma: list[int], readers, ii: int, file: str) -> int:
    """Values of a register file live at once in the steady state (each lives < ii cycles)."""
    rows = [0] * ii
    for i, inst in enumerate(body):
        if any(r.file == file for r in inst.defs()):
            end = max([sigma[j] for j in readers.get(i, ())] + [sigma[i] + 1])
            for t in range(sigma[i], end):
                rows[t % ii] += 1
    return max(rows)


def slot_bound(body: list[Inst], target) -> int:
    """The busiest slot's issue cycles in one iteration (a pair of slots shares)."""
    busy: dict = {}
    for n in body:
        cost = target.cost(n.op)
        busy[cost.slots] = busy.get(cost.slots, 0) + cost.issue
    return max(-(-c // len(slots)) for slots, c in busy.items())


_INTERVALS = TargetMemo(1024)        # find_interval's answer, by the body's content


def find_interval(body: list[Inst], target, limit: int,
                  stages: int) -> tuple[int, list[int]] | None:
    """The smallest II below ``limit`` (from the slot bound up) with a schedule of at most
    ``stages`` stages whose values fit the registers, with that schedule."""
    key = block_key(body) + (limit, stages)
    found = _INTERVALS.get(key, target)
    if found is None:
        found = (_search(body, target, limit, stages),)
        _INTERVALS.put(key, target, found)
    return None if found[0] is None else (found[0][0], list(found[0][1]))


def _search(body: list[Inst], target, limit: int, stages: int) -> tuple[int, list[int]] | None:
    """``find_interval`` without the memo: each II in turn, placed by ``place``."""
    preds, readers = dependences(body, target)
    budget = _budgets(body)
    # below the bounds no placement exists (place returns only valid ones): skip them, and
    # when they reach ``limit`` no II beats the baseline at all
    for ii in range(max(slot_bound(body, target), recurrence_bound(preds, readers), 2), limit):
        sigma = place(body, target, ii, preds, readers, stages * ii)
        if (sigma is not None and max(sigma) // ii < stages
                and all(max_live(body, sigma, readers, ii, f) < budget[f] for f in ("v", "s"))):
            return ii, sigma
    return None
