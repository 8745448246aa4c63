"""The value conventions of the SHAVE semantics as helpers shared by every instruction
class: vector registers as typed lanes and back, 32-bit wrapping, signed views,
addresses, masks repeated over a lane's bytes (``semantics.py`` states the conventions)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from vpuc.shave.isa import WIDTH

U32, I32, I64 = np.uint32, np.int32, np.int64
F16, F32, BF16 = np.float16, np.float32, ml_dtypes.bfloat16
LANE_BYTE = {w: np.arange(16) % WIDTH[w] for w in WIDTH}
LANE_INDEX = {w: np.arange(16) // WIDTH[w] for w in WIDTH}
BYTES16 = np.arange(16, dtype=I64)
MASK_BITS = np.arange(16, dtype=U32)


def lanes(v: np.ndarray, dtype) -> np.ndarray:
    """A vector register (..., 16) as typed lanes (..., 16 // itemsize)."""
    return np.ascontiguousarray(v).view(dtype)


def to_bytes(x: np.ndarray, dtype) -> np.ndarray:
    """Typed lanes (..., n) back to a vector register (..., 16) of bytes."""
    return np.ascontiguousarray(x, dtype=dtype).view(np.uint8)


def u32(x) -> np.ndarray:
    """Any integer result to uint32 (mod 2^32), keeping scalars scalar."""
    return (np.asarray(x).astype(I64) & 0xFFFFFFFF).astype(U32)[()]


def signed(x) -> np.ndarray:
    return np.asarray(x, dtype=U32).view(I32)[()]


def bool_u32(x) -> np.ndarray:
    return np.asarray(x).astype(U32)[()]


def address(base, offset) -> np.ndarray:
    if type(base) is U32 and type(offset) is U32:     # the interpreter's scalar case, cheaply
        return U32((int(base) + int(offset)) & 0xFFFFFFFF)
    return (np.asarray(base, U32) + np.asarray(offset, U32))[()]


def repeat_mask(lane_mask: np.ndarray, width: int) -> np.ndarray:
    return np.repeat(lane_mask, width, axis=-1)


def broadcast_all(*arrays: np.ndarray) -> list[np.ndarray]:
    return list(np.broadcast_arrays(*arrays))
