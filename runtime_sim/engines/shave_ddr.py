"""What an ACT SHAVE invocation reads from DDR, and the cycles the cost model charges it.

A library kernel may read an input left in DDR (``vpuc/abi/ddr_aperture.py``); the
interpreter counts its instructions as if those loads hit the SHAVE's L1, and
``vpuc/cost/shave_ddr.py`` charges the misses: this module finds, per task, which
inputs are in DDR and what the kernel reads of them (its contract's shape rule), for
``ShaveEngine.ddr_cycles`` and the bound (``runtime_sim/bound_input.py``).
"""

from __future__ import annotations

from typing import Callable

from vpuc.cost.shave_ddr import DdrRead, ddr_read_cycles, library_ddr_read
from vpuc.ir.module import BufferKind, KernelDecl
from vpuc.ir.tasks import SwKernelTask
from vpuc.kernel_contracts import library_contract


def task_ddr_reads(task: SwKernelTask, kernel: KernelDecl | None,
                   region: Callable) -> list[DdrRead]:
    """The DDR reads of ``task``'s inputs left in DDR (empty when all are in CMX).
    ``region``: a name -> Region function."""
    bound = {b.alias: b.buffer for b in task.inputs + task.outputs}
    inputs = {b.alias for b in task.inputs}
    if kernel is None:
        return []
    regions, ddr = {}, []
    for arg, param in zip(task.run_args, kernel.params):
        if not param.is_memref or arg not in bound:
            continue
        found = region(bound[arg])
        if found is None:
            continue
        regions[param.name] = found
        if arg in inputs and found.kind is not BufferKind.CMX:
            ddr.append(param.name)
    if not ddr:
        return []
    contract = library_contract(kernel.source.ref) if kernel.source.kind.value == "library" \
        else None
    rule = contract.shapes if contract is not None else None
    dims = {name: r.type.bound_shape for name, r in regions.items()}
    return [library_ddr_read(rule, name, dims, regions[name].type.elem.nbytes) for name in ddr]


def task_ddr_cycles(reads: list[DdrRead], latency: float, ddr_bytes_per_cycle: float) -> float:
    """NCE cycles of a task's DDR reads (one after another: the kernel is in order)."""
    return sum(ddr_read_cycles(r, latency, ddr_bytes_per_cycle) for r in reads)
