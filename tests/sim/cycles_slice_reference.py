"""The cycles-only analysis as first written: a worklist of single instructions, each
register state a full list.  ``cycles_slice`` works a basic block at a time on sparse
states; both compute the same least fixpoints, which the tests check on every library
and zoo kernel."""

from __future__ import annotations

from runtime_sim.isa.cycles_slice import _CONTROL, VECTOR, _keys, critical_out, load_bit
from vpuc.shave.isa import NUM_SREGS, REG_ARGS_ADDR


def reference_slice(ins: list, succ: list[tuple[int, ...]]) -> tuple:
    """(fields of each role, critical registers per instruction), or (None, the index of
    the vector -> scalar move that decides control flow)."""
    preds: list[list[int]] = [[] for _ in ins]
    for i, nexts in enumerate(succ):
        for j in nexts:
            preds[j].append(i)
    status = 1 << REG_ARGS_ADDR
    crit_in = [0] * len(ins)
    work = list(range(len(ins)))
    queued = set(work)
    while work:
        i = work.pop()
        queued.discard(i)
        x = ins[i]
        out = 0
        for j in succ[i]:
            out |= crit_in[j]
        if x.kind in ("ret", "halt"):
            out |= status
        needed = (out & ~x.defs) | x.address
        if x.kind in _CONTROL:
            needed |= x.uses
        elif out & x.defs and x.kind == "op":
            needed |= x.uses
        if needed != crit_in[i]:
            crit_in[i] = needed
            for p in preds[i]:
                if p not in queued:
                    queued.add(p)
                    work.append(p)
    crit_out, bad = critical_out(ins, succ, crit_in)     # shared: the fixpoints differ
    if bad is not None:
        return None, bad
    sources = _sources(ins, succ, crit_out)
    roles = []
    for i, x in enumerate(ins):
        scalar_load = x.scalar_mem and x.kind == "load"
        roles.append((x.kind == "op" and (x.vector_in or (x.vector_out and not x.defs)),
                      scalar_load and bool(x.defs & crit_out[i]),
                      load_bit(i) if scalar_load and not x.defs & crit_out[i] else 0,
                      sources[i], x.kind == "store" and not x.scalar_mem))
    return tuple(roles), tuple(crit_in)


def _sources(ins: list, succ: list[tuple[int, ...]], crit_out: list[int]) -> list[int]:
    count = len(ins)
    state = [[0] * NUM_SREGS for _ in range(count)]
    work = list(range(count - 1, -1, -1))
    queued = set(work)
    stores = [0] * count
    while work:
        i = work.pop()
        queued.discard(i)
        x = ins[i]
        regs = list(state[i])
        used = 0
        for key in _keys(x.uses & ~x.address):
            used |= regs[key]
        if x.kind == "store":
            stores[i] = used if x.scalar_mem else 0
        defs = _keys(x.defs)
        if defs:
            if x.vector_in:
                value = VECTOR
            elif x.kind == "load":
                value = 0 if x.defs & crit_out[i] else load_bit(i)
            else:
                value = used
            for key in defs:
                regs[key] = value
        for j in succ[i]:
            merged = [a | b for a, b in zip(state[j], regs)]
            if merged != state[j]:
                state[j] = merged
                if j not in queued:
                    queued.add(j)
                    work.append(j)
    return stores
