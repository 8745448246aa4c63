"""clean-repeated-data-pointer-shifts: move each pointer register once per loop.

A loop can have several ports on one pointer register: two Loads of the same
Parameter (insert-load-store makes one per reader), or Buffers of one register
group.  The LoopEnd would shift that register once per port, so all but the
first port become not incremented (zero increment and finalization offset).
Register identity is the memory: ``in<i>``/``out<j>``, or a Buffer's
``reg_group``; ports sharing a register have equal shifts (allocate-buffers
only groups such Buffers), so nothing is lost.

Expects: initialized loops; Buffer register groups assigned (allocate-buffers).
Guarantees: within every loop, at most one incremented port per pointer register.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import ExpressionPort
from vpuc.fusion.lir.kinds import BUFFER
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.loop_info import LoopPort
from vpuc.fusion.lir.values import Value


def pointer_key(lir: LinearIR, port: "LoopPort | ExpressionPort"):
    """What identifies the pointer register behind a loop port or an access's pointer port:
    its argument (``in0``, ``out1``), or its Buffer's register group."""
    if isinstance(port, LoopPort):
        port = port.port
    memory = port.expr.attrs.get("memory", "")
    if memory.startswith("buf"):
        buf = next((b for b in lir.exprs_of_kind(BUFFER) if b.attrs["memory"] == memory), None)
        return ("group", buf.attrs.get("reg_group", memory) if buf is not None else memory)
    return memory


class CleanRepeatedDataPointerShiftsPass(LirPass):
    name = "clean-repeated-data-pointer-shifts"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for info in lir.loops:
            seen = set()
            for lp in info.ports:
                key = pointer_key(lir, lp)
                if key not in seen:
                    seen.add(key)
                    continue
                if lp.is_incremented or lp.ptr_increment != 0 or lp.finalization_offset != 0:
                    lp.is_incremented = False
                    lp.ptr_increment = Value(0)
                    lp.finalization_offset = Value(0)
                    changed = True
        return changed
