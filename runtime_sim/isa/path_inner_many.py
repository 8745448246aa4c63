"""``path_inner.run_inner`` over several invocations' rows (``path_many``).

Each invocation's walk has its own ``InnerLoop`` at the same path position (the walks
share their path shape, hence the loop's layout): the same steps, copies and sources,
but each its own affine values (its pointers).  The copies of all of them run as one
batch of (every invocation's rows) x copies, row-major, so each row's copies keep the
order they have alone; an affine source is each invocation's own progression, a
register from the loop head each invocation's own value.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import MOD, Affine
from runtime_sim.isa.loop_chunk import PROGRESSIONS, batch_operands
from runtime_sim.isa.loop_plan import run_op
from runtime_sim.isa.loop_views import copies_view
from runtime_sim.isa.path_inner import _batched, _fold, _store_copies
from runtime_sim.isa.sem_vector import GENERAL


def enters_all(loops: list, affine_now: dict) -> bool:
    """Every invocation's loop has the first's layout and is entered as its walk proved
    (``path_inner.enters_as_proven``, ``affine_now`` holding each invocation's values)."""
    first = loops[0]
    for j, loop in enumerate(loops):
        if loop.copies != first.copies or loop.length != first.length \
                or len(loop.steps) != len(first.steps):
            return False
        for key, value in loop.entering:
            now = affine_now.get(key)
            if now is None or now[j] != value:
                return False
    return True


def run_inner_many(loops: list, outer, memory, rows, env: dict, affine_now: dict) -> None:
    """All copies of each invocation's ``loops[j]`` for its rows; leaves ``env`` (and
    ``affine_now``) as the last copy does.  ``outer(key)``: a register's stacked value at
    the loop head (``path_many``); ``memory`` a ``StackedMemory``, ``rows`` its ``Rows``."""
    t = loops[0].copies
    total = rows.total
    kk = np.repeat(rows.k, t)
    jj = np.tile(np.arange(t, dtype=np.uint32), total)
    counts = [n * t for n in rows.counts]
    memory_t = memory.times(t)
    local: dict[int, object] = {}
    captured: dict[int, object] = {}
    cache: dict[tuple, object] = {}

    def affine(sources: tuple):
        """Copy j of row k of invocation i: its ``a.start + k*a.step + j*d``."""
        found = cache.get(sources)
        if found is None:
            starts = np.repeat(np.array([s[1].start for s in sources], np.uint32), counts)
            steps = np.repeat(np.array([s[1].step for s in sources], np.uint32), counts)
            ds = np.repeat(np.array([s[2] for s in sources], np.uint32), counts)
            found = cache[sources] = starts + kk * steps + jj * ds
        return found

    def value(p: int, s: int):
        source = loops[0].steps[p].sources[s]
        kind = source[0]
        if kind == "imm":
            return source[1]
        if kind == "local":
            return local[source[1]]
        if kind == "affine":
            return affine(tuple(loop.steps[p].sources[s] for loop in loops))
        found = cache.get(source)
        if found is None:
            key = source[1]
            held = env[key] if key in env else outer(key)
            found = cache[source] = (np.repeat(held, t, axis=0) if _batched(key, held)
                                     else held)
        return found

    for p, step in enumerate(loops[0].steps):
        if step.role != "run":
            continue
        if step.capture:
            captured[p] = value(p, 1)
            continue
        if step.op.mnemonic in PROGRESSIONS and step.sources[-2][0] == "affine" \
                and step.sources[-1][0] == "imm":
            views = _views(loops, p, memory, rows, t)
            if views is not None:       # each invocation's copies as one strided view
                if step.op.kind == "store":
                    stored = value(p, 0)
                    for view, lo, n in zip(views, rows.offsets, rows.counts):
                        _store_copies(view, stored[lo * t:(lo + n) * t]
                                      if type(stored) is np.ndarray and stored.ndim == 2
                                      else stored)
                else:
                    local[step.op.writes[0]] = np.concatenate(
                        [view.reshape(-1, 16) for view in views])
                continue
        args = [value(p, s) for s in range(len(step.sources))]
        if step.op.mnemonic in GENERAL:
            args = batch_operands(args, total * t)
        run_op(step.op, memory_t, args, local)
    for f, (key, source) in enumerate(loops[0].final):
        if source[0] == "affine":
            lasts = []
            for loop in loops:
                _, a, d = loop.final[f][1]
                lasts.append(Affine((a.start + (t - 1) * d) % MOD, a.step))
            env[key] = rows.affine(lasts)
            affine_now[key] = tuple(lasts)
            continue
        result = local[key]
        if _batched(key, result):
            result = result.reshape((total, t) + result.shape[1:])[:, -1]
        env[key] = result
        affine_now.pop(key, None)
    for key, mnemonic, fn, positions in loops[0].accumulators:
        held = env[key] if key in env else outer(key)
        env[key] = _fold(mnemonic, fn, held, [captured[p] for p in positions], total, t)
        affine_now.pop(key, None)


def _views(loops: list, p: int, memory, rows, t: int) -> list | None:
    """Each invocation's ``loop_views.copies_view`` of step ``p``'s rows x copies, or None
    when one has none."""
    step = loops[0].steps[p]
    views = []
    for loop, mem, n in zip(loops, memory.memories, rows.counts):
        _, a, d = loop.steps[p].sources[-2]
        view = copies_view(mem, a, d, 0, n, t, step.sources[-1][1], step.op.kind == "store")
        if view is None:
            return None
        views.append(view)
    return views
