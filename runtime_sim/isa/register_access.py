"""What a decoded SHAVE instruction reads and writes: one numbering of the register
file and the operands of each word in the order its semantic function takes them
(the value conventions are in ``semantics.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.shave.encoding import Decoded
from vpuc.shave.isa import FORMAT_OPERANDS, NUM_MREGS, NUM_SREGS, NUM_VREGS

U32 = np.uint32

# --- the register file and what an instruction reads and writes ----------------------

# One numbering of all registers: s0..s31 = 0..31, v0..v31 = 32..63, m0..m7 = 64..71.
REGISTER_KEY_BASE = {"s": 0, "v": NUM_SREGS, "m": NUM_SREGS + NUM_VREGS}
NUM_REGISTER_KEYS = NUM_SREGS + NUM_VREGS + NUM_MREGS


def register_key(regfile: str, number: int) -> int:
    return REGISTER_KEY_BASE[regfile] + number


@dataclass(frozen=True)
class Access:
    """The operands of one decoded instruction, in the semantic function's order.

    ``reads`` items are ``("reg", key)`` or ``("imm", np.uint32)``; ``writes``
    are register keys, in the order the function returns them; ``branch`` is
    the pc-relative byte offset of a label operand, if any.  ``call`` also
    writes lr and ``ret`` reads it (not listed: they have no semantic function).
    """

    reads: tuple[tuple[str, object], ...]
    writes: tuple[int, ...]
    branch: int | None


def operand_access(dec: Decoded) -> Access:
    """The operands of ``dec`` (decoded words are shared and never change: computed once
    per word)."""
    found = _ACCESSES.get(id(dec))
    if found is None or found[0] is not dec:
        if len(_ACCESSES) >= 1 << 16:
            _ACCESSES.clear()
        found = _ACCESSES[id(dec)] = (dec, _operand_access(dec))
    return found[1]


_ACCESSES: dict[int, tuple[Decoded, Access]] = {}


def _operand_access(dec: Decoded) -> Access:
    reads: list[tuple[str, object]] = []
    writes: list[int] = []
    branch = None
    fields = dec.fields
    imm = None                  # its uint32, made once per word (and only if an operand has it)
    for step, field, key, pair, read, write in _plan(dec.info.format):
        if step == _REGISTER:
            key += fields[field]
            if read:
                reads.append(("reg", key))
                if pair:
                    reads.append(("reg", key + 1))
            if write:
                writes.append(key)
                if pair:
                    writes.append(key + 1)
        elif step == _LABEL:
            branch = int(np.int32(np.uint32(dec.imm)))
        else:
            if step == _MEMORY:
                reads.append(("reg", key + fields[field]))
            if imm is None:
                imm = U32(dec.imm)
            reads.append(("imm", imm))
    # ``Access(...)`` without the frozen dataclass's ``__init__`` (an ``object.__setattr__``
    # per field): the same fields, an equal Access, once per word of a cold run
    found = object.__new__(Access)
    found.__dict__.update(reads=tuple(reads), writes=tuple(writes), branch=branch)
    return found


# A format's operands as steps, worked out once per format, not per word (932 words of
# the encoder's kernels share a few dozen formats): (step, field, key base, register
# pair, read, write).
_REGISTER, _MEMORY, _IMMEDIATE, _LABEL = range(4)
_PLANS: dict[str, tuple] = {}


def _plan(format_: str) -> tuple:
    found = _PLANS.get(format_)
    if found is None:
        steps = []
        for op in FORMAT_OPERANDS[format_]:
            kind = op.kind
            if kind == "mem":
                steps.append((_MEMORY, op.field, REGISTER_KEY_BASE["s"], False, True, False))
            elif kind in ("imm", "f32", "f16", "sym"):
                steps.append((_IMMEDIATE, None, 0, False, True, False))
            elif kind == "label":
                steps.append((_LABEL, None, 0, False, False, False))
            else:
                steps.append((_REGISTER, op.field, REGISTER_KEY_BASE[kind[0]],
                              kind in ("sa2", "sd2"),
                              kind in ("sa", "va", "ma", "su", "vu", "sa2"),
                              kind in ("sd", "vd", "md", "su", "vu", "sd2")))
        found = _PLANS[format_] = tuple(steps)
    return found
