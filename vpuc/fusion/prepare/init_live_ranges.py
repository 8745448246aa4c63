"""init-live-ranges: an abstract register and a live range for every value (OpenVINO's InitLiveRanges).

Every output port descriptor gets an abstract register of its class (``gpr``
for data pointers and loop counters, ``vec`` for vector values, ``mask`` for
masks), and every input descriptor the register of the value it reads.  The
ranges (``lir.live_ranges``, see ``liveness.py`` for the rules: pointers span
the kernel, values used inside a loop that does not define them live to its
LoopEnd) are what insert-reg-spills and assign-registers work from.

Expects: the final control flow (specific iterations inserted, masks present).
Guarantees: every register operand has an abstract register; ``lir.live_ranges`` is current.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.prepare.liveness import compute_live_ranges


class InitLiveRangesPass(LirPass):
    name = "init-live-ranges"

    def run(self, lir: LinearIR) -> bool:
        lir.live_ranges = compute_live_ranges(lir)
        return bool(lir.live_ranges)
