"""Verifier rules for barriers: use, counts, deadlocks and physical-id reuse.

Counts follow the real NPU compiler: a DPU task counts once per variant,
because the runtime schedules (and signals barriers from) each variant.
"""

from __future__ import annotations

from vpuc.analysis.liveness import Lifetime, ordered_before
from vpuc.analysis.schedule import Schedule
from vpuc.arch import Arch
from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import Module
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask
from vpuc.ir.symbols import SymbolTable


def barrier_use_counts(module: Module) -> tuple[dict[str, int], dict[str, int]]:
    """Producers and consumers of each barrier, counted as ``Schedule`` counts its units
    (a DPU task once per variant, task-level barriers merged into each variant's), without
    building the units: reading a blob needs the counts only."""
    producers: dict[str, int] = {}
    consumers: dict[str, int] = {}
    produce, consume = producers.get, consumers.get
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, DpuTask):
                for variant in task.variants:
                    for barrier in _merge(task.waits, variant.waits):
                        consumers[barrier] = consume(barrier, 0) + 1
                    for barrier in _merge(task.updates, variant.updates):
                        producers[barrier] = produce(barrier, 0) + 1
            elif isinstance(task, (DmaTask, SwKernelTask)):
                for barrier in task.waits:
                    consumers[barrier] = consume(barrier, 0) + 1
                for barrier in task.updates:
                    producers[barrier] = produce(barrier, 0) + 1
    return producers, consumers


def _merge(task_level: tuple[str, ...], own: tuple[str, ...]) -> tuple[str, ...]:
    """A variant's barriers as its unit lists them (``vpuc.analysis.schedule``)."""
    return tuple(dict.fromkeys(task_level + tuple(own))) if task_level else own


def check_barrier_use(module: Module, arch: Arch, schedule: Schedule | None,
                      symbols: SymbolTable, bag: DiagnosticBag) -> None:
    """``schedule`` None: count with ``barrier_use_counts`` (a schedule of the module's units
    is built only to name the first waiter of a barrier nobody updates)."""
    if schedule is not None:
        producer_count = {name: len(units) for name, units in schedule.producers.items()}
        consumer_count = {name: len(units) for name, units in schedule.consumers.items()}
    else:
        producer_count, consumer_count = barrier_use_counts(module)
    # Graph blocks not lowered yet wait on and update barriers too (verifier/graph_blocks.py).
    graph_waited = {b for g in module.graphs for b in g.waits}
    graph_updated = {b for g in module.graphs for b in g.updates}
    for barrier in module.barriers:
        producers = producer_count.get(barrier.name, 0)
        consumers = consumer_count.get(barrier.name, 0)
        updated = bool(producers) or barrier.name in graph_updated
        waited = bool(consumers) or barrier.name in graph_waited
        if consumers and not updated:
            schedule = schedule or Schedule(module, arch, order=False)
            first = schedule.units[schedule.consumers[barrier.name][0]]
            # The runtime starts a waiter once the barrier has no producers left
            # (docs/simulator.md, runtime rule b): with none at all, it never waits.
            bag.error(barrier.loc, f"barrier %{barrier.name} is waited on but never updated: "
                      "the runtime programs it with a producer count of 0, so it counts as "
                      f"fired before anything runs and {first.name} starts without waiting "
                      "(the wait orders nothing); expected a task that updates it",
                      ((first.loc, f"{first.name} waits here"),))
        elif updated and not waited:
            bag.warning(barrier.loc, f"barrier %{barrier.name} is updated but never waited on")
        elif not updated and not waited:
            bag.warning(barrier.loc, f"barrier %{barrier.name} is never used")
        if producers > arch.max_producers:
            bag.error(barrier.loc, f"barrier %{barrier.name} has {producers} producers; "
                      f"{arch.name} allows at most {arch.max_producers} (a DPU task counts once "
                      "per variant)")
        if consumers > arch.max_consumers:
            bag.error(barrier.loc, f"barrier %{barrier.name} has {consumers} consumers; "
                      f"{arch.name} allows at most {arch.max_consumers}")


def check_deadlock(schedule: Schedule, bag: DiagnosticBag) -> bool:
    """Report a barrier dependency cycle; returns whether the schedule is acyclic."""
    cycle = schedule.find_cycle()
    if not cycle:
        return True
    steps = " -> ".join(schedule.describe_node(n) for n in cycle + cycle[:1])
    first_unit = next((schedule.units[n // 2] for n in cycle if n < 2 * len(schedule.units)), None)
    loc = first_unit.loc if first_unit else None
    bag.error(loc, f"deadlock: the barriers and task order form a cycle: {steps}")
    return False


def check_physical_reuse(module: Module, schedule: Schedule, bag: DiagnosticBag) -> None:
    """Two virtual barriers on one physical id must not be in use at the same time."""
    by_id: dict[int, list] = {}
    for barrier in module.barriers:
        if barrier.physical is not None:
            by_id.setdefault(barrier.physical, []).append(barrier)
    for physical, barriers in by_id.items():
        if len(barriers) < 2:
            continue
        lives = []
        for barrier in barriers:
            units = schedule.producers.get(barrier.name, []) + schedule.consumers.get(barrier.name, [])
            if units:
                lives.append((Lifetime.of(schedule, sorted(units)), barrier))
        lives.sort(key=lambda item: item[0].start_pos)
        for (life_a, a), (life_b, b) in zip(lives, lives[1:]):
            if not ordered_before(schedule, life_a, life_b):
                bag.error(b.loc, f"barriers %{a.name} and %{b.name} share physical barrier "
                          f"{physical} but may be in use at the same time; expected every task "
                          f"of %{a.name} to finish before %{b.name} is first used",
                          ((a.loc, f"%{a.name} is declared here"),))
