"""Straight-line blocks of a kernel run as one step by the interpreter's fast mode.

A generated kernel's software-pipelined loop has a prologue and an epilogue of a few
dozen instructions each (stage 1 of the first iterations, stage 2 of the last) that
the interpreter issues one at a time: per instruction the timing bookkeeping of
``cycles.issue`` and a runner call; a library kernel's driver is scalar code in short
runs between branches.  A block is a maximal run of instructions that never transfer
control (operations, loads, stores, nops), with the transfer that ends it if any,
holding no loop head but its first (falling into a loop head is where the fast path
takes over), so

* its register and memory effects are its runners called in order (the same
  functions on the same values: the same bits); the last one's result (a target,
  ``HALT``...) goes to the interpreter as a single instruction's would;
* its timing is a function of the ``ready`` state relative to the cycle it starts
  at, with every value at or before that cycle counted as that cycle (``issue``
  never looks at past cycles: a source ready earlier, a slot freed earlier, the
  LSU pair's choice all decide the same).  So the block's issue is worked out
  once per distinct relative entry state and remembered as (cycles advanced,
  stalls, each written timing key's cycle relative to the start): a block
  entered again in the same state (every invocation's prologue; an epilogue
  after the same loop) costs one lookup instead of one ``issue`` per
  instruction.

Only the fast interpreter (``run(..., fast=...)``) uses blocks; ``fast=False``
stays the one-instruction-at-a-time reference they are tested against.
"""

from __future__ import annotations

import weakref
from operator import is_, itemgetter

from runtime_sim.isa.cycles import issue_steps
from runtime_sim.isa.semantics import SEMANTICS

# Blocks shorter than this are issued one instruction at a time: a block's lookup and
# remembered issue cost about as much as issuing five (measured on a library kernel's
# driver: no gain from blocks of 3 to 5).
MIN_BLOCK = 6
# Relative entry states remembered per block: a block's states are few (the same
# code entered from the same places), this only bounds a pathological kernel.
MAX_STATES = 64

_STRAIGHT_KINDS = frozenset(("op", "load", "store", "nop"))

# Per Program (Programs are cached by the loader): index -> Block or None.
_BLOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# A block's timing by its words' issue inputs (ids, the tuples kept): bounded.
_TIMINGS: dict[tuple, tuple] = {}
MAX_TIMINGS = 4096


class Block:
    """Instructions ``start .. start+length-1`` of a program, issued as one step."""

    __slots__ = ("start", "length", "straight", "last", "penalty", "issues", "entry", "get",
                 "zero", "states")

    def __init__(self, start: int, flat: list[tuple], tails: list[tuple] | None = None) -> None:
        self.start, self.length = start, len(flat)
        # the runners of all but the last instruction return None; the last's result is
        # the interpreter's (a transfer's target, HALT, ...)
        self.straight = tuple(step[0] for step in flat[:-1])
        self.last, self.penalty = flat[-1][0], flat[-1][8]
        # The timing depends only on the words' issue inputs (``Program.tails``, shared per
        # word): blocks of the same words (the library kernels' shared driver) share it,
        # remembered entry states included
        key = None
        if tails is not None:
            key = tuple(map(id, tails))
            found = _TIMINGS.get(key)
            if found is not None and all(map(is_, found[0], tails)):
                self.issues, self.entry, self.get, self.zero, self.states = found[1:]
                return
        self._timing(flat)
        if key is not None:
            if len(_TIMINGS) >= MAX_TIMINGS:
                _TIMINGS.clear()
            _TIMINGS[key] = (tuple(tails), self.issues, self.entry, self.get, self.zero,
                             self.states)

    def _timing(self, flat: list[tuple]) -> None:
        # ``issue_steps``' inputs per instruction (no penalty within a straight block)
        self.issues = tuple((*step[1:8], 0) for step in flat)
        # the timing keys whose value at entry can matter: read (a source, a slot) before
        # the block writes them
        entry: list[int] = []
        written: set[int] = set()
        for sources, dests, slot, other, *_ in self.issues:
            for key in (*sources, slot) + ((other,) if other is not None else ()):
                if key not in written and key not in entry:
                    entry.append(key)
            if other is None:           # an LSU pair's choice may write either: neither known
                written.add(slot)
            written.update(dests)
        self.entry = tuple(entry)
        self.get = itemgetter(*entry) if len(entry) > 1 else (lambda ready, k=entry[0]:
                                                              (ready[k],))
        self.zero = (0,) * len(entry)
        self.states: dict[tuple, tuple] = {}

    def issue(self, ready: list, now: int) -> tuple[int, int]:
        """Issue the block at cycle ``now``: ``ready`` updated as issuing each of its
        instructions in turn would; returns (the cycle after, stall cycles)."""
        values = self.get(ready)
        state = (self.zero if max(values) <= now else
                 tuple(value - now if value > now else 0 for value in values))
        found = self.states.get(state)
        if found is None:
            found = self._relative(state)
            if len(self.states) >= MAX_STATES:
                self.states.clear()
            self.states[state] = found
        advanced, stalls, writes = found
        for key, cycle in writes:
            ready[key] = now + cycle
        return now + advanced, stalls

    def _relative(self, state: tuple) -> tuple[int, int, tuple]:
        """The block issued from cycle 0 with ``state``: (cycle after, stalls, (key, ready
        cycle) written)."""
        written: dict[int, int] = {}
        now, stalls = issue_steps(self.issues, dict(zip(self.entry, state)), 0, written)
        return now, stalls, tuple(written.items())


def straight_blocks(program, heads: dict) -> list:
    """Per instruction index of ``program``: where a block starting there ends (at least
    ``MIN_BLOCK`` instructions: straight-line ones up to and including the next control
    transfer, or up to the next loop head in ``heads``), else None; ``block`` makes the
    Block on first use and puts it in its place.  Remembered per program."""
    known = _BLOCKS.get(program)
    if known is not None and (known[0] is heads or known[0] == heads):
        return known[1]
    flat = program.flat
    straight = [SEMANTICS[dec.info.opcode].kind in _STRAIGHT_KINDS and not step[7]
                for dec, step in zip(program.decoded, flat)]
    blocks: list = [None] * len(flat)
    end = len(flat)
    for index in range(len(flat) - 1, -1, -1):
        if not straight[index]:
            end = index + 1                  # a transfer ends the blocks before it
        elif index + 1 in heads:
            end = index + 1
        if end - index >= MIN_BLOCK:
            blocks[index] = end
    _BLOCKS[program] = (heads, blocks)
    return blocks


def block(program, blocks: list, index: int) -> Block:
    """The Block starting at ``index`` (``blocks[index]`` is its end or the Block)."""
    found = blocks[index]
    if found.__class__ is not Block:
        tails = getattr(program, "tails", None)
        found = blocks[index] = Block(index, program.flat[index:found],
                                      None if tails is None else tails[index:found])
    return found
