"""insert-loops: explicit LoopBegin and LoopEnd around every loop (OpenVINO's InsertLoops).

``LoopBegin{loop_id}`` goes right before a loop's first expression and
produces the loop's trip counter (a scalar register); ``LoopEnd{loop_id}`` goes
right after its last expression and reads the data pointer of every loop port
(entries, then exits, in the loop info's order) followed by the counter.  Both
run in the enclosing loops.  The loop info (``lir.loops``) stays the single
source of the numbers the emitter needs: work amount, increment, and per port
the pointer increment, finalization offset and data size.

Expects: initialized loops whose expressions are contiguous.
Guarantees: every loop is enclosed by its LoopBegin and LoopEnd, outer loops
around inner ones.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Node, PortDescriptor
from vpuc.fusion.lir.kinds import LOOP_BEGIN, LOOP_END
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.ir.types import ElemType


def insert_loop_markers(lir: LinearIR, loop_id: int) -> None:
    body = lir.loop_exprs(loop_id)
    outer = body[0].loop_ids[:body[0].loop_ids.index(loop_id)]
    first, last = lir.position(body[0]), lir.position(body[-1])
    counter = PortDescriptor((), ElemType.I32)
    begin = lir.create_expression(Node(LOOP_BEGIN, {"loop_id": loop_id}), [], [counter],
                                  list(outer), names=[f"L{loop_id}.n"])
    lir.insert(first, begin)
    info = lir.loops.get(loop_id)
    pointers = [lp.port.connector for lp in info.ports]
    end = lir.create_expression(Node(LOOP_END, {"loop_id": loop_id}),
                                pointers + [begin.outputs[0]], [], list(outer))
    lir.insert(last + 2, end)


class InsertLoopsPass(LirPass):
    name = "insert-loops"

    def run(self, lir: LinearIR) -> bool:
        depth: dict[int, int] = {}
        for e in lir.exprs:
            for d, lid in enumerate(e.loop_ids):
                depth.setdefault(lid, d)
        done = {e.attrs["loop_id"] for e in lir.exprs_of_kind(LOOP_BEGIN)}
        todo = sorted((lid for lid in depth if lid not in done), key=lambda lid: (depth[lid], lid))
        for lid in todo:
            insert_loop_markers(lir, lid)
        return bool(todo)
