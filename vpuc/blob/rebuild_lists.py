"""Task lists rebuilt a column at a time, for ``vpuc.blob.rebuild``.

``rebuild`` checks a task list's labels, kinds and barrier indices on whole
columns first (``_list_checked``).  When they hold, ``*_ok`` checks the rest of
what the row-wise builder checks (enum codes, tensor and kernel indices, names,
invocation images) on the list's columns, and ``*_list`` makes the tasks with
``map`` over the columns, without a check per row: when the module first asks
for its task lists (``Module.defer_task_lists``), or for a few tasks
(``verify_columns``'s representatives, the plan's DPU cost classes).  On any
doubt ``rebuild`` builds the list row by row, whose message names the first
bad task.
"""

from __future__ import annotations

from itertools import chain, islice, repeat

import numpy as np

from vpuc.blob.content import DMA_MODE_OF, DPU_OP_OF, MPE_MODE_CODE, MPE_MODE_OF, POST_OP_OF
from vpuc.blob.record_table import RecordTable, columns
from vpuc.diagnostics import UNKNOWN_LOC
from vpuc.ir.module import Ref
from vpuc.ir.tasks import (Binding, DmaTask, DpuQuant, DpuTask, DpuVariant, PostOp,
                           SwKernelTask)
from vpuc.program import InvocationTable, Program

# Execution mode codes: a mode's name, or None for UNSET (not pinned).
_MODE_OF = {**MPE_MODE_OF, MPE_MODE_CODE[None]: None}


def dma_ok(recs, n_tensors: int) -> bool:
    """Whether a DMA list whose labels and barriers are checked has every tensor index and
    mode good (then ``dma_list`` builds it without a check per row)."""
    if not recs:
        return True
    srcs, dsts, modes = _arrays(recs, "src", "dst", "mode")
    ends = (srcs.min(), srcs.max(), dsts.min(), dsts.max())
    return min(ends) >= 0 and max(ends) < n_tensors and \
        set(np.unique(modes).tolist()) <= DMA_MODE_OF.keys()


def dma_list(recs, refs: list[Ref], barrier_names: list[str]) -> list[DmaTask]:
    """A DMA list that ``dma_ok`` passed, built a column at a time."""
    if not recs:
        return []
    labels, srcs, dsts, channels, modes, waits, updates = zip(*recs)
    barriers = _barrier_tuples(barrier_names)
    return list(map(DmaTask, labels, barriers(waits), barriers(updates),
                    map(refs.__getitem__, srcs), map(refs.__getitem__, dsts), channels,
                    map(DMA_MODE_OF.__getitem__, modes)))


def act_ok(check, recs, n_tensors: int, kernel_names: list[str], program: Program) -> bool:
    """Whether an ACT SHAVE list whose labels and barriers are checked has good kernels,
    bindings, names and invocation images and no scalar constants (then ``act_list`` and
    ``act_invocations`` build it without a check per row)."""
    if not recs:
        return True
    kernels, scalars, invocations = columns(recs, "kernel", "scalars", "invocation")
    if isinstance(recs, RecordTable) and recs.has("names"):
        indices = recs.array("bindings.tensor")
        names = recs.column("names")
    else:
        inputs, outputs, run_args = columns(recs, "inputs", "outputs", "run_args")
        groups = inputs + outputs
        indices = np.fromiter((b.tensor for group in groups for b in group), np.int64)
        names = list({b.alias: None for group in groups for b in group} | dict.fromkeys(
            chain.from_iterable(run_args)))
    if any(scalars) or min(kernels) < 0 or max(kernels) >= len(kernel_names) or \
            (len(indices) and (indices.min() < 0 or indices.max() >= n_tensors)) or \
            not check.all_names(names):
        return False
    if None not in invocations:     # every task invoked: each distinct kernel once, args as columns
        images = program.kernels
        if any(program.kernel_aliases.get(name, name) not in images
               for name in map(kernel_names.__getitem__, set(kernels))):
            return False
        windows, offsets, sizes = zip(*invocations)
        ends = np.fromiter(offsets, np.int64, len(offsets)) + np.fromiter(sizes, np.int64,
                                                                          len(sizes))
        return bool((ends <= np.fromiter(map(len, windows), np.int64, len(windows))).all())
    for kernel, inv in zip(map(kernel_names.__getitem__, kernels), invocations):
        if inv is not None and (program.kernel_aliases.get(kernel, kernel) not in
                                program.kernels or
                                inv.args_offset + inv.args_size > len(inv.window)):
            return False
    return True


def act_invocations(recs, kernel_names: list[str]) -> InvocationTable:
    """The invocation images of a list ``act_ok`` passed (by task index), as columns: an
    ``InvocationImage`` is made only when asked for."""
    if not recs:
        return InvocationTable(([],) * 6)
    kernels, tiles, invocations = columns(recs, "kernel", "tile", "invocation")
    rows = list(range(len(recs)))
    if None in invocations:
        rows = [i for i, inv in enumerate(invocations) if inv is not None]
        kernels, tiles, invocations = ([column[i] for i in rows]
                                       for column in (kernels, tiles, invocations))
    windows, offsets, sizes = zip(*invocations) if rows else ((), (), ())
    return InvocationTable((rows, list(map(kernel_names.__getitem__, kernels)), list(tiles),
                            list(windows), list(offsets), list(sizes)))


def act_list(check, recs, refs: list[Ref], barrier_names: list[str],
             kernel_names: list[str]) -> list[SwKernelTask]:
    """An ACT SHAVE list that ``act_ok`` passed, built a column at a time."""
    if not recs:
        return []
    labels, kernels, tiles, inputs, outputs, _, run_args, _, waits, updates = zip(*recs)
    groups = inputs + outputs
    names = list({b.alias: None for group in groups for b in group} | dict.fromkeys(
        chain.from_iterable(run_args)))
    named = [kernel_names[k] for k in kernels]
    ref = {name: check.ref("", name) for name in chain(names, set(named))}.__getitem__
    # Tasks binding the same tensors share their (never mutated) bindings.
    made = {group: tuple(Binding(refs[b.tensor], ref(b.alias)) for b in group)
            for group in dict.fromkeys(groups)}
    bind = list(map(made.__getitem__, groups))
    barriers = _barrier_tuples(barrier_names)
    return list(map(SwKernelTask, labels, barriers(waits), barriers(updates), map(ref, named),
                    tiles, bind[:len(recs)], bind[len(recs):], repeat((), len(recs)),
                    [tuple(map(ref, args)) for args in run_args]))


def dpu_ok(recs, n_tensors: int) -> bool:
    """Whether a DPU list whose labels and barriers (its variants' too) are checked has
    every op, post op and mode code and tensor index good (then ``dpu_list`` builds it
    without a check per row)."""
    if not recs:
        return True
    ops, outputs, weights, biases, modes = _arrays(recs, "op", "output", "weights", "bias",
                                                   "mode")
    v_modes, = _arrays(recs, "variants.mode")
    posts, = columns(recs, "post_op")
    if isinstance(recs, RecordTable) and recs.has("inputs.flat"):
        all_inputs = recs.array("inputs.flat")
    else:
        all_inputs = np.fromiter(chain.from_iterable(columns(recs, "inputs")[0]), np.int64)
    copies = np.fromiter(chain.from_iterable(columns(recs, "odu_cast")[0]), np.int64)
    scales, = _arrays(recs, "quant_scale")
    used = np.concatenate([weights[weights != -1], biases[biases != -1], copies,
                           scales[scales != -1]])
    ends_ = [outputs.min(), outputs.max()] + \
        ([all_inputs.min(), all_inputs.max()] if len(all_inputs) else []) + \
        ([used.min(), used.max()] if len(used) else [])
    return set(np.unique(ops).tolist()) <= DPU_OP_OF.keys() and \
        set(np.unique(np.concatenate([modes, v_modes])).tolist()) <= _MODE_OF.keys() \
        and {p.kind for p in posts if p is not None} <= POST_OP_OF.keys() \
        and min(ends_) >= 0 and max(ends_) < n_tensors


def _arrays(recs, *names: str) -> list[np.ndarray]:
    """Integer columns of a task list as int64 arrays (a ``RecordTable``'s numpy ones as
    they are)."""
    if not isinstance(recs, RecordTable):
        return [np.fromiter(column, np.int64, len(column)) for column in columns(recs, *names)]
    return [np.asarray(recs.column(name) if recs.array(name) is None else recs.array(name))
            .astype(np.int64) for name in names]


def dpu_list(recs, refs: list[Ref], barrier_names: list[str]) -> list[DpuTask]:
    """A DPU list that ``dpu_ok`` passed, built a column at a time."""
    if not recs:
        return []
    (labels, ops, tiles, inputs, outputs, weights, biases, kernels, strides, pads, dilations,
     posts, waits, updates, per_task, modes, odu_casts, scales, in_zps, out_zps) = zip(*recs)
    flat = list(chain.from_iterable(per_task))
    v_labels, starts, ends, v_waits, v_updates, v_modes = zip(*flat) if flat else ((),) * 6
    ref, mode = refs.__getitem__, _MODE_OF.__getitem__
    barriers = _barrier_tuples(barrier_names)
    variants = list(map(DpuVariant, v_labels, map(tuple, starts), map(tuple, ends),
                        barriers(v_waits), barriers(v_updates), repeat(UNKNOWN_LOC),
                        map(mode, v_modes)))
    grouped = iter(variants)
    post_of: dict = {}
    return list(map(
        DpuTask, labels, barriers(waits), barriers(updates),
        map(DPU_OP_OF.__getitem__, ops), tiles, [tuple(map(ref, i)) for i in inputs],
        map(ref, outputs), [None if w == -1 else refs[w] for w in weights],
        [None if b == -1 else refs[b] for b in biases], map(_opt, kernels), map(_opt, strides),
        map(_opt, pads), map(_opt, dilations), [None if p is None else _post(p, post_of)
                                                 for p in posts],
        [list(islice(grouped, len(v))) for v in per_task], repeat(UNKNOWN_LOC),
        map(mode, modes), [tuple(map(ref, c)) for c in odu_casts],
        [None if s == -1 else DpuQuant(refs[s], int(i), int(o))
         for s, i, o in zip(scales, in_zps, out_zps)]))


def _barrier_tuples(barrier_names: list[str]):
    """A column of barrier index tuples (checked) -> their name tuples; for a long column
    the empty tuple and each barrier's one-name tuple shared (most tasks wait on or update
    one barrier), a few tasks (one made on request) made as they are."""
    names = barrier_names.__getitem__
    ones: list = []

    def made(column) -> list[tuple[str, ...]]:
        if len(column) < 64:
            return [tuple(map(names, w)) for w in column]
        if not ones:
            ones.extend(zip(barrier_names))
        return [ones[w[0]] if len(w) == 1 else tuple(map(names, w)) for w in column]
    return made


def _post(rec, made: dict) -> PostOp:
    """A post op per task (PostOp is mutable), its params converted once per distinct record."""
    params = made.get(rec)
    if params is None:
        params = made[rec] = tuple(map(float, rec.params))
    return PostOp(POST_OP_OF[rec.kind], params)


def _opt(values) -> tuple | None:
    return None if values is None else tuple(values)
