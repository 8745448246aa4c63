"""The dataflow passes of the cycles slice (``cycles_slice.py``) over the basic blocks of
a kernel's control-flow graph: backward, the critical registers before each instruction
(``critical_in``); forward, per scalar store, what its value may come from (a vector ->
scalar move, or unchecked scalar loads: ``_sources``), whose bits ``cycles_only.py``
marks a store's bytes as not computed from at run time.  Both visit the blocks in an
order that sees a block's successors (backward) or predecessors (forward) first where
the graph allows, which a library kernel's loops need about 40% fewer visits in."""

from __future__ import annotations

from heapq import heappop, heappush

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
        self.postorder = _postorder(self.succ)


def _postorder(succ: list[tuple[int, ...]]) -> list[int]:
    """The blocks in depth-first postorder (a block after every successor not on the path
    to it), from each block not yet reached in index order."""
    seen = [False] * len(succ)
    order: list[int] = []
    for root in range(len(succ)):
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(succ[root]))]
        while stack:
            node, nexts = stack[-1]
            for c in nexts:
                if not seen[c]:
                    seen[c] = True
                    stack.append((c, iter(succ[c])))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def backward_step(kind: str, uses: int, defs: int, address: int, control: bool,
                  status: int) -> tuple[int, int, int, int, int]:
    """One instruction of ``critical_in`` as (bits an exit adds, bits kept, bits always
    needed, the defs that make its uses needed, its uses): an exit needs the status; an
    instruction needs its address registers, control its uses, an operation its uses
    when it defines a needed register; what it defines is not needed before it."""
    return (status if kind in ("ret", "halt") else 0, ~defs, address | (uses if control else 0),
            defs if kind == "op" else 0, uses)


def critical_in(steps: list[tuple], succ: list[tuple[int, ...]], blocks: _Blocks) -> list[int]:
    """The least fixpoint of the critical registers before each instruction (bits), a
    block at a time (inside a block each instruction's only successor is the next),
    successors first: blocks in postorder, a changed block's predecessors queued by it."""
    crit_in = [0] * len(steps)
    starts, ends, preds = blocks.starts, blocks.ends, blocks.preds
    order = blocks.postorder
    rank = [0] * len(order)
    for r, b in enumerate(order):
        rank[b] = r
    work = list(range(len(order)))          # ranks: sorted, so already a heap
    queued = [True] * len(order)
    while work:
        b = order[heappop(work)]
        queued[b] = False
        start, end = starts[b], ends[b]
        out = 0
        for j in succ[end - 1]:
            out |= crit_in[j]
        before = crit_in[start]
        for i in range(end - 1, start - 1, -1):
            exit_bits, keep, gen, cond, uses = steps[i]
            out |= exit_bits
            needed = (out & keep) | gen
            if out & cond:
                needed |= uses
            crit_in[i] = out = needed
        if out != before:
            for p in preds[b]:
                if not queued[p]:
                    queued[p] = True
                    heappush(work, rank[p])
    return crit_in


def critical_out_blocks(steps: list[tuple], succ: list[tuple[int, ...]], crit_in: list[int],
                        blocks: _Blocks) -> list[int]:
    """``cycles_slice.critical_out``'s registers after each instruction: inside a block the
    next one's ``crit_in``, at a block's end the union over its successors (and the status
    at an exit, which always ends a block)."""
    crit_out = crit_in[1:] + [0]
    for end in blocks.ends:
        out = steps[end - 1][0]
        for j in succ[end - 1]:
            out |= crit_in[j]
        crit_out[end - 1] = out
    return crit_out


def source_action(kind: str, uses: int, defs: int, address: int, vector_in: bool,
                  scalar_mem: bool) -> tuple | None:
    """What ``_sources`` does with one instruction, from its word alone: None when it
    neither defines a scalar nor is a scalar store, else (registers used, registers
    defined, a scalar store, the value defined: ``VECTOR``, ``_LOAD`` (by the slice) or
    None for the union of the used registers')."""
    scalar_store = kind == "store" and scalar_mem
    if not (defs or scalar_store):
        return None
    value = VECTOR if vector_in else _LOAD if kind == "load" else None
    return _keys(uses & ~address), _keys(defs), scalar_store, value, defs


_LOAD = object()     # a load's value: exact when it is checked, else its load_bit


def _sources(ins: list, succ: list[tuple[int, ...]], crit_out: list[int],
             blocks: _Blocks, actions_of: list) -> list[int]:
    """Per instruction, for a scalar store: what its value may come from (bits: ``VECTOR``
    and ``load_bit(i)`` of each unchecked load); 0 for other instructions.  Forward, per
    register, from every instruction (the entry may be any of them), a basic block at a
    time, each state holding only the registers whose bits are not 0.  ``actions_of``:
    each instruction's ``source_action`` (kept per word)."""
    count = len(ins)
    starts, ends, block_succ = blocks.starts, blocks.ends, blocks.succ
    # Per block, only what reads or changes the state: scalar stores and instructions
    # defining scalars, as (index, registers used, registers defined, a scalar store,
    # the value defined: a constant, or None for the union of the used registers').
    actions: list[list[tuple]] = []
    for start, end in zip(starts, ends):
        found = []
        for i in range(start, end):
            action = actions_of[i]
            if action is None:
                continue
            uses, defs, scalar_store, value, def_bits = action
            if value is _LOAD:
                value = 0 if def_bits & crit_out[i] else load_bit(i)   # checked: exact
            found.append((i, uses, defs, scalar_store, value))
        actions.append(found)
    state: list[dict[int, int]] = [{} for _ in starts]
    # predecessors first: reverse postorder, as ranks in a heap
    order = blocks.postorder[::-1]
    rank = [0] * len(order)
    for r, b in enumerate(order):
        rank[b] = r
    work = list(range(len(order)))
    queued = [True] * len(order)
    stores = [0] * count
    while work:
        b = order[heappop(work)]
        queued[b] = False
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
                if not queued[c]:
                    queued[c] = True
                    heappush(work, rank[c])
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
