"""The forward half of the cycles slice (``cycles_slice.py``): per scalar store, what
its value may come from (a vector -> scalar move, or unchecked scalar loads), worked
out over the basic blocks of the kernel's control-flow graph.  ``cycles_only.py``
marks a store's bytes as not computed from these bits at run time."""

from __future__ import annotations

from vpuc.shave.isa import NUM_SREGS


class _Blocks:
    """Basic blocks of a control-flow graph: a block's instructions after its first have
    one predecessor, the one before, whose only successor they are; so every edge
    between blocks ends at a block's first instruction."""

    def __init__(self, succ: list[tuple[int, ...]]) -> None:
        count = len(succ)
        pred_count = [0] * count
        for nexts in succ:
            for j in nexts:
                pred_count[j] += 1
        starts = [i for i in range(count)
                  if i == 0 or pred_count[i] != 1 or succ[i - 1] != (i,)]
        self.starts = starts
        self.ends = starts[1:] + [count]
        block_of = [0] * count
        for b, (start, end) in enumerate(zip(starts, self.ends)):
            block_of[start:end] = [b] * (end - start)
        self.block_of = block_of
        self.succ = [tuple(block_of[j] for j in succ[end - 1]) for end in self.ends]
        preds: list[list[int]] = [[] for _ in starts]
        for b, nexts in enumerate(self.succ):
            for c in nexts:
                preds[c].append(b)
        self.preds = preds


def _sources(ins: list, succ: list[tuple[int, ...]], crit_out: list[int],
             blocks: _Blocks) -> list[int]:
    """Per instruction, for a scalar store: what its value may come from (bits: ``VECTOR``
    and ``load_bit(i)`` of each unchecked load); 0 for other instructions.  Forward, per
    register, from every instruction (the entry may be any of them), a basic block at a
    time, each state holding only the registers whose bits are not 0."""
    count = len(ins)
    starts, ends, block_succ = blocks.starts, blocks.ends, blocks.succ
    # Per block, only what reads or changes the state: scalar stores and instructions
    # defining scalars, as (index, registers used, registers defined, a scalar store,
    # the value defined: a constant, or None for the union of the used registers').
    actions: list[list[tuple]] = []
    for start, end in zip(starts, ends):
        found = []
        for i in range(start, end):
            x = ins[i]
            scalar_store = x.kind == "store" and x.scalar_mem
            if not (x.defs or scalar_store):
                continue
            if x.vector_in:
                value = VECTOR                                  # skipped: left stale
            elif x.kind == "load":
                value = 0 if x.defs & crit_out[i] else load_bit(i)   # checked: exact
            else:
                value = None
            found.append((i, _keys(x.uses & ~x.address), _keys(x.defs), scalar_store, value))
        actions.append(found)
    state: list[dict[int, int]] = [{} for _ in starts]
    work = list(range(len(starts) - 1, -1, -1))     # popped first to last
    queued = set(work)
    stores = [0] * count
    while work:
        b = work.pop()
        queued.discard(b)
        regs = dict(state[b])
        for i, uses, defs, scalar_store, value in actions[b]:
            used = 0
            for key in uses:
                used |= regs.get(key, 0)
            if scalar_store:
                stores[i] = used
            if defs:
                if value is None:
                    value = used
                for key in defs:
                    if value:
                        regs[key] = value
                    else:
                        regs.pop(key, None)
        for c in block_succ[b]:
            target = state[c]
            merged = None
            for key, value in regs.items():
                old = target.get(key, 0)
                if old | value != old:
                    if merged is None:
                        merged = dict(target)
                    merged[key] = old | value
            if merged is not None:
                state[c] = merged
                if c not in queued:
                    queued.add(c)
                    work.append(c)
    return stores


_KEYS: dict[int, tuple[int, ...]] = {}


def _keys(bits: int) -> tuple[int, ...]:
    found = _KEYS.get(bits)
    if found is None:           # a few register sets recur in every kernel
        found = _KEYS[bits] = tuple(key for key in range(NUM_SREGS) if bits >> key & 1)
    return found


VECTOR = 1


def load_bit(index: int) -> int:
    """The bit of the unchecked scalar load at ``index`` in a store's sources."""
    return 2 << index
