"""Where an ACT SHAVE addresses the memref operands a library kernel reads from DDR.

On NPU37XX a SW kernel's buffer may stay in DDR when it does not fit CMX (Intel's
37XX ``AddSwKernelCacheHandlingOps`` pass, npu_compiler
``src/vpux_compiler/src/NPU37XX/dialect/VPUIP/transforms/passes/
add_sw_kernel_cache_handling_ops.cpp``, surrounds a ``VPUIP.SW.Kernel`` with DDR
inputs or outputs by cache invalidate and flush kernels): the SHAVE reads DDR through
its L1 data cache and the shared NN L2 cache, at DDR addresses, not through a window.

vpuc lays those operands out in an aperture of the SHAVE's address space starting at
``Arch.ddr_aperture``: every DDR root a sw task binds, in the module's buffer order,
at the next ``ALIGN``-byte boundary.  The layout is a function of the module alone, so
the compiler (``pack-kernel-args`` writes these addresses into MemRefData.dataAddr),
a program read back from a blob and the simulator (which maps each root's bytes
there) agree without the blob carrying it.
"""

from __future__ import annotations

from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable, buffer_footprint
from vpuc.ir.tasks import SwKernelTask

ALIGN = 64          # a cache line (the assumed L1 data-cache line, vpuc/cost/shave_ddr.py)


def ddr_operand_roots(module: Module, region=None) -> list[str]:
    """The DDR roots some sw task binds, in the module's buffer order.  ``region``:
    a name -> Region function (a SymbolTable's by default)."""
    region = region or SymbolTable(module).region
    bound = set()
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if not isinstance(task, SwKernelTask):
                continue
            for binding in task.inputs + task.outputs:
                found = region(binding.buffer)
                if found is not None and found.kind is not BufferKind.CMX:
                    bound.add(found.root.name)
    return [b.name for b in module.buffers if b.name in bound]


def ddr_aperture(module: Module, base: int, region=None) -> dict[str, int]:
    """Root name -> the address of its first byte in the aperture at ``base``."""
    buffers = {b.name: b for b in module.buffers}
    addresses, at = {}, base
    for name in ddr_operand_roots(module, region):
        at += -at % ALIGN
        addresses[name] = at
        at += buffer_footprint(buffers[name])
    return addresses

