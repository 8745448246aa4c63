"""The kernel ABI's element types (``MemRefData.dataType``) and dimension orders
(``MemRefData.dimsOrder``).

``dataType`` numbering follows vpux's ``sw_params::DataType`` enum
(openvinotoolkit/npu_plugin, sw_runtime_kernels/kernels/inc/common_types.h), so
the values mean the same thing as on the real stack.

``dimsOrder`` is vpux's ``DimsOrder`` code (openvinotoolkit/npu_compiler,
src/vpux_compiler/src/core/attributes/dims_order.cpp, ``getCodeFromPermutation``):
4 bits per dimension; the memory order is listed from the outermost dimension
in the highest used nibble to the innermost in the lowest nibble; a nibble holds
the logical dimension index plus one, so 0 means "no dimension".  NCHW (logical
dims N=0, C=1, H=2, W=3 stored in that order) is 0x1234; NHWC is 0x1342.
(The same values are ``ND_NCHW``/``ND_NHWC`` in common_types.h.)

The ``dims`` and ``strides`` arrays a MemRefData points to are in *memory order,
innermost first* (vpux's KernelParamsOp serializer writes the memory shape
reversed): ``dims[0]`` is the innermost extent, ``strides[0]`` its stride.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Sequence

import ml_dtypes
import numpy as np

from vpuc.diagnostics import VpucError


class DataType(IntEnum):
    NN_FP64 = 0
    NN_FP32 = 1
    NN_FP16 = 2
    NN_FP8 = 3
    NN_U64 = 4
    NN_U32 = 5
    NN_U16 = 6
    NN_U8 = 7
    NN_I64 = 8
    NN_I32 = 9
    NN_I16 = 10
    NN_I8 = 11
    NN_I4 = 12
    NN_I2 = 13
    NN_BIN = 14
    NN_BF16 = 15
    NN_UNDEFINED = 16


@dataclass(frozen=True)
class DataTypeInfo:
    code: DataType
    name: str                 # vpuc's spelling, as in .vir element types
    bits: int
    numpy: np.dtype | None    # None: no numpy storage type (sub-byte, fp8)

    @property
    def byte_size(self) -> int:
        if self.bits % 8:
            raise VpucError(f"element type {self.name} is {self.bits} bits, not whole bytes")
        return self.bits // 8


DATA_TYPES: tuple[DataTypeInfo, ...] = (
    DataTypeInfo(DataType.NN_FP64, "f64", 64, np.dtype(np.float64)),
    DataTypeInfo(DataType.NN_FP32, "f32", 32, np.dtype(np.float32)),
    DataTypeInfo(DataType.NN_FP16, "f16", 16, np.dtype(np.float16)),
    DataTypeInfo(DataType.NN_FP8, "f8", 8, None),
    DataTypeInfo(DataType.NN_U64, "u64", 64, np.dtype(np.uint64)),
    DataTypeInfo(DataType.NN_U32, "u32", 32, np.dtype(np.uint32)),
    DataTypeInfo(DataType.NN_U16, "u16", 16, np.dtype(np.uint16)),
    DataTypeInfo(DataType.NN_U8, "u8", 8, np.dtype(np.uint8)),
    DataTypeInfo(DataType.NN_I64, "i64", 64, np.dtype(np.int64)),
    DataTypeInfo(DataType.NN_I32, "i32", 32, np.dtype(np.int32)),
    DataTypeInfo(DataType.NN_I16, "i16", 16, np.dtype(np.int16)),
    DataTypeInfo(DataType.NN_I8, "i8", 8, np.dtype(np.int8)),
    DataTypeInfo(DataType.NN_I4, "i4", 4, None),
    DataTypeInfo(DataType.NN_I2, "i2", 2, None),
    DataTypeInfo(DataType.NN_BIN, "bin", 1, None),
    DataTypeInfo(DataType.NN_BF16, "bf16", 16, np.dtype(ml_dtypes.bfloat16)),
)
_BY_NAME = {info.name: info for info in DATA_TYPES}
_BY_CODE = {info.code: info for info in DATA_TYPES}


def data_type(key: "str | int | DataType") -> DataTypeInfo:
    """Look up by vpuc name ('f16') or by dataType code (2 / DataType.NN_FP16)."""
    info = _BY_NAME.get(key) if isinstance(key, str) else _BY_CODE.get(key)
    if info is None:
        raise VpucError(f"unknown element type {key!r}; expected one of "
                        + ", ".join(_BY_NAME))
    return info


def data_type_of(dtype: "np.dtype | type") -> DataTypeInfo:
    dtype = np.dtype(dtype)
    for info in DATA_TYPES:
        if info.numpy == dtype:
            return info
    raise VpucError(f"numpy dtype {dtype} has no kernel dataType")


# --- dimsOrder ------------------------------------------------------------------

BITS_PER_DIM = 4
MAX_DIMS = 15
NAMED_ORDERS: dict[str, int] = {
    "C": 0x1, "NC": 0x12, "CN": 0x21, "CHW": 0x123, "HWC": 0x231, "HCW": 0x213,
    "NCHW": 0x1234, "NHWC": 0x1342, "NHCW": 0x1324, "NCDHW": 0x12345, "NDHWC": 0x13452,
}


def dims_order_code(permutation: Sequence[int]) -> int:
    """Code of a memory order given as logical dims, outermost first (NHWC: [0, 2, 3, 1])."""
    perm = list(permutation)
    if sorted(perm) != list(range(len(perm))) or len(perm) > MAX_DIMS:
        raise VpucError(f"dims order {perm} is not a permutation of 0..{len(perm) - 1} "
                        f"(at most {MAX_DIMS} dims)")
    code = 0
    for dim in perm:
        code = (code << BITS_PER_DIM) | (dim + 1)
    return code


def dims_order_permutation(code: int) -> tuple[int, ...]:
    """Inverse of ``dims_order_code``: logical dims in memory order, outermost first."""
    digits = []
    rest = code
    while rest & 0xF:
        digits.append((rest & 0xF) - 1)
        rest >>= BITS_PER_DIM
    perm = tuple(reversed(digits))
    if rest or sorted(perm) != list(range(len(perm))):
        raise VpucError(f"dimsOrder {code:#x} is not a packed permutation "
                        "(4 bits per dim, 1-based, no gaps)")
    return perm


def identity_order(rank: int) -> int:
    return dims_order_code(range(rank))


def memory_dims(shape: Sequence[int], order: int) -> list[int]:
    """The MemRefData dims array: extents in memory order, innermost first."""
    perm = dims_order_permutation(order)
    if len(perm) != len(shape):
        raise VpucError(f"dimsOrder {order:#x} has {len(perm)} dims, shape {list(shape)} has "
                        f"{len(shape)}")
    return [int(shape[d]) for d in reversed(perm)]


def compact_strides_bits(shape: Sequence[int], order: int, element_bits: int) -> list[int]:
    """The MemRefData strides array of a dense tensor: bits, innermost first."""
    strides, step = [], element_bits
    for extent in memory_dims(shape, order):
        strides.append(step)
        step *= extent
    return strides
