"""insert-broadcast-move: a MoveBroadcast where an operand is 1 along the innermost dim.

Numpy broadcasting along outer dims costs nothing (the loops do not move that
operand's pointer), but along the innermost dim an operand holds one element
while its partner holds a vector: the element must fill every lane first.  For
every expression with several inputs (and every Store, whose memory may be
wider than the value), an input whose innermost extent is 1 where another's is
not gets a ``MoveBroadcast{dim}`` right before the expression.  Scalars need
none: they already fill every lane.

Expects: loads and stores inserted.
Guarantees: the inputs of every expression agree on the innermost extent
(Scalars aside), and a Store's value is as wide as its memory.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Node
from vpuc.fusion.lir.kinds import MOVE_BROADCAST, SCALAR, STORE, is_compute
from vpuc.fusion.lir.linear_ir import LinearIR


class InsertBroadcastMovePass(LirPass):
    name = "insert-broadcast-move"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for expr in list(lir.exprs):
            if expr.kind == STORE:
                widths = [expr.in_descs[0].shape[-1], expr.out_descs[0].shape[-1]]
            elif is_compute(expr) and len(expr.inputs) >= 2:
                widths = [d.shape[-1] for d in expr.in_descs]
            else:
                continue
            target = next((w for w in widths if w != 1), None)
            if target is None:
                continue
            for i, conn in enumerate(list(expr.inputs)):
                if expr.in_descs[i].shape[-1] != 1 or conn.source.expr.kind == SCALAR:
                    continue
                out = expr.in_descs[i].clone()
                out.shape = out.shape[:-1] + (target,)
                out.subtensor = (lir.increment,)
                lir.insert_node(Node(MOVE_BROADCAST, {"dim": target}), [conn], [out],
                                lir.position(expr), list(expr.loop_ids),
                                consumers=[expr.input_port(i)], names=[f"{conn.name}.bc"])
                expr.in_descs[i] = out.clone()
                changed = True
        return changed
