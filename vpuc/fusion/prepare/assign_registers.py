"""assign-registers: physical registers for the abstract ones (OpenVINO's AssignRegisters).

Class by class (scalar ``gpr``, vector ``vec``, ``mask``), the live ranges are
coloured in order of their start: a range takes the first register of the
class's allocatable pool (``lir.config.registers``; ACT SHAVE's ABI-reserved
and emitter-scratch registers are never in it) whose previous range ended
before it starts, so ranges that do not overlap share a register.  This is
optimal for interval graphs: it needs exactly the pressure insert-reg-spills
guaranteed.  One exception to "ended before": a ``Copy`` takes over its
input's register when that input dies at the Copy (the emitter then emits
nothing).

Every port descriptor then holds a physical register (``s4``, ``v0``, ``m0``),
and every expression's ``live_regs`` lists the physical registers live across
it (written before it, read after it): an emitter needing scratch beyond its
reserved registers may use any pool register outside ``live_regs`` and its
own operands.

Expects: live ranges initialized and within budget (insert-reg-spills ran).
Guarantees: every register operand is physical; no two overlapping ranges share a register.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import Reg
from vpuc.fusion.lir.kinds import COPY
from vpuc.fusion.lir.linear_ir import LinearIR


class AssignRegistersPass(LirPass):
    name = "assign-registers"

    def run(self, lir: LinearIR) -> bool:
        ranges = lir.live_ranges
        regs = lir.config.registers
        physical: dict[Reg, Reg] = {}
        for cls in sorted({r.reg.cls for r in ranges}):
            pool = regs.pool(cls)
            active: list[tuple[int, int, Reg]] = []       # (end, physical index, abstract)
            for r in sorted((r for r in ranges if r.reg.cls == cls),
                            key=lambda r: (r.start, r.end, r.reg.index)):
                busy = set()
                still = []
                for end, phys, areg in active:
                    if end >= r.start:
                        still.append((end, phys, areg))
                        busy.add(phys)
                active = still
                chosen = self._coalesce(lir, r, physical, active)
                if chosen is None:
                    chosen = next((i for i in pool if i not in busy), None)
                if chosen is None:
                    where = lir.exprs[r.start]
                    raise VpucError(f"@{lir.name}: out of {cls} registers at e{where.id} "
                                    f"({len(pool)} allocatable); run insert-reg-spills first")
                active = [a for a in active if a[1] != chosen] + [(r.end, chosen, r.reg)]
                physical[r.reg] = Reg(cls, chosen, physical=True)
        for expr in lir.exprs:
            for desc in expr.in_descs + expr.out_descs:
                if desc.reg is not None and not desc.reg.physical:
                    desc.reg = physical[desc.reg]
        for p, expr in enumerate(lir.exprs):
            expr.live_regs = frozenset(physical[r.reg] for r in ranges if r.start < p < r.end)
        return bool(physical)

    @staticmethod
    def _coalesce(lir: LinearIR, r, physical, active) -> int | None:
        define = r.connectors[0].source.expr if r.role == "value" else None
        if define is None or define.kind != COPY:
            return None
        source = define.in_descs[0].reg
        for end, phys, areg in active:
            if areg == source and end == r.start:
                return phys
        return None
