"""Straight-line blocks of several invocations run in lockstep: a generated kernel's
software-pipelined prologue and epilogue, once per class instead of once per invocation.

A generated kernel's loop is entered through a prologue (its constants, then stage 1 of
the first iterations: vector loads and arithmetic) and left through an epilogue (stage 2
of the last ones: arithmetic and vector stores), some 75 instructions that the fast
interpreter runs one runner call at a time for every invocation, between the batches
that ``loop_chunk_many`` already runs for all of a class's invocations at once.  The
invocations of a class run the same code, so ``invoke.invoke_together`` has each
``interpreter.run_steps`` pause at such a block (``FastLoops.pending_block``) and runs the
invocations paused at the same ``Block`` here, each instruction once for all of them:

* registers the block reads before writing are taken from each invocation's registers
  (one value when they all hold the same object, else stacked: a row per invocation);
  an operation is its ``SEMANTICS`` function on those values (batched over a leading
  axis: each row computed as alone, as the loop batches rely on), so every value is the
  one the invocation alone computes (``unbatched`` is tested bit-identical with them);
* a load or store is the invocation's own runner on its own memory (its bounds, its
  sanitizer), with the registers it reads as the block left them so far;
* at the end each invocation's registers get their rows of what the block wrote.

Nothing is committed to the registers before the end, and a block is run this way only
when it has no loads or no stores (every block of a generated kernel: the prologue loads,
the epilogue stores): re-running it alone after a partial run then does exactly what the
first run did.  So when anything fails (a fault, a sanitizer refusal), the lockstep run
is dropped and each invocation runs its block alone, as without lockstep: the first
invocation (in order) that fails raises its own error, at its own instruction.  Blocks
with a stack-checked instruction (writing ``sp``) and block groups of one invocation run
alone too.  Timing is the interpreter's: it still issues the block (``Block.issue``).
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.semantics import NUM_REGISTER_KEYS, SEMANTICS, operand_access
from vpuc.shave.isa import NUM_SREGS, REG_SP

# Per Block (by id; the entry holds the block, so no id is reused while it lives): its
# lockstep schedule, or None when it must run alone.  Blocks live as long as their
# Program, which ``load_kernel`` caches: bounded, not weak (Block has no weakref slot).
_SCHEDULES: dict[int, tuple] = {}
MAX_SCHEDULES = 2048

_OP, _LOAD, _STORE = 0, 1, 2


class BlockPending:
    """A block an invocation paused at: ``run_steps`` runs it alone on resuming unless
    ``done`` (then only the rest of the block's bookkeeping)."""

    __slots__ = ("program", "block", "R", "memory", "done")

    def __init__(self, program, block, R: list, memory) -> None:
        self.program, self.block, self.R, self.memory = program, block, R, memory
        self.done = False


def schedule(program, block) -> tuple | None:
    """The lockstep steps of ``block``'s straight instructions (all but its last), the
    registers it reads before writing them and those it writes; None when it has loads
    and stores, or writes ``sp``."""
    found = _SCHEDULES.get(id(block))
    if found is not None and found[0] is block:
        return found[1]
    made = _schedule(program, block)
    if len(_SCHEDULES) >= MAX_SCHEDULES:
        _SCHEDULES.clear()
    _SCHEDULES[id(block)] = (block, made)
    return made


def _schedule(program, block) -> tuple | None:
    steps: list[tuple] = []
    entry: list[int] = []           # read before the block writes them
    written: dict[int, None] = {}   # in order of first write
    loads = stores = False
    for offset, runner in enumerate(block.straight):
        index = block.start + offset
        dec = program.decoded[index]
        sem = SEMANTICS[dec.info.opcode]
        if sem.kind == "nop":
            continue
        if sem.kind not in ("op", "load", "store"):
            return None
        access = operand_access(dec)
        if REG_SP in access.writes:
            return None             # its runner checks the stack: left to the interpreter
        constant = program.first_constant(index)
        reads = []
        for where, value in access.reads:
            if where == "reg":
                reads.append(value)
            else:
                reads.append(constant)
                constant += 1
        for key in reads:
            if key not in written and key not in entry:
                entry.append(key)
        writes = tuple(access.writes)
        if sem.kind == "op":
            steps.append((_OP, sem.fn, tuple(reads), writes))
        else:
            loads |= sem.kind == "load"
            stores |= sem.kind == "store"
            steps.append((_LOAD if sem.kind == "load" else _STORE, runner, tuple(reads), writes))
        for key in writes:
            written[key] = None
    if loads and stores:
        return None
    return tuple(steps), tuple(entry), tuple(written)


def run_blocks_together(pending: list) -> int:
    """Run the ``BlockPending`` of ``pending`` (``FastLoops`` paused at a block, one per
    invocation) paused at the same block with others in lockstep, marking them done; the
    rest, and every group whose lockstep run fails, are left to run alone.  Returns how
    many invocations' blocks ran in lockstep."""
    groups: dict[int, list] = {}
    for loops in pending:
        groups.setdefault(id(loops.pending_block.block), []).append(loops.pending_block)
    ran = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        plan = schedule(members[0].program, members[0].block)
        if plan is None:
            continue
        try:
            finals = _lockstep(plan, members)
        except Exception:           # noqa: BLE001 -- each alone raises its own error
            continue
        for member, final in zip(members, finals):
            R = member.R
            for key, value in final:
                R[key] = value
            member.done = True
        ran += len(members)
    return ran


def _lockstep(plan: tuple, members: list) -> list[list]:
    """Each member's (key, value) writes of the block run for all at once."""
    steps, entry, written = plan
    Rs = [member.R for member in members]
    values: dict[int, object] = {}
    for key in entry:
        first = Rs[0][key]
        if all(R[key] is first for R in Rs):
            values[key] = first
        else:
            values[key] = _stacked(key, [R[key] for R in Rs])
    locals_: list | None = None     # each member's registers for its memory steps
    for code, fn, reads, writes in steps:
        if code == _OP:
            result = fn(*[values[key] for key in reads])
            if len(writes) == 1:
                values[writes[0]] = result
            else:
                for key, value in zip(writes, result):
                    values[key] = value
            continue
        if locals_ is None:
            locals_ = [list(R) for R in Rs]
        outs: list[list] = [[] for _ in writes]
        for j, (member, R) in enumerate(zip(members, locals_)):
            for key in reads:
                R[key] = _row(key, values[key], j)
            fn(R, member.memory)
            for out, key in zip(outs, writes):
                out.append(R[key])
        for key, out in zip(writes, outs):
            values[key] = _stacked(key, out)
    return [[(key, _row(key, values[key], j, copy=True)) for key in written]
            for j in range(len(members))]


def _scalar(key: int) -> bool:
    """A scalar register or an immediate (else a vector or mask register)."""
    return key < NUM_SREGS or key >= NUM_REGISTER_KEYS


def _stacked(key: int, values: list) -> np.ndarray:
    """One row per member: (members,) words or (members, 16) vectors or masks."""
    return np.array(values, dtype=np.uint32) if _scalar(key) else np.stack(values)


def _row(key: int, value, j: int, copy: bool = False):
    """Member ``j``'s value of a register: its row of a stacked value (a scalar's
    ``(members,)``, a vector's ``(members, 16)``), else the value all share."""
    if type(value) is not np.ndarray or value.ndim == (0 if _scalar(key) else 1):
        return value
    row = value[j]
    return row.copy() if copy and row.ndim else row
