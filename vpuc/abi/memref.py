"""``MemRefData``: how a kernel sees a buffer argument, byte for byte as in the Software Layers HLD.

    struct __attribute__((packed)) MemRefData {
        uint32_t dataAddr;     // WIN_F
        uint32_t isStatic;
        uint32_t numDims;
        uint32_t dimsAddr;     // int32_t[numDims]: WIN_E (static) or WIN_F (dynamic)
        uint32_t stridesAddr;  // int64_t[numDims], in bits: same window as dims
        uint32_t dataType;     // vpuc.abi.dtypes.DataType
        uint64_t dimsOrder;    // vpuc.abi.dtypes dimsOrder code
    };                         // 32 bytes, little-endian

The dims and strides arrays are in memory order, innermost first (see
``vpuc.abi.dtypes``).  In the dynamic case the kernel writes the output's dims
and strides itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Sequence

from vpuc.diagnostics import BinLoc, VpucError

MEMREF_FIELDS: tuple[tuple[str, str], ...] = (
    ("dataAddr", "I"),
    ("isStatic", "I"),
    ("numDims", "I"),
    ("dimsAddr", "I"),
    ("stridesAddr", "I"),
    ("dataType", "I"),
    ("dimsOrder", "Q"),
)
MEMREF_FORMAT = "<" + "".join(code for _, code in MEMREF_FIELDS)      # "<IIIIIIQ"
_STRUCT = struct.Struct(MEMREF_FORMAT)
MEMREF_SIZE = _STRUCT.size                                             # 32
# byte offset of each field, for kernels and for the pack-kernel-args pass
MEMREF_OFFSETS: dict[str, int] = {}
_offset = 0
for _name, _code in MEMREF_FIELDS:
    MEMREF_OFFSETS[_name] = _offset
    _offset += struct.calcsize("<" + _code)
assert MEMREF_SIZE == 32 and _offset == MEMREF_SIZE
_LIMITS = tuple(1 << (8 * struct.calcsize("<" + code)) for _, code in MEMREF_FIELDS)


@dataclass(frozen=True)
class MemRefData:
    dataAddr: int
    isStatic: int
    numDims: int
    dimsAddr: int
    stridesAddr: int
    dataType: int
    dimsOrder: int

    def pack(self) -> bytes:
        # attribute reads, not dataclasses.astuple (a deep copy): invocations pack thousands
        values = [int(getattr(self, name)) for name, _ in MEMREF_FIELDS]
        for (name, _), value, limit in zip(MEMREF_FIELDS, values, _LIMITS):
            if not 0 <= value < limit:
                raise VpucError(f"MemRefData.{name} = {value} does not fit in u{limit.bit_length() - 1}")
        return _STRUCT.pack(*values)

    @classmethod
    def unpack(cls, data: bytes, offset: int = 0, file: str = "<args>",
               section: str = "args") -> "MemRefData":
        if offset < 0 or offset + MEMREF_SIZE > len(data):
            raise VpucError(f"truncated MemRefData: need {MEMREF_SIZE} bytes at offset "
                            f"{offset:#x}, buffer has {len(data)}", BinLoc(file, section, offset))
        return cls(*_STRUCT.unpack_from(data, offset))


assert tuple(f.name for f in fields(MemRefData)) == tuple(n for n, _ in MEMREF_FIELDS)

DIM_FORMAT = "<i"        # int32 per dim
STRIDE_FORMAT = "<q"     # int64 per stride, in bits


def pack_dims(dims: Sequence[int]) -> bytes:
    try:
        return struct.pack(f"<{len(dims)}i", *dims)
    except struct.error:
        raise VpucError(f"dims {list(dims)} do not fit in int32") from None


def pack_strides(strides_bits: Sequence[int]) -> bytes:
    try:
        return struct.pack(f"<{len(strides_bits)}q", *strides_bits)
    except struct.error:
        raise VpucError(f"strides {list(strides_bits)} do not fit in int64") from None


def unpack_dims(data: bytes, count: int, offset: int = 0) -> list[int]:
    if offset < 0 or offset + 4 * count > len(data):
        raise VpucError(f"truncated dims array: {count} x int32 at offset {offset:#x}, "
                        f"buffer has {len(data)} bytes")
    return list(struct.unpack_from(f"<{count}i", data, offset))


def unpack_strides(data: bytes, count: int, offset: int = 0) -> list[int]:
    if offset < 0 or offset + 8 * count > len(data):
        raise VpucError(f"truncated strides array: {count} x int64 at offset {offset:#x}, "
                        f"buffer has {len(data)} bytes")
    return list(struct.unpack_from(f"<{count}q", data, offset))
