"""The schedule kept as tables: its implied graph against one built from the definition,
happens-before against plain reachability, barrier users, and what it costs per unit."""

from __future__ import annotations

import sys
import tracemalloc
from collections import Counter, deque
from pathlib import Path

import pytest

from vpuc.analysis.schedule import Schedule
from vpuc.arch import load_arch
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask
from vpuc.vir.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from gen_program import generate  # noqa: E402

PROGRAMS = sorted(ROOT.glob("examples/*.vir")) + sorted((ROOT / "tests/sim/data").glob("*.vir"))


def _module(path: Path):
    return parse_text(path.read_text(), str(path))


def _definition_graph(module, arch):
    """The graph as the schedule's docstring defines it, built from the tasks alone."""
    units = []   # (waits, updates, queue key, engines)
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, DmaTask):
                units.append((task.waits, task.updates, ("DMA", task.channel), 1))
            elif isinstance(task, DpuTask):
                for v in task.variants:
                    waits = tuple(dict.fromkeys(task.waits + v.waits)) if task.waits else v.waits
                    updates = (tuple(dict.fromkeys(task.updates + v.updates)) if task.updates
                               else v.updates)
                    units.append((waits, updates, ("DPU", task.tile), arch.dpus_per_tile))
            elif isinstance(task, SwKernelTask):
                units.append((task.waits, task.updates, ("ACT_SHAVE", task.tile),
                              arch.act_shaves_per_tile))
    barriers = sorted({b for w, u, _, _ in units for b in w + u})
    node_of = {b: 2 * len(units) + k for k, b in enumerate(barriers)}
    updated = {b for _, u, _, _ in units for b in u}
    edges: dict[int, list[int]] = {n: [] for n in range(2 * len(units) + len(barriers))}
    last: dict[tuple, int] = {}
    for i, (waits, updates, key, engines) in enumerate(units):
        edges[2 * i].append(2 * i + 1)
        edges[2 * i + 1] += [node_of[b] for b in updates]
        for b in waits:
            if b in updated:
                edges[node_of[b]].append(2 * i)
        if key in last:
            prev = last[key]
            edges[2 * prev + 1 if max(engines, 1) == 1 else 2 * prev].append(2 * i)
        last[key] = i
    return units, edges


def _reachable(edges, source: int) -> set[int]:
    seen, todo = {source}, deque([source])
    while todo:
        for t in edges[todo.popleft()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_the_implied_graph_is_the_defined_one(path):
    module, arch = _module(path), load_arch("NPU37XX")
    schedule = Schedule(module, arch)
    units, edges = _definition_graph(module, arch)
    assert len(schedule.units) == len(units)
    for node, targets in edges.items():
        assert Counter(schedule.successors(node)) == Counter(targets), schedule.describe_node(node)
    if schedule.cycle_nodes:
        return
    assert sorted(schedule.order) == list(range(schedule.node_count))
    for node, targets in edges.items():
        assert all(schedule.topo_pos[node] < schedule.topo_pos[t] for t in targets)
    for a in range(len(units)):
        after = _reachable(edges, 2 * a + 1)
        for b in range(len(units)):
            assert schedule.happens_before(a, b) == (a != b and 2 * b in after), (a, b)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_barrier_users_are_the_units_that_list_them(path):
    module, arch = _module(path), load_arch("NPU37XX")
    schedule = Schedule(module, arch, order=False)
    producers: dict[str, list[int]] = {}
    consumers: dict[str, list[int]] = {}
    for unit in schedule.units:
        for b in unit.updates:
            producers.setdefault(b, []).append(unit.index)
        for b in unit.waits:
            consumers.setdefault(b, []).append(unit.index)
    assert dict(schedule.producers) == producers
    assert dict(schedule.consumers) == consumers
    for name in schedule.barrier_names + ["no-such-barrier"]:
        assert (name in schedule.producers) == (name in producers)
        assert schedule.producers.get(name, "none") == producers.get(name, "none")
        assert schedule.producers.count(name) == len(producers.get(name, ()))


def test_units_read_back_from_the_columns():
    module, arch = _module(ROOT / "examples/double_buffer.vir"), load_arch("NPU37XX")
    schedule = Schedule(module, arch)
    units = list(schedule.units)
    assert [schedule.units[i] for i in range(len(units))] == units == schedule.units[:]
    assert schedule.units[-1] == units[-1]
    for queue in schedule.queues:
        assert [units[u].position for u in queue.units] == list(range(len(queue.units)))
        assert {units[u].queue for u in queue.units} <= {schedule.queues.index(queue)}


def test_a_schedule_costs_a_few_hundred_bytes_per_unit():
    # Per unit: six int32 columns and a task pointer (32 B), barrier rows and their
    # transposes (about 2 entries each way: 32 B), the node order and positions (2.8
    # nodes: 22 B), start clocks (6 queues x 4 B + 2 masks x 8 B: 40 B) and the barrier
    # index (0.8 barriers: about 80 B): about 200 B.  The object-per-unit schedule this
    # replaced held over 1,000 B per unit, 1,500 B at its peak.
    module, arch = parse_text(generate(2000), "bench.vir"), load_arch("NPU37XX")
    tracemalloc.start()
    try:
        schedule = Schedule(module, arch)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    n = len(schedule.units)
    assert retained / n < 320, retained / n
    assert peak / n < 450, peak / n
