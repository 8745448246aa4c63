"""pack-kernel-args: build each ACT SHAVE invocation's argument buffer.

Expects: assign-windows has run (kernel images exist, CMX offsets are final).
Guarantees: every sw task has an ``InvocationImage`` whose WIN_E bytes are
``[.data copy][params][dims/strides]``; the params struct follows the kernel's
declared contract byte for byte (MemRefData for memrefs, packed scalars, in
contract order; checked by decoding it back against the contract); memref
addresses are WIN_F addresses in the task's tile CMX, or, for an input left in DDR,
its address in the SHAVE's DDR aperture (``vpuc.abi.ddr_aperture``, which must end
within the 32-bit address space); dynamic memrefs point
their dims/strides at the tensor's shape metadata in WIN_F.  An invocation
whose image plus the SHAVE stack overflows WIN_E is an error.
"""

from __future__ import annotations

from vpuc.abi.contract import contract_slots
from vpuc.abi.ddr_aperture import ddr_aperture
from vpuc.abi.params import MemRefArg, ScalarArg, decode_params, layout_window_e
from vpuc.diagnostics import DiagnosticBag, VpucError
from vpuc.ir.module import Module
from vpuc.ir.symbols import Region, SymbolTable, buffer_footprint, shape_meta_offset
from vpuc.ir.tasks import Executor, SwKernelTask
from vpuc.passes.assign_windows import program_of
from vpuc.passes.base import ModulePass, PassContext
from vpuc.program import InvocationImage

DEFAULT_STACK_BYTES = 16384  # per SHAVE, when the module declares no runtime


def memref_arg(region: Region, win_f: int, ddr: dict[str, int] | None = None) -> MemRefArg:
    """The MemRefData of ``region``: in the tile's CMX at WIN_F, or at its root's address
    in the DDR aperture (``ddr``)."""
    if ddr is not None and region.root.name in ddr:
        return MemRefArg(ddr[region.root.name] + region.byte_offset, region.type.elem,
                         region.type.bound_shape, region.type.order.perm, region.strides_bits,
                         None)
    base = win_f + region.root.offset
    meta = None
    if not region.root.type.is_static:
        meta = base + shape_meta_offset(region.root)
    return MemRefArg(base + region.byte_offset, region.type.elem, region.type.bound_shape,
                     region.type.order.perm, region.strides_bits, meta)


class PackKernelArgsPass(ModulePass):
    name = "pack-kernel-args"

    def run(self, module: Module, ctx: PassContext) -> None:
        program = program_of(module, ctx)
        symbols = SymbolTable(module)
        kernels = {k.name: k for k in module.kernels}
        win_e, win_f = ctx.arch.window_base("WIN_E"), ctx.arch.window_base("WIN_F")
        bag = DiagnosticBag()
        ddr = ddr_aperture(module, ctx.arch.ddr_aperture, symbols.region)
        buffers = {b.name: b for b in module.buffers}
        for name, address in ddr.items():
            end = address + buffer_footprint(buffers[name])
            if end > 1 << 32:
                raise VpucError(f"%{name}, read from DDR by an ACT SHAVE kernel, would end at "
                                f"{end:#x} of the SHAVE's DDR aperture (from "
                                f"{ctx.arch.ddr_aperture:#x}, the DDR operands of all kernels "
                                "one after another), past the 32-bit address space "
                                "MemRefData.dataAddr holds", buffers[name].loc)
        program.invocations.clear()
        act = [tl for tl in module.task_lists if tl.executor is Executor.ACT_SHAVE]
        for task_index, task in enumerate(act[0].tasks if act else []):
            if not isinstance(task, SwKernelTask):
                continue
            kernel = kernels[task.kernel]
            image = program.kernels.get(task.kernel)
            if image is None:
                raise VpucError(f"pack-kernel-args: kernel @{task.kernel} has no image; "
                                "run assign-windows first")
            bound = {b.alias: b.buffer for b in task.inputs + task.outputs}
            consts = {c.name: c for c in task.consts}
            args: list[MemRefArg | ScalarArg] = []
            for arg, param in zip(task.run_args, kernel.params):
                if param.is_memref:
                    args.append(memref_arg(symbols.region(bound[arg]), win_f, ddr))
                else:
                    args.append(ScalarArg(param.scalar, consts[arg].value))
            try:
                layout = layout_window_e(image.data, args, win_e)
                # The guarantee: the struct decodes back against the contract.
                decode_params(contract_slots(kernel), layout.params.struct)
            except VpucError as exc:
                bag.error(task.loc, f"arguments of @{task.kernel}: {exc.diagnostics[0].message}")
                continue
            stack = self._stack_bytes(module, task.tile)
            if len(layout.image) + stack > ctx.arch.window_size:
                bag.error(task.loc, f"invocation of @{task.kernel} needs {len(layout.image)} "
                          f"bytes of WIN_E plus a {stack}-byte stack; the window has "
                          f"{ctx.arch.window_size}")
                continue
            program.invocations.append(InvocationImage(task_index, task.kernel, task.tile,
                                                       layout.image, layout.args_offset,
                                                       layout.args_size))
        bag.raise_if_errors()
        module.attributes["kernel-args"] = "packed"

    @staticmethod
    def _stack_bytes(module: Module, tile: int) -> int:
        if module.runtime is not None and tile < len(module.runtime.stacks):
            return module.runtime.stacks[tile]
        return DEFAULT_STACK_BYTES
