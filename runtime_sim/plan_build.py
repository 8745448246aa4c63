"""``build_plan``: the plan's flat per-unit lists, built column by column.

This runs for every simulation (about 0.35 s for the 125,000 units of the
benchmark program: the cost is mostly memory latency, touching each task,
name and dict entry once), so it does only what the event loop needs, with
C-level ``map``/``zip`` over a whole task list rather than a Python statement
per task, and once per distinct thing rather than once per unit:

* operand shapes are resolved once per buffer or view name, down to a small
  "shape class" (bytes, element bytes, in DDR); every view of a buffer is
  resolved in one tight pass (``plan_shapes.py``);
* a DMA's ``Transfer`` is computed once per (mode, source class, destination
  class), a DPU variant's cycles once per (op, window, operands, box);
* barrier names become ids through one dict, which maps a name straight to
  the one-barrier tuple ``(id,)`` most units use; producer and consumer counts
  are counted by numpy;
* the only per-unit objects are the barrier-id tuples, and a DPU task's
  variants share their task's tuple when they add no barriers of their own.

A task list is cut into runs of one task type (a verified list is one run).
Units are numbered in list order and queues in order of first use, exactly as
``vpuc.analysis.schedule.Schedule`` numbers them.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter, is_

import numpy as np

from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.plan import ACT, DMA, DPU, Plan, dpu_operands
from runtime_sim.plan_columns import ColumnBuilder
from runtime_sim.plan_shapes import OperandShapes, shortest_run
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask

# One pass per task list reads every field a run needs (a task's attributes are read
# while it is in cache), then the columns are zipped apart.
_name, _physical = attrgetter("name"), attrgetter("physical")
_dma_fields = attrgetter("channel", "waits", "updates", "src", "dst", "mode")
_dpu_fields = attrgetter("tile", "waits", "updates", "variants", "op", "kernel", "inputs",
                         "weights", "stride", "mode")
_variant_fields = attrgetter("start", "end", "waits", "updates", "mode")
_act_fields = attrgetter("tile", "waits", "updates")


def build(plan: Plan) -> Plan:
    module = plan.program.module
    tables = plan.program.tables
    _barriers(plan, module, tables)
    if tables is not None and tables.current(module):
        # Read from a blob and never asked for its task objects: from its columns.
        ColumnBuilder(plan, tables).build()
        plan.producer_count = _counts(len(plan.barrier_names), plan.updates)
        plan.consumer_count = _counts(len(plan.barrier_names), plan.waits)
        return plan
    builder = _Builder(plan)
    try:
        for task_list in module.task_lists:
            tasks = task_list.tasks
            for first, last, kind in _runs(tasks):
                run = tasks[first:last] if last - first < len(tasks) else tasks
                if kind == DMA:
                    builder.dma(run)
                elif kind == DPU:
                    builder.dpu(run)
                else:
                    builder.act(run, first, tasks is builder.act_list)
    except KeyError as exc:
        raise VpucError(f"a task uses undeclared barrier %{exc.args[0]}") from None
    plan.producer_count = _counts(len(plan.barrier_names), plan.updates)
    plan.consumer_count = _counts(len(plan.barrier_names), plan.waits)
    return plan


def _runs(tasks: list) -> list[tuple[int, int, int]]:
    """(first, past the last, kind) of each run of tasks of one type; other tasks have no
    unit."""
    kinds = {DmaTask: DMA, DpuTask: DPU, SwKernelTask: ACT}
    types = set(map(type, tasks))
    if len(types) == 1 and next(iter(types)) in kinds:
        return [(0, len(tasks), kinds[next(iter(types))])]
    runs: list[list[int]] = []
    for i, task in enumerate(tasks):
        kind = next((k for cls, k in kinds.items() if isinstance(task, cls)), None)
        if kind is None:
            continue
        if runs and runs[-1][1] == i and runs[-1][2] == kind:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1, kind])
    return [tuple(r) for r in runs]


class _Builder:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        program, arch = plan.program, plan.arch
        module = program.module
        self.arch = arch
        self.by_name = dict(zip(plan.barrier_names, zip(range(len(plan.barrier_names)))))
        self.shapes = OperandShapes(module)
        self.act_list = next((tl.tasks for tl in module.task_lists
                              if tl.executor is Executor.ACT_SHAVE), [])
        self.invocations = [None] * len(self.act_list)
        for inv in program.invocations:
            if inv.task_index < len(self.act_list):
                self.invocations[inv.task_index] = inv
        self.engines = {"DMA": 1, "DPU": arch.structure.dpus_per_tile,
                        "ACT_SHAVE": arch.structure.act_shaves_per_tile}
        self.queue_index: dict[tuple, int] = {}
        self.transfers: dict[tuple, dma_engine.Transfer] = {}
        self.dpu_costs: dict[tuple, tuple[float, int]] = {}
        self.dpu_task_ids: dict[tuple, int] = {}

    # ------------------------------------------------------------ shared columns
    def ids(self, names) -> list[tuple[int, ...]]:
        by_name = self.by_name
        return [by_name[w[0]] if len(w) == 1 else
                (by_name[w[0]][0], by_name[w[1]][0]) if len(w) == 2 else
                tuple(by_name[n][0] for n in w) for w in names]

    def unique_ids(self, names) -> list[tuple[int, ...]]:
        by_name = self.by_name
        return [by_name[w[0]] if len(w) == 1 else
                ((a, b) if (a := by_name[w[0]][0]) != (b := by_name[w[1]][0]) else by_name[w[0]])
                if len(w) == 2 else tuple(dict.fromkeys(by_name[n][0] for n in w)) for w in names]

    def queues(self, kind: str, indices: list[int]) -> list[int]:
        """The queue of each unit (channel or tile ``indices``); queues are numbered in
        order of first use.  Appends the units to their queues' lists."""
        plan = self.plan
        by_index = {}
        for index in dict.fromkeys(indices):
            key = (kind, index)
            q = self.queue_index.get(key)
            if q is None:
                q = self.queue_index[key] = len(plan.queue_units)
                plan.queue_keys.append(key)
                plan.queue_kind.append({"DMA": DMA, "DPU": DPU, "ACT_SHAVE": ACT}[kind])
                plan.queue_units.append([])
                plan.queue_engines.append(max(self.engines[kind], 1))
            by_index[index] = q
        first = len(plan.queue_of)
        if len(by_index) == 1:
            q = next(iter(by_index.values()))
            qs = [q] * len(indices)
            plan.queue_units[q].extend(range(first, first + len(indices)))
        else:
            qs = list(map(by_index.__getitem__, indices))
            queue_units = plan.queue_units
            for u, q in enumerate(qs, first):
                queue_units[q].append(u)
        plan.queue_of.extend(qs)
        return qs

    # ------------------------------------------------------------ runs
    def dma(self, tasks: list) -> None:
        plan, shapes = self.plan, self.shapes
        # One pass over the tasks (each task's attributes are read while in cache), then
        # columns.
        channels, waits, updates, src_names, dst_names, modes = zip(*map(_dma_fields, tasks))
        self.queues("DMA", channels)
        plan.waits.extend(self.ids(waits))
        plan.updates.extend(self.ids(updates))
        classes = shapes.classes
        srcs = list(map(classes.get, src_names))
        dsts = list(map(classes.get, dst_names))
        for i in _nones(srcs, dsts):          # views of views, or unknown names (an error)
            srcs[i] = shapes.shape_class(tasks[i].src)
            dsts[i] = shapes.shape_class(tasks[i].dst)
        keys = list(zip(map(id, modes), srcs, dsts))
        found = list(map(self.transfers.get, keys))
        if any(map(is_, found, repeat(None))):
            transfers = self.transfers
            for i in [i for i, transfer in enumerate(found) if transfer is None]:
                transfer = transfers.get(keys[i])
                if transfer is None:
                    s, d = shapes.class_info[srcs[i]], shapes.class_info[dsts[i]]
                    transfer = transfers[keys[i]] = dma_engine.transfer_for(
                        tasks[i].mode, s[3], s[4], s[5], d[3], d[5], self.arch,
                        shortest_run(s[6], d[6]))
                found[i] = transfer
        plan.work.extend(found)

    def dpu(self, tasks: list) -> None:
        plan = self.plan
        (tiles, waits, updates, per_task_variants, ops, kernels, inputs, weights, strides,
         modes) = zip(*map(_dpu_fields, tasks))
        counts = list(map(len, per_task_variants))
        variants = list(chain.from_iterable(per_task_variants))
        self.queues("DPU", list(chain.from_iterable(map(repeat, tiles, counts))))
        # Barriers: the task's, then the variant's own (usually one side is empty).
        task_waits = self.unique_ids(waits)
        task_updates = self.unique_ids(updates)
        starts, ends, variant_waits, variant_updates, variant_modes = zip(
            *map(_variant_fields, variants))
        owner: list[int] = []            # each variant's task, when needed

        def owners() -> list[int]:
            if not owner:
                owner.extend(chain.from_iterable(map(repeat, range(len(tasks)), counts)))
            return owner

        for per_task, names, out in ((task_waits, variant_waits, plan.waits),
                                     (task_updates, variant_updates, plan.updates)):
            if not any(names):
                out.extend(chain.from_iterable(map(repeat, per_task, counts)))
            elif not any(per_task):
                out.extend(self.ids(names))
            else:
                ids = lambda n: self.by_name[n][0]
                out.extend(_merge(per_task[j], n, ids) for j, n in zip(owners(), names))
        # Cycles and MACs, once per (op, window, input, weights, mode, box): the per-task
        # part of the key is numbered first, so each variant's key hashes a few ints.
        task_ids = self.dpu_task_ids
        per_task = list(zip(map(id, ops), kernels, map(_first, inputs), weights, strides, modes))
        for key in dict.fromkeys(per_task):
            task_ids.setdefault(key, len(task_ids))
        keys = list(zip(chain.from_iterable(map(repeat, map(task_ids.__getitem__, per_task),
                                                counts)),
                        starts, ends, variant_modes))
        found = list(map(self.dpu_costs.get, keys))
        if any(map(is_, found, repeat(None))):
            costs = self.dpu_costs
            position = list(chain.from_iterable(map(range, counts)))
            for i in [i for i, cost in enumerate(found) if cost is None]:
                cost = costs.get(keys[i])
                if cost is None:
                    task = tasks[owners()[i]]
                    tensors = dpu_operands(task, self.shapes.tensor)
                    cost = costs[keys[i]] = dpu_engine.variant_cycles(task, position[i],
                                                                      tensors, self.arch)
                found[i] = cost
        plan.work.extend(found)

    def act(self, tasks: list, first: int, in_act_list: bool) -> None:
        plan = self.plan
        invocations = (self.invocations[first:first + len(tasks)] if in_act_list
                       else [None] * len(tasks))
        if any(map(is_, invocations, repeat(None))):
            i = next(i for i, inv in enumerate(invocations) if inv is None)
            names = plan.names    # every unit's name; the failing unit is the next one
            raise VpucError(f"{names[len(plan.queue_of) + i]}: ACT SHAVE task has no packed "
                            "invocation; run pack-kernel-args before simulating", tasks[i].loc)
        tiles, waits, updates = zip(*map(_act_fields, tasks))
        self.queues("ACT_SHAVE", tiles)
        plan.waits.extend(self.ids(waits))
        plan.updates.extend(self.ids(updates))
        plan.work.extend(invocations)


def _first(inputs: tuple[str, ...]) -> str | None:
    return inputs[0] if inputs else None


def _nones(first: list, second: list) -> list[int]:
    """Indices where either list holds None."""
    if not any(map(is_, first, repeat(None))) and not any(map(is_, second, repeat(None))):
        return []
    return [i for i, (a, b) in enumerate(zip(first, second)) if a is None or b is None]


def _merge(first: tuple[int, ...], names: tuple[str, ...], ids) -> tuple[int, ...]:
    """The task's barrier ids (already unique) then the variant's, without repeats
    (first use kept)."""
    if not names:
        return first
    second = tuple(map(ids, names))
    return tuple(dict.fromkeys(first + second)) if first else second


def _counts(size: int, per_unit: list[tuple[int, ...]]) -> list[int]:
    ids = np.fromiter(chain.from_iterable(per_unit), dtype=np.intp)
    return np.bincount(ids, minlength=size).tolist()


def _barriers(plan: Plan, module, tables) -> None:
    """Number barriers; group them by physical id in module order (the reuse order).
    A barrier without a physical id is its own physical barrier.  A module read from a
    blob whose barriers were never asked for gives the columns read (-1: no physical id)."""
    if tables is not None and not module.barriers_built and tables.current(module):
        plan.barrier_names = tables.barrier_names
        physical = [None if p == -1 else p for p in tables.barrier_physical] \
            if -1 in tables.barrier_physical else tables.barrier_physical
    else:
        barriers = module.barriers
        plan.barrier_names = list(map(_name, barriers))
        physical = list(map(_physical, barriers))
    if any(map(is_, physical, repeat(None))):
        physical = [("virtual", b) if p is None else p for b, p in enumerate(physical)]
    slots = dict(zip(dict.fromkeys(physical), range(len(physical))))   # in order of first use
    plan.barrier_phys = list(map(slots.__getitem__, physical))
    plan.phys_labels = [f"%{plan.barrier_names[p[1]]}" if isinstance(p, tuple)
                        else f"physical barrier {p}" for p in slots]
    if len(slots) == len(physical):
        plan.phys_lists = [[b] for b in range(len(physical))]
        return
    order = np.argsort(np.array(plan.barrier_phys, dtype=np.intp), kind="stable")
    sizes = np.bincount(plan.barrier_phys, minlength=len(slots))
    plan.phys_lists = [part.tolist() for part in np.split(order, np.cumsum(sizes)[:-1])]
