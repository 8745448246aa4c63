"""One-vector forms of the hottest semantics, for the exact interpreter.

``semantics.py`` defines every opcode once, over any leading batch shape; the
generality costs a few numpy calls per instruction (``ascontiguousarray``,
``asarray``, ``ndim``...), which is most of an interpreted instruction's time.
The interpreter only ever holds one value per register -- a vector register is
a C-contiguous ``uint8`` array of 16 bytes (loads copy, every semantic function
returns a fresh array, the fast path stores copies of rows) -- so for it the
functions below compute the same thing with the fewest calls: the same numpy
operations on the same types in the same order, hence the same bits
(``tests/shave/test_unbatched.py`` compares every one with ``SEMANTICS`` on
random and special bit patterns).  An opcode not listed runs its general form.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from runtime_sim.isa.sem_vector import F16_TO_F32

U8, U16, U32 = np.uint8, np.uint16, np.uint32
F16, F32, F64 = np.float16, np.float32, np.float64
MASK32 = 0xFFFFFFFF
_take = F16_TO_F32.take


def _f32_binary(op) -> Callable:
    return lambda a, b: op(a.view(F32), b.view(F32)).view(U8)


def _f16_binary(op) -> Callable:
    return lambda a, b: op(_take(a.view(U16)), _take(b.view(U16))).astype(F16).view(U8)


def _f32_unary(op) -> Callable:
    return lambda a: op(a.view(F32).astype(F32)).view(U8)


def _f16_unary(op) -> Callable:
    return lambda a: op(_take(a.view(U16))).astype(F16).view(U8)


def _vfma_f32(a, b, c):
    return ((a.view(F32).astype(F64) * b.view(F32).astype(F64) + c.view(F32).astype(F64))
            .astype(F32).view(U8))


def _vfma_f16(a, b, c):
    return ((_take(a.view(U16)).astype(F64) * _take(b.view(U16)).astype(F64)
             + _take(c.view(U16)).astype(F64)).astype(F16).view(U8))


def _address(base, offset) -> int:
    return (int(base) + int(offset)) & MASK32


OPS: dict[str, Callable] = {
    "vcvtl.f32.f16": lambda a: _take(a.view(U16)[:4]).view(U8),
    "vcvth.f32.f16": lambda a: _take(a.view(U16)[4:]).view(U8),
    "vcvt.f16.f32": lambda a, b: np.concatenate((a.view(F32), b.view(F32))).astype(F16).view(U8),
    "vfma.f32": _vfma_f32,
    "vfma.f16": _vfma_f16,
    "vexp.f32": _f32_unary(np.exp),
    "vexp.f16": _f16_unary(np.exp),
    # a scalar register's value (a uint32) in every lane, truncated to the lane's width
    "vbcast.w": lambda s: np.full(4, s, U32).view(U8),
    "vbcast.h": lambda s: np.full(8, int(s) & 0xFFFF, U16).view(U8),
    "vbcast.b": lambda s: np.full(16, int(s) & 0xFF, U8),
}
for _name, _op in (("vadd", np.add), ("vsub", np.subtract), ("vmul", np.multiply),
                   ("vdiv", np.divide), ("vmin", np.minimum), ("vmax", np.maximum)):
    OPS[f"{_name}.f32"] = _f32_binary(_op)
    OPS[f"{_name}.f16"] = _f16_binary(_op)

# Loads and stores take the memory first, as in ``sem_memory.MEMORY_OPS``.
MEMORY: dict[str, Callable] = {
    "vld": lambda m, b, o: m.read(_address(b, o), 16),
    "vst": lambda m, v, b, o: m.write(_address(b, o), v),
    "lw": lambda m, b, o: m.read(_address(b, o), 4).view(U32)[0],
    "sw": lambda m, v, b, o: m.write(_address(b, o), np.array(v, U32).reshape(1).view(U8)),
}
