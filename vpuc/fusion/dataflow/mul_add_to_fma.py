"""mul-add-to-fma: ``Add(Multiply(a, b), c)`` becomes ``FMA(a, b, c)``.

One instruction (``vfma`` on SHAVE, ``vfmadd`` on x64) and one rounding instead
of two.  A target with fused multiply-add inserts this pass (a positioned pass).

Expects: any body.  Guarantees: every float Add with an operand produced by a
Multiply that nothing else reads is an FMA; the Multiply is removed.
"""

from __future__ import annotations

from vpuc.fusion.dataflow.base import DataflowContext, GraphPass
from vpuc.fusion.dataflow.rewrite import producer, remove_dead, users
from vpuc.ir.graph import Graph
from vpuc.ir.graph_ops import FLOAT_TYPES


class MulAddToFMA(GraphPass):
    name = "mul-add-to-fma"

    def run(self, body: Graph, ctx: DataflowContext) -> bool:
        changed = False
        for op in body.ops:
            if op.kind != "Add" or op.type.elem not in FLOAT_TYPES:
                continue
            for side in (0, 1):
                mul = producer(body, op.operands[side])
                if mul is None or mul.kind != "Multiply" or len(users(body, mul.result)) != 1:
                    continue
                if op.operands[0] == op.operands[1]:
                    break   # Add(m, m): the product is read twice
                other = op.operands[1 - side]
                op.kind, op.operands = "FMA", (mul.operands[0], mul.operands[1], other)
                changed = True
                break
        if changed:
            remove_dead(body)
        return changed
