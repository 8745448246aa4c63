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

from itertools import chain, repeat

from vpuc.blob.content import DMA_MODE_OF, DPU_OP_OF, MPE_MODE_CODE, MPE_MODE_OF, POST_OP_OF
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
    names = barrier_names.__getitem__
    return list(map(DmaTask, labels, [tuple(map(names, w)) for w in waits],
                    [tuple(map(names, u)) for u in updates], map(refs.__getitem__, srcs),
                    map(refs.__getitem__, dsts), channels, map(DMA_MODE_OF.__getitem__, modes)))


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
    bind = [tuple(Binding(refs[b.tensor], ref(b.alias)) for b in group) for group in groups]
    names_of = barrier_names.__getitem__
    tasks = list(map(SwKernelTask, labels, [tuple(map(names_of, w)) for w in waits],
                     [tuple(map(names_of, u)) for u in updates], map(ref, named), tiles,
                     bind[:len(recs)], bind[len(recs):], repeat((), len(recs)),
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
    modes = {r.mode for r in recs} | {v.mode for r in recs for v in r.variants}
    indices = [i for r in recs for i in (*r.inputs, r.output, r.weights, r.bias) if i != -1]
    if not recs or not {r.op for r in recs} <= DPU_OP_OF.keys() or not modes <= _MODE_OF.keys() \
            or not {r.post_op.kind for r in recs if r.post_op is not None} <= POST_OP_OF.keys() \
            or min(indices) < 0 or max(indices) >= len(refs):
        return []
    names, ref, mode = barrier_names.__getitem__, refs.__getitem__, _MODE_OF.__getitem__
    tasks = []
    for r in recs:
        post = r.post_op
        tasks.append(DpuTask(
            r.label, tuple(map(names, r.waits)), tuple(map(names, r.updates)), DPU_OP_OF[r.op],
            r.tile, tuple(map(ref, r.inputs)), refs[r.output],
            None if r.weights == -1 else refs[r.weights], None if r.bias == -1 else refs[r.bias],
            _opt(r.kernel), _opt(r.stride), _opt(r.pad), _opt(r.dilation),
            None if post is None else PostOp(POST_OP_OF[post.kind], tuple(map(float, post.params))),
            [DpuVariant(v.label, tuple(v.start), tuple(v.end), tuple(map(names, v.waits)),
                        tuple(map(names, v.updates)), mode=mode(v.mode)) for v in r.variants],
            mode=mode(r.mode)))
    return tasks


def _opt(values) -> tuple | None:
    return None if values is None else tuple(values)
