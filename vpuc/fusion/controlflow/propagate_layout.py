"""propagate-layout: hand the memory layouts to the kernel arguments (OpenVINO's PropagateLayout).

The kernel computes the address of its data from the MemRefData it receives,
so each argument must say how its memory is laid out.  Every Load and Store of
an argument must see the same memory layout; that layout goes onto the
Parameter's or Result's port descriptor, and the argument (``lir.io``) gets
the logical layout canonicalization chose for the port (``layout``, e.g.
NHWC or NCHW16c) and, for planar layouts, the MemRefData ``dimsOrder`` code of
its storage order (docs/shave-isa.md: one nibble per dim, outermost in the
highest nibble, logical dim + 1).  A blocked layout has no dimsOrder code (0):
the argument's memory shape is then the only description of its storage.

Expects: loads and stores inserted.
Guarantees: every kernel argument has a layout; Parameter/Result descriptors
carry the layout their accesses use.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.dataflow.layout import PortLayout
from vpuc.fusion.lir.kinds import MEMORY_ACCESS, PARAMETER, RESULT
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.ir.types import DimsOrder


def dims_order_code(layout: PortLayout) -> int:
    if layout.is_blocked:
        return 0
    code = 0
    for d in layout.perm:
        code = (code << 4) | (d + 1)
    return code


class PropagateLayoutPass(LirPass):
    name = "propagate-layout"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for mem in lir.exprs_of_kind(PARAMETER, RESULT):
            memory = mem.attrs["memory"]
            accesses = [e for e in lir.exprs
                        if e.kind in MEMORY_ACCESS and e.attrs["memory"] == memory]
            layouts = {(a.in_descs[0] if a.kind != "Store" else a.out_descs[0]).layout
                       for a in accesses}
            if len(layouts) > 1:
                raise VpucError(f"internal: the accesses of {memory} in @{lir.name} disagree on "
                                f"its layout: {sorted(layouts)}")
            desc = mem.out_descs[0] if mem.kind == PARAMETER else mem.in_descs[0]
            if layouts:
                desc.layout = layouts.pop()
            arg = lir.arg(memory)
            text = mem.attrs.get("layout")
            logical = PortLayout.parse(text) if text else PortLayout.planar(
                DimsOrder.identity(len(arg.shape)).perm)
            layout, code = str(logical), dims_order_code(logical)
            if (arg.layout, arg.dims_order) != (layout, code):
                arg.layout, arg.dims_order = layout, code
                changed = True
        return changed
