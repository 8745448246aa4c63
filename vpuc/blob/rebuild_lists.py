"""Task lists rebuilt a column at a time, for ``vpuc.blob.rebuild``.

``rebuild`` checks a task list's labels, kinds and barrier indices on whole
columns first (``_list_checked``).  When they hold, these build the list's IR
tasks without a check per row: each first checks the rest of what the row-wise
builder checks (enum codes, tensor and kernel indices, names, invocation
images) on the list's columns, then makes the tasks with ``map`` over the
columns.  On any doubt they return [], and ``rebuild`` builds the list row by
row, whose message names the first bad task.
"""

from __future__ import annotations

from itertools import chain, islice, repeat

from vpuc.blob.content import DMA_MODE_OF, DPU_OP_OF, MPE_MODE_CODE, MPE_MODE_OF, POST_OP_OF
from vpuc.diagnostics import UNKNOWN_LOC
from vpuc.ir.module import Ref
from vpuc.ir.tasks import Binding, DmaTask, DpuTask, DpuVariant, PostOp, SwKernelTask
from vpuc.program import InvocationImage, Program

# Execution mode codes: a mode's name, or None for UNSET (not pinned).
_MODE_OF = {**MPE_MODE_OF, MPE_MODE_CODE[None]: None}


def dma_list(recs, refs: list[Ref], barrier_names: list[str]) -> list[DmaTask]:
    """A DMA list whose labels and barriers are checked, built a column at a time when its
    tensor indices and modes are all good; [] to build it row by row (for the message)."""
    if not recs:
        return []
    labels, srcs, dsts, channels, modes, waits, updates = zip(*recs)
    ends = (min(srcs), max(srcs), min(dsts), max(dsts))
    if min(ends) < 0 or max(ends) >= len(refs) or not set(modes) <= DMA_MODE_OF.keys():
        return []
    barriers = _barrier_tuples(barrier_names)
    return list(map(DmaTask, labels, barriers(waits), barriers(updates),
                    map(refs.__getitem__, srcs), map(refs.__getitem__, dsts), channels,
                    map(DMA_MODE_OF.__getitem__, modes)))


def act_list(check, recs, refs: list[Ref], barrier_names: list[str],
             kernel_names: list[str], program: Program) -> list[SwKernelTask]:
    """An ACT SHAVE list whose labels and barriers are checked, built a column at a time
    (with its invocations) when its kernels, bindings, names and invocation images are all
    good and no task has scalar constants; [] to build it row by row (for the message)."""
    if not recs:
        return []
    labels, kernels, tiles, inputs, outputs, scalars, run_args, invocations, waits, updates = \
        zip(*recs)
    groups = inputs + outputs
    indices = [b.tensor for group in groups for b in group]
    names = list({b.alias: None for group in groups for b in group} | dict.fromkeys(
        chain.from_iterable(run_args)))
    if any(scalars) or min(kernels) < 0 or max(kernels) >= len(kernel_names) or \
            (indices and (min(indices) < 0 or max(indices) >= len(refs))) or \
            not check.all_names(names):
        return []
    named = [kernel_names[k] for k in kernels]
    for kernel, inv in zip(named, invocations):
        if inv is not None and (program.kernel_aliases.get(kernel, kernel) not in
                                program.kernels or
                                inv.args_offset + inv.args_size > len(inv.window)):
            return []
    ref = {name: check.ref("", name) for name in chain(names, set(named))}.__getitem__
    # Tasks binding the same tensors share their (never mutated) bindings.
    made = {group: tuple(Binding(refs[b.tensor], ref(b.alias)) for b in group)
            for group in dict.fromkeys(groups)}
    bind = list(map(made.__getitem__, groups))
    barriers = _barrier_tuples(barrier_names)
    tasks = list(map(SwKernelTask, labels, barriers(waits), barriers(updates), map(ref, named),
                     tiles, bind[:len(recs)], bind[len(recs):], repeat((), len(recs)),
                     [tuple(map(ref, args)) for args in run_args]))
    program.invocations.extend(
        InvocationImage(i, kernel, tile, inv.window, inv.args_offset, inv.args_size)
        for i, (kernel, tile, inv) in enumerate(zip(named, tiles, invocations))
        if inv is not None)
    return tasks


def dpu_list(recs, refs: list[Ref], barrier_names: list[str]) -> list[DpuTask]:
    """A DPU list whose labels and barriers (its variants' too) are checked, built without
    per-row checks when its op, post op and mode codes and tensor indices are all good; []
    to build it row by row (for the message)."""
    if not recs:
        return []
    (labels, ops, tiles, inputs, outputs, weights, biases, kernels, strides, pads, dilations,
     posts, waits, updates, per_task, modes) = zip(*recs)
    flat = list(chain.from_iterable(per_task))
    v_labels, starts, ends, v_waits, v_updates, v_modes = zip(*flat) if flat else ((),) * 6
    all_inputs = list(chain.from_iterable(inputs))
    used = [i for i in chain(weights, biases) if i != -1]
    ends_ = [min(outputs), max(outputs)] + \
        ([min(all_inputs), max(all_inputs)] if all_inputs else []) + \
        ([min(used), max(used)] if used else [])
    if not set(ops) <= DPU_OP_OF.keys() or not (set(modes) | set(v_modes)) <= _MODE_OF.keys() \
            or not {p.kind for p in posts if p is not None} <= POST_OP_OF.keys() \
            or min(ends_) < 0 or max(ends_) >= len(refs):
        return []
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
        map(mode, modes)))


def _barrier_tuples(barrier_names: list[str]):
    """A column of barrier index tuples (checked) -> their name tuples; the empty tuple and
    each barrier's one-name tuple shared (most tasks wait on or update one barrier)."""
    names = barrier_names.__getitem__
    ones = list(zip(barrier_names))

    def made(column) -> list[tuple[str, ...]]:
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
