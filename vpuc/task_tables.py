"""A program's task lists as numpy columns: what a timing-only simulation needs of them.

A program read from a blob (``vpuc.blob.rebuild``) leaves its IR task lists unbuilt
(``Module.defer_task_lists``) and carries these instead: per task list its
executor and, per task, its queue (DMA channel or tile), barrier indices waited
on and updated (``Csr``: a count per row and the rows' indices one after
another), a DMA's source and destination tensor indices and mode, a DPU task's
cost class and its variants' corners, modes and barriers.  The simulator's plan
(``runtime_sim/plan_build.py``) is built from them without an object per task;
``task(list, row)`` makes one IR task when a cost or an engine needs it.

The columns describe the module as read: ``TaskTables.current`` says whether they
still do (its task lists never built, so never changed, and its barriers never
built or the list made from these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from vpuc.ir.tasks import Executor


@dataclass(eq=False)
class Csr:
    """A group of int lists, one per row: each row's ``counts`` and every row's
    ``values`` one after another (int64)."""

    counts: np.ndarray
    values: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        """The row of each value."""
        return np.repeat(np.arange(len(self.counts), dtype=np.int64), self.counts)


@dataclass(eq=False)
class ListTable:
    """One task list's columns (int64 arrays, one entry per task unless noted)."""

    executor: Executor
    size: int
    queue: np.ndarray               # DMA channel, or tile
    waits: Csr
    updates: Csr
    # DMA: tensor indices and mode codes, with each code's mode (``modes``).
    src: np.ndarray | None = None
    dst: np.ndarray | None = None
    mode: np.ndarray | None = None
    modes: dict | None = None
    # DPU: the task's cost class (op, kernel, first input, weights, stride, mode: equal
    # classes cost equal variants alike), each task's variant count, and per variant its
    # corners and mode code (start x y z, end x y z, mode) and barriers.
    cost_class: np.ndarray | None = None
    variant_count: np.ndarray | None = None
    corners: np.ndarray | None = None
    variant_waits: Csr | None = None
    variant_updates: Csr | None = None


@dataclass(eq=False)
class ViewTable:
    """The program's tensors as read, for its views: per tensor index its base's index (-1:
    a buffer) and its slices' (start, stop, step) rows (``slice_count`` each, one after
    another); ``view(i)`` makes tensor i's IR View (equal to the module's) on request."""

    base: np.ndarray
    slice_count: np.ndarray
    slices: np.ndarray              # (total, 3) int64
    names: list[str]
    view: Callable[[int], object]

    def current(self, module) -> bool:
        """Whether the columns still describe ``module``'s views: never built, so never
        changed."""
        return not module.views_built


class ViewsByName:
    """The views of a ``ViewTable`` by name, as a read-only mapping: each made when asked
    (the name index made on the first question)."""

    def __init__(self, table: ViewTable) -> None:
        self.table = table
        self._index: dict[str, int] | None = None
        self._made: dict[str, object] = {}

    def get(self, name: str, default=None):
        made = self._made.get(name)
        if made is not None:
            return made
        if self._index is None:
            self._index = dict(zip(self.table.names, range(len(self.table.names))))
        i = self._index.get(name)
        if i is None or self.table.base[i] < 0:
            return default
        made = self._made[name] = self.table.view(i)
        return made

    def __getitem__(self, name: str):
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None


def views_by_name(program) -> dict | ViewsByName:
    """``{view name: View}`` of ``program``'s module: from its view columns while the
    module's views are unbuilt (a program read from a blob), so none is made unasked."""
    tables = getattr(program, "tables", None)
    table = getattr(tables, "views", None)
    if table is not None and table.current(program.module):
        return ViewsByName(table)
    return {v.name: v for v in program.module.views}


@dataclass(eq=False)
class TaskTables:
    lists: list[ListTable]
    tensor_names: list[str]         # by tensor index
    task: Callable[[int, int], object]    # (list index, row) -> its IR task, made on request
    # The barriers read, as columns (physical id -1: virtual): the plan reads these while
    # the module's barrier list is not built (``Module.defer_barriers``).
    barrier_names: list[str]
    barrier_physical: list[int]
    views: ViewTable | None = None  # the tensors' view columns (None: not read so)
    barriers: list | None = None    # the module's barrier list once made (``current``)

    def current(self, module) -> bool:
        """Whether the columns still describe ``module``: its task lists never built (so
        never changed) and its barriers never built or the list made from these."""
        if module.task_lists_built:
            return False
        return not module.barriers_built or module.barriers is self.barriers and \
            len(module.barriers) == len(self.barrier_names)


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an int64 matrix (via ``row_codes``): each one's first row
    index, and each row's index among them (``np.unique``'s order)."""
    codes = row_codes(rows)
    _, first, inverse = np.unique(codes, axis=0 if codes.ndim > 1 else None,
                                  return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)       # numpy 2 keeps the rows' axes on ``inverse``


def row_codes(rows: np.ndarray) -> np.ndarray:
    """Each row of an int64 matrix as one int64, equal iff the rows are equal (mixed radix
    over each column's range), so ``np.unique`` sorts ints rather than rows (3x faster on a
    DMA list of 50k); the rows themselves when the ranges' product could overflow."""
    if not len(rows):
        return rows
    low, high = rows.min(axis=0), rows.max(axis=0)
    with np.errstate(over="ignore"):        # a product past float range is inf: too wide
        wide = float(np.prod(high.astype(np.float64) - low.astype(np.float64) + 1)) >= 2.0 ** 62
    if wide:
        return rows
    span = high - low + 1
    code = np.zeros(len(rows), np.int64)
    for column, (first, size) in enumerate(zip(low.tolist(), span.tolist())):
        code = code * size + (rows[:, column] - first)
    return code
