"""optimize-loop-single-evaluation: loops that run once have no back edge and no per-iteration shifts.

A loop whose work amount equals its increment (a tail, or a dim exactly one
vector wide, or a dim of 1 whose loop survived fusion) runs at most once.  Its
per-iteration pointer increments move into the finalization offsets
(``fin += ptr_increment * increment``, increments become 0) and the loop is
marked ``evaluate_once``: the emitter emits no counter, no ``loop``
instruction and no pointer arithmetic inside, only the finalization after the
body, and, if the loop ``may_be_empty`` (a run-time remainder), a branch over
the body when its work amount is 0 -- the finalization still runs, since it
also completes the main loop's pointer walk.

Expects: specific iterations inserted, offsets cleaned.
Guarantees: every loop with work == increment is ``evaluate_once`` with zero pointer increments.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value


class OptimizeLoopSingleEvaluationPass(LirPass):
    name = "optimize-loop-single-evaluation"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for info in lir.loops:
            if info.evaluate_once or info.work_amount != info.increment:
                continue
            for lp in info.ports:
                lp.finalization_offset = lp.finalization_offset + lp.ptr_increment * info.increment
                lp.ptr_increment = Value(0)
            info.evaluate_once = True
            changed = True
        return changed
