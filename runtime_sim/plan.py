"""What the runtime schedules, flattened for the event loop.

Units (a DMA task, one DPU variant, an ACT SHAVE task) and their FIFO queues
come from ``vpuc.analysis.schedule.Schedule``; here they get integer barrier
ids, physical barrier reuse lists, operand regions, fixed costs (DPU cycles,
DMA transfers) and the byte ranges they read and write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.memory import Memory
from runtime_sim.simarch import SimArch
from vpuc.analysis.schedule import Schedule
from vpuc.diagnostics import VpucError
from vpuc.ir.symbols import Region, SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask
from vpuc.program import InvocationImage, Program

DMA, DPU, ACT = 0, 1, 2
KIND_OF = {"DMA": DMA, "DPU": DPU, "ACT_SHAVE": ACT}


@dataclass
class Plan:
    program: Program
    arch: SimArch
    schedule: Schedule
    names: list[str] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    queue_of: list[int] = field(default_factory=list)
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
    # Operands, by unit.
    transfers: dict[int, dma_engine.Transfer] = field(default_factory=dict)
    dma_regions: dict[int, tuple[Region, Region]] = field(default_factory=dict)
    dpu_regions: dict[int, dict[str, Region]] = field(default_factory=dict)
    invocations: dict[int, InvocationImage] = field(default_factory=dict)
    act_regions: dict[int, tuple[list[Region], list[Region]]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.names)

    def accesses(self, unit: int) -> tuple[list[Region], list[Region]]:
        """(regions read, regions written) by a unit."""
        kind = self.kind[unit]
        if kind == DMA:
            src, dst = self.dma_regions[unit]
            return [src], [dst]
        if kind == DPU:
            sched = self.schedule.units[unit]
            reads, written = dpu_engine.variant_accesses(sched.task, sched.variant,
                                                         self.dpu_regions[unit])
            return reads, [written]
        return self.act_regions[unit]


def build_plan(program: Program, arch: SimArch, memory: Memory) -> Plan:
    module = program.module
    schedule = Schedule(module, arch.structure)
    symbols = SymbolTable(module)
    plan = Plan(program, arch, schedule)
    _barriers(plan, module)
    barrier_id = {name: i for i, name in enumerate(plan.barrier_names)}
    plan.producers = [[] for _ in plan.barrier_names]
    plan.consumers = [[] for _ in plan.barrier_names]
    for queue in schedule.queues:
        kind, index = queue.key
        plan.queue_units.append(list(queue.units))
        plan.queue_engines.append(queue.engines)
        plan.queue_names.append(f"DMA channel {index}" if kind == "DMA" else f"{kind} tile {index}")
    act_list = next((tl.tasks for tl in module.task_lists if tl.executor is Executor.ACT_SHAVE), [])
    invocation_of = {id(act_list[inv.task_index]): inv for inv in program.invocations
                     if inv.task_index < len(act_list)}
    for unit in schedule.units:
        u = unit.index
        task = unit.task
        plan.names.append(unit.name)
        plan.queue_of.append(unit.queue)
        plan.waits.append(tuple(barrier_id[b] for b in unit.waits))
        plan.updates.append(tuple(barrier_id[b] for b in unit.updates))
        for b in plan.waits[-1]:
            plan.consumers[b].append(u)
        for b in plan.updates[-1]:
            plan.producers[b].append(u)
        if isinstance(task, DmaTask):
            src, dst = symbols.region(task.src), symbols.region(task.dst)
            transfer = dma_engine.plan_transfer(task, src, dst, arch)
            plan.kind.append(DMA)
            plan.transfers[u] = transfer
            plan.dma_regions[u] = (src, dst)
            plan.fixed.append(arch.dispatch["DMA"])
            plan.macs.append(0)
            plan.nbytes.append(transfer.nbytes)
            plan.tile.append(None)
        elif isinstance(task, DpuTask):
            regions = {f"in{i}": symbols.region(name) for i, name in enumerate(task.inputs)}
            regions["out"] = symbols.region(task.output)
            if task.weights:
                regions["weights"] = symbols.region(task.weights)
            if task.bias:
                regions["bias"] = symbols.region(task.bias)
            cycles, macs = dpu_engine.variant_cycles(task, unit.variant, regions, arch)
            plan.kind.append(DPU)
            plan.dpu_regions[u] = regions
            plan.fixed.append(arch.dispatch["DPU"] + cycles)
            plan.macs.append(macs)
            plan.nbytes.append(0)
            plan.tile.append(task.tile)
        elif isinstance(task, SwKernelTask):
            invocation = invocation_of.get(id(task))
            if invocation is None:
                raise VpucError(f"{unit.name}: ACT SHAVE task has no packed invocation; run "
                                "pack-kernel-args before simulating", unit.loc)
            plan.kind.append(ACT)
            plan.invocations[u] = invocation
            plan.act_regions[u] = ([symbols.region(b.buffer) for b in task.inputs],
                                   [symbols.region(b.buffer) for b in task.outputs])
            plan.fixed.append(arch.dispatch["ACT_SHAVE"])
            plan.macs.append(0)
            plan.nbytes.append(0)
            plan.tile.append(task.tile)
    return plan


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
