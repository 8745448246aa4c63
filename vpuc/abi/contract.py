"""A declared kernel's contract as the params struct lays it out.

``contract_slots(kernel)`` turns a ``KernelDecl`` (plain IR data) into the
``ContractSlot`` list that ``vpuc.abi.params`` packs and decodes.  It lives in
the ABI layer because the compiler (``pack-kernel-args``), the blob inspector,
the program printer and the simulator (``runtime_sim.kernel_check``,
``kernel_profile``) all need it, and the simulator must not import passes.
"""

from __future__ import annotations

from vpuc.abi.params import ContractSlot


def contract_slots(kernel) -> list[ContractSlot]:
    """One slot per declared parameter, in contract order."""
    return [ContractSlot(p.name, p.is_memref, p.memref.elem if p.is_memref else p.scalar,
                         p.memref.rank if p.is_memref else None) for p in kernel.params]
