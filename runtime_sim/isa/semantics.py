"""What every SHAVE opcode does: the one definition, shared by the exact
interpreter and the vectorized fast path.

Value conventions (every function accepts an arbitrary leading batch shape
``...``; batched and unbatched operands broadcast against each other):

* scalar register, immediate: ``np.uint32``, shape ``(...)`` -- immediates are
  passed as their raw 32-bit pattern (floats too);
* vector register: ``np.uint8``, shape ``(..., 16)``; lane i of an n-byte lane
  type is bytes [i*n, (i+1)*n), little-endian;
* mask register: ``bool``, shape ``(..., 16)``; bit i governs vector byte i.

A semantic function takes the values its instruction *reads*, in operand order
(a memory operand contributes its base register and its offset; a register
pair contributes low and high), and returns what it *writes* (a tuple for a
register pair).  Loads and stores also take the ``WindowMemory`` first.
Branch conditions return bool; ``loop`` returns (new count, taken).

Floating point: lanes are widened to float32, computed there and rounded once to
the lane type (f16 via numpy float16, bf16 via ``ml_dtypes.bfloat16``), round to
nearest even.  f32 has more than 2*11+2 significand bits, so f16 + - * / sqrt
computed this way are correctly rounded.  ``vfma`` evaluates in float64.
Transcendentals use numpy's float32 functions on contiguous arrays, so a lane's
result never depends on the batch it is computed in.  All numpy warnings
(overflow, invalid, divide) must be silenced by the caller (``np.errstate``):
the ISA defines those results, it does not trap.

The definitions live by instruction class: ``sem_scalar.py``, ``sem_memory.py`` and
``sem_vector.py`` (their shared helpers in ``sem_values.py``, the operands of a decoded
word in ``register_access.py``); this module holds control flow and joins them into
``SEMANTICS``, keyed by opcode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from runtime_sim.isa.register_access import (NUM_REGISTER_KEYS, REGISTER_KEY_BASE, Access,
                                             operand_access, register_key)
from runtime_sim.isa.sem_memory import MEMORY_OPS
from runtime_sim.isa.sem_scalar import SCALAR_OPS
from runtime_sim.isa.sem_values import U32, signed
from runtime_sim.isa.sem_vector import VECTOR_OPS
from vpuc.shave.isa import BY_MNEMONIC, INSTRUCTIONS

__all__ = ["BRANCH_CONDITIONS", "NUM_REGISTER_KEYS", "REGISTER_KEY_BASE", "SEMANTICS", "Access",
           "Semantic", "operand_access", "register_key"]


@dataclass(frozen=True)
class Semantic:
    mnemonic: str
    kind: str          # op, load, store, branch, loop, jump, call, ret, halt, nop
    fn: Callable | None


# --- control ----------------------------------------------------------------------------------

BRANCH_CONDITIONS: dict[str, Callable] = {
    "beq": lambda a, b: a == b,
    "bne": lambda a, b: a != b,
    "blt": lambda a, b: signed(a) < signed(b),
    "bge": lambda a, b: signed(a) >= signed(b),
    "bltu": lambda a, b: a < b,
    "bgeu": lambda a, b: a >= b,
    "beqz": lambda a: a == 0,
    "bnez": lambda a: a != 0,
}


def _loop(count):
    remaining = count - U32(1)
    return remaining, remaining != 0


# --- the table ---------------------------------------------------------------------------------

def _build() -> dict[int, Semantic]:
    by_name: dict[str, Semantic] = {}
    for name, fn in {**SCALAR_OPS, **VECTOR_OPS}.items():
        by_name[name] = Semantic(name, "op", fn)
    for name, (kind, fn) in MEMORY_OPS.items():
        by_name[name] = Semantic(name, kind, fn)
    for name, fn in BRANCH_CONDITIONS.items():
        by_name[name] = Semantic(name, "branch", fn)
    by_name["loop"] = Semantic("loop", "loop", _loop)
    for name in ("j", "call", "ret", "halt", "nop"):
        by_name[name] = Semantic(name, {"j": "jump"}.get(name, name), None)
    missing = sorted(set(BY_MNEMONIC) - set(by_name))
    extra = sorted(set(by_name) - set(BY_MNEMONIC))
    assert not missing and not extra, f"semantics out of sync: missing {missing}, extra {extra}"
    return {ins.opcode: by_name[ins.mnemonic] for ins in INSTRUCTIONS}


SEMANTICS: dict[int, Semantic] = _build()
