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

from vpuc.fusion.generator.cleanup.schedule import MEMORY_UNITS, _budgets, _conflict
from vpuc.fusion.generator.cleanup.unroll import _is_step
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
    holder: dict[tuple[int, int], int] = {}      # (row, slot) -> instruction
    sigma: list[int | None] = [None] * n
    last: list[int | None] = [None] * n
    pending = set(range(n))

    def unplace(i: int) -> None:
        for key in [k for k, v in holder.items() if v == i]:
            del holder[key]
        sigma[i] = None
        pending.add(i)

    for _ in range(10 * n):
        if not pending:         # evictions may have moved it all later: start in stage 0
            first = min(sigma) // ii * ii  # type: ignore[type-var]
            return [t - first for t in sigma]  # type: ignore[operator]
        op = min(pending, key=lambda i: (-height[i], i))
        pending.discard(op)
        cost = costs[op]
        start = max([0] + [sigma[i] + d for i, d in into[op] if sigma[i] is not None])
        deadline = span - height[op]
        if start > deadline:
            return None
        rows = lambda t: [(t + k) % ii for k in range(cost.issue)]   # noqa: E731
        chosen = None
        for t in range(start, min(start + ii, deadline + 1)):
            slot = next((sl for sl in cost.slots if all((r, sl) not in holder for r in rows(t))),
                        None)
            if slot is not None:
                chosen = t, slot
                break
        if chosen is None:
            t = start if last[op] is None or start > last[op] else last[op] + 1
            if t > deadline:        # tried every cycle up to the deadline: round again
                t = start
            chosen = t, cost.slots[0]
            for r in rows(t):
                if (r, chosen[1]) in holder:
                    unplace(holder[(r, chosen[1])])
        t, slot = chosen
        for r in rows(t):
            holder[(r, slot)] = op
        sigma[op] = last[op] = t
        for j, d in edges[op]:
            if sigma[j] is not None and sigma[j] < t + d:
                unplace(j)
        for i, d in into[op]:
            if sigma[i] is not None and t < sigma[i] + d:
                unplace(i)
    return None


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


def find_interval(body: list[Inst], target, limit: int,
                  stages: int) -> tuple[int, list[int]] | None:
    """The smallest II below ``limit`` (from the slot bound up) with a schedule of at most
    ``stages`` stages whose values fit the registers, with that schedule."""
    preds, readers = dependences(body, target)
    budget = _budgets(body)
    for ii in range(max(slot_bound(body, target), 2), limit):
        sigma = place(body, target, ii, preds, readers, stages * ii)
        if (sigma is not None and max(sigma) // ii < stages
                and all(max_live(body, sigma, readers, ii, f) < budget[f] for f in ("v", "s"))):
            return ii, sigma
    return None
