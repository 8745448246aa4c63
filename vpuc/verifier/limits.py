"""Sizes and numbers the target and the blob can hold, each reported where it is written.

A value that the grammar accepts but no field can carry would otherwise surface
only when the blob is written, without a location.  The bounds, and where they
come from:

- a tensor holds at most ``Arch.max_tensor_bytes`` (4 GiB on NPU37XX: kernels and
  DMA address data with 32 bits); a buffer placed in DDR ends within that space;
- a dim is an int32 (``MemRefData`` dims, ``vpuc/abi/memref.py``) and a rank is at
  most 15 (``dimsOrder`` packs one 4-bit nibble per dim, ``vpuc/abi/dtypes.py``);
- an ACT SHAVE stack lives at the top of the invocation's WIN_E mapping, so it is
  at most one window (16 MiB);
- an integer literal in a constant is an int64 (the blob's ``Number.int_value``):
  ``declarations.value_problem`` checks it with the element type, for buffers, graph
  constants and scalar arguments alike;
- a kernel declaration's memref dims are int32 (``KernelParam.dims: [int]``);
- DPU kernel, stride, pad and dilation are uint32 (``DPUInvariant``'s ``[uint]``).
"""

from __future__ import annotations

from vpuc.abi.dtypes import MAX_DIMS
from vpuc.arch import Arch
from vpuc.diagnostics import DiagnosticBag, Loc
from vpuc.ir.module import Buffer, BufferKind, Module
from vpuc.ir.tasks import DpuTask
from vpuc.ir.types import Dynamic

INT32 = (-(1 << 31), (1 << 31) - 1)
UINT32 = (0, (1 << 32) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
DPU_WINDOW_PARAMS = ("kernel", "stride", "pad", "dilation")


def fits(value: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def check_limits(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    check_sizes(module, arch, bag)
    _check_stacks(module, arch, bag)
    _check_kernel_dims(module, bag)
    _check_tasks(module, bag)


def check_sizes(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    limit = arch.max_tensor_bytes
    for buf in module.buffers:
        dims = [d.bound if isinstance(d, Dynamic) else d for d in buf.type.dims]
        if len(dims) > MAX_DIMS:
            bag.error(buf.loc, f"%{buf.name} ({buf.type}) has rank {len(dims)}; a tensor has "
                      f"at most {MAX_DIMS} dims (MemRefData's dimsOrder holds one nibble per dim)")
        elif any(d > INT32[1] for d in dims if isinstance(d, int)):
            bag.error(buf.loc, f"%{buf.name} ({buf.type}) has a dim beyond int32 "
                      f"({INT32[1]:,}); a dim is an int32 on this target")
        elif buf.type.nbytes > limit:
            bag.error(buf.loc, f"%{buf.name} ({buf.type}) has {buf.type.nbytes:,} bytes; a "
                      f"tensor on this target holds at most {limit:,} bytes (its address space)")
        elif _placed_in_ddr(buf) and buf.offset + buf.type.nbytes > limit:
            bag.error(buf.loc, f"%{buf.name} is placed at {buf.offset:#x} and ends at "
                      f"{buf.offset + buf.type.nbytes:#x}; DDR addresses end at {limit:#x} "
                      "(its address space)")


def _placed_in_ddr(buf: Buffer) -> bool:
    return buf.offset is not None and buf.kind is not BufferKind.CMX


def _check_stacks(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    runtime = module.runtime
    if runtime is None:
        return
    for tile, size in enumerate(runtime.stacks):
        if size > arch.window_size:
            bag.error(runtime.loc, f"the stack of tile {tile} has {size:,} bytes; an ACT SHAVE "
                      f"stack lives in the WIN_E window, {arch.window_size:,} bytes")


def _check_kernel_dims(module: Module, bag: DiagnosticBag) -> None:
    for kernel in module.kernels:
        for param in kernel.params:
            dims = param.memref.dims if param.memref is not None else None
            if dims and any(d is not None and not fits(d, INT32) for d in dims):
                bag.error(param.loc, f"argument '{param.name}' of @{kernel.name} is "
                          f"{param.memref}: a dim beyond int32 ({INT32[1]:,}); the blob holds "
                          "a kernel's memref dims as int32")


def _check_tasks(module: Module, bag: DiagnosticBag) -> None:
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, DpuTask):
                for name in DPU_WINDOW_PARAMS:
                    values = getattr(task, name)
                    if values and not all(fits(v, UINT32) for v in values):
                        loc: Loc = task.param_locs.get(name, task.loc)
                        bag.error(loc, f"{name}({', '.join(map(str, values))}) is beyond "
                                  f"uint32; DPU {name} values are 0..{UINT32[1]:,}")
