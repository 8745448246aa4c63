"""What the runtime schedules, flattened into lists for the event loop.

Units (a DMA task, one DPU variant, an ACT SHAVE task) and their FIFO queues
are numbered exactly as ``vpuc.analysis.schedule.Schedule`` numbers them (task
lists in order, a DPU task's variants in order), so the schedule's
happens-before applies to plan units directly.

``build_plan`` (``plan_build.py``) fills only what the event loop needs, as flat
per-unit lists: queue, barrier ids waited on and updated, and the unit's work
(a DMA's ``Transfer``, a DPU variant's (fixed cycles, MACs), an ACT task's
invocation); per queue its kind; per barrier its physical slot and its
producer and consumer counts.  Everything else is derived on first use:
kinds, fixed cycles, tasks and variants (numerics, races), names and
locations (reports, errors), producers and consumers per barrier (traces,
deadlock messages), operand regions, and the schedule itself (tests compare
against it; the race detector computes happens-before online).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from runtime_sim.engines import dma as dma_engine
from runtime_sim.simarch import SimArch
from vpuc.analysis.schedule import Schedule, unit_name
from vpuc.diagnostics import Loc, VpucError
from vpuc.ir.module import Buffer
from vpuc.ir.symbols import Region, SymbolTable, dense_strides_bits, span_of
from vpuc.ir.tasks import DpuTask, DmaTask, SwKernelTask
from vpuc.program import InvocationImage, Program

DMA, DPU, ACT = 0, 1, 2


@dataclass(eq=False)
class Plan:
    program: Program
    arch: SimArch
    queue_of: list[int] = field(default_factory=list)
    queue_keys: list[tuple] = field(default_factory=list)
    queue_kind: list[int] = field(default_factory=list)      # DMA, DPU or ACT per queue
    queue_units: list[list[int]] = field(default_factory=list)
    queue_engines: list[int] = field(default_factory=list)
    waits: list[tuple[int, ...]] = field(default_factory=list)
    updates: list[tuple[int, ...]] = field(default_factory=list)
    # Per unit: its Transfer (DMA), (fixed cycles with dispatch, MACs) (DPU variant), or
    # InvocationImage (ACT).
    work: list = field(default_factory=list)
    # Barriers: ids in module order; every barrier belongs to one physical id, whose
    # virtual barriers are reused in module order.
    barrier_names: list[str] = field(default_factory=list)
    barrier_phys: list[int] = field(default_factory=list)
    phys_labels: list[str] = field(default_factory=list)
    phys_lists: list[list[int]] = field(default_factory=list)
    producer_count: list[int] = field(default_factory=list)
    consumer_count: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.queue_of)

    # ------------------------------------------------------------ derived on first use
    @cached_property
    def kind(self) -> list[int]:
        kinds = self.queue_kind
        return [kinds[q] for q in self.queue_of]

    @cached_property
    def fixed(self) -> list[float]:
        """Dispatch plus the work known before the run (a DMA's setup and data phase and
        an ACT task's kernel are timed by the runtime), NCE cycles."""
        dispatch = self.arch.dispatch
        dma, act = dispatch["DMA"], dispatch["ACT_SHAVE"]
        return [dma if k == DMA else act if k == ACT else w[0]
                for k, w in zip(self.kind, self.work)]

    @cached_property
    def task(self) -> list:
        return [task for task, _, _, _ in self._walk()]

    @cached_property
    def variant(self) -> list[int | None]:
        return [v for _, _, _, v in self._walk()]

    @cached_property
    def names(self) -> list[str]:
        return [unit_name(task, index, executor, v) for task, index, executor, v in self._walk()]

    @cached_property
    def loc(self) -> list[Loc]:
        return [task.loc if v is None else task.variants[v].loc for task, _, _, v in self._walk()]

    def _walk(self):
        """(task, list index, executor, variant) per unit, in unit order."""
        for task_list in self.program.module.task_lists:
            executor = task_list.executor
            for index, task in enumerate(task_list.tasks):
                if isinstance(task, DpuTask):
                    for v in range(len(task.variants)):
                        yield task, index, executor, v
                elif isinstance(task, (DmaTask, SwKernelTask)):
                    yield task, index, executor, None

    @cached_property
    def queue_names(self) -> list[str]:
        return [f"DMA channel {index}" if kind == "DMA" else f"{kind} tile {index}"
                for kind, index in self.queue_keys]

    @cached_property
    def producers(self) -> list[list[int]]:
        return _users(len(self.barrier_names), self.updates)

    @cached_property
    def consumers(self) -> list[list[int]]:
        return _users(len(self.barrier_names), self.waits)

    @cached_property
    def transfers(self) -> list[dma_engine.Transfer | None]:
        return [w if k == DMA else None for k, w in zip(self.kind, self.work)]

    @cached_property
    def invocations(self) -> list[InvocationImage | None]:
        return [w if k == ACT else None for k, w in zip(self.kind, self.work)]

    @cached_property
    def macs(self) -> list[int]:
        return [w[1] if k == DPU else 0 for k, w in zip(self.kind, self.work)]

    @cached_property
    def nbytes(self) -> list[int]:
        return [w.nbytes if k == DMA else 0 for k, w in zip(self.kind, self.work)]

    @cached_property
    def tile(self) -> list[int | None]:
        return [None if k == DMA else task.tile for k, task in zip(self.kind, self.task)]

    @cached_property
    def schedule(self) -> Schedule:
        return Schedule(self.program.module, self.arch.structure)

    @cached_property
    def symbols(self) -> SymbolTable:
        return SymbolTable(self.program.module)

    # ------------------------------------------------------------ operands
    @cached_property
    def _buffers(self) -> dict[str, Buffer]:
        return {b.name: b for b in self.program.module.buffers}

    @cached_property
    def _resolved(self) -> dict:
        """Operands resolved so far: name -> Region, DMA unit -> (src, dst), id of a DPU
        task -> its operands.  The same Region objects come back on every start, so
        ``Memory.view`` answers them from its own cache."""
        return {}

    def region(self, name: str) -> Region:
        """A buffer's region directly; a view's through the symbol table (built on the first
        view: it declares every name of the module)."""
        region = self._resolved.get(name)
        if region is not None:
            return region
        buffer = self._buffers.get(name)
        if buffer is not None:
            strides = dense_strides_bits(buffer.type)
            region = Region(name, buffer, buffer.type, 0, strides, span_of(buffer.type, strides))
        else:
            region = self.symbols.region(name)
            if region is None:
                raise VpucError(f"%{name} does not resolve to a buffer region")
        self._resolved[name] = region
        return region

    def resolve_with(self, resolve) -> None:
        """Operands from now on resolved by ``resolve(name)``, which must answer what
        ``region`` would (a simulation's ``regions.Regions``: a static buffer's or view's
        region by arithmetic, without the symbol table), not resolved before."""
        self._resolve = resolve

    def dma_regions(self, unit: int) -> tuple[Region, Region]:
        pair = self._resolved.get(unit)
        if pair is None:
            task = self.task[unit]
            resolve = self.__dict__.get("_resolve", self.region)
            pair = self._resolved[unit] = (resolve(task.src), resolve(task.dst))
        return pair

    def dpu_regions(self, unit: int) -> dict[str, Region]:
        """The operands of the unit's DPU task (shared by its variants: do not modify)."""
        task = self.task[unit]
        key = ("dpu", id(task))
        operands = self._resolved.get(key)
        if operands is None:
            operands = self._resolved[key] = dpu_operands(
                task, self.__dict__.get("_resolve", self.region))
        return operands


def _users(count: int, per_unit: list[tuple[int, ...]]) -> list[list[int]]:
    users: list[list[int]] = [[] for _ in range(count)]
    for u, ids in enumerate(per_unit):
        for b in ids:
            users[b].append(u)
    return users


def dpu_operands(task: DpuTask, resolve) -> dict:
    operands = {f"in{i}": resolve(name) for i, name in enumerate(task.inputs)}
    operands["out"] = resolve(task.output)
    # the output's copies on other tiles (``DpuTask.broadcast_outputs``): "out.1", "out.2"...
    for i, name in enumerate(task.broadcast_outputs, 1):
        operands[f"out.{i}"] = resolve(name)
    if task.weights:
        operands["weights"] = resolve(task.weights)
    if task.bias:
        operands["bias"] = resolve(task.bias)
    if task.quant is not None:     # the integer mode's requantization table
        operands["scale"] = resolve(task.quant.scale)
    return operands


def written_operands(regions: dict) -> list:
    """The regions a DPU task writes: its output and the output's copies on other tiles."""
    return [region for name, region in regions.items() if name.startswith("out")]


def build_plan(program: Program, arch: SimArch) -> Plan:
    from runtime_sim.plan_build import build
    return build(Plan(program, arch))
