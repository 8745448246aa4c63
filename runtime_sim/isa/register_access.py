"""What a decoded SHAVE instruction reads and writes: one numbering of the register
file and the operands of each word in the order its semantic function takes them
(the value conventions are in ``semantics.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.shave.encoding import Decoded
from vpuc.shave.isa import NUM_MREGS, NUM_SREGS, NUM_VREGS

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
    for op in dec.info.operands:
        kind = op.kind
        if kind == "mem":
            reads += [("reg", register_key("s", dec.fields[op.field])), ("imm", U32(dec.imm))]
        elif kind in ("imm", "f32", "f16", "sym"):
            reads.append(("imm", U32(dec.imm)))
        elif kind == "label":
            branch = int(np.int32(np.uint32(dec.imm)))
        else:
            key = register_key(kind[0], dec.fields[op.field])
            keys = [key, key + 1] if kind in ("sa2", "sd2") else [key]
            if kind in ("sa", "va", "ma", "su", "vu", "sa2"):
                reads += [("reg", k) for k in keys]
            if kind in ("sd", "vd", "md", "su", "vu", "sd2"):
                writes += keys
    return Access(tuple(reads), tuple(writes), branch)
