"""The path batch: an outer loop's iterations run together along their one path.

When ``loop_plan`` refuses a loop for its control flow (a call, branches, an
inner loop counted from a register), the fast path asks ``path_walk`` for the
path of the next iteration.  If every iteration provably runs that same path
(its guards hold), touches no byte another iteration stores, and stays inside
the accessible memory, the batch runs the path's instructions in order, each
once for all the iterations (one row per iteration: a softmax over 591 rows
becomes ~700 numpy calls on 591-row arrays instead of 591 x ~700 interpreted
instructions).  Reductions stay sequential along the row, so every value is
the interpreter's, bit for bit.

The batch stops before the first iteration where a guard fails, the trip
count ends, a fault is possible, the step limit or the cycle budget is hit;
the interpreter carries on from there.  Cycles: the path is data-independent
code, so ``PathTiming`` (``loop_timing`` with a refetch penalty after every
transfer the path takes) gives the interpreter's count without stepping every
iteration.  Affine scalars (pointers, counters, the promoted words of a stack
frame) are not run: their values come from the walk.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from runtime_sim.isa.entry_cache import PathChecks, register_key
from runtime_sim.isa.loop_bounds import (MOD, Affine, Footprint, first_exit, first_outside,
                                         independent)
from runtime_sim.isa.loop_timing import LoopTiming
from runtime_sim.isa.loop_chunk import PROGRESSIONS, batch_operands
from runtime_sim.isa.loop_views import loaded, progression_view
from runtime_sim.isa.loop_plan import run_op
from runtime_sim.isa.memory import AccessFault, accessible_ranges
from runtime_sim.isa.path_inner import enters_as_proven, find_inner_loops, run_inner
from runtime_sim.isa.path_relocate import relocated
from runtime_sim.isa.path_ops import instructions
from runtime_sim.isa.path_records import Guard, PathRefused, Walk
from runtime_sim.isa.path_walk import walk
from runtime_sim.isa.sem_vector import GENERAL
from runtime_sim.isa.semantics import BRANCH_CONDITIONS
from vpuc.diagnostics import VpucError
from vpuc.shave.isa import NUM_SREGS

# Iterations per chunk of the batch (rows of every temporary).
PATH_CHUNK = 4096
# Iterations tried at most in one entry when the trip count has no closed form.
UNKNOWN_TRIP = 1 << 16
# Below this many iterations, a path batch costs more than the inner loops' batches.
MIN_PATH_ITERATIONS = 4
# A loop refused this many times in a row is left to the other batches for the run
# (a walk costs about one interpreted iteration).
MAX_PATH_REFUSALS = 2
_TIMINGS: dict[tuple, "PathTiming"] = {}
MAX_CACHED_TIMINGS = 1024


def path_steps(loops, head: int, branch: int, R: list, max_refusals: int) -> dict | None:
    """The loop's remembered walk steps (empty before its first walk), or None when the
    loop has a plan, was refused ``max_refusals`` times, or likely runs too few iterations
    on one path (``run_path``'s and ``cycles_only_path.run_path_cycles``' first step)."""
    if (head, branch, "path") in loops.plans \
            or loops._refusals[(head, branch, "path")] >= max_refusals:
        return None
    steps = loops.plans.setdefault((head, branch, "steps"), {})
    if steps:
        likely = likely_trip(loops.program, branch, R, steps["registers"])
        if likely is not None and likely < loops.min_path_iterations:
            loops.declined["path: too few iterations on one path"] += 1
            return None
    return steps


def run_path(loops, head: int, branch: int, R: list, ready: list[int], now: int, memory,
             counts: list[int], budget: int, max_cycles: float):
    """``FastLoops``'s fallback for a loop its plans refuse: the iterations along one
    path, or None.  Returns (now, next index, instructions run, stall cycles)."""
    key = (head, branch, "path")
    steps = path_steps(loops, head, branch, R, MAX_PATH_REFUSALS)
    if steps is None:
        return None
    try:
        found = _walked(loops, head, branch, R, memory, steps)
        iterations, trip, timing = _iterations(loops, found, branch, ready, now, memory,
                                               budget, max_cycles)
    except PathRefused as why:
        loops.declined[f"path: {why}"] += 1
        loops._refusals[key] += why.recurs
        if why.structural:               # the same for every entry: never again
            loops.plans[key] = str(why)
        return None
    loops._refusals[key] = 0
    exits = iterations == trip
    pending = PathPending(found, R, memory, iterations, min(loops.chunk, PATH_CHUNK), head)
    if loops.defer:                  # run by the caller of run_steps, maybe with others
        loops.pending = pending
    else:
        execute_pending(pending)
    now, stalls = timing.advance(ready, now, iterations, exits)
    for step in found.path:
        counts[step.index] += iterations
    loops.batched_iterations += iterations
    loops.batches += 1
    return now, (branch + 1 if exits else head), iterations * len(found.path), stalls


class PathPending(NamedTuple):
    """A proven path batch not run yet (``FastLoops.defer``): ``execute_pending`` runs it
    alone, ``path_many`` with other invocations' batches of the same path."""

    walk: Walk
    R: list
    memory: object
    iterations: int
    chunk: int
    head: int


def execute_pending(pending: PathPending) -> None:
    """Run ``pending`` alone, unchecked (proven inside the bounds)."""
    found, R, memory = pending.walk, pending.R, pending.memory
    bounds, memory.bounds = memory.bounds, None
    try:
        execute(found, R, memory, pending.iterations, pending.chunk)
    except AccessFault as fault:     # the proofs exclude this: a fast-path bug
        raise VpucError(f"internal error: the path batch faulted in a checked loop: "
                        f"{fault.diagnostics[0].message}") from None
    finally:
        memory.bounds = bounds


def _walked(loops, head: int, branch: int, R: list, memory, steps: dict) -> Walk:
    """The walk of this entry: an earlier entry's, when it started from the same
    registers (``entry_cache``) and its promoted words hold what it read, or moved only
    as pointers do (``path_relocate``)."""
    key = (head, branch, "walk", register_key(R))
    replayed = []
    known = loops.proofs.get(key, lambda known: replayed.append(relocated(known, memory))
                             or replayed[0] is not None)
    if known is None:
        found = walk(loops.program, head, branch, R, memory, steps)
        found.checks = PathChecks()
        loops.proofs.put(key, found)
        return found
    found = replayed[0]
    if found.checks is None:
        found.checks = PathChecks()
    return found


def _iterations(loops, found: Walk, branch: int, ready: list[int], now: int, memory,
                budget: int, max_cycles: float) -> tuple[int, int, "PathTiming"]:
    """(iterations to batch, the trip count, the timing): every check of the batch.
    The checks that depend only on the walk and a count are asked once per count."""
    trip = trip_count(found)
    guards = found.guards
    if trip is None:
        # No closed form (a counter stepping past 0: the last group of rows is shorter):
        # the back-edge is one more guard, and the guards end the batch in time.
        guards = guards + [found.back]
    iterations = min(UNKNOWN_TRIP if trip is None else trip, budget // len(found.path))
    if iterations == trip and branch + 1 == len(loops.program.steps):
        iterations -= 1                  # the fall off the end of .text: the interpreter's
    checks = found.checks
    iterations = checks.guarded(iterations, lambda n: guarded(guards, n))
    iterations = checks.bounded(iterations, accessible_ranges(memory),
                                lambda n, regions: bounded(found, n, regions))
    timing = path_timing(loops.program, found)
    if max_cycles != float("inf"):
        iterations = min(iterations, timing.within(ready, now, iterations, max_cycles))
    if iterations < loops.min_path_iterations:
        raise PathRefused("too few iterations on one path", recurs=False)
    apart, clear = checks.clear(iterations, lambda n: (
        (True, promoted_clear(found, n)) if independent(found.footprints, n) else (False, False)))
    if not apart:
        raise PathRefused("an iteration accesses bytes another iteration stores")
    if not clear:
        raise PathRefused("a stack word is also accessed as data")
    return iterations, trip, timing


class PathTiming(LoopTiming):
    """``LoopTiming`` over a path: the refetch penalty after each transfer it takes
    (``taken`` per step)."""


def path_timing(program, walk: Walk) -> PathTiming:
    """The timing of ``walk``'s path, kept with the walk (a relocated walk shares it: same
    path) and shared by the walks of one path."""
    timing = walk.shared.get("timing")
    if timing is not None:
        return timing
    key = (id(program), tuple((s.index, s.taken) for s in walk.path))
    timing = _TIMINGS.get(key)
    if timing is None:
        if len(_TIMINGS) >= MAX_CACHED_TIMINGS:
            _TIMINGS.clear()
        taken = [s.taken for s in walk.path[:-1]] + [False]
        tails = getattr(program, "tails", None)     # the words' issue inputs, unpacked
        timing = _TIMINGS[key] = PathTiming(None, taken, [tails[s.index] for s in walk.path]) \
            if tails else PathTiming([program.steps[s.index] for s in walk.path], taken)
    walk.shared["timing"] = timing
    return timing


def trip_count(walk: Walk) -> int | None:
    """Iterations until the back-edge falls through (counting that one), if provable."""
    back = walk.back
    exit_at = first_exit(back.condition if back.condition != "loop" else "bne", back.a, back.b)
    return None if exit_at is None else exit_at + 1


def likely_trip(program, branch: int, R: list, steps: dict[int, int]) -> int | None:
    """The trip count if the back-edge's registers step as ``steps`` (an earlier walk of
    this loop found them): a cheap estimate, to skip walking a loop that ends too soon.
    At the back-edge of iteration k a carried register holds R + (k + 1) * step."""
    back = instructions(program)[branch]
    operands = []
    for where, key in back.reads:
        value = int(key) if where == "imm" else int(R[key])
        d = steps.get(key, 0) if where == "reg" else 0
        operands.append(Affine((value + d) % MOD, d))
    condition = "bne" if back.kind == "loop" else back.mnemonic.removesuffix("z")
    if len(operands) == 1:
        operands.append(Affine(0, 0))
    exit_at = first_exit(condition, *operands)
    return None if exit_at is None else exit_at + 1


def guarded(guards: list[Guard], iterations: int) -> int:
    """How many leading iterations keep every guard (so run the walked path)."""
    seen: set[Guard] = set()
    k = np.arange(iterations, dtype=np.uint64)
    for guard in guards:
        if guard in seen or iterations == 0:
            continue
        seen.add(guard)
        a = _values(guard.a, k)
        b = _values(guard.b, k)
        holds = np.asarray(BRANCH_CONDITIONS[guard.condition](a, b), bool)
        wrong = np.flatnonzero(holds != guard.expected)
        if len(wrong):
            iterations = int(wrong[0])
            k = k[:iterations]
    return iterations


def _values(a: Affine, k: np.ndarray) -> np.ndarray:
    if a.step == 0:
        return np.broadcast_to(np.uint32(a.start), k.shape)
    return ((np.uint64(a.start) + k * np.uint64(a.step)) % np.uint64(MOD)).astype(np.uint32)


def promoted_clear(walk: Walk, iterations: int) -> bool:
    """No other access of the path touches a promoted word's bytes in any iteration."""
    if not walk.promoted or not walk.footprints or iterations <= 0:
        return True
    # every footprint's span (``Footprint.span``) at once; the few whose span meets a
    # word are checked iteration by iteration
    fps = walk.footprints
    low = np.array([fp.low for fp in fps], np.int64)
    last = low + (iterations - 1) * np.array([fp.step for fp in fps], np.int64)
    begin = np.minimum(low, last)
    end = np.maximum(low, last) + np.array([fp.length for fp in fps], np.int64)
    k = np.arange(iterations, dtype=np.int64)
    for address, size in walk.promoted.items():
        for i in np.flatnonzero((end > address) & (begin < address + size)).tolist():
            fp = fps[i]
            lows = fp.low + k * fp.step
            if ((lows < address + size) & (lows + fp.length > address)).any():
                return False
    return True


def promoted_footprints(walk: Walk) -> list[Footprint]:
    """The promoted words' footprints: stack words a relocation never moves, so shared."""
    found = walk.shared.get("promoted")
    if found is None:
        stores = {s.address for s in walk.path if s.role == "promoted_store"}
        found = walk.shared["promoted"] = [Footprint(address, 0, size, address in stores, -1)
                                           for address, size in walk.promoted.items()]
    return found


def bounded(walk: Walk, iterations: int, regions: dict) -> int:
    """Iterations before the first whose accesses may leave the accessible memory."""
    for fp in walk.footprints + promoted_footprints(walk):
        iterations = min(iterations, first_outside(fp, iterations, regions[fp.is_store]))
        if fp.is_store and fp.low in walk.promoted:   # a promoted word is also loaded
            iterations = min(iterations, first_outside(fp, iterations, regions[False]))
    return iterations


def execute(walk: Walk, R: list, memory, iterations: int, chunk: int = PATH_CHUNK) -> None:
    """Run the path for iterations 0 .. iterations-1 and leave R as the last one does."""
    env: dict[int, object] = {}
    overlay: dict[int, object] = {}
    for first in range(0, iterations, chunk):
        rows = min(chunk, iterations - first)
        k = np.arange(first, first + rows, dtype=np.uint32)
        env = {key: _batch(a, k) for key, a in walk.carried.items()}
        overlay = {}
        _run_rows(walk, R, memory, k, env, overlay)
    last = iterations - 1
    for key in range(NUM_SREGS):
        end = walk.end.get(key)
        if end is not None:
            R[key] = np.uint32(end.at(last))
        elif key in env:
            R[key] = _last(env[key], 0)
    for key, value in env.items():
        if key >= NUM_SREGS:
            R[key] = _last(value, 1).copy()
    for address, (value, size) in overlay.items():
        word = np.asarray(_last(value, 0), np.uint32).reshape(1).view(np.uint8)[:size]
        memory.write(address, word)


def _run_rows(walk: Walk, R: list, memory, k: np.ndarray, env: dict, overlay: dict) -> None:
    def read(operand):
        where, key = operand
        if where == "imm":
            return key
        if key in env:
            return env[key]
        return R[key]

    if walk.inner is None:
        walk.inner = find_inner_loops(walk)
    inner = walk.inner
    # the scalars' affine values as the path goes (an inner loop's entry is checked on them)
    affine_now = {key: Affine(int(R[key]), 0) for key in range(NUM_SREGS)} if inner else None
    if inner:
        affine_now.update(walk.carried)
    # the registers env holds as the batch of an Affine that steps: a vld / vst based on
    # one goes straight to the memory's rows when they form a progression (loop_chunk)
    stepping = {key: a for key, a in walk.carried.items() if a.step}
    first, rows = int(k[0]), len(k)
    path, position, end = walk.path, 0, len(walk.path) - 1
    while position < end:
        loop = inner.get(position) if inner else None
        if loop is not None and enters_as_proven(loop, affine_now):
            run_inner(loop, R, memory, k, env, affine_now)
            position += loop.copies * loop.length
            stepping.clear()
            continue
        step = path[position]
        position += 1
        role, op = step.role, step.op
        if role == "skip":
            continue
        if role == "affine":
            for key, value in step.values.items():
                env[key] = _batch(value, k)
                if value.step:
                    stepping[key] = value
                else:
                    stepping.pop(key, None)
            if inner:
                affine_now.update(step.values)
            continue
        for key in op.writes:
            stepping.pop(key, None)
        if inner:
            for key in op.writes:
                affine_now.pop(key, None)
        if role == "promoted_store":
            overlay[step.address] = (read(op.reads[0]), step.size)
            continue
        if role == "promoted_load":
            env[op.writes[0]] = overlay[step.address][0]
            continue
        if (op.mnemonic in PROGRESSIONS and op.reads[-1][0] == "imm"
                and op.reads[-2][1] in stepping and op.reads[-2][0] == "reg"):
            view = progression_view(memory, stepping[op.reads[-2][1]], first, rows,
                                    op.reads[-1][1], op.kind == "store")
            if view is not None:
                if op.kind == "store":
                    view[...] = read(op.reads[0])    # a batch of rows, or one vector for all
                else:
                    env[op.writes[0]] = loaded(view)
                continue
        args = [read(r) for r in op.reads]
        if op.mnemonic in GENERAL and rows > 1:
            args = batch_operands(args, rows)
        run_op(op, memory, args, env)
    for key, value in walk.path[-1].values.items():     # the back-edge's loop counter
        env[key] = _batch(value, k)


def _batch(a: Affine, k: np.ndarray):
    if a.step == 0:
        return np.uint32(a.start)
    return np.uint32(a.start) + k * np.uint32(a.step)


def _last(value, vector: int):
    """The last iteration's value from a batch (or the unbatched value)."""
    return value[-1] if np.ndim(value) > vector else value
