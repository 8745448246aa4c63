"""The verifier's per-record rules over a blob's program, a column at a time.

A blob of 100k tasks holds a handful of distinct tasks: the same DPU task on
the same buffers every few blocks, the same DMA between views of one shape.
The module verifier (``vpuc.verifier``) checks each task on its own; here the
rules that look across tasks or declarations are done on whole columns with
numpy, and the rules over one task run on one representative per class of
tasks they cannot tell apart:

* views resolved and compared with their records (``vpuc.blob.view_columns``);
* tensor and barrier names distinct; physical barrier ids in range;
* task and variant labels unique: one set over the label column;
* no task waits on a barrier it updates: the (row, barrier) pairs of the waits
  and of the updates intersected, for tasks and for DPU variants;
* barrier use: the producer and consumer counts the blob records (``rebuild``
  checked them against the tasks) against the architecture's limits, and no
  barrier waited on but never updated;
* the rules over one task (operands, tiles, sizes, windows, kernel contracts,
  wiring, DPU channels) read the task's fields and the *regions* of its
  operands, never its label (except a lowered block's prefix, which goes into
  the key), barriers or position: a DMA's class is (channel, mode, the resolved
  types of source and destination, the destination's memory kind, whether
  both are the same bytes of one buffer); a DPU or ACT SHAVE task's class is
  the record itself without label and barriers, operands by tensor index.  The
  representatives, barriers left out, go through ``verify_module`` with every
  buffer, kernel and runtime declaration and the views they use.

``verify_by_columns`` only ever says "all rules hold" or "ask the module
verifier": on any doubt (a failed column, an error of a representative, a view
the columns do not settle) the caller runs the module verifier over the whole
program, so every error reads exactly as it did (the first bad task, its
message).
"""

from __future__ import annotations

import copy
import dataclasses
from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from vpuc.arch import Arch
from vpuc.blob.content import EXECUTOR_OF, ActTaskRec, BlobContent, DmaRec, DpuRec
from vpuc.blob.record_table import RecordTable, columns
from vpuc.blob.sync_columns import ListSync, barrier_columns, rows_disjoint
from vpuc.blob.tensor_table import tensor_arrays
from vpuc.blob.view_columns import TensorColumns, tensor_columns
from vpuc.ir.module import Module
from vpuc.ir.tasks import DpuTask, TaskList
from vpuc.task_tables import distinct_rows, row_codes

_waits, _updates = attrgetter("waits"), attrgetter("updates")


def verify_by_columns(module: Module, arch: Arch, content: BlobContent,
                      sync: list[ListSync] | None = None, *, task=None, view=None) -> bool:
    """Whether every per-record rule of the module verifier holds (no errors; reading
    reports no warnings) and every tensor's record holds its resolved region; False: the
    caller must run the module verifier for the messages.  ``task(list, row)`` makes the
    IR task of a record (``rebuild.TaskSource.task``), so only the representatives are
    made; by default they are the module's (``view(i)``: tensor ``i``'s View, likewise)."""
    from vpuc.verifier import verify_module

    if module.graphs:
        return False
    executors = [EXECUTOR_OF.get(rec.executor) for rec in content.task_lists]
    if task is None:
        lists = module.task_lists
        if len(lists) != len(content.task_lists) or \
                any(len(tl.tasks) != len(rec.tasks) for tl, rec in zip(lists,
                                                                      content.task_lists)):
            return False
        executors = [tl.executor for tl in lists]
        task = (lambda li, row: lists[li].tasks[row])
    if None in executors:
        return False
    tensors = tensor_columns(module, content.tensors)
    if tensors is None or not (_names_unique(content) and _physical_ids(content, arch) and
                               _labels_unique(content) and
                               (_sync_disjoint(content) if sync is None else rows_disjoint(sync))
                               and
                               _barrier_use(content, arch)):
        return False
    blocks = module.attributes.get("graph-blocks")
    prefixes = tuple(f"{b}." for b in blocks.split(",")) if blocks else None
    reduced, used = [], set()
    for li, (executor, rec) in enumerate(zip(executors, content.task_lists)):
        picks = _representatives(rec.tasks, tensors, prefixes)
        used.update(chain.from_iterable(map(_operands, map(rec.tasks.__getitem__, picks))))
        reduced.append(TaskList(executor, [_without_barriers(task(li, i)) for i in picks]))
    # The module's other fields as they are (its task lists are never built for this).
    probe = dataclasses.replace(module, task_lists=reduced,
                                views=_views_used(module, content.tensors, used, view),
                                barriers=[])
    return not verify_module(probe, arch, schedule_rules=False).has_errors


def _operands(rec) -> list[int]:
    """The tensor indices a task record names."""
    if type(rec) is DmaRec:
        return [rec.src, rec.dst]
    if type(rec) is DpuRec:
        return [*rec.inputs, rec.output, *rec.odu_cast, rec.weights, rec.bias, rec.quant_scale]
    if type(rec) is ActTaskRec:
        return [b.tensor for b in chain(rec.inputs, rec.outputs)]
    return []


def _views_used(module: Module, tensors, used: set[int], view=None) -> list:
    """The views among the tensors ``used`` and their bases, in declaration order
    (``view(i)``: tensor ``i``'s View, so the module's views need not all be made)."""
    bases = tensor_arrays(tensors).base      # the reader's columns: no record made
    n = len(bases)
    is_view = bases != -1
    wanted, todo = set(), [i for i in used if 0 <= i < n and is_view[i]]
    while todo:
        i = todo.pop()
        if i not in wanted:
            wanted.add(i)
            b = int(bases[i])
            if 0 <= b < n and is_view[b]:
                todo.append(b)
    if view is None:
        view_of = np.cumsum(is_view) - 1      # tensor index -> position in module.views
        return [module.views[int(view_of[i])] for i in sorted(wanted)]
    return [view(i) for i in sorted(wanted)]


def _names_unique(content: BlobContent) -> bool:
    """Tensor and barrier names share one namespace: all distinct."""
    tensor_names = columns(content.tensors, "name")[0]
    barrier_names = barrier_columns(content.barriers)[2]
    names = set(tensor_names)       # one set filled column by column: no list joined
    names.update(barrier_names)
    return len(names) == len(tensor_names) + len(barrier_names)


def _physical_ids(content: BlobContent, arch: Arch) -> bool:
    """Every physical barrier id within the architecture's (-1: virtual)."""
    ids = barrier_columns(content.barriers)[1]
    return bool(((ids == -1) | ((ids >= 0) & (ids < arch.barriers))).all())


def _representatives(recs, tensors: TensorColumns, prefixes) -> list[int]:
    """The first task of each class the per-task rules cannot tell apart (in list order)."""
    if not recs:
        return []
    kinds = {recs.record} if isinstance(recs, RecordTable) else set(map(type, recs))
    if kinds == {DmaRec}:
        fields = getattr(getattr(recs, "sync", None), "fields", None) or {}
        names = ("src", "dst", "channel", "mode")
        src, dst, channel, mode = (fields[name].astype(np.int64) for name in names) \
            if "src" in fields else (np.fromiter(column, np.int64, len(recs)) for column in
                                     columns(recs, *names))
        same = (tensors.root[src] == tensors.root[dst]) & \
            (tensors.offset[src] == tensors.offset[dst])
        keys = np.stack([channel, mode, tensors.type_id[src], tensors.type_id[dst],
                         tensors.kind[dst], same.astype(np.int64)], axis=1)
        return _firsts(keys)
    codes = None
    if kinds == {DpuRec} and isinstance(recs, RecordTable) and recs.has("class_key"):
        codes = row_codes(recs.sync.fields["corners"])
    if codes is not None and codes.ndim == 1 and prefixes is None:
        # the decoder's key of the task's fields, and its variants' corners and modes
        counts = recs.sync.variant_count
        width = int(counts.max()) if len(counts) else 0
        shapes = np.full((len(recs), width), -1, np.int64)
        rows = np.repeat(np.arange(len(recs)), counts)
        shapes[rows, np.arange(len(codes)) - np.repeat(np.cumsum(counts) - counts, counts)] = \
            codes.reshape(-1)
        return _firsts(np.concatenate([recs.array("class_key"), shapes], axis=1))
    if kinds == {DpuRec}:
        fields = columns(recs, "op", "tile", "inputs", "output", "weights", "bias", "kernel",
                         "stride", "pad", "dilation", "post_op", "mode", "odu_cast",
                         "quant_scale", "in_zero_point", "out_zero_point")
        corners = getattr(getattr(recs, "sync", None), "fields", None) or {}
        if "corners" in corners:        # each variant's corners and mode as one small int
            codes = row_codes(corners["corners"])
            codes = codes.tolist() if codes.ndim == 1 else list(map(tuple, codes.tolist()))
            counts = recs.sync.variant_count.tolist()
            at = np.cumsum([0] + counts).tolist()
            shapes = [tuple(codes[a:b]) for a, b in zip(at, at[1:])]
        else:
            shapes = [tuple((v.start, v.end, v.mode) for v in variants)
                      for variants in columns(recs, "variants")[0]]
        blocks = [None] * len(recs) if prefixes is None else \
            [(label or "").startswith(prefixes) for label in columns(recs, "label")[0]]
        keys = zip(*fields, shapes, blocks)
    elif kinds == {ActTaskRec} and isinstance(recs, RecordTable) and recs.has("class_key"):
        return _firsts(recs.array("class_key"))     # the decoder's key (strings by offset)
    elif kinds == {ActTaskRec}:     # kernel, tile, bindings, scalars, run() arguments
        keys = zip(*columns(recs, "kernel", "tile", "inputs", "outputs", "scalars",
                            "run_args"))
    else:       # a list of mixed kinds: every task (the rules report the strays)
        return list(range(len(recs)))
    seen: dict = {}
    for i, key in enumerate(keys):
        seen.setdefault(key, i)
    return sorted(seen.values())


def _firsts(keys: np.ndarray) -> list[int]:
    """The first row of each distinct row of ``keys``, in row order."""
    return sorted(distinct_rows(keys)[0].tolist())


def _without_barriers(task):
    """A copy of ``task`` (and of a DPU task's variants) that waits on and updates nothing:
    the representatives' barrier counts would otherwise be partial."""
    task = copy.copy(task)
    task.waits = task.updates = ()
    if isinstance(task, DpuTask):
        variants = []
        for variant in task.variants:
            variant = copy.copy(variant)
            variant.waits = variant.updates = ()
            variants.append(variant)
        task.variants = variants
    return task


def _labels_unique(content: BlobContent) -> bool:
    """Task labels, and "task.variant" for labelled DPU variants, all distinct."""
    seen: set[str] = set()
    total = 0
    for tl in content.task_lists:
        task_labels, = columns(tl.tasks, "label")
        labels = task_labels if None not in task_labels and "" not in task_labels else \
            [label for label in task_labels if label]
        seen.update(labels)         # no list of every label joined: one set
        total += len(labels)
        if tl.tasks and (isinstance(tl.tasks, RecordTable) and tl.tasks.record is DpuRec or
                         not isinstance(tl.tasks, RecordTable) and
                         {type(rec) for rec in tl.tasks} == {DpuRec}):
            variant_labels, = columns(tl.tasks, "variants.label")
            if any(variant_labels):
                counts = [len(v) for v in columns(tl.tasks, "variants")[0]]
                owners = chain.from_iterable(map(repeat, task_labels, counts))
                labels = [f"{task}.{label}" for task, label in zip(owners, variant_labels)
                          if label]
                seen.update(labels)
                total += len(labels)
    return len(seen) == total


def _sync_disjoint(content: BlobContent) -> bool:
    """No task (and no DPU variant) both waits on and updates one barrier."""
    rows = [rec for tl in content.task_lists for rec in tl.tasks]
    rows += chain.from_iterable(rec.variants for rec in rows if type(rec) is DpuRec)
    waits = _pairs(list(map(_waits, rows)))
    updates = np.sort(_pairs(list(map(_updates, rows))))
    if not len(waits) or not len(updates):
        return True
    at = np.minimum(np.searchsorted(updates, waits), len(updates) - 1)
    return not (updates[at] == waits).any()


def _pairs(groups: list[tuple[int, ...]]) -> np.ndarray:
    """row << 32 | barrier for every barrier index of every row."""
    counts = np.fromiter(map(len, groups), np.int64, len(groups))
    barriers = np.fromiter(chain.from_iterable(groups), np.int64, int(counts.sum()))
    rows = np.repeat(np.arange(len(groups), dtype=np.int64), counts)
    return (rows << 32) | barriers


def barrier_counts(content: BlobContent) -> tuple[list[int], list[int]]:
    """Each barrier's producers and consumers as ``Schedule`` counts its units: a DPU task
    once per variant (its own barriers with the variant's), a barrier listed twice once."""
    waits, updates = [], []
    for tl in content.task_lists:
        for rec in tl.tasks:
            if type(rec) is DpuRec:
                for v in rec.variants:
                    waits.append(rec.waits + v.waits)
                    updates.append(rec.updates + v.updates)
            else:
                waits.append(rec.waits)
                updates.append(rec.updates)
    size = len(content.barriers)
    return tuple(np.bincount(_distinct(_pairs(groups)) & 0xFFFFFFFF, minlength=size).tolist()
                 for groups in (updates, waits))


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (np.unique, by one sort)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _barrier_use(content: BlobContent, arch: Arch) -> bool:
    """Within the architecture's producer and consumer limits, and none waited on without
    a producer (the counts are the records', checked against the tasks by ``rebuild``)."""
    if not content.barriers:
        return True
    _, _, _, producers, consumers = barrier_columns(content.barriers)
    return not ((producers > arch.max_producers).any() or
                (consumers > arch.max_consumers).any() or
                ((consumers > 0) & (producers == 0)).any())
