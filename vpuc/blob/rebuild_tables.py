"""A checked blob's task lists as ``vpuc.task_tables`` columns, for ``rebuild``.

Made after ``rebuild`` checked every record (kinds, codes, indices in range), from
the barrier indices the readers flattened (``sync_columns.ListSync``) and the
columns of the other fields: the readers' numpy columns when they handed them
over (``ListSync.fields``), else the records' fields zipped apart.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from vpuc.blob.content import DMA_MODE_OF, BlobContent
from vpuc.blob.record_table import RecordTable, columns
from vpuc.blob.sync_columns import Flat, ListSync, list_sync
from vpuc.ir.tasks import Executor
from vpuc.task_tables import Csr, ListTable, TaskTables, ViewTable


def task_tables(content: BlobContent, executors: list[Executor], sync: list[ListSync] | None,
                names: list[str], barrier_names: list[str], barrier_physical: list[int],
                task, views: ViewTable | None = None) -> TaskTables | None:
    """The columns of every task list (``executors``: each list's, as checked), of the
    barriers and the tensors' view columns (``views``, when rebuild read them so); None when
    a list's barrier indices are not columns (``list_sync`` finds a record of another kind)."""
    lists = []
    for li, (executor, tl) in enumerate(zip(executors, content.task_lists)):
        found = sync[li] if sync is not None else list_sync(tl.tasks)
        if found is None:
            return None
        lists.append(_list_table(executor, tl.tasks, found))
    return TaskTables(lists, names, task, barrier_names, barrier_physical, views)


def _csr(flat: Flat, rows: int) -> Csr:
    return Csr(np.bincount(flat.rows, minlength=rows).astype(np.int64),
               flat.barriers.astype(np.int64))


def _ints(column) -> np.ndarray:
    return np.fromiter(column, np.int64, len(column))


def _list_table(executor: Executor, recs, sync: ListSync) -> ListTable:
    n = len(recs)
    table = ListTable(executor, n, np.zeros(n, np.int64), _csr(sync.waits, n),
                      _csr(sync.updates, n))
    fields = getattr(sync, "fields", None) or {}
    if not n:
        if executor is Executor.DPU:
            table.cost_class = table.variant_count = np.zeros(0, np.int64)
            table.corners = np.zeros((0, 7), np.int64)
            table.variant_waits = table.variant_updates = Csr(np.zeros(0, np.int64),
                                                              np.zeros(0, np.int64))
        elif executor is Executor.DMA:
            table.src = table.dst = table.mode = np.zeros(0, np.int64)
            table.modes = DMA_MODE_OF
        return table
    if executor is Executor.DMA:
        table.modes = DMA_MODE_OF
        if fields:
            table.src, table.dst, table.queue, table.mode = (
                fields[k].astype(np.int64) for k in ("src", "dst", "channel", "mode"))
        else:
            table.src, table.dst, table.queue, table.mode = map(
                _ints, columns(recs, "src", "dst", "channel", "mode"))
        return table
    table.queue = fields["tile"].astype(np.int64) if fields else _ints(columns(recs, "tile")[0])
    if executor is Executor.ACT_SHAVE:
        return table
    # DPU: each task's cost class, numbered in order of first use.
    ops, weights, kernels, strides, modes = columns(recs, "op", "weights", "kernel", "stride",
                                                    "mode")
    if isinstance(recs, RecordTable) and recs.has("first_input"):
        firsts = recs.column("first_input")
    else:
        firsts = [i[0] if i else -1 for i in columns(recs, "inputs")[0]]
    keys = list(zip(ops, kernels, firsts, weights, strides, modes))
    ids = {key: n for n, key in enumerate(dict.fromkeys(keys))}
    table.cost_class = np.fromiter(map(ids.__getitem__, keys), np.int64, n)
    table.variant_count = sync.variant_count.astype(np.int64)
    corners = fields.get("corners")
    if corners is None:
        flat = list(chain.from_iterable(columns(recs, "variants")[0]))
        corners = np.array([(*v.start, *v.end, v.mode) for v in flat],
                           np.int64).reshape(len(flat), 7)
    table.corners = corners
    variants = int(table.variant_count.sum())
    table.variant_waits = _csr(sync.variant_waits, variants)
    table.variant_updates = _csr(sync.variant_updates, variants)
    return table
