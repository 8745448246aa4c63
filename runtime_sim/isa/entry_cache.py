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
a proof found once is replayed: the key is every scalar and mask register, a
walk is reused only after re-reading the words it promoted (a row pointer on
the stack that moved is relocated by ``path_relocate``, any other change is a
miss), and what depends on the accessible memory or
the step and cycle budgets (``first_outside``, ``timing.within``) is checked on
every entry as before.  A changed address, trip count or branch changes a
register or a promoted word, so it is never served a stale proof.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import Footprint, independent
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


def loop_facts(cache: EntryCache, key: tuple, affine_pass, declined: type) -> LoopFacts:
    """The facts under ``key``, else ``affine_pass()``'s (or the ``declined`` it raised)."""
    facts = cache.get(key)
    if facts is None:
        try:
            facts = LoopFacts(*affine_pass())
        except declined as why:
            facts = LoopFacts(None, None, why)
        cache.put(key, facts)
    return facts


class PathChecks:
    """A walk's checks that depend only on it and an iteration count, once per count:
    how many leading iterations keep the guards, whether they are independent and leave
    the promoted words alone (``path_batch`` supplies the functions)."""

    __slots__ = ("_guarded", "_bounded", "_clear")

    def __init__(self) -> None:
        self._guarded: dict[int, int] = {}
        self._bounded: dict[tuple, int] = {}
        self._clear: dict[int, tuple[bool, bool]] = {}

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
