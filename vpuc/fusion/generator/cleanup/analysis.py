"""Facts the clean-ups share: definitions and uses of registers, purity, constants."""

from __future__ import annotations

from collections import Counter

from vpuc.fusion.generator.mir import If, Inst, Loop, Reg, walk

# Units whose instructions only compute their destination from their operands.
PURE_UNITS = frozenset({"salu", "smul", "sdiv", "sfpu", "sfdiv", "valu", "vfpu", "vfma", "vdiv",
                        "vsfu", "vrcp", "vred", "vcvt"})
LOAD_UNITS = frozenset({"sld", "vld", "vlds"})
NOT_PURE = frozenset({"nop"})


def is_pure(inst: Inst) -> bool:
    return inst.unit in PURE_UNITS and inst.op not in NOT_PURE and len(inst.defs()) == 1


def node_defs(node) -> list[Reg]:
    if isinstance(node, Inst):
        return node.defs()
    out = [] if isinstance(node, If) else [node.counter]
    for inst in walk(node.body):
        out += inst.defs()
    return out


def node_uses(node) -> list[Reg]:
    if isinstance(node, Inst):
        return node.uses()
    out = [node.reg] if isinstance(node, If) else [node.counter]
    for inst in walk(node.body):
        out += inst.uses()
    return out


def node_stores(node) -> bool:
    if isinstance(node, Inst):
        return node.is_store
    return any(i.is_store for i in walk(node.body)) or (isinstance(node, Loop)
                                                         and node.slot is not None)


def def_counts(mir) -> Counter:
    counts: Counter = Counter()
    for inst in list(walk(mir.body)) + list(mir.tail):
        counts.update(inst.defs())
    return counts


def use_counts(mir) -> Counter:
    counts: Counter = Counter()
    for inst in list(walk(mir.body)) + list(mir.tail):
        counts.update(inst.uses())
    for node in _control(mir.body):
        counts[node.reg if isinstance(node, If) else node.counter] += 1
    return counts


def _control(nodes):
    for n in nodes:
        if isinstance(n, (If, Loop)):
            yield n
            yield from _control(n.body)


def constants(mir) -> dict[Reg, int]:
    """Virtual scalar registers defined exactly once, by ``li``: their value."""
    defs = def_counts(mir)
    out = {}
    for inst in walk(mir.body):
        if inst.op == "li" and isinstance(inst.args[1], int):
            d = inst.args[0]
            if d.virtual and defs[d] == 1:
                out[d] = inst.args[1]
    return out


def rename_uses(mir, mapping: dict[Reg, Reg]) -> None:
    """Replace *uses* (and If / Loop registers) of ``mapping``'s keys everywhere."""
    def fix(inst: Inst) -> None:
        defs = set(inst.defs())
        args = []
        for kind_arg in zip(inst.kinds(), inst.args):
            kind, a = kind_arg
            if isinstance(a, Reg) and a in mapping and a not in defs:
                a = mapping[a]
            elif hasattr(a, "base") and a.base in mapping:
                a = type(a)(mapping[a.base], a.offset)
            args.append(a)
        inst.args = args

    for inst in list(walk(mir.body)) + list(mir.tail):
        fix(inst)
    for node in _control(mir.body):
        if isinstance(node, If):
            node.reg = mapping.get(node.reg, node.reg)


def wrap32(value: int) -> int:
    """A 32-bit result as the immediate ``li`` takes (non-negative below 2^32)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def block_key(insts: list[Inst]) -> tuple:
    """A straight-line block's exact content as the schedulers read it: each instruction's
    mnemonic, operands (registers, memory operands and immediates compare by value) and
    unrolled copy; not its tag or note, which no scheduling decision reads."""
    return tuple((i.op, tuple(i.args), i.group) for i in insts)
