"""assign-windows: place kernel code in WIN_D, invocation data in WIN_E, buffers in WIN_F.

Expects: a verified module whose CMX buffers all have offsets (allocate-cmx) and whose
graph blocks are lowered (lower-graph; one left is an error at the block).
Guarantees: every declared kernel used by a task has a ``KernelImage`` in the
program, linked once for its windows (``.text`` at WIN_D + 0, ``.rodata``
after it, ``.data`` at WIN_E + 0, as the runtime re-points WIN_D/WIN_E per
invocation); each kernel fits WIN_D; each CMX buffer (with its dynamic-shape
metadata) fits the WIN_F window of its tile.  Overflows are errors naming the
kernel or buffer and the bytes over.
"""

from __future__ import annotations

from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.tasks import SwKernelTask
from vpuc.ir.symbols import buffer_footprint
from vpuc.kernel_sources import load_kernel_object
from vpuc.passes.base import ModulePass, PassContext
from vpuc.program import KernelImage, Program
from vpuc.shave import link_kernel, rodata_address


def program_of(module: Module, ctx: PassContext) -> Program:
    program = ctx.artifacts.get("program")
    if program is None or program.module is not module:
        program = Program(module, ctx.arch)
        ctx.artifacts["program"] = program
    return program


def _entry(obj, kernel) -> int:
    """The entry point: the only global function, or the one named like the kernel."""
    if len(obj.entry_points) == 1:
        return obj.entry_offset()
    name = kernel.source.ref if kernel.source.kind.value == "library" else kernel.name
    return obj.entry_offset(name)


class AssignWindowsPass(ModulePass):
    name = "assign-windows"

    def run(self, module: Module, ctx: PassContext) -> None:
        bag = DiagnosticBag()
        for graph in module.graphs:     # the program would run its tasks without the graph's
            bag.error(graph.loc, f"graph block @{graph.name} is not lowered to tasks; run "
                      "lower-graph before assign-windows (the pipeline that `vpuc compile` and "
                      "vpuc.api.compile run puts it first)")
        bag.raise_if_errors()
        program = program_of(module, ctx)
        window = ctx.arch.window_size
        used = {t.kernel for tl in module.task_lists for t in tl.tasks
                if isinstance(t, SwKernelTask)}
        if module.runtime is not None:
            used.add(module.runtime.kernel)
        for kernel in module.kernels:
            if kernel.name not in used:
                continue
            obj = load_kernel_object(kernel, ctx.artifacts.get("generated-kernels"))
            win_d, win_e = ctx.arch.window_base("WIN_D"), ctx.arch.window_base("WIN_E")
            rodata_at = rodata_address(obj, win_d)
            text, rodata, data = link_kernel(obj, win_d, rodata_at, win_e)
            size = rodata_at - win_d + len(rodata)
            if size > window:
                bag.error(kernel.loc, f"kernel @{kernel.name} needs {size} bytes of WIN_D "
                          f"(.text + .rodata); the window has {window}, {size - window} over")
            elf = obj.to_elf()
            program.kernels[kernel.name] = KernelImage(
                kernel.name, str(kernel.source), elf, text, rodata, data,
                _entry(obj, kernel), rodata_at - win_d, obj.graph, obj.tags, (elf, obj))
        for buffer in module.buffers:
            if buffer.kind is BufferKind.CMX and buffer.offset is not None:
                end = buffer.offset + buffer_footprint(buffer)
                if end > window:
                    bag.error(buffer.loc, f"%{buffer.name} ends at WIN_F + {end:#x}, past the "
                              f"{window:#x}-byte window by {end - window} bytes")
        bag.raise_if_errors()
        module.attributes["windows"] = "assigned"
