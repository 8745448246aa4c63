"""Several invocations' batches of one loop plan run as one batch of all their rows.

The blocks of a layer invoke one generated kernel on different CMX slots: the same
code, the same trip count, only the pointers differ.  Run alone, each batch pays
the chunk schedule's per-instruction numpy calls for a few dozen rows; run
together (``execute_together``, invocations paused by ``interpreter.run_steps``
at their proven batches), each step is one numpy call over every invocation's
rows, stacked invocation after invocation:

* a view load concatenates the invocations' views of their rows (each its own
  memory and pointers), a view store writes each invocation's rows back to its
  own view; the other steps are the same semantic functions on the stacked
  rows, which compute each row as alone (elementwise, row by row: the chunks
  of one batch already rely on it);
* what is per invocation stays so: the carried registers' values entering the
  chunk (a shifted register takes each invocation's at its first row), the
  accumulators' captured operands (folded per invocation, in order), the
  registers the batch leaves.

A load or store other than through views (a gather at computed addresses, a scalar
word) reads and writes each invocation's rows in its own memory
(``stacked_memory.StackedMemory``).  Invocations whose invariant registers differ
(one vector could not stand for all), and chunks whose rows are not views in every
invocation run alone, as ``FastLoops.execute_pending`` does.  Every invocation's memory and
registers end as its own batch alone leaves them.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.fastpath import _chunks, _induction, _last_row
from runtime_sim.isa.loop_bounds import MOD, Affine
from runtime_sim.isa.loop_chunk import (_CAPTURE, _LOAD, _OP, _OP1, _OP2, _SHIFT, _STORE,
                                        _VIEW_LOAD, _VIEW_STORE, ChunkRunner, step_value)
from runtime_sim.isa.loop_pipelined import batched, rows_of
from runtime_sim.isa.loop_scan import fold
from runtime_sim.isa.loop_views import grouped_view, tiled
from runtime_sim.isa.memory import AccessFault
from runtime_sim.isa.path_batch import PathPending
from runtime_sim.isa.path_many import run_paths_together
from runtime_sim.isa.stacked_memory import StackedMemory
from vpuc.diagnostics import VpucError


def execute_together(pending: list) -> None:
    """Run the ``pending`` batches of these ``FastLoops`` (one per invocation): those of
    one plan, iteration count and chunk size, with the same invariant registers, as one
    batch; the others alone.  Path batches go to ``path_many``."""
    paths = [loops for loops in pending if type(loops.pending) is PathPending]
    if paths:
        run_paths_together(paths)
        pending = [loops for loops in pending if loops.pending is not None]
    groups: dict[tuple, list] = {}
    for loops in pending:
        plan, _, _, iterations = loops.pending
        groups.setdefault((id(plan), iterations, loops.chunk), []).append(loops)
    for members in groups.values():
        for group in _alike(members):
            if len(group) < 2:
                group[0].execute_pending()
            else:
                _run_group(group)


def _alike(members: list) -> list[list]:
    """``members`` (batches of one plan) in groups that may run as one: the same invariant
    registers within a group."""
    plan = members[0].pending[0]
    if len(members) < 2:
        return [members]
    if plan.runner is None:
        plan.runner = ChunkRunner(plan)
    runner = plan.runner
    groups: list[list] = []
    for loops in members:
        R = loops.pending[1]
        for group in groups:
            first = group[0].pending[1]
            if all(_same(first[key], R[key]) for _, key in runner.invariants):
                group.append(loops)
                break
        else:
            groups.append([loops])
    return groups


def _run_group(members: list) -> None:
    plan, _, _, iterations = members[0].pending
    Rs = [loops.pending[1] for loops in members]
    memories = [loops.pending[2] for loops in members]
    for loops in members:
        loops.pending = None
        loops.together += 1
    bounds = [memory.bounds for memory in memories]
    for memory in memories:         # proven for every batch: not checked again
        memory.bounds = None
    try:
        _execute_many(plan, Rs, memories, iterations, members[0].chunk)
    except AccessFault as fault:    # the proofs exclude this: a fast-path bug
        raise VpucError(f"internal error: the fast path faulted in a checked loop: "
                        f"{fault.diagnostics[0].message}") from None
    finally:
        for memory, bound in zip(memories, bounds):
            memory.bounds = bound


def _same(a, b) -> bool:
    if a is b:
        return True
    if type(a) is np.ndarray or type(b) is np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return int(a) == int(b)


def _execute_many(plan, Rs: list, memories: list, iterations: int, chunk: int) -> None:
    """``FastLoops._execute`` of every invocation, its chunks run together."""
    finals = [{key: np.uint32(_induction(plan, R, key).at(iterations))
               for key in plan.induction} for R in Rs]
    incomings = [({key: R[key] for key in plan.pipelined.carried}
                  if plan.pipelined is not None else {}) for R in Rs]
    sums = [{key: R[key] for key in plan.accumulators} for R in Rs]
    runner = plan.runner
    envs: list = [{} for _ in Rs]
    for first, rows in _chunks(iterations, chunk):
        captureds: list[dict] = [{} for _ in Rs]
        together = run_chunk_many(runner, Rs, memories, first, rows, incomings, captureds)
        if together is None:            # rows that are not views somewhere: each alone
            envs = [runner(R, memory, first, rows, incoming, captured)
                    for R, memory, incoming, captured in zip(Rs, memories, incomings,
                                                              captureds)]
        else:
            envs = together
        for k in range(len(Rs)):
            for key, acc in plan.accumulators.items():
                sums[k][key] = fold(acc, sums[k][key], captureds[k], rows)
    for R, env, total, final in zip(Rs, envs, sums, finals):
        for key, value in env.items():
            R[key] = _last_row(key, value)
        for key, value in total.items():
            R[key] = value
        for key, value in final.items():
            R[key] = value


def _affines(runner: ChunkRunner, R: list) -> dict[int, Affine]:
    """Each induction slot's Affine at iteration 0 (``ChunkRunner.__call__``'s)."""
    plan = runner.plan
    steps = {key: [step_value(s, R) for s in plan.induction[key].values()]
             for key in {key for _, key, _ in runner.inductions}}
    affines = {}
    for slot, key, before in runner.inductions:
        amounts = steps[key]
        affines[slot] = Affine((int(R[key]) + sum(amounts[:before])) % MOD, sum(amounts) % MOD)
    return affines


def run_chunk_many(runner: ChunkRunner, Rs: list, memories: list, first: int, rows: int,
                   incomings: list, captureds: list) -> list | None:
    """``ChunkRunner.__call__`` of every invocation at once (iterations first ..
    first+rows-1 of each), or None, having run nothing, when some view step's rows are
    not a view in some invocation."""
    count = len(Rs)
    total = count * rows
    affines = [_affines(runner, R) for R in Rs] if runner.inductions else [{}] * count
    # every view first: a step whose rows are no view in some invocation runs nothing.
    # (A reloaded constant's rows are read here, not at its step: no store of the batch
    # reaches them, or two iterations would touch the same bytes and the loop would
    # not have been batched.)
    views: dict[int, list] = {}
    windows = [{} for _ in Rs]          # each invocation's view groups' windows, this chunk
    for step in runner.run_steps:
        if step[0] == _VIEW_LOAD or step[0] == _VIEW_STORE:
            found = []
            for memory, groups, aff in zip(memories, windows, affines):
                view = grouped_view(memory, groups, aff, first, rows, step[1], step[3],
                                    step[0] == _VIEW_STORE)
                if view is None:
                    return None
                found.append(view)
            views[id(step)] = found
    stacked = StackedMemory(memories, [rows] * count)
    R = Rs[0]                           # the invariants are the same in every invocation
    v = runner.template.copy()
    for slot, key in runner.invariants:
        v[slot] = R[key]
    for slot, key in runner.tiled:
        v[slot] = tiled(R[key], total)
    if runner.arrays:
        k = np.arange(first, first + rows, dtype=np.uint32)
        for slot, _, _ in runner.arrays:
            v[slot] = np.concatenate([np.uint32(aff[slot].start) + k * np.uint32(aff[slot].step)
                                      for aff in affines])
    for step in runner.run_steps:
        code = step[0]
        if code == _OP2:
            v[step[4]] = step[1](v[step[2]], v[step[3]])
            for slot in step[5]:
                v[slot] = None
            continue
        if code == _OP1:
            v[step[3]] = step[1](v[step[2]])
            for slot in step[4]:
                v[slot] = None
            continue
        found = views.get(id(step))
        step, dead, outs = step[1], step[2], ()
        if code == _OP:
            result, outs = step[1](*[v[a] for a in step[2]]), step[3]
        elif code == _LOAD:             # each row from its own invocation's memory
            result, outs = step[1](stacked, *[v[a] for a in step[2]]), step[3]
        elif code == _STORE:
            step[1](stacked, *[v[a] for a in step[2]])
        elif code == _VIEW_LOAD:
            result, outs = np.concatenate(found), step[3]
        elif code == _VIEW_STORE:
            value = v[step[2][0]]
            if type(value) is np.ndarray and value.ndim == 2 and len(value) == total:
                for j, view in enumerate(found):
                    view[...] = value[j * rows:(j + 1) * rows]
            else:                       # one vector for all rows
                for view in found:
                    view[...] = value
        elif code == _CAPTURE:
            value = v[step[2]]
            key = runner.plan.scans[step[1]]
            for j, captured in enumerate(captureds):
                captured[step[1]] = (value[j * rows:(j + 1) * rows] if batched(key, value)
                                     else value)
        else:                           # _SHIFT
            _, key, source, slot = step
            v[slot] = _shifted_many(key, v[source], [incoming[key] for incoming in incomings],
                                    rows, total)
        if len(outs) == 1:
            v[outs[0]] = result
        elif outs:
            for slot, value in zip(outs, result):
                v[slot] = value
        for slot in dead:
            v[slot] = None
    for key, slot in runner.incoming:
        value = rows_of(key, v[slot], total)
        for j, incoming in enumerate(incomings):
            incoming[key] = value[(j + 1) * rows - 1]
    envs = []
    for j in range(count):
        env = {}
        for key, slot in runner.final:
            value = v[slot]
            env[key] = value[j * rows:(j + 1) * rows] if batched(key, value) else value
        envs.append(env)
    return envs


def _shifted_many(key: int, value, incoming: list, rows: int, total: int) -> np.ndarray:
    """``loop_pipelined.shifted`` of each invocation's rows: the row before, its own
    incoming value at its first row."""
    batch = rows_of(key, value, total)
    out = np.empty(batch.shape, batch.dtype)
    out[1:] = batch[:-1]
    # each invocation's first row (rows j*rows): its own incoming value, as shifted takes it
    out[::rows] = np.asarray(incoming, dtype=batch.dtype).reshape(
        (len(incoming),) + batch.shape[1:])
    return out
