"""The generator's machine IR (MIR): ACT SHAVE instructions in structured control flow.

The target machine's emitters turn each Linear IR expression into ``Inst``s:
one ISA instruction each (mnemonic and operands in assembly order, see
``vpuc/shave/isa.py``), tagged with the LIR expression it came from (``tag``:
the expression id, or a kernel-level tag such as ``"prologue"``), which is
how per-expression cycle counters map machine code back to the LIR.

Control flow stays structured until the end, so the clean-up passes can see
loops:

- ``Loop``: a counted loop closed by the zero-overhead ``loop`` instruction.
  The instruction that sets its counter comes right before it; ``guard`` adds
  a ``beqz counter`` over the loop when the count may be 0; a loop whose
  counter lives on the stack (``slot``) counts down in memory instead.
- ``If``: a body skipped when a register is zero (``skip_if="zero"``) or not
  zero (``"nonzero"``).

Registers are physical (``s5``, ``v3``, ``m0``: what the LIR's register passes
assigned, or ABI registers) or virtual (``%s7``, ``%v2``, ``%m1``: emitter
temporaries, given physical registers by ``regalloc.py`` after the clean-ups).
``flatten`` lowers the tree to labels and branches; ``print_asm`` writes the
assembly the assembler reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator, Union

from vpuc.shave.isa import BY_MNEMONIC
from vpuc.shave.isa_operands import FORMATS, KINDS


@dataclass(frozen=True)
class Reg:
    file: str            # "s", "v" or "m"
    index: int
    virtual: bool = False

    def __str__(self) -> str:
        if self.virtual:
            return f"%{self.file}{self.index}"
        if self.file == "s" and self.index == 30:
            return "sp"
        if self.file == "s" and self.index == 31:
            return "lr"
        return f"{self.file}{self.index}"


def S(i: int) -> Reg:
    return Reg("s", i)


def V(i: int) -> Reg:
    return Reg("v", i)


def M(i: int) -> Reg:
    return Reg("m", i)


SP, ARGS = S(30), S(0)


@dataclass(frozen=True)
class Mem:
    base: Reg
    offset: int = 0

    def __str__(self) -> str:
        return f"{self.offset}({self.base})"

    def moved(self, delta: int) -> "Mem":
        return Mem(self.base, self.offset + delta)


@dataclass(frozen=True)
class FBits:
    """A float immediate as its raw bits (``li.f32``/``li.f16``), printed as hex."""

    bits: int

    def __str__(self) -> str:
        return f"{self.bits:#x}"


Operand = Union[Reg, Mem, int, FBits, str]


@dataclass
class Inst:
    op: str
    args: list
    tag: object = None           # LIR expression id (int) or a kernel-level tag (str)
    note: str = ""
    group: int | None = None     # unrolled copy it belongs to (memory of different copies
                                 # never overlaps: the scheduler may reorder across them)

    def kinds(self) -> tuple[str, ...]:
        return FORMATS[BY_MNEMONIC[self.op].format]

    def defs(self) -> list[Reg]:
        out = []
        for kind, arg in zip(self.kinds(), self.args):
            access = KINDS[kind].access
            if kind == "mem" or "w" not in access:
                continue
            out.append(arg)
            if kind == "sd2":
                out.append(Reg(arg.file, arg.index + 1, arg.virtual))
        return out

    def uses(self) -> list[Reg]:
        out = []
        for kind, arg in zip(self.kinds(), self.args):
            if kind == "mem":
                out.append(arg.base)
            elif "r" in KINDS[kind].access:
                out.append(arg)
                if kind == "sa2":
                    out.append(Reg(arg.file, arg.index + 1, arg.virtual))
        return out

    @property
    def unit(self) -> str:
        return BY_MNEMONIC[self.op].unit

    @property
    def is_store(self) -> bool:
        return self.unit in ("sst", "vst", "vsts")

    @property
    def is_load(self) -> bool:
        return self.unit in ("sld", "vld", "vlds")

    @property
    def mem(self) -> Mem | None:
        return next((a for a in self.args if isinstance(a, Mem)), None)

    def replace_regs(self, mapping: dict[Reg, Reg]) -> None:
        args = []
        for a in self.args:
            if isinstance(a, Reg):
                a = mapping.get(a, a)
            elif isinstance(a, Mem):
                a = Mem(mapping.get(a.base, a.base), a.offset)
            args.append(a)
        self.args = args

    def key(self) -> tuple:
        return (self.op, tuple(self.args))

    def text(self) -> str:
        if not self.args:
            return self.op
        return f"{self.op:<9} " + ", ".join(str(a) for a in self.args)

    def copy(self) -> "Inst":
        return Inst(self.op, list(self.args), self.tag, self.note, self.group)


@dataclass
class Loop:
    counter: Reg
    body: list
    guard: bool = False          # skip the loop when the counter is 0 on entry
    slot: int | None = None      # counter kept at this sp offset (a spilled LIR counter)
    tag: object = None
    name: str = ""
    info: dict = field(default_factory=dict)   # what passes know (lir loop id, innermost, ...)


@dataclass
class If:
    reg: Reg
    body: list
    skip_if: str = "zero"        # skip the body when reg is "zero" / "nonzero"
    tag: object = None


Node = Union[Inst, Loop, If]


def walk(nodes: list) -> Iterator[Inst]:
    """Every instruction, in program order, loops and ifs included."""
    for n in nodes:
        if isinstance(n, Inst):
            yield n
        else:
            yield from walk(n.body)


def walk_bodies(nodes: list) -> Iterator[list]:
    """Every instruction list (the top level, then nested bodies, depth first)."""
    yield nodes
    for n in nodes:
        if isinstance(n, (Loop, If)):
            yield from walk_bodies(n.body)


def copy_nodes(nodes: list) -> list:
    """A copy of structured MIR a pass may rewrite (operands are immutable values, so each
    instruction's operand list is copied, not the operands)."""
    out: list = []
    for n in nodes:
        if isinstance(n, Inst):
            out.append(n.copy())
        elif isinstance(n, Loop):
            out.append(Loop(n.counter, copy_nodes(n.body), n.guard, n.slot, n.tag, n.name,
                            dict(n.info)))
        else:
            out.append(If(n.reg, copy_nodes(n.body), n.skip_if, n.tag))
    return out


def loops(nodes: list) -> Iterator[Loop]:
    for n in nodes:
        if isinstance(n, (Loop, If)):
            yield from loops(n.body)
        if isinstance(n, Loop):
            yield n


def count(nodes: list) -> int:
    return sum(1 for _ in walk(nodes))


def f32_bits(value: float) -> FBits:
    return FBits(struct.unpack("<I", struct.pack("<f", value))[0])


# ----------------------------------------------------------------- flattening

@dataclass
class Flat:
    """One line of flattened code: an instruction, with the labels placed before it."""

    inst: Inst
    labels: list[str] = field(default_factory=list)


def flatten(nodes: list, tail: list[Inst], where: dict | None = None) -> list[Flat]:
    """Structured MIR to instructions with labels and branches; ``tail`` ends the kernel.
    ``where`` (if given) receives id(Loop) -> index of its closing instruction."""
    out: list[Flat] = []
    pending: list[str] = []
    counter = [0]

    def label(base: str) -> str:
        counter[0] += 1
        return f".L{counter[0]}_{base}"

    def put(inst: Inst) -> None:
        nonlocal pending
        out.append(Flat(inst, pending))
        pending = []

    def emit(nodes: list) -> None:
        nonlocal pending
        for n in nodes:
            if isinstance(n, Inst):
                put(n)
            elif isinstance(n, If):
                end = label("skip")
                put(Inst("beqz" if n.skip_if == "zero" else "bnez", [n.reg, end], n.tag))
                emit(n.body)
                pending.append(end)
            else:
                head, end = label("loop"), label("done")
                if n.guard:
                    put(Inst("beqz", [n.counter, end], n.tag))
                if n.slot is not None:
                    put(Inst("sw", [n.counter, Mem(SP, n.slot)], n.tag, "counter to its slot"))
                pending.append(head)
                emit(n.body)
                if where is not None:
                    where[id(n)] = len(out) + (3 if n.slot is not None else 0)
                if n.slot is None:
                    put(Inst("loop", [n.counter, head], n.tag))
                else:
                    put(Inst("lw", [n.counter, Mem(SP, n.slot)], n.tag))
                    put(Inst("addi", [n.counter, n.counter, -1], n.tag))
                    put(Inst("sw", [n.counter, Mem(SP, n.slot)], n.tag))
                    put(Inst("bnez", [n.counter, head], n.tag))
                if n.guard:
                    pending.append(end)

    emit(nodes)
    for inst in tail:
        put(inst)
    return out


def print_asm(name: str, flat: list[Flat], header: list[str] = ()) -> str:
    lines = [f"// {h}" for h in header]
    lines += [f"    .global {name}", "    .text", f"{name}:"]
    for f in flat:
        for lab in f.labels:
            lines.append(f"{lab}:")
        text = "    " + f.inst.text()
        comment = [f"e{f.inst.tag}" if isinstance(f.inst.tag, int) else str(f.inst.tag or "")]
        if f.inst.note:
            comment.append(f.inst.note)
        comment = [c for c in comment if c]
        if comment:
            text = f"{text:<40}# " + " ".join(comment)
        lines.append(text)
    return "\n".join(lines) + "\n"


def print_mir(nodes: list, indent: int = 0) -> str:
    """The structured MIR as text (for --print-after-all)."""
    lines = []
    pad = "  " * indent
    for n in nodes:
        if isinstance(n, Inst):
            tag = f"e{n.tag}" if isinstance(n.tag, int) else str(n.tag or "")
            text = pad + n.text()
            lines.append(f"{text:<48}# {tag}" + (f" {n.note}" if n.note else "") if tag or n.note
                         else text)
        elif isinstance(n, Loop):
            extra = ", guarded" if n.guard else ""
            extra += f", counter in sp+{n.slot}" if n.slot is not None else ""
            lines.append(f"{pad}loop {n.counter}{extra} {{" + (f"   # {n.name}" if n.name else ""))
            lines.append(print_mir(n.body, indent + 1).rstrip("\n"))
            lines.append(pad + "}")
        else:
            lines.append(f"{pad}if {n.reg} != 0 {{" if n.skip_if == "zero"
                         else f"{pad}if {n.reg} == 0 {{")
            lines.append(print_mir(n.body, indent + 1).rstrip("\n"))
            lines.append(pad + "}")
    return "\n".join(line for line in lines if line != "") + "\n"
