"""What the runtime schedules, flattened into lists for the event loop.

Units (a DMA task, one DPU variant, an ACT SHAVE task) and their FIFO queues
are numbered exactly as ``vpuc.analysis.schedule.Schedule`` numbers them (task
lists in order, a DPU task's variants in order), so the schedule's
happens-before applies to plan units directly.  The schedule itself (graph,
vector clocks) is only built when something asks for it, the race detector;
operand regions (offsets, strides) likewise, when numerics or races need them.
Timing needs only shapes, so those are resolved cheaply here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.simarch import SimArch
from vpuc.analysis.schedule import Schedule, unit_name
from vpuc.diagnostics import Loc, VpucError
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import Region, SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask
from vpuc.ir.types import TensorType
from vpuc.program import InvocationImage, Program

DMA, DPU, ACT = 0, 1, 2


@dataclass
class Plan:
    program: Program
    arch: SimArch
    names: list[str] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    task: list = field(default_factory=list)
    variant: list[int | None] = field(default_factory=list)
    loc: list[Loc] = field(default_factory=list)
    queue_of: list[int] = field(default_factory=list)
    queue_keys: list[tuple] = field(default_factory=list)
    queue_units: list[list[int]] = field(default_factory=list)
    queue_engines: list[int] = field(default_factory=list)
    queue_names: list[str] = field(default_factory=list)
    waits: list[tuple[int, ...]] = field(default_factory=list)
    updates: list[tuple[int, ...]] = field(default_factory=list)
    fixed: list[float] = field(default_factory=list)     # dispatch + fixed work, NCE cycles
    macs: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    tile: list[int | None] = field(default_factory=list)
    # Barriers: ids in module order; every barrier belongs to one physical id, whose
    # virtual barriers are reused in module order.
    barrier_names: list[str] = field(default_factory=list)
    barrier_phys: list[int] = field(default_factory=list)
    phys_labels: list[str] = field(default_factory=list)
    phys_lists: list[list[int]] = field(default_factory=list)
    producers: list[list[int]] = field(default_factory=list)
    consumers: list[list[int]] = field(default_factory=list)
    transfers: list[dma_engine.Transfer | None] = field(default_factory=list)   # DMA units
    invocations: list[InvocationImage | None] = field(default_factory=list)     # ACT units

    @property
    def size(self) -> int:
        return len(self.names)

    @cached_property
    def schedule(self) -> Schedule:
        return Schedule(self.program.module, self.arch.structure)

    @cached_property
    def symbols(self) -> SymbolTable:
        return SymbolTable(self.program.module)

    # ------------------------------------------------------------ operands
    def region(self, name: str) -> Region:
        region = self.symbols.region(name)
        if region is None:
            raise VpucError(f"%{name} does not resolve to a buffer region")
        return region

    def dma_regions(self, unit: int) -> tuple[Region, Region]:
        task = self.task[unit]
        return self.region(task.src), self.region(task.dst)

    def dpu_regions(self, unit: int) -> dict[str, Region]:
        return _dpu_operands(self.task[unit], self.region)

    def accesses(self, unit: int) -> tuple[list[Region], list[Region]]:
        """(regions read, regions written) by a unit."""
        kind, task = self.kind[unit], self.task[unit]
        if kind == DMA:
            src, dst = self.dma_regions(unit)
            return [src], [dst]
        if kind == DPU:
            reads, written = dpu_engine.variant_accesses(task, self.variant[unit],
                                                         self.dpu_regions(unit))
            return reads, [written]
        return ([self.region(b.buffer) for b in task.inputs],
                [self.region(b.buffer) for b in task.outputs])


class _Shapes:
    """(dims, element type, dims order, bytes, element bytes, in DDR) of buffers and views,
    without offsets or strides: all that timing needs."""

    def __init__(self, module) -> None:
        self.views = {v.name: v for v in module.views}
        self.cache: dict[str, tuple] = {
            b.name: (b.type.bound_shape, b.type.elem, b.type.order, b.type.nbytes,
                     b.type.elem.nbytes, b.kind is not BufferKind.CMX) for b in module.buffers}
        self.tensors: dict[str, TensorType] = {}

    def __call__(self, name: str) -> tuple:
        found = self.cache.get(name)
        if found is not None:
            return found
        chain = []
        while name not in self.cache:
            if name not in self.views:
                raise VpucError(f"%{name} is not a buffer or view")
            chain.append(name)
            name = self.views[name].base
        dims, elem, order, _, esize, ddr = self.cache[name]
        for view_name in reversed(chain):
            sizes = []
            count = 1
            for piece, size in zip(self.views[view_name].slices, dims):
                stop = size if piece.stop == -1 else piece.stop
                extent = max(0, (stop - piece.start + piece.step - 1) // piece.step)
                sizes.append(extent)
                count *= extent
            dims = tuple(sizes)
            self.cache[view_name] = (dims, elem, order, count * esize, esize, ddr)
        return self.cache[chain[0]]

    def tensor(self, name: str) -> TensorType:
        tensor = self.tensors.get(name)
        if tensor is None:
            dims, elem, order = self(name)[:3]
            tensor = self.tensors[name] = TensorType(dims, elem, order)
        return tensor


def _dpu_operands(task: DpuTask, resolve) -> dict:
    operands = {f"in{i}": resolve(name) for i, name in enumerate(task.inputs)}
    operands["out"] = resolve(task.output)
    if task.weights:
        operands["weights"] = resolve(task.weights)
    if task.bias:
        operands["bias"] = resolve(task.bias)
    return operands


def _merge(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(tuple(first) + tuple(second))) if first else tuple(second)


def build_plan(program: Program, arch: SimArch) -> Plan:
    module = program.module
    plan = Plan(program, arch)
    _barriers(plan, module)
    rows = _unit_rows(program, arch)
    if not rows:
        return plan
    (plan.names, plan.kind, plan.task, plan.variant, plan.loc, keys, waits, updates, plan.fixed,
     plan.macs, plan.nbytes, plan.tile, extras) = map(list, zip(*rows))
    # Queues in order of first use, as the schedule numbers them.
    engines = {"DMA": 1, "DPU": arch.structure.dpus_per_tile,
               "ACT_SHAVE": arch.structure.act_shaves_per_tile}
    queue_index: dict[tuple, int] = {}
    for u, key in enumerate(keys):
        q = queue_index.get(key)
        if q is None:
            q = queue_index[key] = len(plan.queue_units)
            plan.queue_keys.append(key)
            plan.queue_units.append([])
            plan.queue_engines.append(max(engines[key[0]], 1))
            plan.queue_names.append(f"DMA channel {key[1]}" if key[0] == "DMA"
                                    else f"{key[0]} tile {key[1]}")
        plan.queue_units[q].append(u)
        plan.queue_of.append(q)
    barrier_id = {name: i for i, name in enumerate(plan.barrier_names)}.__getitem__
    plan.producers = [[] for _ in plan.barrier_names]
    plan.consumers = [[] for _ in plan.barrier_names]
    try:
        plan.waits = [tuple(map(barrier_id, names)) for names in waits]
        plan.updates = [tuple(map(barrier_id, names)) for names in updates]
    except KeyError as exc:
        raise VpucError(f"a task uses undeclared barrier %{exc.args[0]}") from None
    for u, ids in enumerate(plan.waits):
        for b in ids:
            plan.consumers[b].append(u)
    for u, ids in enumerate(plan.updates):
        for b in ids:
            plan.producers[b].append(u)
    plan.transfers = [x if k == DMA else None for k, x in zip(plan.kind, extras)]
    plan.invocations = [x if k == ACT else None for k, x in zip(plan.kind, extras)]
    return plan


def _unit_rows(program: Program, arch: SimArch) -> list[tuple]:
    """One row per unit: (name, kind, task, variant, loc, queue key, waits, updates,
    fixed cycles, MACs, bytes, tile, transfer or invocation)."""
    module = program.module
    shapes = _Shapes(module)
    act_list = next((tl.tasks for tl in module.task_lists if tl.executor is Executor.ACT_SHAVE), [])
    invocation_of = {id(act_list[inv.task_index]): inv for inv in program.invocations
                     if inv.task_index < len(act_list)}
    transfer_cache: dict[tuple, dma_engine.Transfer] = {}
    cycles_cache: dict[tuple, tuple[float, int]] = {}
    dispatch = arch.dispatch
    rows: list[tuple] = []
    for task_list in module.task_lists:
        executor = task_list.executor
        for index, task in enumerate(task_list.tasks):
            if isinstance(task, DmaTask):
                src, dst = shapes(task.src), shapes(task.dst)
                key = (task.mode.value, src[3], src[4], src[5], dst[3], dst[5])
                transfer = transfer_cache.get(key)
                if transfer is None:
                    transfer = transfer_cache[key] = dma_engine.plan_transfer(
                        task.mode, shapes.tensor(task.src), src[5], shapes.tensor(task.dst),
                        dst[5], arch)
                rows.append((unit_name(task, index, executor), DMA, task, None, task.loc,
                             ("DMA", task.channel), task.waits, task.updates, dispatch["DMA"], 0,
                             transfer.nbytes, None, transfer))
            elif isinstance(task, DpuTask):
                tensors = _dpu_operands(task, shapes.tensor)
                for v, variant in enumerate(task.variants):
                    key = (task.op.value, task.kernel, id(tensors["in0"]),
                           id(tensors.get("weights")),
                           variant.end[0] - variant.start[0], variant.end[1] - variant.start[1],
                           variant.end[2] - variant.start[2])
                    cost = cycles_cache.get(key)
                    if cost is None:
                        cost = cycles_cache[key] = dpu_engine.variant_cycles(task, v, tensors, arch)
                    rows.append((unit_name(task, index, executor, v), DPU, task, v, variant.loc,
                                 ("DPU", task.tile), _merge(task.waits, variant.waits),
                                 _merge(task.updates, variant.updates),
                                 dispatch["DPU"] + cost[0], cost[1], 0, task.tile, None))
            elif isinstance(task, SwKernelTask):
                name = unit_name(task, index, executor)
                invocation = invocation_of.get(id(task))
                if invocation is None:
                    raise VpucError(f"{name}: ACT SHAVE task has no packed invocation; run "
                                    "pack-kernel-args before simulating", task.loc)
                rows.append((name, ACT, task, None, task.loc, ("ACT_SHAVE", task.tile),
                             task.waits, task.updates, dispatch["ACT_SHAVE"], 0, 0, task.tile,
                             invocation))
    return rows


def _barriers(plan: Plan, module) -> None:
    """Number barriers; group them by physical id in module order (the reuse order).
    A barrier without a physical id is its own physical barrier."""
    by_physical: dict[int, int] = {}
    for barrier in module.barriers:
        b = len(plan.barrier_names)
        plan.barrier_names.append(barrier.name)
        if barrier.physical is None:
            slot = len(plan.phys_lists)
            plan.phys_lists.append([b])
            plan.phys_labels.append(f"%{barrier.name}")
        elif barrier.physical in by_physical:
            slot = by_physical[barrier.physical]
            plan.phys_lists[slot].append(b)
        else:
            slot = by_physical[barrier.physical] = len(plan.phys_lists)
            plan.phys_lists.append([b])
            plan.phys_labels.append(f"physical barrier {barrier.physical}")
        plan.barrier_phys.append(slot)
