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

from runtime_sim.isa.loop_bounds import MOD, Footprint, first_outside, independent
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
    reason it declined; and the overlap check per iteration count, once each.

    Footprints based on the same pointers (``groups``: by the registers their bases sum,
    loads apart from stores, by step) move together when the pointers move, so a relocated
    entry (``moved``: the remembered facts and each group's move) answers from its origin's
    per-group work: the overlaps within a group, or between two groups that moved alike, are
    the origin's (the same footprints, one shift), and groups whose spans over the batch
    are apart cannot overlap; only when the spans of two groups that moved apart meet is
    every pair checked again.  Likewise a group's hull inside the accessible memory puts
    each of its footprints inside (``hulls``)."""

    __slots__ = ("footprints", "exit_at", "declined", "_independent", "groups", "moved",
                 "_spans", "_hulls", "_hull_groups")

    def __init__(self, footprints: list[Footprint] | None, exit_at: int | None,
                 declined: Exception | None = None, groups: tuple | None = None,
                 moved: tuple | None = None) -> None:
        self.footprints, self.exit_at, self.declined = footprints, exit_at, declined
        self._independent: dict[int, bool] = {}
        self.groups = groups        # (member indices, ...) of footprints moving together
        self.moved = moved          # (origin LoopFacts, each group's move) when relocated
        self._spans: dict[int, tuple] = {}
        self._hulls: list | None = None
        self._hull_groups: list | None = None

    def independent(self, iterations: int) -> bool:
        answer = self._independent.get(iterations)
        if answer is None:
            answer = self._independent[iterations] = self._independent_now(iterations)
        return answer

    def _independent_now(self, iterations: int) -> bool:
        if self.moved is None or iterations < 2:
            return independent(self.footprints, iterations)
        origin, moves = self.moved
        within, spans = origin.group_spans(iterations)
        if not within:          # two iterations of one group overlap: they still do
            return False
        spans = [(low + d, high + d, stores) for (low, high, stores), d in zip(spans, moves)]
        for g, (g_low, g_high, g_stores) in enumerate(spans):
            for h in range(g + 1, len(spans)):
                h_low, h_high, h_stores = spans[h]
                if not (g_stores or h_stores) or g_high <= h_low or h_high <= g_low:
                    continue            # apart over the whole batch, or neither stores
                if moves[g] != moves[h]:
                    return independent(self.footprints, iterations)
                if not origin.pair_independent(g, h, iterations):
                    return False        # moved as one: the origin's pairs, shifted
        return True

    def group_spans(self, iterations: int) -> tuple[bool, list]:
        """(no two iterations of one group overlap, each group's (low, high, stores) over
        the batch), once per count."""
        found = self._spans.get(iterations)
        if found is None:
            fps = self.footprints
            spans = []
            for members in self.groups:
                ends = [fps[i].span(iterations) for i in members]
                spans.append((min(low for low, _ in ends), max(high for _, high in ends),
                              any(fps[i].is_store for i in members)))
            within = all(independent([fps[i] for i in members], iterations)
                         for members in self.groups)
            found = self._spans[iterations] = (within, spans)
        return found

    def inside(self, iterations: int, regions: dict) -> int:
        """Iterations before the first whose footprints leave ``regions`` ({is_store:
        [(begin, end)]}): ``first_outside`` of every footprint, asked of a group's hull
        first (inside for every iteration: so are its members)."""
        footprints = self.footprints
        for hull, members in self.hulls():
            if first_outside(hull, iterations, regions[hull.is_store]) < iterations:
                for i in members:
                    fp = footprints[i]
                    iterations = min(iterations,
                                     first_outside(fp, iterations, regions[fp.is_store]))
        return iterations

    def pair_independent(self, g: int, h: int, iterations: int) -> bool:
        """No iteration of group g touches bytes another iteration of h stores or the
        reverse (given each group alone is independent), once per pair and count."""
        key = (g, h, iterations)
        answer = self._spans.get(key)
        if answer is None:
            fps = self.footprints
            answer = self._spans[key] = independent(
                [fps[i] for i in self.groups[g] + self.groups[h]], iterations)
        return answer

    def hulls(self) -> list[tuple[Footprint, tuple[int, ...]]]:
        """(hull, members) per group's loads and stores of one step: the hull's bytes in
        every iteration hold its members'."""
        if self._hulls is None:
            if self.moved is not None:
                origin, moves = self.moved
                index = {members: g for g, members in enumerate(self.groups)}
                self._hulls = [(Footprint(hull.low + moves[index[group]], hull.step,
                                          hull.length, hull.is_store, hull.position), members)
                               for (hull, members), group in origin.hull_groups()]
            else:
                self._hulls = [entry for entry, _ in self.hull_groups()]
        return self._hulls

    def hull_groups(self) -> list:
        """((hull, members), the group they belong to), of this entry's own footprints
        (once: every entry relocated from this one moves them)."""
        if self._hull_groups is None:
            self._hull_groups = self._make_hull_groups()
        return self._hull_groups

    def _make_hull_groups(self) -> list:
        fps, out = self.footprints, []
        for members in self.groups or (tuple(range(len(fps))),):
            parts: dict[tuple, list[int]] = {}
            for i in members:
                parts.setdefault((fps[i].is_store, fps[i].step), []).append(i)
            for (is_store, step), part in parts.items():
                low = min(fps[i].low for i in part)
                high = max(fps[i].low + fps[i].length for i in part)
                out.append(((Footprint(low, step, high - low, is_store, fps[part[0]].position),
                             tuple(part)), members))
        return out


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
            footprints, exit_at = affine_pass(bases)
            facts = LoopFacts(footprints, exit_at,
                              groups=_groups(footprints, origins, frozenset(pointers)))
        except declined as why:
            facts = LoopFacts(None, None, why)
        cache.put(key, (facts, tuple([int(R[k]) for k in pointers]), bases))
        return facts
    facts, entered, bases = found
    moved = {k: (int(R[k]) - was) % MOD for k, was in zip(pointers, entered) if int(R[k]) != was}
    if not moved or facts.footprints is None:
        return facts
    footprints = list(facts.footprints)
    deltas = [0] * len(footprints)
    # A group's bases sum the same pointers (``_groups``), and only pointers move: one
    # shift per group, not per footprint (a layer norm has ~40 footprints in a few groups).
    for members in facts.groups:
        words = origins.get(footprints[members[0]].position, ())
        d = sum([moved.get(k, 0) for k in words]) % MOD
        if not d:
            continue
        for i in members:   # the base moved by d (mod 2^32); the hull's offsets from it stay
            fp = footprints[i]
            footprints[i] = Footprint((bases[i] + d) % MOD + fp.low - bases[i], fp.step,
                                      fp.length, fp.is_store, fp.position)
            deltas[i] = footprints[i].low - fp.low
    cache.relocated += 1
    # each group moved as one (no base wrapped alone): its work is the origin's, moved
    moves = [deltas[members[0]] for members in facts.groups]
    rigid = all(deltas[i] == d for members, d in zip(facts.groups, moves) for i in members)
    return LoopFacts(footprints, facts.exit_at, groups=facts.groups,
                     moved=(facts, moves) if rigid else None)


def _groups(footprints: list[Footprint], origins: dict[int, frozenset],
            pointers: frozenset) -> tuple[tuple[int, ...], ...]:
    """The footprints' indices by the pointers their bases sum (they move as one)."""
    by_words: dict[frozenset, list[int]] = {}
    for i, fp in enumerate(footprints):
        by_words.setdefault(origins.get(fp.position, frozenset()) & pointers, []).append(i)
    return tuple(tuple(members) for members in by_words.values())


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
