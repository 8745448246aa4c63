"""Who touches what, for ``schedule_deps``: the DMA accesses of DDR bytes (and of values
kept in CMX), the DPU accesses of values kept in CMX, which DMAs load data alone, and a
barrier only a given task updates.  Footprints are the exact strided ones of
``vpuc/analysis/races.py``.
"""

from __future__ import annotations

from vpuc.analysis.races import make_footprint, region_box
from vpuc.ir.module import Barrier, BufferKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask

DDR_KINDS = (BufferKind.DDR, BufferKind.OUTPUT, BufferKind.INPUT)


def ddr_accesses(tasks: list[DmaTask], symbols: SymbolTable,
                  resident: set[str]) -> dict[str, list]:
    """Root name -> (task, position in the DMA list, footprint, writes) of every DMA
    access of DDR bytes or of a ``resident`` CMX buffer, in list order."""
    by_root: dict[str, list] = {}
    for position, task in enumerate(tasks):
        if not isinstance(task, DmaTask):
            continue
        for name, write in ((task.src, False), (task.dst, True)):
            region = symbols.region(name)
            if region is None or (region.kind not in DDR_KINDS
                                  and region.root.name not in resident):
                continue
            footprint = make_footprint(region.root, region_box(region))
            by_root.setdefault(region.root.name, []).append((task, position, footprint, write))
    return by_root


def dpu_accesses(tasks: list, symbols: SymbolTable, resident: set[str],
                  write: bool) -> dict[str, dict[int, list]]:
    """Root name -> tile -> (task, footprint) of the DPU tasks writing (``write``) or reading
    a ``resident`` CMX buffer, in each tile's list order."""
    by_root: dict[str, dict[int, list]] = {}
    for task in tasks:
        if not isinstance(task, DpuTask):
            continue
        # an output copy on another tile (``resident.cast_blocks``) is written by this tile's DPU
        for name in (task.output, *task.broadcast_outputs) if write else task.inputs:
            region = symbols.region(name)
            if region is None or region.root.name not in resident:
                continue
            footprint = make_footprint(region.root, region_box(region))
            by_root.setdefault(region.root.name, {}).setdefault(task.tile, []).append(
                (task, footprint))
    return by_root


def loads_data(task, symbols: SymbolTable, touched: set[str], resident: set[str]) -> bool:
    """Whether ``task`` loads into CMX a DDR value (or network input) only DMAs touch, or
    copies out of a value kept in CMX (``resident``)."""
    if not isinstance(task, DmaTask):
        return False
    src, dst = symbols.region(task.src), symbols.region(task.dst)
    return src is not None and dst is not None and dst.kind is BufferKind.CMX \
        and (src.kind in DDR_KINDS or src.root.name in resident) and src.root.name not in touched


class OwnBarriers:
    """A barrier that only a given task updates: one of its own, else a new
    ``<label>.written`` (the module's barriers and the task's updates grow)."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.names = {b.name for b in module.barriers}
        self.updaters: dict[str, int] = {}
        for tl in module.task_lists:
            for t in tl.tasks:
                for u in all_updates(t):
                    self.updaters[u] = self.updaters.get(u, 0) + 1
        self.made: dict[int, str] = {}

    def of(self, task) -> str:
        found = self.made.get(id(task))
        if found is None:
            found = next((u for u in task.updates if self.updaters.get(u) == 1), None)
        if found is None:
            found = base = f"{task.label}.written"
            n = 1
            while found in self.names:
                found, n = f"{base}{n}", n + 1
            self.names.add(found)
            self.updaters[found] = 1
            self.module.barriers.append(Barrier(found))
            task.updates = tuple(task.updates) + (found,)
        self.made[id(task)] = found
        return found


def all_updates(task) -> tuple[str, ...]:
    """A task's updates, its DPU variants' too."""
    out = tuple(task.updates)
    for v in getattr(task, "variants", ()) or ():
        out += tuple(v.updates)
    return out


def all_waits(task) -> tuple[str, ...]:
    """A task's waits, its DPU variants' too."""
    out = tuple(task.waits)
    for v in getattr(task, "variants", ()) or ():
        out += tuple(v.waits)
    return out
