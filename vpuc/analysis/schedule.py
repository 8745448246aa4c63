"""The schedule a module implies: units, queues, the barrier graph, happens-before.

A *unit* is what the runtime schedules: a DMA task, one DPU *variant*, or an
ACT SHAVE task.  Units sit in FIFO queues: one per DMA channel, one per tile
for the DPUs and one per tile for the ACT SHAVEs.  A queue served by one engine
is *serial* (a unit starts after the previous one ends); a queue served by
several engines (2 ACT SHAVEs per tile on NPU37XX) only starts its units in
order.

The graph has a start and an end node per unit and a node per barrier:
``start(u) → end(u)``; ``end(p) → b`` for each barrier ``b`` that ``p``
updates; ``b → start(c)`` for each barrier ``c`` waits on; and, within a queue,
``end(prev) → start(next)`` (serial) or ``start(prev) → start(next)``.
A cycle is a deadlock.  ``u`` happens before ``v`` iff ``end(u)`` reaches
``start(v)``.

Happens-before is answered in O(1) with vector clocks over the queues (entry
``q`` = the longest prefix of queue ``q`` known to have ended), which is exact
for serial queues.  For multi-engine queues a clock can be conservative, so a
negative answer is confirmed by a search bounded by the topological order.
Everything here is linear in units + barrier edges.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field

from vpuc.arch import Arch
from vpuc.diagnostics import Loc
from vpuc.ir.module import Module
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask


@dataclass(slots=True)
class Unit:
    index: int
    task: object                 # DmaTask | DpuTask | SwKernelTask
    variant: int | None          # DPU variant index
    queue: int
    position: int                # within its queue
    name: str
    waits: tuple[str, ...]
    updates: tuple[str, ...]
    loc: Loc


@dataclass
class Queue:
    key: tuple                   # ("DMA", channel) | ("DPU", tile) | ("ACT_SHAVE", tile)
    engines: int
    units: list[int] = field(default_factory=list)

    @property
    def serial(self) -> bool:
        return self.engines == 1

    def __str__(self) -> str:
        kind, index = self.key
        return f"{kind} channel {index}" if kind == "DMA" else f"{kind} tile {index}"


def unit_name(task, list_index: int, executor: Executor, variant: int | None = None) -> str:
    base = task.label or f"{executor.value.lower()}#{list_index}"
    if variant is None:
        return base
    label = task.variants[variant].label
    return f"{base}.{label}" if label else f"{base}.v{variant}"


class Schedule:
    def __init__(self, module: Module, arch: Arch, order: bool = True) -> None:
        """``order=False``: the units, queues, producers and consumers only (no barrier
        graph, no happens-before)."""
        self.units: list[Unit] = []
        self.queues: list[Queue] = []
        self._queue_index: dict[tuple, int] = {}
        self.producers: dict[str, list[int]] = {}
        self.consumers: dict[str, list[int]] = {}
        self._build_units(module, arch)
        self.order: list[int] = []        # graph nodes in topological order
        self.topo_pos: list[int] = []     # node -> position in ``order``
        self.cycle_nodes: list[int] = []  # nodes left over by Kahn's algorithm (deadlock)
        self.clock: list[list[int]] | None = None
        if not order:
            return
        self._build_graph()
        self._toposort()
        if not self.cycle_nodes:
            self._compute_clocks()

    # ----------------------------------------------------------- units
    def _queue(self, key: tuple, engines: int) -> int:
        index = self._queue_index.get(key)
        if index is None:
            index = len(self.queues)
            self._queue_index[key] = index
            self.queues.append(Queue(key, max(engines, 1)))
        return index

    def _add(self, task, variant, key, engines, name, waits, updates, loc) -> None:
        queue = self._queue(key, engines)
        unit = Unit(len(self.units), task, variant, queue, len(self.queues[queue].units), name,
                    tuple(waits), tuple(updates), loc)
        self.units.append(unit)
        self.queues[queue].units.append(unit.index)
        for barrier in unit.waits:
            self.consumers.setdefault(barrier, []).append(unit.index)
        for barrier in unit.updates:
            self.producers.setdefault(barrier, []).append(unit.index)

    def _build_units(self, module: Module, arch: Arch) -> None:
        for task_list in module.task_lists:
            for list_index, task in enumerate(task_list.tasks):
                executor = task_list.executor
                if isinstance(task, DmaTask):
                    self._add(task, None, ("DMA", task.channel), 1,
                              unit_name(task, list_index, executor), task.waits, task.updates,
                              task.loc)
                elif isinstance(task, DpuTask):
                    for v, variant in enumerate(task.variants):
                        self._add(task, v, ("DPU", task.tile), arch.dpus_per_tile,
                                  unit_name(task, list_index, executor, v),
                                  _merge(task.waits, variant.waits),
                                  _merge(task.updates, variant.updates), variant.loc)
                elif isinstance(task, SwKernelTask):
                    self._add(task, None, ("ACT_SHAVE", task.tile), arch.act_shaves_per_tile,
                              unit_name(task, list_index, executor), task.waits, task.updates,
                              task.loc)

    # ----------------------------------------------------------- graph
    # Node numbering: start(u) = 2u, end(u) = 2u + 1, barrier k = 2·units + k.
    def start_node(self, unit: int) -> int:
        return 2 * unit

    def end_node(self, unit: int) -> int:
        return 2 * unit + 1

    def _build_graph(self) -> None:
        n_units = len(self.units)
        self.barrier_names = sorted(set(self.producers) | set(self.consumers))
        self.barrier_node = {name: 2 * n_units + k for k, name in enumerate(self.barrier_names)}
        self.node_count = 2 * n_units + len(self.barrier_names)
        succ: list[list[int]] = [[] for _ in range(self.node_count)]
        for unit in self.units:
            succ[2 * unit.index].append(2 * unit.index + 1)
            for barrier in unit.updates:
                succ[2 * unit.index + 1].append(self.barrier_node[barrier])
            for barrier in unit.waits:
                # A barrier nobody updates has no producers left from the start:
                # it orders nothing (the verifier reports it on its own).
                if barrier in self.producers:
                    succ[self.barrier_node[barrier]].append(2 * unit.index)
        for queue in self.queues:
            for prev, nxt in zip(queue.units, queue.units[1:]):
                source = 2 * prev + 1 if queue.serial else 2 * prev
                succ[source].append(2 * nxt)
        self.succ = succ

    def _toposort(self) -> None:
        indegree = [0] * self.node_count
        for targets in self.succ:
            for t in targets:
                indegree[t] += 1
        ready = deque(n for n in range(self.node_count) if indegree[n] == 0)
        order = []
        while ready:
            node = ready.popleft()
            order.append(node)
            for t in self.succ[node]:
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
        # Machine ints, not a list of int objects: two of these per node add up at 100k tasks.
        self.order = array("q", order)
        pos = array("q", [-1]) * self.node_count
        for i, node in enumerate(order):
            pos[node] = i
        self.topo_pos = pos
        self.cycle_nodes = [n for n in range(self.node_count) if pos[n] < 0]

    # ----------------------------------------------------------- deadlocks
    def find_cycle(self) -> list[int]:
        """One cycle among the nodes Kahn's algorithm could not order, as a node list."""
        if not self.cycle_nodes:
            return []
        stuck = set(self.cycle_nodes)
        # Every stuck node has a stuck predecessor; walk predecessors until one repeats.
        pred: dict[int, int] = {}
        for node in self.cycle_nodes:
            for t in self.succ[node]:
                if t in stuck and t not in pred:
                    pred[t] = node
        node = self.cycle_nodes[0]
        seen: dict[int, int] = {}
        path = []
        while node not in seen:
            seen[node] = len(path)
            path.append(node)
            node = pred[node]
        cycle = path[seen[node]:]
        cycle.reverse()
        return cycle

    def describe_node(self, node: int) -> str:
        if node >= 2 * len(self.units):
            return f"barrier %{self.barrier_names[node - 2 * len(self.units)]}"
        unit = self.units[node // 2]
        return f"{'end' if node % 2 else 'start'} of {unit.name}"

    # ----------------------------------------------------------- happens-before
    def _compute_clocks(self) -> None:
        """One clock per node, in topological order.

        Entry ``q`` of a clock is what is known to have ended in queue ``q``: for a
        serial queue the last ended position (all before it ended too); for a
        multi-engine queue, where units may end out of order, a pair (prefix,
        mask): positions up to ``prefix`` have ended, and bit ``i`` of ``mask``
        says position ``prefix + 1 + i`` has ended as well.
        """
        multi = [not q.serial for q in self.queues]
        empty = [(-1, 0) if m else -1 for m in multi]
        preds: list[list[int]] = [[] for _ in range(self.node_count)]
        for node, targets in enumerate(self.succ):
            for t in targets:
                preds[t].append(node)
        clock: list = [None] * self.node_count
        n_unit_nodes = 2 * len(self.units)
        any_multi = any(multi)
        # happens_before reads start clocks only: another node's clock is dropped once its
        # last successor has merged it, so at most a frontier of them is alive at once.
        pending = [len(targets) for targets in self.succ]
        for node in self.order:
            sources = preds[node]
            if not sources:
                merged = list(empty)
            elif len(sources) == 1:
                merged = list(clock[sources[0]])
            elif not any_multi:
                merged = [max(column) for column in zip(*(clock[s] for s in sources))]
            else:
                merged = [_merge_multi(column) if m else max(column)
                          for m, column in zip(multi, zip(*(clock[s] for s in sources)))]
            if node < n_unit_nodes and node % 2 == 1:
                unit = self.units[node // 2]
                if multi[unit.queue]:
                    merged[unit.queue] = _mark_ended(merged[unit.queue], unit.position)
                else:
                    merged[unit.queue] = max(merged[unit.queue], unit.position)
            is_start = node < n_unit_nodes and node % 2 == 0
            clock[node] = tuple(merged) if is_start else merged
            for source in sources:
                pending[source] -= 1
                if not pending[source] and (source >= n_unit_nodes or source % 2):
                    clock[source] = None
            if not pending[node] and not is_start:
                clock[node] = None
        self.clock = clock
        self.fallback_searches = 0

    def happens_before(self, a: int, b: int) -> bool:
        """Whether unit ``a`` is guaranteed to end before unit ``b`` starts."""
        if a == b or self.clock is None:
            return False
        unit = self.units[a]
        known = self.clock[2 * b][unit.queue]
        if isinstance(known, tuple):
            prefix, mask = known
            if unit.position <= prefix or (mask >> (unit.position - prefix - 1)) & 1:
                return True
        elif known >= unit.position:
            return True
        self.fallback_searches += 1
        return self._reaches(2 * a + 1, 2 * b)

    def _reaches(self, source: int, target: int) -> bool:
        limit = self.topo_pos[target]
        if self.topo_pos[source] >= limit:
            return False
        stack, seen = [source], {source}
        while stack:
            node = stack.pop()
            for t in self.succ[node]:
                if t == target:
                    return True
                if t not in seen and self.topo_pos[t] < limit:
                    seen.add(t)
                    stack.append(t)
        return False


MASK_BITS = 64  # how far past its prefix a multi-engine queue's clock remembers ended units


def _normalize(prefix: int, mask: int) -> tuple[int, int]:
    # Fold the run of ended positions just past the prefix into the prefix.
    run = (~mask & (mask + 1)).bit_length() - 1
    return prefix + run, (mask >> run) & ((1 << MASK_BITS) - 1)


def _merge_multi(entries) -> tuple[int, int]:
    prefix = max(e[0] for e in entries)
    mask = 0
    for p, m in entries:
        if prefix - p < MASK_BITS:
            mask |= m >> (prefix - p)
    return _normalize(prefix, mask)


def _mark_ended(entry: tuple[int, int], position: int) -> tuple[int, int]:
    prefix, mask = entry
    offset = position - prefix - 1
    if offset < 0 or offset >= MASK_BITS:
        return entry  # already known, or too far ahead to remember (a search will confirm)
    return _normalize(prefix, mask | (1 << offset))


def _merge(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    if not first:
        return tuple(second)
    return tuple(dict.fromkeys(first + tuple(second)))
