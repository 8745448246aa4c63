"""convert-power-to-power-static: ``Power(x, Scalar)`` becomes ``PowerStatic{power}(x)``.

With the exponent known when the kernel is generated, the generator can emit
``x*x`` for 2, ``sqrt`` for 0.5, ``rcp`` for -1 instead of exp(log(x) * p).

Expects: Scalars (run after convert-constants-to-scalars).  Guarantees: every
Power whose exponent is a Scalar and which does not grow its base's shape is a
PowerStatic; Scalars left unread are removed.
"""

from __future__ import annotations

from vpuc.fusion.dataflow.base import DataflowContext, GraphPass
from vpuc.fusion.dataflow.rewrite import producer, remove_dead
from vpuc.ir.graph import SCALAR, Graph


class ConvertPowerToPowerStatic(GraphPass):
    name = "convert-power-to-power-static"

    def run(self, body: Graph, ctx: DataflowContext) -> bool:
        changed = False
        for op in body.ops:
            if op.kind != "Power":
                continue
            base, exponent = op.operands
            scalar = producer(body, exponent)
            base_type = producer(body, base).type
            # A Scalar of higher rank would broadcast the base: then the op is not unary.
            if scalar is None or scalar.kind != SCALAR or base_type.dims != op.type.dims:
                continue
            op.kind, op.operands = "PowerStatic", (base,)
            op.attrs = {"power": float(scalar.scalar_value())}
            changed = True
        if changed:
            remove_dead(body)
        return changed
