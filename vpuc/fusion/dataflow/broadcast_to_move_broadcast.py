"""broadcast-to-move-broadcast: explicit Broadcasts become MoveBroadcasts, or vanish.

Broadcasting along outer dims costs nothing in a kernel: the loops simply do
not advance that input's pointer.  Only stretching the *innermost* dim needs
an instruction, which fills a vector with one element (``vbcast``/``vldb``):
``MoveBroadcast``.  So a Broadcast that stretches the innermost dim becomes a
MoveBroadcast to that size, and any other Broadcast is removed (its readers
broadcast implicitly).  A Result keeps its type, so an output still has the
full shape: the store broadcasts.

Expects: a canonical body (innermost = the memory's innermost dim).
Guarantees: no Broadcast op is left.
"""

from __future__ import annotations

from vpuc.fusion.dataflow.base import DataflowContext, GraphPass
from vpuc.fusion.dataflow.rewrite import producer, remove_dead, replace_uses
from vpuc.ir.graph import Graph
from vpuc.verifier.graph import infer_graph


class BroadcastToMoveBroadcast(GraphPass):
    name = "broadcast-to-move-broadcast"

    def run(self, body: Graph, ctx: DataflowContext) -> bool:
        changed = False
        for op in list(body.ops):
            if op.kind != "Broadcast":
                continue
            source = producer(body, op.operands[0]).type
            inner = source.dims[-1] if source.rank else 1
            target = op.attrs["shape"][-1] if op.attrs["shape"] else 1
            if inner != target:
                op.kind, op.attrs = "MoveBroadcast", {"dim": target}
            else:
                replace_uses(body, op.result, op.operands[0])
            changed = True
        if changed:
            remove_dead(body)
            infer_graph(body)
        return changed
