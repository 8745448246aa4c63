"""Which scalar values of a kernel decide its cycles: the static half of cycles-only runs.

The timing model (``cycles.py``) never looks at a value, only at which
instructions run.  Which instructions run is decided by the operands of the
control instructions (branch, ``loop``, ``ret``'s lr); every access's address
(base and stride registers) must be known too, for the memory sanitizer and
the window checks, and the status in s0 at the end.  Those are the **critical**
scalar registers.  Working backwards over the control-flow graph, a register
is critical where a later instruction needs it critical (a ``ret`` goes back
after every call of its function), and an instruction defining a critical
register makes its own scalar operands critical; so are the scalars a mask is
made from (``vmask``, ``mset``: a mask says which bytes an access touches).
The operand kinds of the ISA table (``vpuc.shave.isa``) say which registers an
instruction reads and writes, and in which register file.

A kernel has **cycles independent of its data** when no critical register is
ever defined from a vector or mask register (``vext``, ``mget``, ``vred*``:
the ``SV``/``SM``/``SVI`` formats).  Loads are the other way data can reach a
scalar: a load defining a critical register is marked, and the cycles-only run
checks at run time that it reads neither CMX (tensor data) nor bytes whose
value the run did not compute (``cycles_only.py`` falls back to the full run
if it does).  A forward pass says what each scalar store's value may come
from: a vector -> scalar move (never computed), or unchecked loads, which the
run watches: a store's bytes are marked as not computed when a source of its
value is a vector, or a watched load that read CMX or such bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

import numpy as np

# VECTOR, _keys and load_bit are read from here by cycles_only
from runtime_sim.isa.cycles_slice_flow import (VECTOR, _Blocks, _keys, _sources,  # noqa: F401
                                               backward_step, critical_in,
                                               critical_out_blocks, load_bit,
                                               source_action)
from runtime_sim.isa.semantics import SEMANTICS, operand_access
from vpuc.shave.encoding import FIELDS, WORD_BYTES
from vpuc.shave.isa import NUM_SREGS, REG_ARGS_ADDR, REG_LR, VECTOR_BYTES

_CONTROL = frozenset({"branch", "loop", "jump", "call", "ret", "halt"})


class Role(NamedTuple):
    """What the cycles-only run does with one instruction."""

    skip: bool = False            # vector arithmetic, vector -> scalar: not run
    checked_load: bool = False    # a scalar load defining a critical register
    watched_load: int = 0         # an unchecked scalar load: its bit in store_sources
    store_sources: int = 0        # a scalar store: what its value may come from
    vector_store: bool = False


@dataclass(frozen=True)
class Slice:
    roles: tuple[Role, ...] | None      # None: the kernel's cycles may depend on data
    reason: str = ""
    critical_at: tuple[int, ...] = ()   # per instruction: critical scalar registers (bits)
    accesses: tuple = ()                 # per instruction: its ``semantics.Access``
    # The code but for its immediates (each word's fields but imm, the branch
    # targets): kernels equal in it run the same steps with other immediates
    # (``cycles_only.TimingProgram`` shares its steps by it).
    code: tuple = field(default=(), compare=False, repr=False)


class _Ins(NamedTuple):             # a tuple: a kernel's structure hashes in C
    kind: str
    uses: int            # scalar registers read (bits)
    defs: int            # scalar registers written (bits)
    address: int         # scalar registers forming an address (base, stride)
    vector_in: bool      # reads a vector or mask register
    vector_out: bool     # writes a vector or mask register
    scalar_mem: bool     # a scalar load or store
    target: int | None   # branch / jump / call target index


def _bits(keys) -> int:
    value = 0
    for key in keys:
        if key < NUM_SREGS:
            value |= 1 << key
    return value


def _instruction(index: int, dec, access, count: int) -> _Ins:
    target = None
    if access.branch is not None and access.branch % WORD_BYTES == 0:
        candidate = index + access.branch // WORD_BYTES
        target = candidate if 0 <= candidate < count else None
    return _Ins(*_shape(dec, access), target)


# Decoded words are shared and never change (``encoding.decode_word``): their registers
# are worked out once per word, not once per kernel that holds it.
_SHAPES: dict[int, tuple] = {}


def _shape(dec, access) -> tuple:
    """(kind, uses, defs, address, vector_in, vector_out, scalar_mem) of one word."""
    found = _SHAPES.get(id(dec))
    if found is not None and found[0] is dec:
        return found[1]
    info = dec.info
    plan = _OPCODE_SHAPES.get(info.opcode)
    if plan is None:
        plan = _OPCODE_SHAPES[info.opcode] = _opcode_shape(info)
    kind, address_fields, mask_from_scalar, extra_uses, extra_defs, scalar_mem = plan
    fields = dec.fields
    address = 0
    for name in address_fields:
        address |= 1 << fields[name]
    uses = defs = 0
    vector_in = vector_out = False
    for where, key in access.reads:
        if where == "reg":
            if key < NUM_SREGS:
                uses |= 1 << key
            else:
                vector_in = True
    for key in access.writes:
        if key < NUM_SREGS:
            defs |= 1 << key
        else:
            vector_out = True
    if mask_from_scalar:
        address |= uses         # a mask from a scalar (vmask, mset) says which bytes are accessed
    shape = (kind, uses | extra_uses, defs | extra_defs, address, vector_in, vector_out,
             scalar_mem)
    if len(_SHAPES) >= 1 << 16:
        _SHAPES.clear()
    _SHAPES[id(dec)] = (dec, shape)
    return shape


# Per opcode, what ``_shape`` reads off the table row (a word adds its fields): (kind, the
# fields naming address registers, a mask made from scalars, uses and defs of lr).
_OPCODE_SHAPES: dict[int, tuple] = {}


def _opcode_shape(info) -> tuple:
    sem = SEMANTICS[info.opcode]
    address_fields: list[str] = []
    for op in info.operands:
        if op.kind == "mem":
            address_fields.append(op.field)
        elif address_fields and op.kind == "sa" and sem.kind in ("load", "store") \
                and info.format.startswith("V"):
            address_fields.append(op.field)               # a strided access's stride
    return (sem.kind, tuple(address_fields), info.format == "MS",
            1 << REG_LR if sem.mnemonic == "ret" else 0,
            1 << REG_LR if sem.mnemonic == "call" else 0,
            info.format.startswith("S") and sem.kind in ("load", "store"))


def _successors(ins: list[_Ins]) -> list[tuple[int, ...]]:
    """Each instruction's successors; a ``ret`` returns after the calls of the functions
    it ends (a function: what its entry reaches without entering calls)."""
    count = len(ins)
    returns: dict[int, list[int]] = {}          # ret index -> return points
    calls: dict[int, list[int]] = {}            # function entry -> its return points
    for i, x in enumerate(ins):
        if x.kind == "call" and x.target is not None and i + 1 < count:
            calls.setdefault(x.target, []).append(i + 1)
    for entry, points in calls.items():
        seen, stack = set(), [entry]
        while stack:
            i = stack.pop()
            if i in seen or not 0 <= i < count:
                continue
            seen.add(i)
            x = ins[i]
            if x.kind == "ret":
                returns.setdefault(i, []).extend(points)
            elif x.kind in ("branch", "loop"):
                stack += [i + 1] + ([x.target] if x.target is not None else [])
            elif x.kind == "jump":
                stack += [x.target] if x.target is not None else []
            elif x.kind != "halt":
                stack.append(i + 1)             # a call: on after it returns
    out = []
    for i, x in enumerate(ins):
        kind = x.kind
        if kind in _FALLS_THROUGH:
            out.append((i + 1,) if i + 1 < count else ())
        elif kind in ("branch", "loop"):
            after = (i + 1,) if i + 1 < count else ()
            out.append(after + (x.target,) if x.target is not None else after)
        elif kind in ("jump", "call"):
            out.append((x.target,) if x.target is not None else ())
        elif kind == "ret":
            out.append(tuple(dict.fromkeys(returns.get(i, ()))))
        else:                                   # halt
            out.append(())
    return out


# every kind but control transfers: on to the next instruction
_FALLS_THROUGH = frozenset(("op", "load", "store", "nop"))


# The analysis sees only each instruction's opcode, register sets and branch target, not
# its immediates: kernels generated from one template at other sizes (a model's
# elementwise kernels) share it.  Keyed by that structure, bounded.
_BY_STRUCTURE: dict[tuple, tuple] = {}
MAX_STRUCTURES = 256


def analyse(decoded: list) -> Slice:
    """The critical registers of a decoded .text and each instruction's role."""
    count = len(decoded)
    get = _WORDS.get
    # An entry holds its word, so an id found is that word's (no id is reused while the
    # entry lives): one look-up per instruction, a miss only for a word new to the process.
    words = list(map(get, map(id, decoded)))
    if None in words:
        for i, found in enumerate(words):
            if found is None:
                dec = decoded[i]            # seen earlier in this .text, maybe
                words[i] = get(id(dec)) or _word(dec)
    offsets = list(map(_OFFSET, words))
    targets = [None] * count
    for i, offset in enumerate(offsets):
        if offset is not None and 0 <= offset + i < count:
            targets[i] = offset + i
    # The key holds each word's shape (shared per word) and the targets: no per-instruction
    # object is made unless the structure is new.
    targets = tuple(targets)
    key = (tuple(map(_SHAPE, words)), targets)
    found = _BY_STRUCTURE.get(key)
    if found is None:
        if len(_BY_STRUCTURE) >= MAX_STRUCTURES:
            _BY_STRUCTURE.clear()
        ins = list(map(_INS, words))
        for i, target in enumerate(targets):
            if target is not None:
                ins[i] = _Ins(*words[i][2][1:], target)
        found = _BY_STRUCTURE[key] = _analyse(decoded, ins, words)
    roles, reason, critical_at = found
    return Slice(roles, reason, critical_at, tuple(map(_ACCESS, words)),
                 (tuple(map(_FIELDS_BUT_IMM, words)), targets))


_ACCESS, _SHAPE, _OFFSET, _FIELDS_BUT_IMM, _INS = (itemgetter(i) for i in (1, 2, 3, 4, 7))


# Per decoded word (shared, never changed): (dec, access, (opcode, *shape), its branch
# offset in words or None, the word's fields but imm, its step of ``critical_in``, its
# role unless it is a scalar load or a scalar store, its ``_Ins`` without a target, its
# action in ``_sources``).
_WORDS: dict[int, tuple] = {}
_BUT_IMM = itemgetter(*(name for name in FIELDS if name != "imm"))


def _word(dec) -> tuple:
    access = operand_access(dec)
    branch = access.branch
    offset = branch // WORD_BYTES if branch is not None and branch % WORD_BYTES == 0 else None
    shape = (dec.info.opcode, *_shape(dec, access))
    derived = _DERIVED.get(shape)
    if derived is None:
        derived = _DERIVED[shape] = _derived(*shape[1:])
    found = (dec, access, shape, offset, _BUT_IMM(dec.fields), *derived)
    if len(_WORDS) >= 1 << 16:
        _WORDS.clear()
        _DERIVED.clear()
    _WORDS[id(dec)] = found
    return found


def _derived(kind, uses, defs, address, vector_in, vector_out, scalar_mem) -> tuple:
    """What ``_word`` keeps of a word's shape alone (its step of ``critical_in``, its role
    unless a scalar load or store, its ``_Ins`` without a target, its ``_sources`` action):
    made once per shape, not per word (the encoder's 932 words have 330 shapes)."""
    return (backward_step(kind, uses, defs, address, kind in _CONTROL, _STATUS),
            _role(kind == "op" and (vector_in or (vector_out and not defs)), False, 0, 0,
                  kind == "store" and not scalar_mem),
            _Ins(kind, uses, defs, address, vector_in, vector_out, scalar_mem, None),
            source_action(kind, uses, defs, address, vector_in, scalar_mem))


# ``_derived`` by (opcode, *shape); cleared with ``_WORDS``.
_DERIVED: dict[tuple, tuple] = {}


_STATUS = 1 << REG_ARGS_ADDR          # s0 holds the status at the exit


def _analyse(decoded: list, ins: list[_Ins], words: list[tuple]) -> tuple:
    """(roles, reason, critical registers per instruction) of ``analyse``; ``decoded``
    only names the instruction in the reason, ``words`` are ``_word``'s."""
    succ = _successors(ins)
    blocks = _Blocks(succ)
    steps = [found[5] for found in words]
    crit_in = critical_in(steps, succ, blocks)
    crit_out = critical_out_blocks(steps, succ, crit_in, blocks)
    for i, x in enumerate(ins):
        if x.vector_in and x.defs & crit_out[i]:       # ``critical_out``'s first such move
            return None, (f"{decoded[i].info.mnemonic} at .text+{i * WORD_BYTES:#x} "
                          "makes a scalar that decides control flow or an address"), ()
    # What a scalar store's value may come from: without scalar stores (a generated
    # kernel's), nothing to find (every instruction's is 0)
    if any(x.scalar_mem and x.kind == "store" for x in ins):
        sources = _sources(ins, succ, crit_out, blocks, [found[8] for found in words])
    else:
        sources = [0] * len(ins)
    roles = [found[6] for found in words]
    for i, x in enumerate(ins):
        if not x.scalar_mem:
            continue
        if x.kind == "load":
            critical = bool(x.defs & crit_out[i])
            roles[i] = _role(False, critical, 0 if critical else load_bit(i), sources[i], False)
        elif sources[i]:
            roles[i] = _role(False, False, 0, sources[i], False)
    return tuple(roles), "", tuple(crit_in)


_ROLES: dict[tuple, Role] = {}



def critical_out(ins: list, succ: list, crit_in: list[int]) -> tuple[list[int], int | None]:
    """The critical registers after each instruction, from the fixpoint's ``crit_in``
    (s0 at an exit: the status); and the first vector -> scalar move whose result is
    critical (the slice cannot skip vector work then), or None."""
    status = 1 << REG_ARGS_ADDR
    crit_out = []
    for i, x in enumerate(ins):
        out = 0
        for j in succ[i]:
            out |= crit_in[j]
        if x.kind in ("ret", "halt"):
            out |= status
        crit_out.append(out)
        if x.vector_in and x.defs & out:
            return crit_out, i
    return crit_out, None

def _role(*fields) -> Role:
    """One ``Role`` per distinct value (most instructions share a handful).  Roles naming
    loads (``watched_load``, ``store_sources``: bits ``2 << index``) are not shared: few
    are equal, and those bits hash alike every 61 indices (an int's hash is taken mod
    2^61 - 1), so a dict of them degrades to long probe chains (mvn: 8 ms)."""
    if fields[2] or fields[3]:
        return Role(*fields)
    found = _ROLES.get(fields)
    if found is None:
        if len(_ROLES) >= 1 << 16:
            _ROLES.clear()
        found = _ROLES[fields] = Role(*fields)
    return found


# A mask the slice leaves as data: every lane taken as active (cycles_only, cycles_only_path).
ALL_LANES = np.ones(VECTOR_BYTES, bool)
ALL_LANES.flags.writeable = False
