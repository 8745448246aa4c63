"""insert-buffers: put a Buffer where a value crosses from one loop nest into another.

After fuse-loops, a value computed in one innermost loop and read in a
different one cannot stay in a register: the producer's loop finishes before
the consumer's starts.  Such a value goes through a ``Buffer``, a piece of the
kernel's scratchpad.  The Buffer sits in the loops the producer and all its
outside consumers share (their common outer loops), right after the
producer's loop nest.  Its allocation covers only the dims the remaining
(unshared) loops walk: along a shared loop's dim the buffer holds one slice
and is reused every iteration, so that dim is 1 in its ``allocation_shape``.
Its size in bytes uses the upper bound of run-time dims.

Expects: fused loops, no Loads/Stores yet.
Guarantees: every value read by a computing expression comes from the same
innermost loop, a Scalar, a Parameter or a Buffer; each Buffer has
``memory`` = buf<k>, ``allocation_shape``, ``elem`` and ``size``.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.controlflow.mark_loops import runs_in_loops
from vpuc.fusion.lir.expression import Node, PortDescriptor
from vpuc.fusion.lir.kinds import BUFFER
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value, product


def common_prefix(lists: list[list[int]]) -> list[int]:
    out = []
    for items in zip(*lists):
        if any(x != items[0] for x in items):
            break
        out.append(items[0])
    return out


class InsertBuffersPass(LirPass):
    name = "insert-buffers"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        count = len(lir.exprs_of_kind(BUFFER))
        for expr in list(lir.exprs):
            if not runs_in_loops(expr):
                continue
            for port in expr.output_ports():
                outside = [c for c in port.connector.consumers
                           if runs_in_loops(c.expr) and c.expr.loop_ids != expr.loop_ids]
                if not outside:
                    continue
                self._insert(lir, port, outside, count)
                count += 1
                changed = True
        return changed

    @staticmethod
    def _insert(lir: LinearIR, port, outside, number: int) -> None:
        producer = port.expr
        shared = common_prefix([producer.loop_ids] + [c.expr.loop_ids for c in outside])
        value = port.descriptor
        alloc = list(value.shape)
        for lid in shared:
            alloc[lir.rank - 1 - lir.loops.get(lid).dim_idx] = Value(1)
        size = product(alloc).evaluate(lir.dim_bounds) * value.elem.nbytes
        # Right after the producer's loop nest at the first depth it does not share.
        nest = producer.loop_ids[:len(shared) + 1]
        after = max(i for i, e in enumerate(lir.exprs) if e.loop_ids[:len(nest)] == nest)
        memory = f"buf{number}"
        node = Node(BUFFER, {"memory": memory, "allocation_shape": tuple(alloc),
                             "elem": value.elem, "size": size})
        out = PortDescriptor(tuple(alloc), value.elem)
        lir.insert_node(node, [port.connector], [out], after + 1, list(shared),
                        consumers=list(outside), names=[f"{port.connector.name}.buf"],
                        in_descs=[out.clone()])
