"""A Program's instructions as the path walk and the path batch read them (``_Op``):
each worked out once, when a walk first reaches it.

A walk reads only its loop's body, and most loops are refused at their back-edge,
so working out all of .text up front (softmax: 1,403 words) was wasted: ``_Ops``
builds an instruction's ``_Op`` when first indexed, and one ``_Ops`` per Program
(Programs are cached and immutable) serves every walk.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields

from runtime_sim.isa.loop_bounds import affine_const
from runtime_sim.isa.loop_plan import _memory_shape
from runtime_sim.isa.semantics import SEMANTICS, operand_access
from vpuc.shave.isa import NUM_SREGS, NUM_VREGS, REG_SP


@dataclass(frozen=True)
class _Op:
    """What the walk and the batch need of one instruction of .text (computed once)."""

    mnemonic: str
    kind: str
    fn: object
    reads: tuple
    writes: tuple
    branch: int | None
    shape: object                  # loop_plan.MemoryShape of a load or store
    zeroing: bool                  # xor r, r, r: reads nothing
    # what every walk would work out again from the above (the walk's inner loop):
    operands: tuple = ()           # per read: (0, Affine) an immediate, (1, key) a scalar,
                                   # (2, None) a vector or mask (never affine)
    first_reads: tuple = ()        # registers it reads (none when zeroing)
    scalar_out: tuple = ()
    mask_out: tuple = ()
    reads_vectors: bool = False
    moves_sp: bool = False
    # an operation with no scalar or mask result (vector arithmetic): the walk notes only
    # its registers, nothing of its operands' values
    plain: bool = False


_OPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Ops:
    """A Program's ``_Op`` per .text index, each worked out when first indexed."""

    __slots__ = ("_decoded", "_ops")

    def __init__(self, decoded) -> None:
        self._decoded = decoded
        self._ops: list[_Op | None] = [None] * len(decoded)

    def __len__(self) -> int:
        return len(self._ops)

    def __getitem__(self, i: int) -> _Op:
        op = self._ops[i]
        if op is None:
            op = self._ops[i] = word_op(self._decoded[i])
        return op


def instructions(program) -> _Ops:
    ops = _OPS.get(program)
    if ops is None:
        ops = _OPS[program] = _Ops(program.decoded)
    return ops


# Decoded words are shared and never change (``encoding.decode_word``): a word's ``_Op``
# is worked out once, for every Program holding it (the library kernels share their
# driver's code).  By id, the word kept so the id stays its own; bounded.
_BY_WORD: dict[int, tuple] = {}


def word_op(dec) -> _Op:
    found = _BY_WORD.get(id(dec))
    if found is None or found[0] is not dec:
        if len(_BY_WORD) >= 1 << 16:
            _BY_WORD.clear()
        found = _BY_WORD[id(dec)] = (dec, _make_op(dec))
    return found[1]


def _make_op(dec) -> _Op:
    sem = SEMANTICS[dec.info.opcode]
    access = operand_access(dec)
    kind = sem.kind
    shape = _memory_shape(dec, sem.mnemonic, kind) if kind in ("load", "store") else None
    zeroing = _zeroing(sem.mnemonic, access)
    operands, registers = [], []
    reads_vectors = False
    for where, key in access.reads:             # one pass: a cold walk meets ~300 words
        if where == "imm":
            operands.append((0, affine_const(int(key))))
            continue
        registers.append(key)
        if key < NUM_SREGS:
            operands.append((1, key))
        else:
            operands.append((2, None))
            reads_vectors = True
    scalar_out = tuple([key for key in access.writes if key < NUM_SREGS])
    mask_out = tuple([key for key in access.writes if key >= NUM_SREGS + NUM_VREGS])
    return _new_op(sem.mnemonic, kind, sem.fn, access.reads, access.writes, access.branch,
                   shape, zeroing, tuple(operands), () if zeroing else tuple(registers),
                   scalar_out, mask_out, reads_vectors, REG_SP in access.writes,
                   kind == "op" and not scalar_out and not mask_out)


_OP_FIELDS = tuple(f.name for f in fields(_Op))


def _new_op(*values) -> _Op:
    """``_Op(*values)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__``
    per field: 2.9 of a word's 5.2 us); the same fields, so an equal ``_Op``."""
    op = object.__new__(_Op)
    op.__dict__.update(zip(_OP_FIELDS, values))
    return op


def _zeroing(mnemonic: str, access) -> bool:
    """``vxor v, v, v`` and friends: the result is 0 whatever the register held."""
    return (mnemonic in ("xor", "vxor", "mxor") and access.reads[0] == access.reads[1]
            and access.reads[0][0] == "reg")
