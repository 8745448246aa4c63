"""Cycles-only path batches: an outer loop's rows counted along their one proven path.

A library kernel's per-row loop (softmax, layer norm) calls routines and runs
inner loops counted from registers, so ``cycles_only_loops`` cannot plan it and
a cycles-only run would interpret every row.  The numerics path batch already
proves, per entry, that every row runs the same instructions (``path_walk``:
affine scalars, guards on every branch and inner trip count, ``path_batch``:
accessible, independent footprints); its ``PathTiming`` then gives the
interpreter's cycles for any number of rows.  A cycles-only run needs exactly
that proof and that count, not the rows' arithmetic, so here nothing of the path
is executed:

* the scalars the path leaves affine take their last row's values; a scalar it
  leaves as data is left stale, which is allowed only when the cycles after the
  loop do not depend on it (``cycles_slice``'s critical registers there);
* promoted stack words get their last row's value when it is affine, else their
  bytes are marked as not computed, as are the bytes of every other store;
* the masks the rows set are taken as all lanes active (as ``cycles_only`` takes a
  mask made from vectors), so later accesses are checked over a superset;
* the promoted words the walk read must hold computed bytes, and watched loads
  note the bytes they cover, as in ``cycles_only_loops``.

The proofs and the walk cache (``entry_cache``, ``path_relocate``) are the
numerics batch's, so the cycles are identical to the full run's.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.cycles_slice import ALL_LANES
from runtime_sim.isa.loop_bounds import Affine, affine_const
from runtime_sim.isa.path_batch import _iterations, _walked, path_steps
from runtime_sim.isa.path_records import PathRefused
from vpuc.shave.isa import NUM_SREGS

_WORD_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def run_path_cycles(loops, head: int, branch: int, R: list, ready: list[int], now: int,
                    memory, counts: list[int], budget: int, max_cycles: float):
    """``TimingLoops``'s fallback for a loop its plans refuse: the rows along one proven
    path, counted, or None.  Returns (now, next index, instructions run, stall cycles)."""
    key = (head, branch, "path")
    steps = path_steps(loops, head, branch, R, loops.max_path_refusals)
    if steps is None:
        return None
    try:
        found = _walked(loops, head, branch, R, memory, steps)
        _check_read_words(found, memory)
        iterations, trip, timing = _iterations(loops, found, branch, ready, now, memory,
                                               budget, max_cycles)
        exits = iterations == trip
        words = _last_words(found, R)
        _check_stale(loops, found, branch + 1 if exits else head)
    except PathRefused as why:
        loops.declined[f"path: {why}"] += 1
        loops._refusals[key] += why.recurs
        if why.structural:
            loops.plans[key] = str(why)
        return None
    loops._refusals[key] = 0
    last = iterations - 1
    _account_memory(loops, found, memory, iterations, words, last)
    for reg, end in found.end.items():
        if end is not None:
            R[reg] = np.uint32(end.at(last))
    for step in found.path:          # masks the rows set: all lanes, as ``cycles_only`` takes
        for reg in step.op.mask_out:  # a mask it does not compute (a superset of the bytes)
            R[reg] = ALL_LANES
    now, stalls = timing.advance(ready, now, iterations, exits)
    for step in found.path:
        counts[step.index] += iterations
    loops.batched_iterations += iterations
    loops.path_batches += 1
    return now, (branch + 1 if exits else head), iterations * len(found.path), stalls


def _check_read_words(found, memory) -> None:
    """The walk's start values of promoted words must be what the full run reads."""
    for address, raw in found.read_words.items():
        if not memory.computed(address, address + len(raw)):
            raise PathRefused("a promoted word holds a value this run does not compute")


def _check_stale(loops, found, resume: int) -> None:
    """A scalar the path leaves as data keeps a stale value: none the cycles need."""
    critical = loops.critical[resume] if resume < len(loops.critical) else 0
    for reg, end in found.end.items():
        if end is None and critical >> reg & 1:
            raise PathRefused(f"s{reg} leaves the loop holding data the cycles depend on")


def _last_words(found, R: list) -> dict[int, Affine | None]:
    """Each promoted word as the path last stores it: affine in the row, or data (None).
    The scalars are followed along the path as ``path_batch._run_rows`` does."""
    affine_now: dict[int, Affine] = {reg: Affine(int(R[reg]), 0) for reg in range(NUM_SREGS)}
    affine_now.update(found.carried)
    words: dict[int, Affine | None] = {}
    for step in found.path:
        if step.role == "affine":
            affine_now.update(step.values)
            continue
        if step.role == "promoted_store":
            where, source = step.op.reads[0]
            words[step.address] = (affine_const(int(source)) if where == "imm"
                                   else affine_now.get(source))
        for reg in step.op.writes:
            affine_now.pop(reg, None)
    return words


def _account_memory(loops, found, memory, iterations: int, words: dict, last: int) -> None:
    """What the rows' memory accesses leave for the rest of the cycles-only run."""
    for fp in found.footprints:
        low, high = fp.span(iterations)
        if fp.is_store:
            memory.mark_unknown(low, high)
        else:
            watched = loops.roles[found.path[fp.position].index].watched_load
            if watched:
                memory.watch_load(watched, low, high)
    for address, value in words.items():
        size = found.promoted[address]
        if value is None:
            memory.mark_unknown(address, address + size)
        else:
            word = np.asarray(value.at(last), np.uint32).reshape(1).view(np.uint8)[:size]
            memory.write(address, word)
