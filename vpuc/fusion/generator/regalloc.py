"""Physical registers for the emitters' virtual temporaries, after the clean-ups.

The LIR's register passes placed every *value* (pointers, counters, vectors,
masks); emitter temporaries, hoisted constants and unrolled copies are
virtual.  This allocator works on the flattened kernel (labels and branches,
so loops' back edges are seen): iterative liveness over all registers, an
interference graph in which the LIR's registers are precoloured, then greedy
colouring of the virtual registers in order of first appearance, each taking
the first register of its file that no neighbour holds.

Pools: ``s1``..``s29`` (``s0`` keeps argsAddr, ``sp`` and ``lr`` are the
stack), ``v0``..``v31``, ``m0``..``m7``; a physical register is free wherever
the LIR's value in it is dead.  ``AllocationError`` means more registers are
live at once than the file has; the generator then retries with less
unrolling and hoisting (generate.py).
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.mir import Flat, If, Inst, Loop, Reg, flatten, walk_bodies

POOLS = {"s": tuple(range(1, 30)), "v": tuple(range(32)), "m": tuple(range(8))}
BRANCHES = {"beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "loop"}


class AllocationError(VpucError):
    """The emitted code needs more registers than the target has (the generator retries smaller)."""


def successors(flat: list[Flat]) -> list[list[int]]:
    where = {lab: i for i, f in enumerate(flat) for lab in f.labels}
    succ = []
    for i, f in enumerate(flat):
        op = f.inst.op
        out = []
        if op in BRANCHES:
            out = [i + 1, where[f.inst.args[-1]]]
        elif op == "j":
            out = [where[f.inst.args[-1]]]
        elif op not in ("halt", "ret"):
            out = [i + 1]
        succ.append([s for s in out if s < len(flat)])
    return succ


def liveness(flat: list[Flat], with_in: bool = False):
    """Registers live after each instruction (and before it, with ``with_in``)."""
    succ = successors(flat)
    uses = [set(f.inst.uses()) for f in flat]
    defs = [set(f.inst.defs()) for f in flat]
    live_in: list[set[Reg]] = [set() for _ in flat]
    live_out: list[set[Reg]] = [set() for _ in flat]
    changed = True
    while changed:
        changed = False
        for i in range(len(flat) - 1, -1, -1):
            out = set()
            for s in succ[i]:
                out |= live_in[s]
            new_in = uses[i] | (out - defs[i])
            if out != live_out[i] or new_in != live_in[i]:
                live_out[i], live_in[i] = out, new_in
                changed = True
    return (live_out, live_in) if with_in else live_out


def allocate(body: list, tail: list[Inst]) -> dict[Reg, Reg]:
    """Assign every virtual register of ``body`` (structured MIR) in place; returns the map."""
    flat = flatten(body, tail)
    live_out, live_in = liveness(flat, with_in=True)
    undefined = sorted(str(r) for r in (live_in[0] if flat else ()) if r.virtual)
    if undefined:     # a clean-up pass lost a definition: the code would read garbage
        raise VpucError("internal: the generated code reads " + ", ".join(undefined)
                        + " before any instruction writes it")
    neighbours: dict[Reg, set[Reg]] = {}
    order: dict[Reg, int] = {}
    for i, f in enumerate(flat):
        for r in f.inst.uses() + f.inst.defs():
            if r.virtual:
                order.setdefault(r, i)
                neighbours.setdefault(r, set())
        for d in f.inst.defs():
            for other in live_out[i]:
                if other != d and other.file == d.file:
                    neighbours.setdefault(d, set()).add(other)
                    neighbours.setdefault(other, set()).add(d)
    mapping: dict[Reg, Reg] = {}
    for reg in sorted(order, key=order.get):
        taken = set()
        for n in neighbours[reg]:
            phys = mapping.get(n, n if not n.virtual else None)
            if phys is not None:
                taken.add(phys.index)
        choice = next((i for i in POOLS[reg.file] if i not in taken), None)
        if choice is None:
            raise AllocationError(f"out of {reg.file} registers for {reg} "
                                  f"({len(neighbours[reg])} live at once)")
        mapping[reg] = Reg(reg.file, choice)
    rename(body, tail, mapping)
    return mapping


def rename(body: list, tail: list[Inst], mapping: dict[Reg, Reg]) -> None:
    for nodes in walk_bodies(body):
        for n in nodes:
            if isinstance(n, Inst):
                n.replace_regs(mapping)
            elif isinstance(n, If):
                n.reg = mapping.get(n.reg, n.reg)
            elif isinstance(n, Loop):
                n.counter = mapping.get(n.counter, n.counter)
    for inst in tail:
        inst.replace_regs(mapping)
