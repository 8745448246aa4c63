"""Several invocations' path batches of one loop run as one batch of all their rows.

The blocks of a layer invoke one library kernel (a layer norm, a softmax) on the same
row length at different CMX slots: each invocation's per-row loop is a path batch
(``path_batch``) along the same path, only its pointers differ.  Run alone, each pays
the path's ~one numpy call per instruction for its few dozen rows; run together
(``execute_together``, invocations paused by ``interpreter.run_steps`` at their proven
path batches), each path instruction is one numpy call over every invocation's rows,
stacked invocation after invocation:

* what the walks prove (affine scalars: pointers, counters, promoted stack words) is
  each invocation's own, its rows ``start + k*step`` from its own walk; a register the
  path reads from the loop head is the invocation's own, one value when all agree;
* loads and stores go to each invocation's own memory (``StackedMemory``: the rows of
  a batched access split by invocation, an unbatched one made by every invocation);
  a ``vld`` / ``vst`` at a stepping pointer reads or writes each invocation's view;
* a row's uniform inner loops (``path_inner``) run as rows x copies when every
  invocation's walk has them and enters them as proven, else copy by copy.

Every operation computes each row as alone (the path batch already runs each row of
one invocation so), so every invocation's memory and registers end as its own batch
alone leaves them.  Walks of different paths, programs, promoted words or register
sets run alone, as ``FastLoops.execute_pending`` does.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import Affine
from runtime_sim.isa.loop_chunk import PROGRESSIONS, batch_operands
from runtime_sim.isa.loop_plan import run_op
from runtime_sim.isa.loop_views import progression_view
from runtime_sim.isa.memory import AccessFault
from runtime_sim.isa.path_batch import PATH_CHUNK
from runtime_sim.isa.path_inner import find_inner_loops
from runtime_sim.isa.path_inner_many import enters_all, run_inner_many
from runtime_sim.isa.sem_vector import GENERAL
from runtime_sim.isa.stacked_memory import Rows, StackedMemory
from vpuc.diagnostics import VpucError
from vpuc.shave.isa import NUM_SREGS


def group_key(program, head: int, walk) -> tuple:
    """What invocations' path batches must share to run as one: the program, the loop,
    and the walk's shape (each step's instruction, role, transfer, promoted word and
    affine registers; the carried, promoted and final registers)."""
    shape = walk.shared.get("many_key")       # the same for a relocated walk (same path)
    if shape is None:
        shape = walk.shared["many_key"] = (
            tuple((s.index, s.role, s.taken, s.address, s.size, tuple(s.values))
                  for s in walk.path),
            tuple(sorted(walk.promoted.items())))
    return (id(program), head, shape, tuple(walk.carried),
            tuple((key, value is None) for key, value in walk.end.items()))


def run_paths_together(members: list) -> None:
    """Run the pending path batches of these ``FastLoops`` (one per invocation): those
    sharing ``group_key``, as one batch of at most ``PATH_CHUNK`` rows; the others alone.
    Each ``FastLoops`` counts in ``together`` the batches it ran with others."""
    groups: dict[tuple, list] = {}
    for loops in members:
        pending = loops.pending
        key = group_key(loops.program, pending.head, pending.walk)
        groups.setdefault(key, []).append(loops)
    for group in groups.values():
        batch: list = []
        rows = 0
        for loops in group:
            iterations = loops.pending.iterations
            if batch and rows + iterations > PATH_CHUNK:
                _run_group(batch)
                batch, rows = [], 0
            batch.append(loops)
            rows += iterations
        _run_group(batch)


def _run_group(members: list) -> None:
    if len(members) == 1:
        members[0].execute_pending()
        return
    pendings = [loops.pending for loops in members]
    for loops in members:
        loops.pending = None
        loops.together += 1
    memories = [p.memory for p in pendings]
    bounds = [memory.bounds for memory in memories]
    for memory in memories:         # proven for every batch: not checked again
        memory.bounds = None
    try:
        execute_many([p.walk for p in pendings], [p.R for p in pendings], memories,
                     [p.iterations for p in pendings])
    except AccessFault as fault:    # the proofs exclude this: a fast-path bug
        raise VpucError(f"internal error: the path batch faulted in a checked loop: "
                        f"{fault.diagnostics[0].message}") from None
    finally:
        for memory, bound in zip(memories, bounds):
            memory.bounds = bound


def execute_many(walks: list, Rs: list, memories: list, counts: list[int]) -> None:
    """``path_batch.execute`` of each invocation (its walk, head registers, memory and
    iterations), all rows as one batch; the walks share ``group_key``."""
    rows = Rows(counts)
    memory = StackedMemory(memories, counts)
    first = walks[0]
    env = {key: rows.affine([w.carried[key] for w in walks]) for key in first.carried}
    overlay: dict[int, object] = {}
    _run_rows_many(walks, Rs, memory, rows, env, overlay)
    for j, (walk, R, mem) in enumerate(zip(walks, Rs, memories)):
        last = counts[j] - 1
        for key in range(NUM_SREGS):
            end = walk.end.get(key)
            if end is not None:
                R[key] = np.uint32(end.at(last))
            elif key in env:
                R[key] = rows.last(env[key], j, 0)
        for key, value in env.items():
            if key >= NUM_SREGS:
                R[key] = rows.last(value, j, 1).copy()
        for address, (value, size) in overlay.items():
            word = np.asarray(rows.last(value, j, 0), np.uint32).reshape(1).view(np.uint8)[:size]
            mem.write(address, word)


def _run_rows_many(walks: list, Rs: list, memory: StackedMemory, rows: Rows, env: dict,
                   overlay: dict) -> None:
    """``path_batch._run_rows`` over every invocation's rows (``rows``)."""
    heads: dict[int, object] = {}

    def outer(key):
        found = heads.get(key)
        if found is None:
            found = heads[key] = rows.same_or_rows(key, [R[key] for R in Rs])
        return found

    def read(operand):
        where, key = operand
        if where == "imm":
            return key
        if key in env:
            return env[key]
        return outer(key)

    for walk in walks:
        if walk.inner is None:
            walk.inner = find_inner_loops(walk)
    inner = all(walk.inner for walk in walks)
    paths = [walk.path for walk in walks]
    # per register: each invocation's affine value as the path goes (inner loops' entries)
    affine_now: dict[int, tuple] = {}
    if inner:
        affine_now = {key: tuple(Affine(int(R[key]), 0) for R in Rs) for key in range(NUM_SREGS)}
        affine_now.update({key: tuple(w.carried[key] for w in walks) for key in walks[0].carried})
    # the registers stepping in every invocation (a vld / vst based on one reads or
    # writes each invocation's view of its rows)
    stepping: dict[int, list] = {}
    for key in walks[0].carried:
        values = [w.carried[key] for w in walks]
        if all(value.step for value in values):
            stepping[key] = values
    total = rows.total
    path, position, end = paths[0], 0, len(paths[0]) - 1
    while position < end:
        if inner:
            loops = [walk.inner.get(position) for walk in walks]
            if None not in loops and enters_all(loops, affine_now):
                run_inner_many(loops, outer, memory, rows, env, affine_now)
                position += loops[0].copies * loops[0].length
                stepping.clear()
                continue
        step = path[position]
        p = position
        position += 1
        role, op = step.role, step.op
        if role == "skip":
            continue
        if role == "affine":
            for key in step.values:
                values = [steps[p].values[key] for steps in paths]
                env[key] = rows.affine(values)
                if all(value.step for value in values):
                    stepping[key] = values
                else:
                    stepping.pop(key, None)
                if inner:
                    affine_now[key] = tuple(values)
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
            views = _views(memory, stepping[op.reads[-2][1]], rows, op.reads[-1][1],
                           op.kind == "store")
            if views is not None:
                if op.kind == "store":
                    rows.store(views, read(op.reads[0]))
                else:
                    env[op.writes[0]] = np.concatenate(views)
                continue
        args = [read(r) for r in op.reads]
        if op.mnemonic in GENERAL and total > 1:
            args = batch_operands(args, total)
        run_op(op, memory, args, env)
    for key in path[-1].values:         # the back-edge's loop counter
        env[key] = rows.affine([steps[-1].values[key] for steps in paths])


def _views(memory: StackedMemory, bases: list[Affine], rows: Rows, offset,
           is_store: bool) -> list | None:
    """Each invocation's ``progression_view`` of its rows, or None if one has none."""
    views = []
    for mem, base, count in zip(memory.memories, bases, rows.counts):
        view = progression_view(mem, base, 0, count, offset, is_store)
        if view is None:
            return None
        views.append(view)
    return views
