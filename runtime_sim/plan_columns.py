"""``build_plan`` from a program's task columns (``vpuc.task_tables``), without a task object.

A program read from a blob carries its task lists as numpy columns and builds
its IR task lists only when asked.  While they are unbuilt (``TaskTables.current``)
the plan is built from the columns: the same queues, barrier tuples, transfers
and DPU costs as ``plan_build`` makes from the tasks, unit for unit (tests
compare the two plans), with numpy over whole lists:

* queues numbered in order of first use, units appended to them per queue;
* a unit's barrier ids as the one-barrier tuples shared by every unit (most
  units wait on or update one barrier), other units made one by one with the
  object path's rules (a DPU variant's: its task's distinct ids, then its own);
* a DMA's ``Transfer`` once per distinct (mode, source class, destination class),
  the classes looked up per tensor index;
* a DPU variant's (cycles, MACs) once per distinct (task cost class, corners,
  mode), on the one IR task the columns make for it (``TaskTables.task``).
"""

from __future__ import annotations

import numpy as np

from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.plan import ACT, DMA, DPU, Plan, dpu_operands
from runtime_sim.plan_shapes import OperandShapes, shortest_run
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import Executor
from vpuc.task_tables import Csr, ListTable, TaskTables

_KIND = {Executor.DMA: (DMA, "DMA"), Executor.DPU: (DPU, "DPU"),
         Executor.ACT_SHAVE: (ACT, "ACT_SHAVE")}


class ColumnBuilder:
    """Fills ``plan``'s per-unit lists from ``tables`` (the barriers are numbered first)."""

    def __init__(self, plan: Plan, tables: TaskTables) -> None:
        self.plan, self.tables = plan, tables
        program, arch = plan.program, plan.arch
        self.arch = arch
        self.shapes = OperandShapes(program.module, tables.views, program)
        n_barriers = len(plan.barrier_names)
        # One shared tuple per barrier id, and () after them (a row with none).
        self.ones = list(zip(range(n_barriers))) + [()]
        self.engines = {"DMA": 1, "DPU": arch.structure.dpus_per_tile,
                        "ACT_SHAVE": arch.structure.act_shaves_per_tile}
        self.queue_index: dict[tuple, int] = {}
        self._classes: np.ndarray | None = None

    def build(self) -> None:
        for index, table in enumerate(self.tables.lists):
            if table.executor is Executor.DMA:
                self.dma(table)
            elif table.executor is Executor.DPU:
                self.dpu(index, table)
            else:
                self.act(table)

    # ------------------------------------------------------------ shared columns
    def queues(self, kind: str, indices: np.ndarray) -> None:
        """Each unit's queue (channel or tile ``indices``), queues numbered in order of first
        use; the units appended to their queues' lists."""
        plan = self.plan
        first = len(plan.queue_of)
        distinct, at = np.unique(indices, return_index=True)
        order = np.argsort(at, kind="stable")
        numbers = np.zeros(len(distinct), np.int64)
        for slot in order.tolist():
            key = (kind, int(distinct[slot]))
            q = self.queue_index.get(key)
            if q is None:
                q = self.queue_index[key] = len(plan.queue_units)
                plan.queue_keys.append(key)
                plan.queue_kind.append(_KIND_OF_NAME[kind])
                plan.queue_units.append([])
                plan.queue_engines.append(max(self.engines[kind], 1))
            numbers[slot] = q
        qs = numbers[np.searchsorted(distinct, indices)] if len(indices) else numbers[:0]
        for slot in order.tolist():
            q = int(numbers[slot])
            plan.queue_units[q].extend((np.flatnonzero(qs == q) + first).tolist())
        plan.queue_of.extend(qs.tolist())

    def tuples(self, csr: Csr, distinct: bool = False) -> list[tuple[int, ...]]:
        """Each row's barrier ids as a tuple, as the object path's ``ids`` makes them
        (``distinct``: its ``unique_ids``, repeats dropped, first use kept)."""
        counts, values = csr.counts, csr.values
        starts = np.cumsum(counts) - counts
        key = np.full(len(counts), len(self.ones) - 1, np.int64)
        single = counts == 1
        key[single] = values[starts[single]]
        out = list(map(self.ones.__getitem__, key.tolist()))
        pairs = np.flatnonzero(counts == 2)
        if len(pairs):
            a, b = values[starts[pairs]], values[starts[pairs] + 1]
            made = list(zip(a.tolist(), b.tolist()))
            if distinct:
                for at in np.flatnonzero(a == b).tolist():
                    made[at] = self.ones[int(a[at])]
            for row, pair in zip(pairs.tolist(), made):
                out[row] = pair
        for row in np.flatnonzero(counts > 2).tolist():
            ids = values[starts[row]:starts[row] + counts[row]].tolist()
            out[row] = tuple(dict.fromkeys(ids) if distinct else ids)
        return out

    def classes(self) -> np.ndarray:
        """The transfer-cache shape class of every tensor index."""
        if self._classes is None:
            shapes = self.shapes
            names = self.tables.tensor_names
            if shapes.class_column is not None:        # found on the view columns
                found = shapes.class_column.copy()
                for i in np.flatnonzero(found < 0).tolist():
                    found[i] = shapes.shape_class(names[i])    # a view of a view
                self._classes = found
                return found
            found = list(map(shapes.classes.get, names))
            for i in [i for i, c in enumerate(found) if c is None]:
                found[i] = shapes.shape_class(names[i])    # a view of a view
            self._classes = np.array(found, np.int64)
        return self._classes

    # ------------------------------------------------------------ lists
    def dma(self, table: ListTable) -> None:
        plan = self.plan
        self.queues("DMA", table.queue)
        plan.waits.extend(self.tuples(table.waits))
        plan.updates.extend(self.tuples(table.updates))
        if not table.size:
            return
        classes = self.classes()
        src, dst = classes[table.src], classes[table.dst]
        width = len(self.shapes.class_info)
        keys = (table.mode * width + src) * width + dst
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        info = self.shapes.class_info
        found = []
        for row in first.tolist():
            s, d = info[int(src[row])], info[int(dst[row])]
            found.append(dma_engine.transfer_for(
                table.modes[int(table.mode[row])], s[3], s[4], s[5], d[3], d[5], self.arch,
                shortest_run(s[6], d[6])))
        plan.work.extend(map(found.__getitem__, inverse.reshape(-1).tolist()))

    def dpu(self, index: int, table: ListTable) -> None:
        plan = self.plan
        counts = table.variant_count
        owner = np.repeat(np.arange(table.size, dtype=np.int64), counts)
        self.queues("DPU", table.queue[owner])
        first_variant = np.cumsum(counts) - counts
        for task_side, variant_side, out in ((table.waits, table.variant_waits, plan.waits),
                                             (table.updates, table.variant_updates,
                                              plan.updates)):
            out.extend(self.merged(task_side, variant_side, owner))
        if not len(owner):
            return
        keys = np.concatenate([table.cost_class[owner][:, None], table.corners], axis=1)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        found = []
        for unit in first.tolist():
            row = int(owner[unit])
            task = self.tables.task(index, row)
            tensors = dpu_operands(task, self.shapes.tensor)
            found.append(dpu_engine.variant_cycles(task, unit - int(first_variant[row]),
                                                   tensors, self.arch))
        plan.work.extend(map(found.__getitem__, inverse.reshape(-1).tolist()))

    def merged(self, task_side: Csr, variant_side: Csr, owner: np.ndarray) -> list:
        """Each variant's barrier ids: its task's distinct ids then its own, repeats
        dropped (first use kept); a variant of a task without ids keeps its own as they
        are (``plan_build._merge``)."""
        per_task = self.tuples(task_side, distinct=True)
        if not len(variant_side.values):
            return list(map(per_task.__getitem__, owner.tolist()))
        own = self.tuples(variant_side)
        if not len(task_side.values):
            return own
        out = list(map(per_task.__getitem__, owner.tolist()))
        for unit in np.flatnonzero(variant_side.counts).tolist():
            first, second = out[unit], own[unit]
            out[unit] = tuple(dict.fromkeys(first + second)) if first else second
        return out

    def act(self, table: ListTable) -> None:
        plan = self.plan
        invocations = plan.program.invocations
        if hasattr(invocations, "by_task"):     # read from a blob: rows of its columns
            invocations = invocations.by_task(table.size)
        else:
            invocations = [None] * table.size
            for inv in plan.program.invocations:
                if inv.task_index < table.size:
                    invocations[inv.task_index] = inv
        if None in invocations:
            i = invocations.index(None)
            names = plan.names    # every unit's name (the task lists, made now)
            raise VpucError(f"{names[len(plan.queue_of) + i]}: ACT SHAVE task has no packed "
                            "invocation; run pack-kernel-args before simulating",
                            plan.task[len(plan.queue_of) + i].loc)
        self.queues("ACT_SHAVE", table.queue)
        plan.waits.extend(self.tuples(table.waits))
        plan.updates.extend(self.tuples(table.updates))
        plan.work.extend(invocations)


_KIND_OF_NAME = {name: kind for kind, name in _KIND.values()}
