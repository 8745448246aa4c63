"""convert-constants-to-scalars: one-element Constants become Scalars.

A ``Scalar`` is a value the generator materialises inside the kernel (a
``vbcast`` of an immediate on SHAVE) instead of loading it from memory.

Expects: any body.  Guarantees: no Constant with one element is left; type
and value are kept.
"""

from __future__ import annotations

from vpuc.fusion.dataflow.base import DataflowContext, GraphPass
from vpuc.ir.graph import CONSTANT, SCALAR, Graph


class ConvertConstantsToScalars(GraphPass):
    name = "convert-constants-to-scalars"

    def run(self, body: Graph, ctx: DataflowContext) -> bool:
        changed = False
        for op in body.ops:
            if op.kind == CONSTANT and op.is_scalar_constant:
                op.kind = SCALAR
                changed = True
        return changed
