"""insert-load-store: explicit memory accesses between memory and vector registers.

Every read of a Parameter or Buffer becomes a ``Load`` placed right before the
reader, in the reader's loops (one Load per reading port, as OpenVINO does;
clean-repeated-data-pointer-shifts later makes sure their shared pointer moves
once).  Every value written to a Result or a Buffer gets a ``Store`` placed
right after its producer, in the producer's loops.  Loop entry and exit ports
move to the Loads' pointer inputs and the Stores' pointer outputs.

``count`` is the number of elements one access moves: the vector width, or 1
where the memory's innermost dim is 1 (a broadcast element).  ``memory``
names the argument or buffer (in<i>, out<j>, buf<k>); ``offset`` is a byte
offset added to the pointer (set for buffers by allocate-buffers).

Expects: loops marked and fused, buffers inserted.
Guarantees: Parameters and Buffers are read only by Loads (and LoopEnds),
Results and Buffers are written only by Stores; all loop ports are memory
accesses.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Node
from vpuc.fusion.lir.kinds import BUFFER, LOAD, LOOP_END, PARAMETER, RESULT, STORE
from vpuc.fusion.lir.linear_ir import LinearIR


def access_count(lir: LinearIR, memory_shape) -> int:
    return 1 if memory_shape[-1] == 1 else lir.increment


class InsertLoadStorePass(LirPass):
    name = "insert-load-store"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for mem in lir.exprs_of_kind(PARAMETER, BUFFER):
            conn = mem.outputs[0]
            for port in list(conn.consumers):
                if port.expr.kind in (LOAD, LOOP_END):
                    continue
                reader = port.expr
                node = Node(LOAD, {"count": access_count(lir, mem.out_descs[0].shape),
                                   "memory": mem.attrs["memory"], "offset": 0})
                lir.insert_node(node, [conn], [port.descriptor.clone()], lir.position(reader),
                                list(reader.loop_ids), consumers=[port],
                                names=[f"{conn.name}.v"],
                                in_descs=[mem.out_descs[0].clone()])
                changed = True
        for mem in lir.exprs_of_kind(RESULT, BUFFER):
            port = mem.input_port(0)
            value = port.connector
            producer = value.source.expr
            if producer.kind == STORE:
                continue
            node = Node(STORE, {"count": access_count(lir, port.descriptor.shape),
                                "memory": mem.attrs["memory"], "offset": 0})
            lir.insert_node(node, [value], [port.descriptor.clone()],
                            lir.position(producer) + 1, list(producer.loop_ids),
                            consumers=[port], names=[f"{value.name}.st"])
            changed = True
        return changed
