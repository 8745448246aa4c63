"""insert-reg-spills: spill registers to the stack when a class runs out.

With inclusive live ranges, interval colouring needs exactly as many registers
as the largest number of ranges live at one position (the *pressure*), so the
pass works on pressure alone, class by class, against the allocatable pool of
the target's register file (``lir.config.registers``):

- vector and mask values: at the first position over budget, the value live
  there (neither written nor read by that expression) whose range reaches
  furthest is spilled everywhere: a ``Spill{slot, cls}`` right after its
  definition stores it, and a ``Reload{slot, cls}`` right before each reader
  (in the reader's loops: a Scalar spilled outside a loop is reloaded every
  iteration) gives that reader a short-lived copy;
- scalar registers: pointers are never spilled; the trip counters of the
  outermost loops move to the stack instead (``LoopInfo.counter_slot``: the
  emitter decrements it in memory through a temporary).

Slots are ``spill_bytes`` wide per class (16 for a vector) in the frame's
spill area (``lir.frame.spill_size``).  An expression that alone needs more
registers than the budget (inputs plus outputs) is an error.

Expects: live ranges initialized.
Guarantees: no class's pressure exceeds its pool; live ranges are current.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.expression import GPR, MASK, VEC, Node
from vpuc.fusion.lir.kinds import RELOAD, SPILL
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.prepare.liveness import LiveRange, compute_live_ranges, pressure


class InsertRegSpillsPass(LirPass):
    name = "insert-reg-spills"

    def run(self, lir: LinearIR) -> bool:
        regs = lir.config.registers
        changed = False
        for _ in range(8 * len(lir.exprs) + 8):
            ranges = compute_live_ranges(lir)
            lir.live_ranges = ranges
            over = self._first_over(lir, ranges, regs)
            if over is None:
                return changed
            cls, p = over
            if cls == GPR:
                self._spill_counter(lir, ranges, p, len(regs.pool(GPR)))
            else:
                self._spill_value(lir, ranges, cls, p, len(regs.pool(cls)))
            changed = True
        raise VpucError(f"internal: insert-reg-spills did not converge on @{lir.name}")

    @staticmethod
    def _first_over(lir: LinearIR, ranges, regs):
        n = len(lir.exprs)
        best = None
        for cls in (GPR, VEC, MASK):
            budget = len(regs.pool(cls))
            for p, count in enumerate(pressure(ranges, cls, n)):
                if count > budget:
                    if best is None or p < best[1]:
                        best = (cls, p)
                    break
        return best

    @staticmethod
    def _slot(lir: LinearIR, cls: str) -> int:
        size = lir.config.registers.spill_bytes.get(cls, 16)
        offset = -(-lir.frame.spill_size // size) * size
        lir.frame.spill_size = offset + size
        return offset

    def _spill_counter(self, lir: LinearIR, ranges, p: int, budget: int) -> None:
        counters = [r for r in ranges if r.role == "counter" and r.live_at(p)]
        if not counters:
            raise VpucError(f"@{lir.name} needs more than {budget} scalar registers for its "
                            "data pointers alone; the tokenizer's data-pointer limit should "
                            "prevent this")
        victim = max(counters, key=lambda r: (r.end - r.start, -r.start))
        begin = victim.connectors[0].source.expr
        lir.loops.get(begin.attrs["loop_id"]).counter_slot = self._slot(lir, GPR)

    def _spill_value(self, lir: LinearIR, ranges, cls: str, p: int, budget: int) -> None:
        expr = lir.exprs[p]
        touched = {id(c) for c in expr.inputs} | {id(c) for c in expr.outputs}
        candidates = [r for r in ranges if r.reg.cls == cls and r.role == "value"
                      and r.live_at(p) and r.start != p
                      and not any(id(c) in touched for c in r.connectors)]
        if not candidates:
            raise VpucError(f"@{lir.name}: e{expr.id} ({expr.kind}) alone needs more than "
                            f"{budget} {cls} registers")
        victim: LiveRange = max(candidates, key=lambda r: (r.end, r.end - r.start))
        value = victim.connectors[0]
        define = value.source.expr
        slot = self._slot(lir, cls)
        spill = lir.create_expression(Node(SPILL, {"slot": slot, "cls": cls}), [value], [],
                                      list(define.loop_ids))
        lir.insert(lir.position(define) + 1, spill)
        for port in list(value.consumers):
            if port.expr is spill:
                continue
            desc = value.source.descriptor.clone()
            desc.reg = None
            reload = lir.create_expression(Node(RELOAD, {"slot": slot, "cls": cls}), [], [desc],
                                           list(port.expr.loop_ids), names=[f"{value.name}.r"])
            lir.insert(lir.position(port.expr), reload)
            lir.set_input(port, reload.outputs[0])
