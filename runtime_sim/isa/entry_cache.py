"""Per-entry proofs of the fast path and the path batch, remembered by what they read.

Each time the interpreter offers a loop, the fast path proves it can batch it:
``fastpath._affine_pass`` walks the body for its trip count and footprints,
``path_walk.walk`` walks one iteration of an outer loop for its path, guards and
footprints, and both check that no iteration touches bytes another stores.
That work depends only on the loop's code and on a few inputs, never on vector
data:

* the affine pass reads the scalar registers and the mask registers at the
  head (``_footprint``'s active bytes of a mask the body does not set);
* the walk reads the same registers and the scalar words it promotes from
  memory (a stack frame's row pointers), whose addresses and bytes it records;
* the overlap checks read only the footprints, guards and the iteration count.

A library kernel invoked once per block of a layer enters its loops with the
same registers every time (the block's buffers sit at the same CMX slots), so
a proof found once is replayed.  The affine pass is keyed by the scalar
registers it reads and the masks, less its *pointers* (``pointer_registers``):
a generated kernel's blocks move through CMX, and a register that only ever
addresses memory moves the footprints it bases with it and decides nothing
else, so the remembered footprints are moved instead of walking again.  A walk
is keyed by every scalar and mask register, and reused only after re-reading
the words it promoted (a row pointer on
the stack that moved is relocated by ``path_relocate``, any other change is a
miss), and what depends on the accessible memory or
the step and cycle budgets (``first_outside``, ``timing.within``) is checked on
every entry as before.  A changed trip count or branch changes a deciding
register or a promoted word, and a moved pointer moves every footprint based on
it (the fault bounds and overlap checks are redone on them), so no entry is
served a stale proof.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import MOD, Footprint, independent
from runtime_sim.isa.semantics import NUM_REGISTER_KEYS
from vpuc.shave.isa import NUM_SREGS, NUM_VREGS

# Entries kept per loop cache before it starts afresh (a key is ~40 small ints).
MAX_ENTRIES = 4096
_MASKS = slice(NUM_SREGS + NUM_VREGS, NUM_REGISTER_KEYS)


def register_key(R: list) -> tuple:
    """What a per-entry proof may read of the registers: every scalar, every mask."""
    return (tuple(map(int, R[:NUM_SREGS])),
            b"".join([np.asarray(m, bool).tobytes() for m in R[_MASKS]]))


class EntryCache:
    """Proofs of one Program's loops by (head, branch, registers), bounded in size."""

    def __init__(self) -> None:
        self._entries: dict[tuple, object] = {}
        self.hits = 0
        self.misses = 0
        self.relocated = 0          # hits whose footprints moved with their pointers

    def get(self, key: tuple, still_valid=None):
        """The proof under ``key``, if any and ``still_valid(proof)`` (when given)."""
        found = self._entries.get(key)
        if found is not None and (still_valid is None or still_valid(found)):
            self.hits += 1
            return found
        self.misses += 1
        return None

    def clear(self) -> None:
        self._entries.clear()

    def put(self, key: tuple, value) -> None:
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = value


class LoopFacts:
    """The affine pass of one entry: footprints and the first exiting iteration, or the
    reason it declined; and the overlap check per iteration count, once each."""

    __slots__ = ("footprints", "exit_at", "declined", "_independent")

    def __init__(self, footprints: list[Footprint] | None, exit_at: int | None,
                 declined: Exception | None = None) -> None:
        self.footprints, self.exit_at, self.declined = footprints, exit_at, declined
        self._independent: dict[int, bool] = {}

    def independent(self, iterations: int) -> bool:
        answer = self._independent.get(iterations)
        if answer is None:
            answer = self._independent[iterations] = independent(self.footprints, iterations)
        return answer


def entry_facts(cache: EntryCache, plan, loop: tuple, R: list, affine_pass,
                declined: type) -> LoopFacts:
    """The affine pass's facts for this entry of ``loop`` (head, branch): remembered by
    the registers the pass reads, less those it only uses as moving pointers
    (``pointer_registers``), whose moves shift the remembered footprints; else
    ``affine_pass(bases)``'s (or the ``declined`` it raised)."""
    moving = plan.pointers
    if moving is None:
        moving = plan.pointers = pointer_registers(plan)
    keyed, pointers, origins = moving
    key = (loop, tuple([int(R[k]) for k in keyed]),
           b"".join([np.asarray(m, bool).tobytes() for m in R[_MASKS]]))
    found = cache.get(key)
    if found is None:
        bases: list[int] = []
        try:
            facts = LoopFacts(*affine_pass(bases))
        except declined as why:
            facts = LoopFacts(None, None, why)
        cache.put(key, (facts, tuple([int(R[k]) for k in pointers]), bases))
        return facts
    facts, entered, bases = found
    moved = {k: (int(R[k]) - was) % MOD for k, was in zip(pointers, entered) if int(R[k]) != was}
    if not moved or facts.footprints is None:
        return facts
    shifts = {position: sum(moved.get(k, 0) for k in words) % MOD
              for position, words in origins.items() if not moved.keys().isdisjoint(words)}
    footprints = list(facts.footprints)
    for i, fp in enumerate(footprints):
        d = shifts.get(fp.position)
        if d:       # the base moved by d (mod 2^32); the hull's offsets from it stay
            footprints[i] = Footprint((bases[i] + d) % MOD + fp.low - bases[i], fp.step,
                                      fp.length, fp.is_store, fp.position)
    cache.relocated += 1
    return LoopFacts(footprints, facts.exit_at)


def pointer_registers(plan) -> tuple[tuple[int, ...], tuple[int, ...], dict[int, frozenset]]:
    """Which scalar registers ``fastpath._affine_pass`` reads at the loop's entry, split
    into those whose values decide its facts and *pointers*: registers whose entry value
    reaches nothing but address bases, as that value plus values of other registers
    (``add``, ``addi``, ``mov``; an induction's own updates).  Moving a pointer by d moves
    those footprints by d and changes no decision of the pass (trip count, steps, strides,
    whether a value is affine), so one pass serves every entry that differs only in its
    pointers.  Returns (deciding registers, pointers, footprint position -> the registers
    whose entry values its base is the sum of)."""
    none: frozenset = frozenset()
    origin: dict[int, frozenset] = {key: frozenset((key,)) for key in plan.induction}
    read: set[int] = set(plan.induction)
    deciding: set[int] = set()
    origins: dict[int, frozenset] = {}
    for steps in plan.induction.values():
        for step in steps.values():
            if step.source == "reg":
                deciding.add(step.value)
                read.add(step.value)

    def of(operand) -> frozenset:
        where, key = operand
        if where != "reg" or key >= NUM_SREGS:
            return none
        if key in origin:
            return origin[key]
        if key not in plan.written:          # an invariant: its entry value
            read.add(key)
            return frozenset((key,))
        return none                          # not affine here: no entry value in it

    for op in plan.affine_ops:
        if op.memory is not None:
            origins[op.position] = of(("reg", op.memory.base))
            if op.memory.stride is not None:
                deciding.update(of(("reg", op.memory.stride)))
        if op.position in plan.updates:
            continue
        args = [of(r) for r in op.reads]
        result = none
        if op.kind in ("load", "store"):
            pass                             # its base makes a footprint; data decides nothing
        elif op.kind == "op" and len(op.writes) == 1:
            if op.mnemonic in ("add", "addi"):
                deciding.update(args[0] & args[1])       # a register counted twice
                result = args[0] | args[1]
            elif op.mnemonic == "sub":
                deciding.update(args[1])                  # less a register: not a shift
                result = args[0]
            elif op.mnemonic in ("mov", "li", "la", "li.f32", "li.f16"):
                result = args[0]
            else:
                deciding.update(*args)
        else:
            deciding.update(*args)
        for key in op.writes:
            if result and key < NUM_SREGS:
                origin[key] = result
            else:
                origin.pop(key, None)
    for operand in plan.ops[-1].reads:       # the back-edge decides the trip count
        deciding.update(of(operand))
    pointers = tuple(sorted(read - deciding))
    return tuple(sorted(read & deciding)), pointers, origins


class PathChecks:
    """A walk's checks that depend only on it and an iteration count, once per count:
    how many leading iterations keep the guards, whether they are independent and leave
    the promoted words alone (``path_batch`` supplies the functions)."""

    __slots__ = ("_guarded", "_bounded", "_clear")

    def __init__(self, guarded: dict[int, int] | None = None) -> None:
        self._guarded: dict[int, int] = {} if guarded is None else guarded
        self._bounded: dict[tuple, int] = {}
        self._clear: dict[int, tuple[bool, bool]] = {}

    def relocated(self) -> "PathChecks":
        """The checks of the walk relocated (``path_relocate``): its guards are the walk's
        own (no decision depends on a moved word), so their answers are shared; the
        footprints moved, so the rest is asked anew."""
        return PathChecks(self._guarded)

    def guarded(self, iterations: int, compute) -> int:
        if iterations not in self._guarded:
            self._guarded[iterations] = compute(iterations)
        return self._guarded[iterations]

    def bounded(self, iterations: int, regions: dict, compute) -> int:
        key = (iterations, tuple(regions[False]), tuple(regions[True]))
        if key not in self._bounded:
            self._bounded[key] = compute(iterations, regions)
        return self._bounded[key]

    def clear(self, iterations: int, compute) -> tuple[bool, bool]:
        """(independent, promoted words clear) for ``iterations``."""
        if iterations not in self._clear:
            self._clear[iterations] = compute(iterations)
        return self._clear[iterations]
