"""allocate-buffers: registers, memory sharing and offsets of the Buffers (OpenVINO's AllocateBuffers).

All Buffers live in one *scratchpad* (``lir.frame.scratchpad_size`` bytes at sp+0
of the kernel's frame).  Each Buffer gets:

- ``reg_group``: Buffers of one group share one data pointer register; each
  access adds its Buffer's ``offset`` as an immediate, so the register only
  has to follow the loops' pointer shifts;
- ``cluster``: Buffers of one cluster share memory (the same ``offset``);
- ``offset``: bytes from the scratchpad base, copied to the ``offset`` of
  every Load and Store of the Buffer.

Optimized mode (the default), in three steps:

1. *Register groups by graph colouring* (``SetBufferRegGroup``).  Two Buffers
   conflict when one loop moves both pointers differently (different
   incrementation, increment, finalization offset or element size), or when a
   loop moves one Buffer's pointer while the other Buffer lives inside that
   loop (its accesses would see a shifted register).  Greedy colouring in LIR
   order merges each Buffer with every later non-conflicting one.
2. *Clusters* (``DefineBufferClusters``).  A loop that reads Buffer A for the
   last time and writes Buffer B with the same access pattern (same pointer
   shifts in every loop, each element visited once, the read before the write in the
   body, same size) can write B in place over A: B joins A's cluster, unless
   another member of that cluster is still alive while B is.
3. *Memory* (``SolveBufferMemory``).  A cluster is alive from the start of the
   loop nest that writes it to the end of the last loop nest that reads it;
   clusters are placed largest first at the lowest 16-byte-aligned offset
   that does not overlap a placed cluster alive at the same time.

Simple mode gives every Buffer its own group, cluster and consecutive offset.

Expects: loops inserted and initialized (insert-loops, init-loops).
Guarantees: every Buffer has ``reg_group``, ``cluster`` and ``offset``; every
access to a Buffer carries its offset; the frame knows the scratchpad size.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Expression
from vpuc.fusion.lir.kinds import BUFFER, LOADS, STORE
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.loop_info import LoopPort

ALIGN = 16


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def buffer_of(lir: LinearIR, lp: LoopPort) -> Expression | None:
    """The Buffer a loop port accesses, if any."""
    expr = lp.port.expr
    if expr.kind in LOADS:
        source = expr.inputs[0].source.expr
        return source if source.kind == BUFFER else None
    if expr.kind == STORE:
        return next((c.expr for c in expr.outputs[0].consumers if c.expr.kind == BUFFER), None)
    return None


def _shifts(lp: LoopPort) -> tuple:
    if not lp.is_incremented:
        return (False,)
    return (True, lp.ptr_increment, lp.finalization_offset, lp.data_size)


def _moves(lp: LoopPort) -> bool:
    return lp.is_incremented and (lp.ptr_increment != 0 or lp.finalization_offset != 0)


class AllocateBuffersPass(LirPass):
    name = "allocate-buffers"

    def run(self, lir: LinearIR) -> bool:
        buffers = lir.exprs_of_kind(BUFFER)
        if not buffers:
            return False
        if lir.config.buffer_mode == "simple":
            offset = 0
            for i, buf in enumerate(buffers):
                buf.attrs.update(reg_group=i, cluster=i, offset=offset)
                offset = _align(offset + buf.attrs["size"])
            total = offset
        else:
            self._reg_groups(lir, buffers)
            clusters = self._clusters(lir, buffers)
            total = self._solve(lir, clusters)
        for expr in lir.exprs:
            if expr.kind in LOADS and expr.inputs[0].source.expr.kind == BUFFER:
                expr.attrs["offset"] = expr.inputs[0].source.expr.attrs["offset"]
            elif expr.kind == STORE:
                target = next((c.expr for c in expr.outputs[0].consumers
                               if c.expr.kind == BUFFER), None)
                if target is not None:
                    expr.attrs["offset"] = target.attrs["offset"]
        lir.frame.scratchpad_size = total
        return True

    # ---------------------------------------------------------------- 1. register groups
    @staticmethod
    def _reg_groups(lir: LinearIR, buffers: list[Expression]) -> None:
        n = len(buffers)
        index = {id(b): i for i, b in enumerate(buffers)}
        adj = [[i == j for j in range(n)] for i in range(n)]

        def conflict(a: Expression, b: Expression) -> None:
            i, j = index[id(a)], index[id(b)]
            adj[i][j] = adj[j][i] = True

        for info in lir.loops:
            neighbours: dict[int, LoopPort] = {}
            for lp in info.ports:
                buf = buffer_of(lir, lp)
                if buf is not None:
                    neighbours.setdefault(id(buf), lp)
            members = [b for b in buffers if id(b) in neighbours]
            inside = [b for b in buffers if info.id in b.loop_ids]
            for x, a in enumerate(members):
                for b in members[x + 1:]:
                    if _shifts(neighbours[id(a)]) != _shifts(neighbours[id(b)]):
                        conflict(a, b)
                if _moves(neighbours[id(a)]):
                    for b in inside:
                        if b is not a:
                            conflict(a, b)
        colour = [-1] * n
        current = 0
        for i in range(n):
            if colour[i] >= 0:
                continue
            colour[i] = current
            row = list(adj[i])
            for j in range(i + 1, n):
                if colour[j] < 0 and not row[j]:
                    colour[j] = current
                    row = [r or s for r, s in zip(row, adj[j])]
            current += 1
        for buf, c in zip(buffers, colour):
            buf.attrs["reg_group"] = c

    # ---------------------------------------------------------------- 2. clusters
    @staticmethod
    def _clusters(lir: LinearIR, buffers: list[Expression]) -> list[list[Expression]]:
        cluster_of = {id(b): [b] for b in buffers}
        for info in lir.loops:
            body = lir.loop_exprs(info.id)
            for store in (e for e in body if e.kind == STORE):
                target = next((c.expr for c in store.outputs[0].consumers
                               if c.expr.kind == BUFFER), None)
                if target is None:
                    continue
                for load in (e for e in body if e.kind in LOADS):
                    source = load.inputs[0].source.expr
                    if source.kind != BUFFER or source is target or \
                            cluster_of[id(source)] is cluster_of[id(target)]:
                        continue
                    # In place over ``source`` only; every other member must be dead by then.
                    span = _lifetime(lir, target)
                    others = [m for m in cluster_of[id(source)] if m is not source]
                    if _in_place(lir, source, target, load, store) and not any(
                            _overlap(_lifetime(lir, m), span) for m in others):
                        merged = cluster_of[id(source)] + cluster_of[id(target)]
                        for b in merged:
                            cluster_of[id(b)] = merged
        seen, clusters = set(), []
        for b in buffers:
            c = cluster_of[id(b)]
            if id(c[0]) not in seen:
                seen.add(id(c[0]))
                clusters.append(c)
        for n, cluster in enumerate(clusters):
            for b in cluster:
                b.attrs["cluster"] = n
        return clusters

    # ---------------------------------------------------------------- 3. memory
    @staticmethod
    def _solve(lir: LinearIR, clusters: list[list[Expression]]) -> int:
        boxes = []
        for cluster in clusters:
            spans = [_lifetime(lir, b) for b in cluster]
            size = _align(max(b.attrs["size"] for b in cluster))
            boxes.append((size, min(s for s, _ in spans), max(e for _, e in spans), cluster))
        placed: list[tuple[int, int, int, int]] = []     # offset, size, start, end
        for size, start, end, cluster in sorted(boxes, key=lambda b: (-b[0], b[1])):
            offset = 0
            for o, s, a, z in sorted(placed):
                if a <= end and start <= z and o < offset + size and offset < o + s:
                    offset = o + s
            placed.append((offset, size, start, end))
            for b in cluster:
                b.attrs["offset"] = offset
        return max((o + s for o, s, _, _ in placed), default=0)


def _lifetime(lir: LinearIR, buf: Expression) -> tuple[int, int]:
    """From the start of the loop nest that writes ``buf`` to the end of the last one reading it."""
    depth = len(buf.loop_ids)

    def nest_span(expr: Expression) -> tuple[int, int]:
        if len(expr.loop_ids) > depth:
            return lir.loop_bounds(expr.loop_ids[depth])
        pos = lir.position(expr)
        return pos, pos

    writer = buf.inputs[0].source.expr
    start = nest_span(writer)[0]
    readers = [p.expr for p in buf.outputs[0].consumers if p.expr.kind in LOADS]
    end = max((nest_span(r)[1] for r in readers), default=lir.position(buf))
    return start, end


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _in_place(lir: LinearIR, source: Expression, target: Expression, load: Expression,
              store: Expression) -> bool:
    if source.loop_ids != target.loop_ids or source.attrs["size"] != target.attrs["size"] \
            or source.attrs["elem"].nbytes != target.attrs["elem"].nbytes:
        return False
    readers = [p.expr for p in source.outputs[0].consumers if p.expr.kind in LOADS]
    if any(r.loop_ids != load.loop_ids for r in readers):
        return False              # read again elsewhere: overwriting it would lose data
    if any(lir.position(r) > lir.position(store) for r in readers):
        return False              # an element would be overwritten before it is read
    for info in lir.loops:
        a = info.find(load.input_port(0))
        b = info.find(store.output_port(0))
        if (a is None) != (b is None) or (a is not None and _shifts(a) != _shifts(b)):
            return False
        # A loop that walks the same elements again (a broadcast dim) would read back
        # what an earlier iteration wrote in place.
        if a is not None and not a.is_incremented and info.work_amount != 1:
            return False
    return True
