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
for serial queues (every path from ``end(u)`` carries ``u``'s position in its
queue's entry, which only grows along it), so a negative answer there is final.  For
multi-engine queues a clock can be conservative, so a negative answer is confirmed by
a search bounded by the topological order.
Everything here is linear in units + barrier edges.

The graph is never stored: a node's successors and predecessors follow from the
units' barrier rows and queue order (``successors``), and the units, barrier
users and start clocks are machine-int tables (``schedule_tables.py``), so a
schedule of 100k tasks costs tens of bytes per unit instead of a kilobyte.
"""


from __future__ import annotations

from array import array
from collections import deque

from vpuc.arch import Arch
from vpuc.analysis.schedule_tables import (BarrierUsers, Queue, Rows, Unit, UnitColumns,
                                           UnitTable, mark_ended, merge_barriers, merge_multi,
                                           unit_name)
from vpuc.ir.module import Module
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask

__all__ = ["Schedule", "Unit", "Queue", "unit_name"]


class Schedule:
    def __init__(self, module: Module, arch: Arch, order: bool = True) -> None:
        """``order=False``: the units, queues, producers and consumers only (no barrier
        graph, no happens-before)."""
        self.queues: list[Queue] = []
        self._queue_index: dict[tuple, int] = {}
        self._columns = UnitColumns()
        self.units = UnitTable(self._columns)
        self._waits, self._updates = Rows(), Rows()   # per unit: barrier numbers
        self._build_units(module, arch)
        self.order = array("i")       # graph nodes in topological order
        self.topo_pos = array("i")    # node -> position in ``order``
        self.cycle_nodes: list[int] = []  # nodes left over by Kahn's algorithm (deadlock)
        self.fallback_searches = 0
        self._start_clock: array | None = None
        if not order:
            return
        self._toposort()
        if not self.cycle_nodes:
            self._compute_clocks()

    # ----------------------------------------------------------- units
    def _queue(self, key: tuple, engines: int) -> int:
        index = self._queue_index.get(key)
        if index is None:
            index = len(self.queues)
            self._queue_index[key] = index
            self.queues.append(Queue(key, max(engines, 1), array("i")))
        return index

    def _build_units(self, module: Module, arch: Arch) -> None:
        c = self._columns
        number: dict[str, int] = {}     # barrier name -> number, as first seen
        names: list[str] = []

        def add_row(rows: Rows, barriers) -> None:
            values = rows.values
            for barrier in barriers:
                k = number.get(barrier)
                if k is None:
                    k = number[barrier] = len(names)
                    names.append(barrier)
                values.append(k)
            rows.close_row()

        def add(task, variant, key, engines, waits, updates) -> None:
            queue = self._queue(key, engines)
            units = self.queues[queue].units
            c.task.append(task)
            c.variant.append(variant)
            c.queue.append(queue)
            c.position.append(len(units))
            c.list_index.append(list_index)
            c.executor.append(executor)
            units.append(len(c.task) - 1)
            add_row(self._waits, waits)
            add_row(self._updates, updates)

        for task_list in module.task_lists:
            executor = len(c.executors)
            c.executors.append(task_list.executor)
            for list_index, task in enumerate(task_list.tasks):
                if isinstance(task, DmaTask):
                    add(task, -1, ("DMA", task.channel), 1, task.waits, task.updates)
                elif isinstance(task, DpuTask):
                    for v, variant in enumerate(task.variants):
                        add(task, v, ("DPU", task.tile), arch.dpus_per_tile,
                            merge_barriers(task.waits, variant.waits),
                            merge_barriers(task.updates, variant.updates))
                elif isinstance(task, SwKernelTask):
                    add(task, -1, ("ACT_SHAVE", task.tile), arch.act_shaves_per_tile,
                        task.waits, task.updates)
        # Barriers are numbered in name order (the graph's barrier nodes follow it).
        by_name = sorted(range(len(names)), key=names.__getitem__)
        rank = array("i", [0]) * len(names)
        for r, k in enumerate(by_name):
            rank[k] = r
        for rows in (self._waits, self._updates):
            rows.values = array("i", [rank[k] for k in rows.values])
        self.barrier_names = [names[k] for k in by_name]
        for name, k in number.items():   # the first-seen numbers become name-order ones
            number[name] = rank[k]
        self.barrier_index = number
        self._producers = self._updates.transposed(len(self.barrier_names))
        self._consumers = self._waits.transposed(len(self.barrier_names))
        self.producers = BarrierUsers(self.barrier_index, self.barrier_names, self._producers)
        self.consumers = BarrierUsers(self.barrier_index, self.barrier_names, self._consumers)
        # The unit after each one in its queue (-1: the last).
        self._next = array("i", [-1]) * len(c.task)
        for queue in self.queues:
            units = queue.units
            for i in range(len(units) - 1):
                self._next[units[i]] = units[i + 1]
        self._serial_queue = [q.serial for q in self.queues]

    # ----------------------------------------------------------- graph
    # Node numbering: start(u) = 2u, end(u) = 2u + 1, barrier k = 2·units + k.
    # Edges: start(u) → end(u); end(p) → barrier b for each b that p updates; b → start(c)
    # for each c waiting on b, if b has producers (a barrier nobody updates orders nothing;
    # the verifier reports it on its own); within a queue end(prev) → start(next) (serial)
    # or start(prev) → start(next).
    def start_node(self, unit: int) -> int:
        return 2 * unit

    def end_node(self, unit: int) -> int:
        return 2 * unit + 1

    @property
    def node_count(self) -> int:
        return 2 * len(self._columns.task) + len(self.barrier_names)

    def successors(self, node: int) -> list[int]:
        n2 = 2 * len(self._columns.task)
        if node >= n2:
            k = node - n2
            if not self._producers.size(k):
                return []
            return [2 * c for c in self._consumers.row(k)]
        u = node >> 1
        nxt = self._next[u]
        serial = self._serial_queue[self._columns.queue[u]]
        if node & 1:
            out = [n2 + k for k in self._updates.row(u)]
            if nxt >= 0 and serial:
                out.append(2 * nxt)
        else:
            out = [node + 1]
            if nxt >= 0 and not serial:
                out.append(2 * nxt)
        return out

    def _successor_counts(self) -> list[int]:
        """``len(self.successors(node))`` for every node."""
        n_units = len(self._columns.task)
        counts = [0] * self.node_count
        upd_start, produced, consumed = self._updates.start, self._producers.start, self._consumers.start
        for u in range(n_units):
            nxt = self._next[u] >= 0
            serial = self._serial_queue[self._columns.queue[u]]
            counts[2 * u] = 1 + (nxt and not serial)
            counts[2 * u + 1] = upd_start[u + 1] - upd_start[u] + (nxt and serial)
        for k in range(len(self.barrier_names)):
            if produced[k + 1] > produced[k]:
                counts[2 * n_units + k] = consumed[k + 1] - consumed[k]
        return counts

    def _toposort(self) -> None:
        n_units, node_count = len(self._columns.task), self.node_count
        n2 = 2 * n_units
        produced = self._producers.start
        position, waits = self._columns.position, self._waits
        indegree = [0] * node_count
        for u in range(n_units):
            d = 1 if position[u] else 0
            for k in waits.row(u):
                if produced[k + 1] > produced[k]:
                    d += 1
            indegree[2 * u] = d
            indegree[2 * u + 1] = 1
        for k in range(len(self.barrier_names)):
            indegree[n2 + k] = produced[k + 1] - produced[k]
        ready = deque(n for n in range(node_count) if indegree[n] == 0)
        order = array("i")
        # ``successors`` inlined: it is the loop's whole work.
        nxt_of, serial_of, queue_of = self._next, self._serial_queue, self._columns.queue
        upd_start, upd = self._updates.start, self._updates.values
        cons_start, cons = self._consumers.start, self._consumers.values
        while ready:
            node = ready.popleft()
            order.append(node)
            if node >= n2:
                k = node - n2
                if produced[k + 1] == produced[k]:
                    continue
                targets = [2 * c for c in cons[cons_start[k]:cons_start[k + 1]]]
            else:
                u = node >> 1
                nxt = nxt_of[u]
                if node & 1:
                    targets = [n2 + k for k in upd[upd_start[u]:upd_start[u + 1]]]
                    if nxt >= 0 and serial_of[queue_of[u]]:
                        targets.append(2 * nxt)
                elif nxt >= 0 and not serial_of[queue_of[u]]:
                    targets = (node + 1, 2 * nxt)
                else:
                    targets = (node + 1,)
            for t in targets:
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
        self.order = order
        pos = array("i", [-1]) * node_count
        for i, node in enumerate(order):
            pos[node] = i
        self.topo_pos = pos
        self.cycle_nodes = [n for n in range(node_count) if pos[n] < 0]

    # ----------------------------------------------------------- deadlocks
    def find_cycle(self) -> list[int]:
        """One cycle among the nodes Kahn's algorithm could not order, as a node list."""
        if not self.cycle_nodes:
            return []
        stuck = set(self.cycle_nodes)
        # Every stuck node has a stuck predecessor; walk predecessors until one repeats.
        pred: dict[int, int] = {}
        for node in self.cycle_nodes:
            for t in self.successors(node):
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

        ``happens_before`` reads start clocks only, kept as table rows: ``_start_clock``
        (entry ``q`` of unit ``u``'s start at ``u·queues + q``; a multi-engine queue's
        prefix) and ``_start_mask`` (the masks, at ``u·multi + slot``).  A clock in
        flight is dropped once its last successor has merged it, so at most a frontier
        of them is alive at once.
        """
        c = self._columns
        n_units, nq = len(c.task), len(self.queues)
        n2 = 2 * n_units
        multi = [not serial for serial in self._serial_queue]
        slot = [-1] * nq
        n_multi = 0
        for q in range(nq):
            if multi[q]:
                slot[q], n_multi = n_multi, n_multi + 1
        empty = [(-1, 0) if m else -1 for m in multi]
        start_clock = array("i", [0]) * (n_units * nq)
        start_mask = array("Q", [0]) * (n_units * n_multi)
        multi_slots = [(q, slot[q]) for q in range(nq) if multi[q]]
        pending = self._successor_counts()
        clock: list = [None] * self.node_count
        # A node's predecessors, from the same tables as ``successors``: this runs once per node.
        produced, prod = self._producers.start, self._producers.values
        wait_start, waits = self._waits.start, self._waits.values
        serial_of, queues = self._serial_queue, self.queues
        for node in self.order:
            if node >= n2:
                k = node - n2
                sources = [2 * p + 1 for p in prod[produced[k]:produced[k + 1]]]
            elif node & 1:
                sources = (node - 1,)
            else:
                u = node >> 1
                sources = [n2 + k for k in waits[wait_start[u]:wait_start[u + 1]]
                           if produced[k + 1] > produced[k]]
                position = c.position[u]
                if position:
                    q = c.queue[u]
                    prev = queues[q].units[position - 1]
                    sources.append(2 * prev + 1 if serial_of[q] else 2 * prev)
            if not sources:
                merged = list(empty)
            elif len(sources) == 1:
                merged = list(clock[sources[0]])
            elif not n_multi:
                merged = [max(column) for column in zip(*(clock[s] for s in sources))]
            else:
                merged = [merge_multi(column) if m else max(column)
                          for m, column in zip(multi, zip(*(clock[s] for s in sources)))]
            if node < n2:
                u = node >> 1
                if node & 1:
                    q = c.queue[u]
                    if multi[q]:
                        merged[q] = mark_ended(merged[q], c.position[u])
                    else:
                        merged[q] = max(merged[q], c.position[u])
                else:
                    base = u * nq
                    if not n_multi:
                        start_clock[base:base + nq] = array("i", merged)
                    else:
                        start_clock[base:base + nq] = array(
                            "i", [e[0] if m else e for m, e in zip(multi, merged)])
                        for q, s in multi_slots:
                            start_mask[u * n_multi + s] = merged[q][1]
            clock[node] = merged
            for source in sources:
                pending[source] -= 1
                if not pending[source]:
                    clock[source] = None
            if not pending[node]:
                clock[node] = None
        self._start_clock, self._start_mask = start_clock, start_mask
        self._mask_slot, self._multi_count = slot, n_multi

    def happens_before(self, a: int, b: int) -> bool:
        """Whether unit ``a`` is guaranteed to end before unit ``b`` starts."""
        if a == b or self._start_clock is None:
            return False
        c = self._columns
        q, position = c.queue[a], c.position[a]
        known = self._start_clock[b * len(self.queues) + q]
        if position <= known:
            return True
        s = self._mask_slot[q]
        if s < 0:
            return False        # a serial queue's clock entry is exact (module docstring)
        if (self._start_mask[b * self._multi_count + s] >> (position - known - 1)) & 1:
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
            for t in self.successors(node):
                if t == target:
                    return True
                if t not in seen and self.topo_pos[t] < limit:
                    seen.add(t)
                    stack.append(t)
        return False
