"""A row's inner loops in the path batch, run along a second axis (rows x iterations).

The path batch (``path_batch``) runs an outer loop's rows together, but the walk
unrolls each row's inner loops, so a layer norm's three passes over a row of
192 halves are ~450 path instructions: one numpy call each, on arrays of a few
rows.  An inner loop whose copies in the path are *uniform* runs here once for
all of them, as one batch of rows x copies (flattened row-major, so every order
the interpreter keeps is kept: row k's copy j before its copy j + 1, row k
before row k + 1):

* every copy runs the same instructions with the same roles (no promoted
  stack word); each affine value steps by a constant from one copy to the next
  (a pointer, the loop counter), checked on every copy, so the affine value of
  copy j in row k is ``start + k*step + j*d``;
* a register the copy reads before writing it is affine (its value entering
  copy 0 checked against the batch's when the loop is reached) or an
  accumulator, ``OP acc, acc, x`` as ``loop_scan`` defines it: its operands are
  captured and folded per row in program order (copy 0 position a, copy 0 b,
  copy 1 a, ...), with ``loop_scan``'s exactness argument;
* every access of copy j steps by a constant from copy to copy and, within a
  row, no copy touches bytes another copy stores (the path batch has already
  proven this between rows); accesses of a segment must step alike between
  rows, so that one row's check holds for all.

Anything else runs copy by copy, as before.  Registers, memory, counts and
cycles are the interpreter's: the cycles never depended on how the path's
instructions are executed (``PathTiming``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_sim.isa.loop_bounds import MOD, Affine, Footprint, independent
from runtime_sim.isa.loop_chunk import PROGRESSIONS, batch_operands
from runtime_sim.isa.loop_plan import run_op
from runtime_sim.isa.loop_scan import SCANS
from runtime_sim.isa.loop_views import copies_view
from runtime_sim.isa.sem_vector import GENERAL
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import NUM_SREGS, NUM_VREGS

# Fewer copies than this run copy by copy (one extra numpy call per read would not pay).
MIN_COPIES = 2


class _NotUniform(Exception):
    """The loop's copies in the path cannot run as one batch."""


@dataclass(frozen=True)
class InnerStep:
    """One instruction of the copy: ``sources`` per read operand ("imm", value),
    ("local", key), ("outer", key) or ("affine", Affine of copy 0, step per copy);
    ``capture``: an accumulator's instruction (its operand is captured, not run)."""

    role: str
    op: object
    sources: tuple
    capture: bool = False


@dataclass(frozen=True)
class InnerLoop:
    start: int                       # path position of the first copy's first step
    length: int                      # steps per copy
    copies: int
    steps: tuple[InnerStep, ...]
    entering: tuple                  # (key, Affine) each carried affine register must enter with
    final: tuple                     # (key, source) of every register the copies write
    accumulators: tuple              # (key, mnemonic, fn, positions in the copy)


def find_inner_loops(walk) -> dict[int, InnerLoop]:
    """The uniform inner loops of ``walk``'s path, by the path position they start at.
    Which loops, and how each copy's registers flow, depends only on the path's
    instructions (the program's own, by identity), roles and transfers taken: worked out once per path shape (``_LAYOUTS``); the values
    (each affine value's start and step per copy) and the accesses are checked per walk."""
    path = walk.path
    layouts = walk.shared.get("layouts")     # a relocated walk shares them
    if layouts is None:
        # the instructions by identity: the entry holds them, so no id is reused while it lives
        shape = tuple((id(s.op), s.role, s.taken) for s in path)
        known = _LAYOUTS.get(shape)
        if known is None:
            if len(_LAYOUTS) >= MAX_LAYOUTS:
                _LAYOUTS.clear()
            known = _LAYOUTS[shape] = (tuple(s.op for s in path), _layouts(path))
        layouts = walk.shared["layouts"] = known[1]
    footprints = {fp.position: fp for fp in walk.footprints}
    found = {}
    for layout in layouts:
        try:
            found[layout.start] = _bind(layout, path, footprints)
        except _NotUniform:
            pass            # this walk's inner loop runs one iteration at a time
    return found


# Inner-loop layouts by path shape (instruction, role, taken per step), with the
# instructions they were found for.
_LAYOUTS: dict[tuple, list] = {}
MAX_LAYOUTS = 256


@dataclass(frozen=True)
class _Layout:
    """An inner loop's copies as the path's shape fixes them; affine sources are
    ("affine", position, key) and ("entering", position, key) until bound to values."""

    start: int
    length: int
    copies: int
    steps: tuple[InnerStep, ...]
    affine: tuple                    # (position, key) of every affine value the copies write
    accesses: tuple                  # positions of the loads and stores
    entering: tuple                  # (key, position of its last write in the copy)
    final: tuple
    accumulators: tuple


def _layouts(path) -> list[_Layout]:
    found, q = [], 0
    while q < len(path) - 1:
        step = path[q]
        if step.op.kind != "loop" or not step.taken or step.op.branch is None:
            q += 1
            continue
        length = -step.op.branch // WORD_BYTES + 1
        if length < 1:
            q += 1
            continue
        start = q - length + 1
        copies = _copies(path, start, length, step.index)
        if copies >= MIN_COPIES:
            try:
                found.append(_layout(path, start, length, copies))
            except _NotUniform:
                pass        # not batched: the path runs these copies one by one
        q = max(q + 1, start + copies * length)
    return found


def _copies(path, start: int, length: int, loop_index: int) -> int:
    """How many copies of the loop body ``path[start:]`` holds (the last one falls through)."""
    head = loop_index - length + 1
    if start < 0:
        return 0
    copies = 0
    while start + (copies + 1) * length <= len(path) - 1:
        copy = path[start + copies * length:start + (copies + 1) * length]
        if any(s.index != head + i for i, s in enumerate(copy)):
            break
        copies += 1
        if not copy[-1].taken:
            break
    return copies


def _layout(path, start: int, length: int, copies: int) -> _Layout:
    copy = [path[start + p] for p in range(length)]
    for p, step in enumerate(copy):
        if step.role not in ("run", "affine", "skip") or any(
                path[start + j * length + p].role != step.role for j in range(1, copies)):
            raise _NotUniform
    affine = tuple((p, key) for p, step in enumerate(copy) if step.role == "affine"
                   for key in step.values)
    written_last: dict[int, tuple[str, int]] = {}             # key -> its last write
    read_first: set[int] = set()
    for p, step in enumerate(copy):
        if step.role == "run":
            for where, key in step.op.reads:
                if where == "reg" and key not in written_last:
                    read_first.add(key)
        for key in (step.values if step.role == "affine" else
                    step.op.writes if step.role == "run" else ()):
            written_last[key] = (step.role, p)
    accumulators = _accumulators(copy, read_first, written_last)
    state: dict[int, tuple] = {}
    entering = []
    for key in read_first & set(written_last):
        role, p = written_last[key]
        if role == "affine":                # entering copy j: the last write of copy j - 1
            state[key] = ("entering", p, key)
            entering.append((key, p))
        elif key in accumulators:
            state[key] = ("acc", key)
        else:
            raise _NotUniform                # data carried from copy to copy
    steps = []
    for p, step in enumerate(copy):
        sources, capture = (), False
        if step.role == "run":
            sources = tuple(("imm", value) if where == "imm" else state.get(value, ("outer", value))
                            for where, value in step.op.reads)
            capture = any(p in acc[3] for acc in accumulators.values())
            if any(s[0] == "acc" for s in sources[capture:]):
                raise _NotUniform
            for key in step.op.writes:
                if key not in accumulators:
                    state[key] = ("local", key)
        elif step.role == "affine":
            for key in step.values:
                state[key] = ("affine", p, key)
        steps.append(InnerStep(step.role, step.op, sources, capture))
    final = tuple((key, state[key]) for key in written_last if key not in accumulators)
    accesses = tuple(p for p, step in enumerate(copy) if step.op.kind in ("load", "store"))
    return _Layout(start, length, copies, tuple(steps), affine, accesses, tuple(entering), final,
                   tuple(accumulators.values()))


def _bind(layout: _Layout, path, footprints: dict) -> InnerLoop:
    """``layout`` with this walk's values: every affine value steps by a constant per copy,
    every access too, and no copy touches bytes another stores."""
    start, length, copies = layout.start, layout.length, layout.copies
    values = {(p, key): _progression([path[start + j * length + p].values.get(key)
                                      for j in range(copies)]) for p, key in layout.affine}
    _check_memory(footprints, start, length, copies, layout.accesses)

    def bound(source):
        if source[0] == "affine":
            a0, d = values[source[1], source[2]]
            return ("affine", a0, d)
        if source[0] == "entering":
            a0, d = values[source[1], source[2]]
            return ("affine", Affine((a0.start - d) % MOD, a0.step), d)
        return source
    steps = tuple(InnerStep(s.role, s.op, tuple(bound(x) for x in s.sources), s.capture)
                  if s.role == "run" else s for s in layout.steps)
    entering = tuple((key, bound(("entering", p, key))[1]) for key, p in layout.entering)
    final = tuple((key, bound(source)) for key, source in layout.final)
    return InnerLoop(start, length, copies, steps, entering, final, layout.accumulators)


def _progression(values: list) -> tuple[Affine, int]:
    """(copy 0's value, step per copy) of an affine result that steps by a constant."""
    if None in values:
        raise _NotUniform
    a0 = values[0]
    d = (values[1].start - a0.start) % MOD
    for j, a in enumerate(values):
        if a.step != a0.step or a.start != (a0.start + j * d) % MOD:
            raise _NotUniform
    return a0, d


def _check_memory(footprints: dict, start: int, length: int, copies: int,
                  accesses: tuple[int, ...]) -> None:
    """Every access steps by a constant per copy; no copy touches bytes another stores."""
    per_copy = []
    for p in accesses:
        column = [footprints.get(start + j * length + p) for j in range(copies)]
        if all(fp is None for fp in column):
            continue
        if any(fp is None for fp in column):
            raise _NotUniform
        a0, a1 = column[0], column[1]
        d = a1.low - a0.low
        if any(fp.low != a0.low + j * d or (fp.step, fp.length, fp.is_store)
               != (a0.step, a0.length, a0.is_store) for j, fp in enumerate(column)):
            raise _NotUniform
        per_copy.append(Footprint(a0.low, d, a0.length, a0.is_store, p))
    if any(fp.is_store for fp in per_copy):
        # one row's check holds for every row only if all accesses step alike between rows
        if len({footprints[start + fp.position].step for fp in per_copy}) > 1:
            raise _NotUniform
        if not independent(per_copy, copies):
            raise _NotUniform


def _accumulators(copy, read_first: set[int], written_last: dict) -> dict[int, tuple]:
    """The carried vector registers every touching instruction updates as ``OP acc, acc, x``."""
    found = {}
    for key in read_first:
        if not NUM_SREGS <= key < NUM_SREGS + NUM_VREGS or written_last.get(key, ("",))[0] != "run":
            continue
        touching = [(p, step) for p, step in enumerate(copy) if step.role == "run"
                    and (key in step.op.writes or ("reg", key) in step.op.reads)]
        first = touching[0][1].op.mnemonic
        if first in SCANS and all(
                s.op.mnemonic == first and s.op.writes == (key,) and len(s.op.reads) == 2
                and s.op.reads[0] == ("reg", key) and s.op.reads[1] != ("reg", key)
                for _, s in touching):
            found[key] = (key, first, touching[0][1].op.fn, tuple(p for p, _ in touching))
    return found


def enters_as_proven(loop: InnerLoop, affine_now: dict[int, Affine]) -> bool:
    """The carried affine registers hold, entering copy 0, what the copies assume."""
    return all(affine_now.get(key) == value for key, value in loop.entering)


def run_inner(loop: InnerLoop, R: list, memory, k: np.ndarray, env: dict,
              affine_now: dict[int, Affine]) -> None:
    """All copies of ``loop`` for the rows ``k``; leaves ``env`` (and ``affine_now``) as
    the last copy does."""
    rows, t = len(k), loop.copies
    kk = np.repeat(k, t)
    jj = np.tile(np.arange(t, dtype=np.uint32), rows)
    local: dict[int, object] = {}
    captured: dict[int, object] = {}
    cache: dict[tuple, object] = {}

    def value(source):
        kind = source[0]
        if kind == "imm":
            return source[1]
        if kind == "local":
            return local[source[1]]
        if kind == "affine":
            if source not in cache:
                a, d = source[1], source[2]
                cache[source] = (np.uint32(a.start) + kk * np.uint32(a.step)
                                 + jj * np.uint32(d))
            return cache[source]
        # a register no copy writes (else it is local, entering or an accumulator): the
        # same for every step, so its rows repeated to the copies once
        found = cache.get(source)
        if found is None:
            key = source[1]
            outer = env[key] if key in env else R[key]
            found = cache[source] = (np.repeat(outer, t, axis=0) if _batched(key, outer)
                                     else outer)
        return found

    for p, step in enumerate(loop.steps):
        if step.role != "run":
            continue
        if step.capture:
            captured[p] = value(step.sources[1])
            continue
        if step.op.mnemonic in PROGRESSIONS and step.sources[-2][0] == "affine" \
                and step.sources[-1][0] == "imm":
            _, a, d = step.sources[-2]
            view = copies_view(memory, a, d, int(k[0]), rows, t, step.sources[-1][1],
                               step.op.kind == "store")
            if view is not None:        # the copies' rows as one strided view
                if step.op.kind == "store":
                    _store_copies(view, value(step.sources[0]))
                else:
                    local[step.op.writes[0]] = view.copy().reshape(rows * t, 16)
                continue
        args = [value(s) for s in step.sources]
        if step.op.mnemonic in GENERAL:
            args = batch_operands(args, rows * t)
        run_op(step.op, memory, args, local)
    for key, source in loop.final:
        if source[0] == "affine":
            a, d = source[1], source[2]
            last = Affine((a.start + (t - 1) * d) % MOD, a.step)
            env[key] = (np.uint32(last.start) + k * np.uint32(last.step) if last.step
                        else np.uint32(last.start))
            affine_now[key] = last
            continue
        result = local[key]
        if _batched(key, result):
            result = result.reshape((rows, t) + result.shape[1:])[:, -1]
        env[key] = result
        affine_now.pop(key, None)
    for key, mnemonic, fn, positions in loop.accumulators:
        env[key] = _fold(mnemonic, fn, env[key] if key in env else R[key],
                         [captured[p] for p in positions], rows, t)
        affine_now.pop(key, None)


def _store_copies(view: np.ndarray, value) -> None:
    """A batch of rows x copies (or one vector for all) into its (rows, copies, 16) view."""
    if type(value) is np.ndarray and value.ndim == 2:
        view[...] = value.reshape(view.shape)
    else:
        view[...] = value


def _batched(key: int, value) -> bool:
    return np.ndim(value) >= (1 if key < NUM_SREGS else 2)


def _fold(mnemonic: str, fn, incoming, operands: list, rows: int, t: int) -> np.ndarray:
    """Each row's accumulator after its copies: the operands in program order (copy 0's
    positions, then copy 1's, ...), folded as ``loop_scan.fold`` folds one row."""
    count = len(operands)
    sequence = np.empty((1 + t * count, rows, 16), np.uint8)
    sequence[0] = np.asarray(incoming, np.uint8)
    steps = sequence[1:].reshape(t, count, rows, 16)
    for i, x in enumerate(operands):
        x = np.asarray(x, np.uint8)
        steps[:, i] = x.reshape(rows, t, 16).transpose(1, 0, 2) if x.ndim == 2 else x
    ufunc, lane = SCANS[mnemonic]
    wide = sequence.view(lane).astype(np.float32)
    if not np.isnan(wide).any():
        total = ufunc.accumulate(wide, axis=0)[-1]
        if not np.isnan(total).any():
            return np.ascontiguousarray(total.astype(lane)).view(np.uint8)
    value = sequence[0]              # NaNs: the instruction's own fold, one copy at a time
    for operand in sequence[1:]:
        value = fn(value, np.ascontiguousarray(operand))
    return value
