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
class TaskTables:
    lists: list[ListTable]
    tensor_names: list[str]         # by tensor index
    task: Callable[[int, int], object]    # (list index, row) -> its IR task, made on request
    # The barriers read, as columns (physical id -1: virtual): the plan reads these while
    # the module's barrier list is not built (``Module.defer_barriers``).
    barrier_names: list[str]
    barrier_physical: list[int]
    barriers: list | None = None    # the module's barrier list once made (``current``)

    def current(self, module) -> bool:
        """Whether the columns still describe ``module``: its task lists never built (so
        never changed) and its barriers never built or the list made from these."""
        if module.task_lists_built:
            return False
        return not module.barriers_built or module.barriers is self.barriers and \
            len(module.barriers) == len(self.barrier_names)
