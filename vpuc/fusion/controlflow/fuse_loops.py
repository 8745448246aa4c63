"""fuse-loops: fuse a producer loop with its consumer loop (OpenVINO's FuseLoops).

Two loops at the same depth, inside the same outer loops, fuse when the lower
one reads a value the upper one produces and they are compatible: same dim,
same increment, and equal work amounts or one of them 1 (a loop that only
computes a broadcast value fuses into the full one and recomputes it every
iteration, which is cheaper than a round trip through memory).  The
expressions must become contiguous without breaking a data dependency, so
either the upper loop moves down to just above the lower one (no expression in
between reads it) or the lower loop moves up to just below the upper one (it
reads nothing computed in between).  Outer loops fuse first; their inner loops
then become siblings and fuse in turn.  Fusion repeats until nothing changes.

Expects: loops marked (mark-loops), no LoopBegin/LoopEnd, no Loads/Stores yet.
Guarantees: no pair of loops is left that could fuse; fused loops keep the
upper loop's id, the larger work amount and recomputed entry/exit ports.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.loop_info import LoopInfo


def can_be_fused(upper: LoopInfo, lower: LoopInfo) -> bool:
    work_ok = upper.work_amount == lower.work_amount or upper.work_amount == 1 \
        or lower.work_amount == 1
    return upper.dim_idx == lower.dim_idx and upper.increment == lower.increment and work_ok


class FuseLoopsPass(LirPass):
    name = "fuse-loops"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        while self._fuse_one(lir):
            changed = True
        return changed

    def _fuse_one(self, lir: LinearIR) -> bool:
        depth_max = max((len(e.loop_ids) for e in lir.exprs), default=0)
        for depth in range(depth_max):
            order: list[int] = []
            for e in lir.exprs:
                if len(e.loop_ids) > depth and e.loop_ids[depth] not in order:
                    order.append(e.loop_ids[depth])
            for lower in order:
                for upper in self._producer_loops(lir, depth, lower):
                    if can_be_fused(lir.loops.get(upper), lir.loops.get(lower)) and \
                            self._fuse(lir, depth, upper, lower):
                        return True
        return False

    @staticmethod
    def _producer_loops(lir: LinearIR, depth: int, lower: int) -> list[int]:
        found: list[int] = []
        for e in lir.exprs:
            if len(e.loop_ids) <= depth or e.loop_ids[depth] != lower:
                continue
            prefix = e.loop_ids[:depth]
            for source in e.input_sources():
                ids = source.loop_ids
                if len(ids) > depth and ids[:depth] == prefix and ids[depth] != lower \
                        and ids[depth] not in found:
                    found.append(ids[depth])
        return found

    @staticmethod
    def _fuse(lir: LinearIR, depth: int, upper: int, lower: int) -> bool:
        exprs = lir.exprs
        in_upper = [i for i, e in enumerate(exprs) if len(e.loop_ids) > depth
                    and e.loop_ids[depth] == upper]
        in_lower = [i for i, e in enumerate(exprs) if len(e.loop_ids) > depth
                    and e.loop_ids[depth] == lower]
        u0, u1, l0, l1 = in_upper[0], in_upper[-1], in_lower[0], in_lower[-1]
        if u1 > l0:
            return False
        up, middle, low = exprs[u0:u1 + 1], exprs[u1 + 1:l0], exprs[l0:l1 + 1]
        up_ids = {id(e) for e in up}
        mid_ids = {id(e) for e in middle}
        # Upper moves down: nothing in between may read it.
        down_ok = not any(id(s) in up_ids for e in middle for s in e.input_sources())
        # Lower moves up: it may read nothing computed in between.
        up_ok = not any(id(s) in mid_ids for e in low for s in e.input_sources())
        if down_ok:
            lir.exprs = exprs[:u0] + middle + up + low + exprs[l1 + 1:]
        elif up_ok:
            lir.exprs = exprs[:u0] + up + low + middle + exprs[l1 + 1:]
        else:
            return False
        for e in low:
            e.loop_ids[depth] = upper
        info_up, info_low = lir.loops.get(upper), lir.loops.get(lower)
        if info_up.work_amount == 1:
            info_up.work_amount = info_low.work_amount
        lir.loops.remove(lower)
        lir.refresh_loop_ports(upper)
        return True
