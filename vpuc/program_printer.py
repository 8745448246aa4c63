"""Print what the kernel passes decided: kernel images and decoded invocation args.

Appended to the printed VIR as ``//`` comments, so the output of ``vpuc opt``
still parses.  Each invocation's params are decoded against the kernel's
contract: every MemRefData field, the dims and strides it points to (when they
sit in WIN_E), and the scalars.
"""

from __future__ import annotations

from vpuc.abi.dtypes import data_type
from vpuc.abi.memref import MemRefData, unpack_dims, unpack_strides
from vpuc.abi.params import decode_params
from vpuc.abi.contract import contract_slots
from vpuc.program import Program


def describe_memref(memref: MemRefData, window_e: bytes, win_e_base: int) -> list[str]:
    try:
        dtype = data_type(memref.dataType).name
    except Exception:
        dtype = f"code {memref.dataType}"
    lines = [f"dataAddr={memref.dataAddr:#x} isStatic={memref.isStatic} numDims={memref.numDims} "
             f"dimsAddr={memref.dimsAddr:#x} stridesAddr={memref.stridesAddr:#x} "
             f"dataType={memref.dataType} ({dtype}) dimsOrder={memref.dimsOrder:#x}"]
    dims_at, strides_at = memref.dimsAddr - win_e_base, memref.stridesAddr - win_e_base
    if memref.isStatic and 0 <= dims_at and strides_at + 8 * memref.numDims <= len(window_e):
        dims = unpack_dims(window_e, memref.numDims, dims_at)
        strides = unpack_strides(window_e, memref.numDims, strides_at)
        lines.append(f"dims (innermost first)={dims} strides in bits={strides}")
    elif not memref.isStatic:
        lines.append("dims and strides in WIN_F, written at run time by the producer")
    return lines


def print_program(program: Program) -> str:
    if not program.kernels and not program.invocations:
        return ""
    arch = program.arch
    win_e = arch.window_base("WIN_E")
    lines = ["", "// ----- kernel images (WIN_D per kernel, .data at WIN_E + 0) -----"]
    for name in sorted(program.kernels):
        k = program.kernels[name]
        lines.append(f"// @{name} from {k.origin}: .text {len(k.text)} B, .rodata {len(k.rodata)} B "
                     f"at WIN_D+{k.rodata_offset:#x}, .data {len(k.data)} B, entry .text+{k.entry:#x}, "
                     f"ELF {len(k.elf)} B")
    kernels = {k.name: k for k in program.module.kernels}
    act = [tl for tl in program.module.task_lists if tl.executor.value == "ACT_SHAVE"]
    tasks = act[0].tasks if act else []
    if program.invocations:
        lines.append("// ----- invocations (WIN_E = [.data][params][dims/strides]) -----")
    for inv in program.invocations:
        task = tasks[inv.task_index]
        label = task.label or f"act_shave#{inv.task_index}"
        lines.append(f"// {label}: @{inv.kernel} on tile {inv.tile}, WIN_E image {len(inv.window_e)} B, "
                     f"argsAddr=WIN_E+{inv.args_offset:#x} argsSize={inv.args_size}")
        struct = inv.window_e[inv.args_offset:inv.args_offset + inv.args_size]
        for slot, value in decode_params(contract_slots(kernels[inv.kernel]), struct):
            if isinstance(value, MemRefData):
                first, *rest = describe_memref(value, inv.window_e, win_e)
                lines.append(f"//   {slot.name}: MemRefData {first}")
                lines += [f"//     {line}" for line in rest]
            else:
                lines.append(f"//   {slot.name}: {slot.elem} {value!r}")
        lines.append(f"//   bytes: {struct.hex(' ')}")
    return "\n".join(lines) + "\n"
