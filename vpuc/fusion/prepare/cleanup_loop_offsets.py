"""cleanup-loop-offsets: fold finalization offsets into outer loops, drop dead ones.

Two rules (OpenVINO's CleanupLoopOffsets, generalized to pointer liveness):

1. A LoopEnd right before its outer loop's LoopEnd: the inner loop's
   finalization offset of a pointer and the outer loop's increment of the same
   pointer register are applied back to back, so the offset is folded into the
   outer increment (``outer_ptr * outer_increment + inner_fin``, divided back by
   the outer increment when that is exact; outer increments are 1 in practice)
   and the inner offset becomes 0.  A dense 2-D walk then has outer increment 0
   and no finalization at all: the inner loop already left the pointer at the
   next row.
2. A finalization offset of a top-level loop whose pointer register nothing
   after the LoopEnd uses is dead (it would only rewind a pointer the kernel no
   longer reads), e.g. every offset of the last loop before the Results.

Pointer registers are matched by memory (``in<i>``, ``out<j>``, a Buffer's
register group), so a tail loop's ports match the outer loop's ports on the
main body's accesses.

Expects: specific iterations inserted (the tail loop ends right before the outer LoopEnd).
Guarantees: no finalization offset that rule 1 or 2 can remove is left.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.controlflow.clean_repeated_data_pointer_shifts import pointer_key
from vpuc.fusion.lir.kinds import LOOP_END, MEMORY_ACCESS, STORE
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value


def _keys_used(lir: LinearIR, expr) -> set:
    if expr.kind == LOOP_END:
        return {pointer_key(lir, lp) for lp in lir.loops.get(expr.attrs["loop_id"]).ports}
    if expr.kind in MEMORY_ACCESS:
        return {pointer_key(lir, expr.input_port(0) if expr.kind != STORE else expr.output_port(0))}
    return set()


class CleanupLoopOffsetsPass(LirPass):
    name = "cleanup-loop-offsets"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        exprs = lir.exprs
        for i, expr in enumerate(exprs):
            if expr.kind != LOOP_END:
                continue
            info = lir.loops.get(expr.attrs["loop_id"])
            nxt = exprs[i + 1] if i + 1 < len(exprs) else None
            if nxt is not None and nxt.kind == LOOP_END:
                changed |= self._fold(lir, info, lir.loops.get(nxt.attrs["loop_id"]))
            if not expr.loop_ids:
                later = set().union(*(_keys_used(lir, e) for e in exprs[i + 1:]))
                for lp in info.ports:
                    if lp.finalization_offset != 0 and pointer_key(lir, lp) not in later:
                        lp.finalization_offset = Value(0)
                        changed = True
        return changed

    @staticmethod
    def _fold(lir: LinearIR, inner, outer) -> bool:
        changed = False
        for olp in outer.ports:
            if not olp.is_incremented:
                continue
            key = pointer_key(lir, olp)
            match = [lp for lp in inner.ports if lp.is_incremented and pointer_key(lir, lp) == key]
            if len(match) != 1 or match[0].data_size != olp.data_size \
                    or match[0].finalization_offset == 0:
                continue
            lp = match[0]
            inc = outer.increment.static
            if inc is None:
                continue
            total = olp.ptr_increment * inc + lp.finalization_offset
            if inc != 1 and not total.divides_exactly(inc):
                continue
            olp.ptr_increment = total // inc if inc != 1 else total
            lp.finalization_offset = Value(0)
            changed = True
        return changed
