"""The lockstep's steps: each instruction on several invocations at once (``lockstep``).

A step runs one instruction on a register file whose registers hold one value for every
invocation or one per invocation (a leading axis, as the semantics take: ``stacked``
names them), over ``LockstepMemory``: each invocation's accesses on its own memory.  A
step that would make the invocations do different things next (a branch some take, a
return to different places, a fault, ``sp`` leaving a stack) has no effect and says so
(``SPLIT`` or ``_Split``), so the lockstep can hand each invocation on to run alone.
"""

from __future__ import annotations

import weakref
from operator import itemgetter

import numpy as np

from runtime_sim.isa.program import BAD_TARGET, HALT, Program
from runtime_sim.isa.register_access import operand_access
from runtime_sim.isa.semantics import SEMANTICS
from runtime_sim.isa.stacked_memory import StackedMemory
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import EXIT_ADDRESS, NUM_SREGS, REG_LR, REG_SP

SPLIT = -3          # a step's result: the invocations go on alone from this instruction


class _Split(Exception):
    """Raised by a step before it has any effect: go on alone from this instruction."""


class LockstepMemory(StackedMemory):
    """``StackedMemory`` of one row per invocation: a batched access is one access per
    invocation (its ``WindowMemory``'s one-address forms, checked), not a row view."""

    def read_rows(self, addresses, size: int) -> np.ndarray:
        if np.shape(addresses) != (self.total,):
            return super().read_rows(addresses, size)
        return np.stack([memory.read(a, size) for memory, a
                         in zip(self.memories, np.asarray(addresses, np.int64).tolist())])

    def write_rows(self, addresses, data: np.ndarray) -> None:
        if np.shape(addresses) != (self.total,):
            return super().write_rows(addresses, data)
        data = np.broadcast_to(data, (self.total, data.shape[-1]))
        for memory, a, row in zip(self.memories, np.asarray(addresses, np.int64).tolist(),
                                  data):
            memory.write(a, row)

    def gather(self, addresses, active=None) -> np.ndarray:
        shape = np.broadcast_shapes(np.shape(addresses), np.shape(active)) \
            if active is not None else np.shape(addresses)
        if shape != (self.total, 16):
            return super().gather(addresses, active)
        addresses = np.broadcast_to(np.asarray(addresses, np.int64), shape)
        masks = (np.broadcast_to(np.asarray(active, bool), shape) if active is not None
                 else [None] * self.total)
        return np.stack([memory.gather(a, m) for memory, a, m
                         in zip(self.memories, addresses, masks)])

    def scatter(self, addresses, values, active=None) -> None:
        shapes = [np.shape(addresses), np.shape(values)]
        if active is not None:
            shapes.append(np.shape(active))
        shape = np.broadcast_shapes(*shapes)
        if shape != (self.total, 16):
            return super().scatter(addresses, values, active)
        addresses = np.broadcast_to(np.asarray(addresses, np.int64), shape)
        values = np.broadcast_to(np.asarray(values, np.uint8), shape)
        masks = (np.broadcast_to(np.asarray(active, bool), shape) if active is not None
                 else [None] * self.total)
        for memory, a, v, m in zip(self.memories, addresses, values, masks):
            memory.scatter(a, v, m)


# --- one step per instruction, on every invocation at once ---------------------------------

_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Steps(dict):
    """Index -> step, each made when first run (a kernel's .text is mostly loops the
    fast path batches: their steps are never needed)."""

    def __init__(self, program: Program) -> None:
        super().__init__()
        self.program = weakref.ref(program)     # weakly: the steps are kept by program

    def __missing__(self, index: int):
        step = self[index] = _make_step(self.program(), index)
        return step


def lockstep_steps(program: Program) -> "_Steps":
    """Each instruction's step (``_make_step``), remembered per program."""
    found = _STEPS.get(program)
    if found is None:
        found = _STEPS[program] = _Steps(program)
    return found


def _uniform(flags):
    """A condition's one value, or None when the invocations disagree."""
    if np.ndim(flags) == 0:
        return bool(flags)
    if flags.all():
        return True
    return False if not flags.any() else None


def _make_step(program: Program, index: int):
    """Instruction ``index`` on every invocation, ``step(R, mem, stacked)``: None, a
    target index, HALT, BAD_TARGET or SPLIT, as ``Program``'s runners, over values with a
    leading invocation axis (the registers in ``stacked``, kept up to date); it writes
    nothing before deciding that the invocations go on together.  Where it reads no
    stacked register, the program's own runner (its one-value forms) runs it."""
    dec = program.decoded[index]
    access = operand_access(dec)
    constant = program.first_constant(index)
    reads = []
    for where, value in access.reads:
        if where == "reg":
            reads.append(value)
        else:
            reads.append(constant)
            constant += 1
    writes = list(access.writes)
    target = BAD_TARGET
    if access.branch is not None and access.branch % WORD_BYTES == 0:
        if 0 <= index + access.branch // WORD_BYTES < len(program.decoded):
            target = index + access.branch // WORD_BYTES
    sem = SEMANTICS[dec.info.opcode]
    kind, fn = sem.kind, sem.fn
    get = itemgetter(*reads) if len(reads) > 1 else (
        (lambda R, k=reads[0]: (R[k],)) if reads else (lambda R: ()))
    reads_set = frozenset(reads)
    own = program.flat[index][0]
    if kind in ("op", "load"):
        checked = REG_SP in writes
        vector = [key >= NUM_SREGS for key in writes]

        def step(R, mem, stacked):
            if kind == "op" and not checked and reads_set.isdisjoint(stacked):
                own(R, mem)
                stacked.difference_update(writes)
                return None
            out = fn(mem, *get(R)) if kind == "load" else fn(*get(R))
            values = out if len(writes) > 1 else (out,)
            if checked:
                sp = np.asarray(values[writes.index(REG_SP)], np.int64)
                for memory in mem.memories:
                    lo, hi = memory.stack
                    if not (np.all(lo <= sp) and np.all(sp <= hi)):
                        raise _Split
            for key, value, wide in zip(writes, values, vector):
                R[key] = value
                if type(value) is np.ndarray and value.ndim == 1 + wide:
                    stacked.add(key)
                else:
                    stacked.discard(key)
            return None
        return step
    if kind == "store":
        return lambda R, mem, stacked: fn(mem, *get(R))
    if kind == "branch":
        def step(R, mem, stacked):
            if reads_set.isdisjoint(stacked):
                return own(R, mem)
            taken = _uniform(fn(*get(R)))
            return SPLIT if taken is None else (target if taken else None)
        return step
    if kind == "loop":
        counter = writes[0]

        def step(R, mem, stacked):
            if counter not in stacked:
                return own(R, mem)
            remaining, taken = fn(R[counter])
            taken = _uniform(taken)
            if taken is None:
                return SPLIT
            R[counter] = remaining
            return target if taken else None
        return step
    if kind == "ret":
        program = weakref.proxy(program)    # a step kept by its program: no cycle

        def step(R, mem, stacked):
            lr = R[REG_LR]
            if REG_LR in stacked:
                if not (lr == lr[0]).all():
                    return SPLIT
                lr = lr[0]
            address = int(lr)
            return HALT if address == EXIT_ADDRESS else program.index_of(address)
        return step
    if kind == "call":
        def step(R, mem, stacked):
            stacked.discard(REG_LR)
            return own(R, mem)
        return step
    return lambda R, mem, stacked: own(R, mem)        # jump, halt, nop
