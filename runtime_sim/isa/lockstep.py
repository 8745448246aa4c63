"""Several invocations of one kernel interpreted in lockstep: one step per instruction.

A library kernel's driver (its prologue: the params read, the iteration space built; the
walker between rows; the epilogue) is a few hundred scalar instructions outside the
loops the fast path batches, the same instructions for every invocation of a class.
``run_lockstep`` interprets them once for all the invocations: each register holds one
value when every invocation holds the same bits, else one per invocation (a leading
axis, as the semantics take); loads and stores go to each invocation's own memory
(``LockstepMemory``, one row per invocation, each ``WindowMemory`` checking its own
accesses).  Timing is shared: the same instructions issued from the same state give the
same cycles.  At the fast path's hooks each invocation's own ``FastLoops`` is asked with
its own registers, as alone; their batches run together (``execute_together``).

Anything that would make the invocations differ in what they do next -- a branch taken
by some, batches taken by some or ending apart, a fault, the stack check, the step
limit -- stops the lockstep before that instruction has any effect, and hands each
invocation's state to ``interpreter.run_steps`` (``state=``) to go on alone from there:
alone, that instruction then runs (or faults) as it always would.  So every register,
memory byte, cycle and error is each invocation's alone.
"""

from __future__ import annotations

import weakref
from collections import Counter

import numpy as np

from runtime_sim.isa.cycles import finish, issue_steps, new_ready
from runtime_sim.isa.interpreter import _LazyRunResult, default_stack_top, initial_registers
from runtime_sim.isa.lockstep_steps import SPLIT, LockstepMemory, _Split, lockstep_steps
from runtime_sim.isa.loop_chunk_many import execute_together
from runtime_sim.isa.memory import AccessFault
from runtime_sim.isa.program import BAD_TARGET, HALT, BadTarget, Program
from runtime_sim.isa.semantics import NUM_REGISTER_KEYS
from runtime_sim.isa.straight_blocks import Block, block, straight_blocks
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import NUM_SREGS


# A lockstep saves each invocation's interpreting of the instructions it runs once for all,
# and costs a split of the registers at every fast-path hook and a merge after every
# batch: a generated kernel's few dozen prologue and epilogue instructions, issued as
# remembered blocks, cost less alone.  Measured on the encoder layer (instructions
# interpreted per call in lockstep; instructions of .text outside the fast path's loops):
# its elementwise kernels 7-65 (7-65), 1.3x slower in lockstep; its layer norm 389 (362)
# and softmax 477 (687), faster.  A program with fewer instructions outside its loops
# runs alone.
MIN_SHARED = 150
_OUTSIDE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def worth_lockstep(program: Program, heads: dict[int, int]) -> bool:
    """Whether ``program``'s invocations run in lockstep: at least ``MIN_SHARED`` of its
    instructions outside the loops ``heads`` (head -> back-edge) the fast path may batch."""
    outside = _OUTSIDE.get(program)
    if outside is None:
        inside = set()
        for head, branch in heads.items():
            inside.update(range(head, branch + 1))
        outside = _OUTSIDE[program] = len(program.decoded) - len(inside)
    return outside >= MIN_SHARED


def run_lockstep(program: Program, memories: list, loops: list, entry: int,
                 args: list[tuple[int, int]], max_steps: int):
    """Run invocations of ``program`` (their ``memories``, ``FastLoops`` and (args_addr,
    args_size)) from byte offset ``entry`` in lockstep.  Returns ("done", results), or
    ("alone", states): each invocation's ``run_steps`` state to go on from."""
    n = len(memories)
    R = merge([initial_registers(program, a, s, default_stack_top(m))
               for (a, s), m in zip(args, memories)])
    stacked = set(stacked_keys(R))      # the registers holding one value per invocation
    parts: dict = {}                    # a stacked value's per-invocation values (``split``)
    memory = LockstepMemory(memories, [1] * n)
    steps = lockstep_steps(program)
    end = len(program.flat)
    heads = loops[0].entries
    # the interpreter's straight-line blocks: the same timing, issued once per block
    blocks = straight_blocks(program, heads)
    blocks_ran: list[Block] = []
    ready = new_ready()
    counts = [0] * end
    own = [Counter() for _ in range(n)]      # what each one's fast path counted
    now = stalls = executed = 0
    i = program.index_of(program.base + entry)

    def counted(j: int) -> list[int]:
        """Invocation ``j``'s count of each instruction run."""
        for blk in blocks_ran:                 # each of a block's instructions ran once
            for index in range(blk.start, blk.start + blk.length):
                counts[index] += 1
        blocks_ran.clear()
        mine = list(counts)
        for index, count in own[j].items():
            mine[index] += count
        return mine

    def alone(at: int, each=None) -> tuple:
        """Each invocation's state at instruction ``at`` (or ``each[j]``: its own)."""
        states = []
        for j in range(n):
            if each is not None and each[j] is not None:
                Rj, rj, nj, sj, ej, at_j = each[j]
                states.append((Rj, rj, nj, sj, ej, counted(j), at_j))
            else:
                states.append((split(R, j, stacked, parts), list(ready), now, stalls,
                               executed, counted(j), at))
        return "alone", states

    def consult(head: int, branch: int | None, forward: bool, paths: bool = True):
        """Each invocation's fast path at a loop head, as alone: None when all decline,
        else (their common result, registers, ready) when all took the same batch, or
        (each's state to go on alone from, or None where it declined; registers, ready)."""
        results, regs, readies = [], [], []
        # the timing state each asks with: one copy of ``ready`` until a batch taken
        # changes it (a decline leaves it as it is; the callers copy it for each)
        rj = list(ready)
        for j in range(n):
            Rj = split(R, j, stacked, parts)
            if forward:
                result = loops[j].enter(head, Rj, rj, now, memories[j], own[j],
                                        max_steps - executed, float("inf"), paths=paths)
            else:
                result = loops[j](head, branch, Rj, rj, now, memories[j], own[j],
                                  max_steps - executed, float("inf"))
            results.append(result)
            regs.append(Rj)
            readies.append(rj)
            if result is not None:
                rj = list(ready)
        if all(result is None for result in results):
            return None
        pending = [fl for fl in loops if getattr(fl, "pending", None) is not None]
        if pending:
            execute_together(pending)
        first = results[0]
        if all(result == first for result in results) and all(
                rj == readies[0] for rj in readies[1:]):
            return first, merge(regs, R, stacked, parts), readies[0]
        each = [None if result is None else
                (regs[j], readies[j], result[0], stalls + result[3], executed + result[2],
                 result[1]) for j, result in enumerate(results)]
        return each, regs, readies

    with np.errstate(all="ignore"):
        while True:
            blk = blocks[i]
            if blk is not None and executed + (
                    blk.length if blk.__class__ is Block else blk - i) <= max_steps:
                blk = block(program, blocks, i)
                at = i
                try:
                    for at in range(i, i + blk.length):
                        nxt = steps[at](R, memory, stacked)
                        if nxt == SPLIT or nxt == BAD_TARGET:
                            raise _Split
                except (_Split, AccessFault, BadTarget):
                    # the block's instructions before ``at`` ran: issued one by one
                    now, stalled = issue_steps(blk.issues[:at - i], ready, now, {})
                    for index in range(i, at):
                        counts[index] += 1
                    executed += at - i
                    stalls += stalled
                    return alone(at)
                i = at
                executed += blk.length
                now, stalled = blk.issue(ready, now)
                stalls += stalled
                blocks_ran.append(blk)
                penalty = blk.penalty
            else:
                if executed >= max_steps:
                    return alone(i)
                _, sources, dests, slot, other, busy, latency, closes, penalty = program.flat[i]
                try:
                    nxt = steps[i](R, memory, stacked)
                except (_Split, AccessFault, BadTarget):
                    return alone(i)
                if nxt == SPLIT or nxt == BAD_TARGET:
                    return alone(i)
                executed += 1
                counts[i] += 1
                # cycles.issue_steps, inline (as the interpreter's)
                start = now
                for key in sources:
                    if ready[key] > start:
                        start = ready[key]
                operands = start
                if other is not None and ready[slot] > start and ready[other] < ready[slot]:
                    slot = other
                free = ready[slot]
                if free > start:
                    start = free
                ready[slot] = start + busy
                done = start + latency
                for key in dests:
                    ready[key] = done
                stall = operands - (now + 1 if now + 1 > free else free)
                if stall > 0:
                    stalls += stall
                now = start + 1 if closes else start
            if nxt is None:
                i += 1
                if i == end:
                    return alone(i - 1)          # alone: ran past the end of .text
                if i in heads:
                    got = consult(i, None, True, paths=False)
                    if got is not None:
                        result, regs, readies = got
                        if type(result) is list:
                            return alone(i, [s if s is not None else
                                             (regs[j], list(ready), now, stalls, executed, i)
                                             for j, s in enumerate(result)])
                        now, i, ran, stalled = result
                        R, ready = regs, readies
                        stacked = set(stacked_keys(R))
                        executed += ran
                        stalls += stalled
            elif nxt == HALT:
                results = []
                for j in range(n):
                    Rj = split(R, j, stacked, parts)
                    results.append(_LazyRunResult.made(
                        program, Rj, counted(j), [],
                        cycles=finish(ready, now), instructions=executed, stall_cycles=stalls,
                        scalar_regs=[int(v) for v in Rj[:NUM_SREGS]],
                        exit_pc=program.base + i * WORD_BYTES,
                        batched_iterations=loops[j].batched_iterations))
                return "done", results
            else:
                now += penalty
                got = None
                if nxt <= i:
                    got = consult(nxt, i, False)
                elif nxt in heads:
                    got = consult(nxt, None, True)
                if got is not None:
                    result, regs, readies = got
                    if type(result) is list:
                        return alone(nxt, [s if s is not None else
                                           (regs[j], list(ready), now, stalls, executed, nxt)
                                           for j, s in enumerate(result)])
                    now, nxt, ran, stalled = result
                    R, ready = regs, readies
                    stacked = set(stacked_keys(R))
                    executed += ran
                    stalls += stalled
                i = nxt


# --- registers: one value for all, or one per invocation ---------------------------------

def merge(regs: list[list], before: list | None = None, keys=(),
          cache: dict | None = None) -> list:
    """One register file from each invocation's: a register's one value when all hold
    the same bits, else theirs along a leading axis.  ``before``: the merged file they
    were split from (``split(before, j, keys, cache)``): only registers written since are
    looked at (a value is replaced, never changed in place)."""
    merged = list(regs[0])
    if before is None:
        candidates = range(NUM_REGISTER_KEYS)
    else:
        candidates = set()
        for r in regs:
            candidates.update(key for key, (v, w) in enumerate(zip(r[:NUM_REGISTER_KEYS],
                                                                   before)) if v is not w)
    for key in candidates:
        values = [r[key] for r in regs]
        if before is not None and key in keys:
            old = before[key]
            known = cache.get(id(old))
            if known is not None and known[0] is old and all(
                    v is w for v, w in zip(values, known[1])):
                merged[key] = old
                continue
        if key < NUM_SREGS:
            ints = [int(v) for v in values]
            if ints.count(ints[0]) != len(ints):
                merged[key] = np.array(ints, np.uint32)
        else:
            raw = [np.asarray(v) for v in values]
            b0 = raw[0].tobytes()
            if any(r is not raw[0] and r.tobytes() != b0 for r in raw[1:]):
                merged[key] = np.stack(raw)
    return merged


def stacked_keys(R: list) -> list[int]:
    """The registers holding one value per invocation."""
    return [key for key in range(NUM_REGISTER_KEYS)
            if type(R[key]) is np.ndarray and R[key].ndim == (1 if key < NUM_SREGS else 2)]


def split(R: list, j: int, keys: list[int] | None = None, cache: dict | None = None) -> list:
    """Invocation ``j``'s register file (``keys``: ``stacked_keys(R)``; ``cache``: each
    stacked value's parts by id, so that values split again are the same objects)."""
    cache = {} if cache is None else cache
    out = list(R)
    for key in stacked_keys(R) if keys is None else keys:
        v = R[key]
        parts = cache.get(id(v))
        if parts is None or parts[0] is not v:
            parts = cache[id(v)] = (v, [v[i] if key < NUM_SREGS else v[i].copy()
                                          for i in range(len(v))])
        out[key] = parts[1][j]
    return out
