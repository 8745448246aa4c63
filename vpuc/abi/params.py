"""A kernel's params struct, packed from its contract: the Software Layers HLD's argument contract.

Memref arguments become ``MemRefData`` (32 bytes); scalars are stored as
themselves (f16 in 2 bytes, i32 in 4, ...); the struct is packed with no
padding, in contract order.  The dims (int32) and strides (int64, in bits)
arrays of a *static* memref follow the struct in WIN_E; those of a *dynamic*
memref sit in WIN_F, next to the tensor, where its producer writes the actual
dims at run time.  Arrays are in memory order, innermost first (see
``vpuc.abi.dtypes``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from vpuc.abi.dtypes import data_type, dims_order_code
from vpuc.abi.memref import MEMREF_SIZE, MemRefData, pack_dims, pack_strides
from vpuc.diagnostics import VpucError
from vpuc.ir.types import ElemType

_INT_FORMATS = {ElemType.U8: "<B", ElemType.I8: "<b", ElemType.U16: "<H", ElemType.I16: "<h",
                ElemType.U32: "<I", ElemType.I32: "<i", ElemType.I64: "<q"}


@dataclass(frozen=True)
class MemRefArg:
    """A memref argument as the kernel will see it."""

    data_addr: int                      # window address of element 0 (WIN_F for CMX)
    elem: ElemType
    dims: tuple[int, ...]               # logical dims (upper bounds when dynamic)
    perm: tuple[int, ...]               # dims order, outermost first
    strides_bits: tuple[int, ...]       # per logical dim
    meta_addr: int | None = None        # dynamic: WIN_F address of its dims and strides

    @property
    def is_static(self) -> bool:
        return self.meta_addr is None

    def memory_dims(self) -> list[int]:
        return [self.dims[d] for d in reversed(self.perm)]

    def memory_strides(self) -> list[int]:
        return [self.strides_bits[d] for d in reversed(self.perm)]

    def meta_bytes(self) -> bytes:
        """The dims then strides arrays, as they sit in WIN_E or WIN_F."""
        dims = pack_dims(self.memory_dims())
        return dims + bytes(_pad(len(dims), 8)) + pack_strides(self.memory_strides())


@dataclass(frozen=True)
class ScalarArg:
    elem: ElemType
    value: float | int


@dataclass
class PackedParams:
    struct: bytes                 # exactly sizeof(params): what argsSize says
    tail: bytes                   # the static memrefs' dims and strides, right after the struct
    memrefs: list[MemRefData]     # the MemRefData of each memref argument, in order

    @property
    def image(self) -> bytes:
        return self.struct + self.tail


def _pad(offset: int, alignment: int) -> int:
    return -offset % alignment


def scalar_bytes(elem: ElemType, value: float | int) -> bytes:
    """A scalar in its own storage type, little-endian; out-of-range values are errors."""
    if elem is ElemType.F16:
        return _float_bytes(np.float16, value, elem)
    if elem is ElemType.BF16:
        return _float_bytes(ml_dtypes.bfloat16, value, elem)
    if elem is ElemType.F32:
        return _float_bytes(np.float32, value, elem)
    if elem is ElemType.F64:
        return struct.pack("<d", float(value))
    if isinstance(value, float) and not value.is_integer():
        raise VpucError(f"scalar {value} is not an integer; expected a value of type {elem}")
    try:
        return struct.pack(_INT_FORMATS[elem], int(value))
    except struct.error:
        raise VpucError(f"scalar {int(value)} does not fit in {elem}") from None


def _float_bytes(dtype, value: float | int, elem: ElemType) -> bytes:
    as_f64 = float(value)
    with np.errstate(over="ignore"):
        stored = np.array([as_f64], dtype=np.float64).astype(dtype)
    if np.isinf(stored[0]) and np.isfinite(as_f64):
        raise VpucError(f"scalar {value} overflows {elem}")
    return stored.tobytes()


def pack_params(args: list[MemRefArg | ScalarArg], params_addr: int) -> PackedParams:
    """Pack a params struct placed at ``params_addr``; the tail follows it directly."""
    struct_size = sum(MEMREF_SIZE if isinstance(a, MemRefArg) else a.elem.nbytes for a in args)
    tail = bytearray()
    parts: list[bytes] = []
    memrefs: list[MemRefData] = []
    for arg in args:
        if isinstance(arg, ScalarArg):
            parts.append(scalar_bytes(arg.elem, arg.value))
            continue
        rank = len(arg.dims)
        if arg.is_static:
            tail += bytes(_pad(struct_size + len(tail), 8))
            dims_addr = params_addr + struct_size + len(tail)
            meta = arg.meta_bytes()
            strides_addr = dims_addr + (len(meta) - 8 * rank)
            tail += meta
        else:
            dims_addr = arg.meta_addr
            strides_addr = arg.meta_addr + 4 * rank + _pad(4 * rank, 8)
        memref = MemRefData(
            dataAddr=arg.data_addr, isStatic=int(arg.is_static), numDims=rank,
            dimsAddr=dims_addr, stridesAddr=strides_addr,
            dataType=int(data_type(arg.elem.value).code), dimsOrder=dims_order_code(arg.perm))
        memrefs.append(memref)
        parts.append(memref.pack())
    packed = b"".join(parts)
    assert len(packed) == struct_size
    return PackedParams(packed, bytes(tail), memrefs)


WINDOW_E_ALIGN = 16


@dataclass
class WindowEImage:
    """What WIN_E maps for one invocation: ``[.data copy][params][dims/strides]``."""

    image: bytes
    args_offset: int        # params struct, from the WIN_E base
    params: PackedParams

    @property
    def args_size(self) -> int:
        return len(self.params.struct)


def layout_window_e(data_template: bytes, args: list[MemRefArg | ScalarArg],
                    window_e_base: int) -> WindowEImage:
    """Lay out an invocation's WIN_E: the kernel's .data first (it is linked at
    WIN_E + 0 for every invocation), then the params struct and its tail."""
    args_offset = len(data_template) + _pad(len(data_template), WINDOW_E_ALIGN)
    params = pack_params(args, window_e_base + args_offset)
    image = data_template + bytes(args_offset - len(data_template)) + params.image
    return WindowEImage(image, args_offset, params)


@dataclass(frozen=True)
class ContractSlot:
    """One argument of a kernel contract, as the params struct lays it out."""

    name: str
    memref: bool
    elem: ElemType | None     # the scalar's type; for memrefs the declared element type
    rank: int | None = None   # memrefs: the declared rank, None for any rank

    @property
    def size(self) -> int:
        return MEMREF_SIZE if self.memref else self.elem.nbytes


def decode_scalar(elem: ElemType, data: bytes) -> float | int:
    if elem is ElemType.F16:
        return float(np.frombuffer(data, np.float16)[0])
    if elem is ElemType.BF16:
        return float(np.frombuffer(data, ml_dtypes.bfloat16)[0])
    if elem is ElemType.F32:
        return float(np.frombuffer(data, np.float32)[0])
    if elem is ElemType.F64:
        return struct.unpack("<d", data)[0]
    return struct.unpack(_INT_FORMATS[elem], data)[0]


def decode_params(slots: list[ContractSlot], data: bytes, file: str = "<args>",
                  section: str = "args") -> list[tuple[ContractSlot, MemRefData | float | int]]:
    """Split a params struct back into its arguments; a size mismatch is an error."""
    expected = sum(s.size for s in slots)
    if len(data) != expected:
        raise VpucError(f"{file}: {section}: params struct is {len(data)} bytes; the contract "
                        f"({', '.join(s.name for s in slots)}) needs {expected}")
    values, offset = [], 0
    for slot in slots:
        chunk = data[offset:offset + slot.size]
        if slot.memref:
            values.append((slot, MemRefData.unpack(chunk, 0, file=file, section=section)))
        else:
            values.append((slot, decode_scalar(slot.elem, chunk)))
        offset += slot.size
    return values
