"""A walk replayed with moved buffers: the promoted row pointers changed, nothing else.

A library kernel invoked once per block of a layer enters its row loop with the
same registers every time, but the row pointers it keeps on its stack frame
(promoted words, ``path_walk``) point into that block's buffers, which move.
The walk is a function of the registers and those words; when a word is only
ever used as a pointer -- copied (``mov``), offset by values that do not depend
on any word (``add``, ``addi``, ``sub`` of such a value), used as the base of
an access that is not itself promoted, and stored back to its own word -- every
value the walk derives from it is that word plus a constant, mod 2^32, and no
decision of the walk (a branch, a guard, a mask, a promoted address, the path)
depends on it.  The walk with the word moved by d is then the recorded walk
with each such value moved by d: ``relocated`` builds it without walking.

``relocation`` finds, once per recorded walk, which promoted words are
*relocatable* and which recorded values and footprints derive from each (a
trace of the path's instructions over origins, not values).  A word used any
other way (a count, a comparison, a product, data stored elsewhere, a
different word stored over it, read in part) is *fixed*: a walk whose fixed
word changed is walked afresh.  A footprint whose base moved past either end
of the address space is walked afresh too (the walk keeps addresses mod 2^32).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from runtime_sim.isa.loop_bounds import MOD, Affine, Footprint
from runtime_sim.isa.memory import AccessFault
from runtime_sim.isa.path_records import PathStep
from vpuc.shave.isa import NUM_SREGS, REG_LR

# The scalar operations whose result is an operand plus a value no word moves.
_OFFSETS = ("add", "addi")
_COPIES = ("mov", "li", "la", "li.f32", "li.f16")


@dataclass(frozen=True)
class Relocation:
    fixed: frozenset                 # words any change of which needs a new walk
    values: tuple                    # (path position, register, words) of moving affine values
    footprints: tuple                # (footprint index, words)
    end: tuple                       # (register, words) of the values after the iteration


def relocation(walk) -> Relocation:
    """Which recorded values move with which promoted words (see the module docstring).
    A value's *origin* is the set of words it is the sum of (plus a constant): a sum
    of two pointers' words, or a word's own value less another's, fixes the word(s)
    whose move would not simply shift it."""
    none: frozenset = frozenset()
    origin: dict[int, frozenset] = {}          # scalar register -> its words
    stored: dict[int, frozenset] = {}          # promoted word -> origin of its value now
    fixed: set[int] = set()
    values, footprints = [], []
    footprint_at = {fp.position: i for i, fp in enumerate(walk.footprints)}

    def fix(*origins) -> None:
        for words in origins:
            fixed.update(words)

    for position, step in enumerate(walk.path):
        op = step.op
        found = [origin.get(key, none) if where == "reg" and key < NUM_SREGS else none
                 for where, key in op.reads]
        result = none
        if step.address is not None:                       # a promoted word
            fix(origin.get(op.shape.base, none))
            if op.kind == "store":
                stored[step.address] = found[0]
            else:
                if step.address not in stored:            # read from memory: itself
                    stored[step.address] = frozenset((step.address,))
                    if op.mnemonic != "lw":                # read in part: never moved
                        fix(stored[step.address])
                result = stored[step.address]
        elif op.kind in ("load", "store"):
            base = origin.get(op.shape.base, none)
            fix(*[o for (where, key), o in zip(op.reads, found) if key != op.shape.base])
            if base and position in footprint_at:
                footprints.append((footprint_at[position], base))
        elif step.role == "affine" and op.kind == "op":
            if op.mnemonic in _OFFSETS:
                if found[0] & found[1]:                    # a word counted twice
                    fix(*found)
                else:
                    result = found[0] | found[1]
            elif op.mnemonic == "sub":                     # less a word: that word is fixed
                fix(found[1])
                result = found[0] - found[1]
            elif op.mnemonic in _COPIES:
                result = found[0]
            else:
                fix(*found)
        else:                    # branches, loops, ret, data: any word they read is fixed
            fix(*found)
        for key in op.writes:
            origin.pop(key, None)
        if op.kind == "call":
            origin.pop(REG_LR, None)
        if result:
            for key in step.values:
                origin[key] = result
                values.append((position, key, result))
    # The induction proof compares a word's value after an iteration with its value
    # before: the word moves its own next value, and nothing else that is in it may move
    # (the step per iteration would change).
    for address in walk.read_words:
        after = stored.get(address, frozenset((address,)))
        fix(after - {address} if address in after else after | {address})
    for key in walk.carried:                 # carried registers start from R, which stays
        fix(origin.get(key, none))
    end = tuple((key, words) for key, words in origin.items() if walk.end.get(key) is not None)
    return Relocation(frozenset(fixed), tuple(values), tuple(footprints), end)


def relocated(walk, memory):
    """``walk`` as a walk with the current promoted words would record it, or None when
    a fixed word changed, a word cannot be read, or an address would wrap."""
    moved: dict[int, int] = {}
    read_words = {}
    for address, raw in walk.read_words.items():
        try:
            now = memory.read(address, len(raw)).tobytes()
        except AccessFault:
            return None
        read_words[address] = now
        if now != raw:
            moved[address] = int.from_bytes(now, "little") - int.from_bytes(raw, "little")
    if not moved:
        return walk
    # A layer's blocks cycle through a few buffer slots: the walk relocated to words seen
    # before is the one made then, with its inner loops and checks (a pure function of
    # the recorded walk and the words).
    made = walk.moved
    if made is None:
        made = walk.moved = {}
    now_words = tuple(read_words.items())
    known = made.get(now_words)
    if known is not None:
        return known
    if walk.relocation is None:
        walk.relocation = relocation(walk)
    plan = walk.relocation
    if plan.fixed.intersection(moved):
        return None
    path = list(walk.path)
    copied: set[int] = set()
    for position, key, words in plan.values:
        d = sum(moved.get(word, 0) for word in words)
        if d:
            if position not in copied:
                copied.add(position)
                s = path[position]          # a copy with its own values (replace, cheaper)
                path[position] = PathStep(s.index, s.op, s.role, dict(s.values), s.address,
                                          s.size, s.taken)
            old = path[position].values[key]
            path[position].values[key] = Affine((old.start + d) % MOD, old.step)
    footprints = list(walk.footprints)
    for index, words in plan.footprints:
        d = sum(moved.get(word, 0) for word in words)
        if d:
            if not 0 <= walk.bases[index] + d < MOD:
                return None
            fp = footprints[index]
            footprints[index] = Footprint(fp.low + d, fp.step, fp.length, fp.is_store,
                                          fp.position)
    end = dict(walk.end)
    for key, words in plan.end:
        d = sum(moved.get(word, 0) for word in words)
        if d:
            end[key] = Affine((end[key].start + d) % MOD, end[key].step)
    checks = walk.checks.relocated() if walk.checks is not None else None
    moved_walk = replace(walk, path=path, footprints=footprints, end=end,
                         read_words=read_words, checks=checks, inner=None, relocation=plan,
                         moved=None)
    if len(made) >= MAX_RELOCATED:
        made.clear()
    made[now_words] = moved_walk
    return moved_walk


# Relocated walks remembered per walk (``Walk.moved``): a layer's slots, with room to spare.
MAX_RELOCATED = 64
