"""Sizes the target can hold: every buffer fits the address space.

A tensor larger than the target's address space (``Arch.max_tensor_bytes``,
4 GiB on NPU37XX: kernels and DMA address data with 32 bits) cannot exist, and
its dims would not fit the blob's 32-bit fields either; it is reported here, at
its declaration, before any pass or serializer meets it.
"""

from __future__ import annotations

from vpuc.arch import Arch
from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import Module
from vpuc.ir.types import Dynamic


def check_sizes(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    limit = arch.max_tensor_bytes
    for buf in module.buffers:
        dims = [d.bound if isinstance(d, Dynamic) else d for d in buf.type.dims]
        if any(d >= 1 << 32 for d in dims if isinstance(d, int)):
            bag.error(buf.loc, f"%{buf.name} ({buf.type}) has a dim of 2^32 or more; a tensor "
                      f"on this target holds at most {limit:,} bytes (its address space)")
        elif buf.type.nbytes > limit:
            bag.error(buf.loc, f"%{buf.name} ({buf.type}) has {buf.type.nbytes:,} bytes; a "
                      f"tensor on this target holds at most {limit:,} bytes (its address space)")
