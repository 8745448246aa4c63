"""load-move-broadcast-to-broadcast-load: fuse Load(1 element) + MoveBroadcast into BroadcastLoad.

A one-element Load whose only reader is a MoveBroadcast in the same loops is
exactly what ``vldb.{b,h,w}`` does in one instruction (load one element into
every lane), so the pair becomes ``BroadcastLoad{count, memory, offset}``
reading the Load's pointer and producing the MoveBroadcast's value.  The loop
port on the Load's pointer moves to the BroadcastLoad.

Expects: Loads and MoveBroadcasts inserted (insert-broadcast-move ran).
Guarantees: no Load feeds only a MoveBroadcast.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Node
from vpuc.fusion.lir.kinds import BROADCAST_LOAD, LOAD, MOVE_BROADCAST
from vpuc.fusion.lir.linear_ir import LinearIR


class LoadMoveBroadcastToBroadcastLoadPass(LirPass):
    name = "load-move-broadcast-to-broadcast-load"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for move in lir.exprs_of_kind(MOVE_BROADCAST):
            load = move.inputs[0].source.expr
            if load.kind != LOAD or len(load.inputs) != 1 or load.attrs["count"] != 1 \
                    or len(load.outputs[0].consumers) != 1 or load.loop_ids != move.loop_ids:
                continue
            node = Node(BROADCAST_LOAD, {"count": lir.increment, "memory": load.attrs["memory"],
                                         "offset": load.attrs["offset"]})
            out = move.out_descs[0].clone()
            lir.replace_with_node([load, move], node, out_descs=[out])
            changed = True
        return changed
