"""init-loops: the data pointer shifts of every loop port (OpenVINO's InitLoops).

For a loop over dim ``d`` (counted from the innermost) and a port whose memory
has shape ``S`` (outermost first; a Buffer's allocation shape):

- the port is not incremented if ``S`` is 1 along ``d`` (the loop broadcasts
  it: every iteration reads the same elements);
- otherwise ``ptr_increment`` is the dense stride of ``d``, the product of
  ``S``'s inner dims, in elements, and ``finalization_offset`` is
  ``-ptr_increment * work_amount``, which returns the pointer to where the
  loop found it so that the enclosing loop can step from there;
- ``data_size`` is the element size in bytes.

Strides of run-time dims stay symbolic (``16*D2``).

Expects: every loop port is a Load's pointer input or a Store's pointer output
(insert-load-store ran).
Guarantees: every loop is ``initialized``.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.kinds import MEMORY_ACCESS
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.loop_info import LoopInfo, LoopPort
from vpuc.fusion.lir.values import Value, product


def init_port(lp: LoopPort, info: LoopInfo) -> None:
    desc = lp.port.descriptor
    k = desc.rank - 1 - info.dim_idx
    lp.data_size = desc.elem.nbytes
    if desc.shape[k] == 1:
        lp.is_incremented = False
        lp.ptr_increment = Value(0)
        lp.finalization_offset = Value(0)
    else:
        lp.is_incremented = True
        lp.ptr_increment = product(desc.shape[k + 1:])
        lp.finalization_offset = -lp.ptr_increment * info.work_amount


class InitLoopsPass(LirPass):
    name = "init-loops"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for info in lir.loops:
            if info.initialized:
                continue
            for lp in info.ports:
                if lp.port.expr.kind not in MEMORY_ACCESS:
                    raise VpucError(f"internal: loop {info.id} of @{lir.name} has the port "
                                    f"{lp.port} on a {lp.port.expr.kind}; init-loops needs "
                                    "memory accesses (run insert-load-store first)")
                init_port(lp, info)
            info.initialized = True
            changed = True
        return changed
