"""``build_plan``: one pass over the task lists filling the plan's flat per-unit lists.

This runs for every simulation, so it does only what the event loop needs and
does each piece of work once per distinct thing, not once per unit:

* operand shapes are resolved once per buffer or view name, down to a small
  "shape class" (bytes, element bytes, in DDR);
* a DMA's ``Transfer`` is computed once per (mode, source class, destination
  class), a DPU variant's cycles once per (op, window, operands, box);
* barrier names become ids through one dict; producer and consumer counts are
  counted by numpy;
* no per-unit objects beyond the barrier-id tuples (the same tuple is shared
  by a DPU task's variants when they add no barriers of their own).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.plan import ACT, DMA, DPU, Plan, dpu_operands
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask
from vpuc.ir.types import TensorType


class _Shapes:
    """Per buffer or view name: (dims, element type, dims order, bytes, element bytes,
    in DDR) without offsets or strides, all that timing needs; and ``classes``, a small
    int per name for its (bytes, element bytes, in DDR), the key of the transfer cache."""

    def __init__(self, module) -> None:
        self.views = {v.name: v for v in module.views}
        self.cache: dict[str, tuple] = {}
        for b in module.buffers:
            t = b.type
            self.cache[b.name] = (t.bound_shape, t.elem, t.order, t.nbytes, t.elem.nbytes,
                                  b.kind is not BufferKind.CMX)
        self._class_ids: dict[tuple, int] = {}
        self.class_info: list[tuple] = []    # class id -> a name's shape tuple
        self.classes: dict[str, int] = {name: self._class(shape)
                                        for name, shape in self.cache.items()}
        self._view_classes(module.views)
        self.tensors: dict[str, TensorType] = {}

    def _class(self, shape: tuple) -> int:
        key = shape[3:]
        found = self._class_ids.get(key)
        if found is None:
            found = self._class_ids[key] = len(self.class_info)
            self.class_info.append(shape)
        return found

    def _view_classes(self, views) -> None:
        """The class of every view of a buffer, in one tight pass (the 100k-task program
        has 50,000 views, each used once); views of views go through ``__call__``."""
        cache, classes, class_ids = self.cache, self.classes, self._class_ids
        for view in views:
            base = cache.get(view.base)
            if base is None:
                continue           # a view of a view: resolved on first use
            dims, elem, order, _, esize, ddr = base
            count = 1
            for piece, size in zip(view.slices, dims):
                stop = piece.stop
                if stop == -1:
                    stop = size
                step = piece.step
                extent = stop - piece.start if step == 1 else (stop - piece.start + step - 1) // step
                if extent < 0:
                    extent = 0
                count *= extent
            key = (count * esize, esize, ddr)
            found = class_ids.get(key)
            if found is None:
                found = self._class(self(view.name))
            classes[view.name] = found

    def __call__(self, name: str) -> tuple:
        found = self.cache.get(name)
        if found is not None:
            return found
        chain_ = []
        while name not in self.cache:
            view = self.views.get(name)
            if view is None:
                raise VpucError(f"%{name} is not a buffer or view")
            chain_.append(view)
            name = view.base
        dims, elem, order, _, esize, ddr = self.cache[name]
        for view in reversed(chain_):
            sizes = []
            count = 1
            for piece, size in zip(view.slices, dims):
                stop = piece.stop
                if stop == -1:
                    stop = size
                step = piece.step
                extent = stop - piece.start if step == 1 else (stop - piece.start + step - 1) // step
                if extent < 0:
                    extent = 0
                sizes.append(extent)
                count *= extent
            dims = tuple(sizes)
            self.cache[view.name] = (dims, elem, order, count * esize, esize, ddr)
        return self.cache[chain_[0].name]

    def shape_class(self, name: str) -> int:
        found = self.classes.get(name)
        if found is None:
            found = self.classes[name] = self._class(self(name))
        return found

    def tensor(self, name: str) -> TensorType:
        tensor = self.tensors.get(name)
        if tensor is None:
            dims, elem, order = self(name)[:3]
            tensor = self.tensors[name] = TensorType(dims, elem, order)
        return tensor


def build(plan: Plan) -> Plan:  # noqa: C901 -- one loop per executor, kept flat for speed
    program, arch = plan.program, plan.arch
    module = program.module
    _barriers(plan, module)
    bid = dict(zip(plan.barrier_names, range(len(plan.barrier_names))))
    ids = bid.__getitem__
    shapes = _Shapes(module)
    classes, shape_class, class_info = shapes.classes, shapes.shape_class, shapes.class_info
    act_list = next((tl.tasks for tl in module.task_lists if tl.executor is Executor.ACT_SHAVE), [])
    act_invocations = [None] * len(act_list)
    for inv in program.invocations:
        if inv.task_index < len(act_list):
            act_invocations[inv.task_index] = inv
    dpu_dispatch = arch.dispatch["DPU"]
    engines = {"DMA": 1, "DPU": arch.structure.dpus_per_tile,
               "ACT_SHAVE": arch.structure.act_shaves_per_tile}
    kinds = {"DMA": DMA, "DPU": DPU, "ACT_SHAVE": ACT}
    queue_index: dict[tuple, int] = {}
    queue_units = plan.queue_units

    def queue(key: tuple, by_index: dict) -> int:
        """The queue of ``key``, numbered in order of first use; cached by channel or tile."""
        q = queue_index.get(key)
        if q is None:
            q = queue_index[key] = len(queue_units)
            plan.queue_keys.append(key)
            plan.queue_kind.append(kinds[key[0]])
            queue_units.append([])
            plan.queue_engines.append(max(engines[key[0]], 1))
        by_index[key[1]] = q
        return q

    transfers: dict[tuple, dma_engine.Transfer] = {}
    dpu_costs: dict[tuple, dict] = {}
    queue_of, waits_of, updates_of, work = plan.queue_of, plan.waits, plan.updates, plan.work
    u = 0
    try:
        for task_list in module.task_lists:
            by_index: dict[int, int] = {}      # channel or tile -> queue, for this list
            for index, task in enumerate(task_list.tasks):
                if isinstance(task, DmaTask):
                    q = by_index.get(task.channel)
                    if q is None:
                        q = queue(("DMA", task.channel), by_index)
                    src = classes.get(task.src)
                    if src is None:
                        src = shape_class(task.src)
                    dst = classes.get(task.dst)
                    if dst is None:
                        dst = shape_class(task.dst)
                    key = (id(task.mode), src, dst)
                    transfer = transfers.get(key)
                    if transfer is None:
                        s, d = class_info[src], class_info[dst]
                        transfer = transfers[key] = dma_engine.transfer_for(
                            task.mode, s[3], s[4], s[5], d[3], d[5], arch)
                    queue_of.append(q)
                    queue_units[q].append(u)
                    waits_of.append(tuple(map(ids, task.waits)))
                    updates_of.append(tuple(map(ids, task.updates)))
                    work.append(transfer)
                    u += 1
                elif isinstance(task, DpuTask):
                    q = by_index.get(task.tile)
                    if q is None:
                        q = queue(("DPU", task.tile), by_index)
                    key = (id(task.op), task.kernel, task.inputs[0] if task.inputs else None,
                           task.weights)
                    costs = dpu_costs.get(key)
                    if costs is None:
                        costs = dpu_costs[key] = {}
                    task_waits = tuple(map(ids, task.waits))
                    if len(task_waits) > 1:
                        task_waits = tuple(dict.fromkeys(task_waits))
                    task_updates = tuple(map(ids, task.updates))
                    if len(task_updates) > 1:
                        task_updates = tuple(dict.fromkeys(task_updates))
                    units = queue_units[q]
                    for v, variant in enumerate(task.variants):
                        box = (variant.start, variant.end)
                        cost = costs.get(box)
                        if cost is None:
                            tensors = dpu_operands(task, shapes.tensor)
                            cycles, macs = dpu_engine.variant_cycles(task, v, tensors, arch)
                            cost = costs[box] = (dpu_dispatch + cycles, macs)
                        queue_of.append(q)
                        units.append(u)
                        names = variant.waits
                        waits_of.append(_merge(task_waits, names, ids) if names else task_waits)
                        names = variant.updates
                        if not names:
                            updates_of.append(task_updates)
                        elif task_updates:
                            updates_of.append(_merge(task_updates, names, ids))
                        else:
                            updates_of.append(tuple(map(ids, names)))
                        work.append(cost)
                        u += 1
                elif isinstance(task, SwKernelTask):
                    q = by_index.get(task.tile)
                    if q is None:
                        q = queue(("ACT_SHAVE", task.tile), by_index)
                    invocation = act_invocations[index] if task_list.tasks is act_list else None
                    if invocation is None:
                        raise VpucError(f"{plan.names[u]}: ACT SHAVE task has no packed "
                                        "invocation; run pack-kernel-args before simulating",
                                        task.loc)
                    queue_of.append(q)
                    queue_units[q].append(u)
                    waits_of.append(tuple(map(ids, task.waits)))
                    updates_of.append(tuple(map(ids, task.updates)))
                    work.append(invocation)
                    u += 1
    except KeyError as exc:
        raise VpucError(f"a task uses undeclared barrier %{exc.args[0]}") from None
    plan.producer_count = _counts(len(bid), plan.updates)
    plan.consumer_count = _counts(len(bid), plan.waits)
    return plan


def _merge(first: tuple[int, ...], names: tuple[str, ...], ids) -> tuple[int, ...]:
    """The task's barrier ids (already unique) then the variant's, without repeats
    (first use kept); a variant without barriers shares its task's tuple."""
    if not names:
        return first
    second = tuple(map(ids, names))
    return tuple(dict.fromkeys(first + second)) if first else second


def _counts(size: int, per_unit: list[tuple[int, ...]]) -> list[int]:
    ids = np.fromiter(chain.from_iterable(per_unit), dtype=np.intp)
    return np.bincount(ids, minlength=size).tolist()


def _barriers(plan: Plan, module) -> None:
    """Number barriers; group them by physical id in module order (the reuse order).
    A barrier without a physical id is its own physical barrier."""
    by_physical: dict[int, int] = {}
    names, barrier_phys = plan.barrier_names, plan.barrier_phys
    phys_lists, labels = plan.phys_lists, plan.phys_labels
    for b, barrier in enumerate(module.barriers):
        names.append(barrier.name)
        physical = barrier.physical
        if physical is None:
            slot = len(phys_lists)
            phys_lists.append([b])
            labels.append(f"%{barrier.name}")
        else:
            slot = by_physical.get(physical)
            if slot is None:
                slot = by_physical[physical] = len(phys_lists)
                phys_lists.append([b])
                labels.append(f"physical barrier {physical}")
            else:
                phys_lists[slot].append(b)
        barrier_phys.append(slot)
