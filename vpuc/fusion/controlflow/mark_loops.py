"""mark-loops: group expressions into loop nests (OpenVINO's MarkLoops).

Walks the LIR and collects maximal runs of consecutive expressions where each
one reads the previous one through ports that agree (same layout and
subtensor).  A run ends at an expression that does not read its predecessor
(a new branch) or at one that never runs in a loop (Parameter, Result,
Scalar).  Every run gets a loop nest: one loop per master dim that is not a
static 1, outermost first.  A loop's work amount is the broadcast of the run's
exit ports and of their readers outside the run along its dim (so a run that
only computes a broadcast value gets work 1 there, and one that feeds a wider
Result walks the whole Result); the innermost dim's increment is the vector width
(``lir.increment``), every other increment is 1.

Expects: a LIR without loops (optimize-domain may have run).
Guarantees: every computing expression has ``loop_ids`` (outermost first); the
loop infos list each run's entry and exit ports in order; port subtensors say
how many innermost elements one emission handles (the vector width, or 1
where the port broadcasts the innermost dim).
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Expression, ExpressionPort
from vpuc.fusion.lir.kinds import BUFFER, LOOP_MARKERS, OUTSIDE_LOOPS
from vpuc.fusion.lir.linear_ir import LinearIR, io_ports
from vpuc.fusion.lir.values import Value


def runs_in_loops(expr: Expression) -> bool:
    return expr.kind not in OUTSIDE_LOOPS and expr.kind not in LOOP_MARKERS and expr.kind != BUFFER


def _conflicted(consumer: ExpressionPort, source: ExpressionPort) -> bool:
    a, b = consumer.descriptor, source.descriptor
    return a.layout != b.layout or (a.subtensor and b.subtensor and a.subtensor != b.subtensor)


class MarkLoopsPass(LirPass):
    name = "mark-loops"

    def run(self, lir: LinearIR) -> bool:
        exprs = list(lir.exprs)
        marked = False
        i = 0
        while i < len(exprs):
            if not runs_in_loops(exprs[i]) or exprs[i].loop_ids:
                i += 1
                continue
            j = i + 1
            while j < len(exprs) and runs_in_loops(exprs[j]) and not exprs[j].loop_ids:
                prev, cur = exprs[j - 1], exprs[j]
                reads = [p for p in cur.input_ports() if p.connector.source.expr is prev]
                if not reads or any(_conflicted(p, p.connector.source) for p in reads):
                    break
                j += 1
            mark_loop(lir, exprs[i:j])
            marked = True
            i = j
        return marked


def mark_loop(lir: LinearIR, run: list[Expression]) -> list[int]:
    """Give ``run`` a loop nest over the master dims; returns the loop ids, outermost first."""
    entries, exits = io_ports(run)
    # What leaves the loop decides its extent, including where it is read: a Result wider
    # than its value (the store broadcasts) makes the loop walk the whole output.
    inside = {id(e) for e in run}
    shapes = [p.descriptor.shape for p in exits] + [
        c.descriptor.shape for p in exits for c in p.connector.consumers if id(c.expr) not in inside]
    shapes = shapes or [d.shape for e in run for d in e.out_descs]
    ids = []
    for k, size in enumerate(lir.master_shape):
        if size == 1:
            continue
        dim_idx = lir.rank - 1 - k
        work = size if any(s[k] != 1 for s in shapes) else Value(1)
        increment = lir.increment if dim_idx == 0 else 1
        ids.append(lir.loops.add(dim_idx, work, increment, entries, exits).id)
    for expr in run:
        expr.loop_ids = list(ids)
        for desc in expr.in_descs + expr.out_descs:
            desc.subtensor = (1 if desc.shape[-1] == 1 else lir.increment,)
    return ids
