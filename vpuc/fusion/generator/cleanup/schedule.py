"""schedule: list scheduling of straight-line code for the in-order pipeline.

The body of each innermost loop (straight-line code, where the time goes) is
reordered by a greedy list scheduler driven by the simulator's cycle table and
VLIW slots (``TargetMachine.cost``): among the instructions whose predecessors
are placed, it takes the one that can issue first (its operands ready and its
slot free; instructions on different slots share a cycle), breaking ties by
the longest latency path to the end of the block.  Dependences: a register read after its write
(the writer's latency), a register written after a read or a write (order
only), and memory: a store stays in order with every load and store, except
that accesses of different unrolled copies (``Inst.group``) never overlap.
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import block_key
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.kernel_cache import TargetMemo
from vpuc.fusion.generator.mir import Inst, loops

MEMORY_UNITS = frozenset({"sld", "sst", "vld", "vst", "vlds", "vsts"})


def _conflict(a: Inst, b: Inst) -> bool:
    if a.unit not in MEMORY_UNITS or b.unit not in MEMORY_UNITS:
        return False
    if not (a.is_store or b.is_store):
        return False
    return a.group is None or b.group is None or a.group == b.group


POOL = {"s": 29, "v": 32, "m": 8}


def _budgets(insts: list[Inst]) -> dict[str, int]:
    """Registers per file left for the block's own temporaries: the pool minus physical
    registers it names and values it reads from outside."""
    defined = {r for i in insts for r in i.defs()}
    outside = {r for i in insts for r in i.uses() if r not in defined or not r.virtual}
    outside |= {r for r in defined if not r.virtual}
    return {f: POOL[f] - sum(1 for r in outside if r.file == f) for f in POOL}


_ORDERS = TargetMemo(1024)      # a block's issue order, by its content (``TargetMemo``)


def schedule_block(insts: list[Inst], target) -> list[Inst]:
    if len(insts) < 3:
        return insts
    key = block_key(insts)
    order = _ORDERS.get(key, target)
    if order is None:
        order = _list_order(insts, target)
        _ORDERS.put(key, target, order)
    return [insts[i] for i in order]


def _list_order(insts: list[Inst], target) -> tuple[int, ...]:
    """The list scheduler's issue order of ``insts`` (their positions)."""
    n = len(insts)
    budget = _budgets(insts)
    # uses of each definition (position, register) before the register's next definition
    web_uses: dict[tuple[int, object], int] = {}
    reaching: dict = {}
    for j, inst in enumerate(insts):
        for r in inst.uses():
            if r in reaching:
                web_uses[reaching[r]] += 1
        for r in inst.defs():
            if r.virtual:
                reaching[r] = (j, r)
                web_uses[(j, r)] = 0
    remaining: dict = {}
    live = {f: 0 for f in POOL}
    preds: list[dict[int, int]] = [dict() for _ in range(n)]    # pred -> latency
    last_def: dict = {}
    reads_since: dict = {}
    memory: list[int] = []
    for j, inst in enumerate(insts):
        deps = preds[j]
        for r in inst.uses():
            if r in last_def:
                i = last_def[r]
                deps[i] = max(deps.get(i, 0), target.cost(insts[i].op).latency)
        for r in inst.defs():
            for i in reads_since.get(r, ()):
                if i != j:
                    deps.setdefault(i, 0)
            if r in last_def:
                deps.setdefault(last_def[r], 0)
        if inst.unit in MEMORY_UNITS:
            for i in memory:
                if _conflict(insts[i], inst):
                    deps.setdefault(i, 0)
            memory.append(j)
        for r in inst.uses():
            reads_since.setdefault(r, []).append(j)
        for r in inst.defs():
            last_def[r] = j
            reads_since[r] = []
    succs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for j in range(n):
        for i, lat in preds[j].items():
            succs[i].append((j, lat))
    height = [0] * n
    for i in range(n - 1, -1, -1):
        own = target.cost(insts[i].op)
        height[i] = max([own.latency] + [lat + height[j] for j, lat in succs[i]])
    waiting = [len(p) for p in preds]
    earliest = [0] * n
    ready = [i for i in range(n) if waiting[i] == 0]
    order: list[int] = []
    now = 0
    def grows(i: int) -> bool:
        return any(r.virtual and r.file in live and live[r.file] >= budget[r.file] - 1
                   for r in insts[i].defs())

    slot_free: dict[int, int] = {}

    def start_of(i: int) -> int:
        free = min(slot_free.get(k, 0) for k in target.cost(insts[i].op).slots)
        return max(now, earliest[i], free)

    while ready:
        allowed = [i for i in ready if not grows(i)] or ready
        best = min(allowed, key=lambda i: (start_of(i), -height[i], i))
        ready.remove(best)
        for r in insts[best].uses():
            if remaining.get(r, 0) > 0:
                remaining[r] -= 1
                if remaining[r] == 0:
                    live[r.file] -= 1
        for r in insts[best].defs():
            if r.virtual:
                if remaining.get(r, 0) > 0:
                    live[r.file] -= 1
                remaining[r] = web_uses[(best, r)]
                if remaining[r] > 0:
                    live[r.file] += 1
        start = start_of(best)
        order.append(best)
        cost = target.cost(insts[best].op)
        slot = min(cost.slots, key=lambda k: slot_free.get(k, 0))
        slot_free[slot] = start + cost.issue
        now = start + 1 if cost.closes_bundle else start
        for j, lat in succs[best]:
            earliest[j] = max(earliest[j], start + lat)
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    assert len(order) == n, "schedule: dependence cycle"
    return tuple(order)


class SchedulePass(MirPass):
    name = "schedule"

    def run(self, mir, target, config) -> bool:
        changed = False
        for loop in loops(mir.body):
            if loop.info.get("modulo"):
                continue                # already placed cycle by cycle (modulo-schedule)
            if all(isinstance(n, Inst) for n in loop.body):
                scheduled = schedule_block(loop.body, target)
                changed |= scheduled != loop.body
                loop.body[:] = scheduled
        return changed
