"""The semantics of the scalar instructions: integer arithmetic, logic, shifts and
compares (with their immediate forms), and the f32 arithmetic and conversions done in
scalar registers."""

from __future__ import annotations

from typing import Callable

import numpy as np

from runtime_sim.isa.sem_values import F16, F32, I64, U32, bool_u32, signed, u32


# --- scalar integer ----------------------------------------------------------------

def _div(a, b):
    x, y = signed(a).astype(I64), signed(b).astype(I64)
    safe = np.where(y == 0, 1, y)
    quotient = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return u32(np.where(y == 0, -1, quotient))


def _rem(a, b):
    x, y = signed(a).astype(I64), signed(b).astype(I64)
    safe = np.where(y == 0, 1, y)
    quotient = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return u32(np.where(y == 0, x, x - quotient * safe))


def _divu(a, b):
    x, y = np.asarray(a, I64), np.asarray(b, I64)
    return u32(np.where(y == 0, 0xFFFFFFFF, x // np.where(y == 0, 1, y)))


def _remu(a, b):
    x, y = np.asarray(a, I64), np.asarray(b, I64)
    return u32(np.where(y == 0, x, x % np.where(y == 0, 1, y)))


def _mulh(a, b):
    return u32((signed(a).astype(I64) * signed(b).astype(I64)) >> 32)


def _mulhu(a, b):
    return u32((np.asarray(a, np.uint64) * np.asarray(b, np.uint64)) >> np.uint64(32))


def _sra(a, amount):
    return (signed(a) >> (signed(amount) & 31)).view(U32)


SCALAR_OPS: dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "mulh": _mulh, "mulhu": _mulhu, "div": _div, "divu": _divu, "rem": _rem, "remu": _remu,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "sll": lambda a, b: a << (b & U32(31)),
    "srl": lambda a, b: a >> (b & U32(31)),
    "sra": _sra,
    "slt": lambda a, b: bool_u32(signed(a) < signed(b)),
    "sltu": lambda a, b: bool_u32(a < b),
    "seq": lambda a, b: bool_u32(a == b),
    "sne": lambda a, b: bool_u32(a != b),
    "min": lambda a, b: np.minimum(signed(a), signed(b)).view(U32),
    "max": lambda a, b: np.maximum(signed(a), signed(b)).view(U32),
    "minu": np.minimum,
    "maxu": np.maximum,
    "mov": lambda a: a,
    "li": lambda imm: imm,
    "la": lambda imm: imm,
    "li.f32": lambda imm: imm,
    "li.f16": lambda imm: imm,
}
# Immediate forms are the register forms with the immediate as second operand.
IMMEDIATE_FORMS = {"addi": "add", "muli": "mul", "andi": "and", "ori": "or", "xori": "xor",
                   "slli": "sll", "srli": "srl", "srai": "sra", "slti": "slt", "sltiu": "sltu",
                   "seqi": "seq", "snei": "sne"}
for _imm_name, _reg_name in IMMEDIATE_FORMS.items():
    SCALAR_OPS[_imm_name] = SCALAR_OPS[_reg_name]


# --- scalar f32 ----------------------------------------------------------------------

def f32_of(a):
    return np.asarray(a, U32).view(F32)[()]


def f32_bits(x):
    return np.asarray(x, F32).view(U32)[()]


def f32_to_i32(x, rounding: Callable) -> np.ndarray:
    wide = np.asarray(x, np.float64)
    clipped = np.clip(rounding(np.where(np.isnan(wide), 0.0, wide)), -2.0 ** 31, 2.0 ** 31 - 1)
    return clipped.astype(I64)


SCALAR_OPS.update({
    "fadd": lambda a, b: f32_bits(f32_of(a) + f32_of(b)),
    "fsub": lambda a, b: f32_bits(f32_of(a) - f32_of(b)),
    "fmul": lambda a, b: f32_bits(f32_of(a) * f32_of(b)),
    "fdiv": lambda a, b: f32_bits(f32_of(a) / f32_of(b)),
    "fmin": lambda a, b: f32_bits(np.minimum(f32_of(a), f32_of(b))),
    "fmax": lambda a, b: f32_bits(np.maximum(f32_of(a), f32_of(b))),
    "feq": lambda a, b: bool_u32(f32_of(a) == f32_of(b)),
    "flt": lambda a, b: bool_u32(f32_of(a) < f32_of(b)),
    "fle": lambda a, b: bool_u32(f32_of(a) <= f32_of(b)),
    "fabs": lambda a: a & U32(0x7FFFFFFF),
    "fneg": lambda a: a ^ U32(0x80000000),
    "fsqrt": lambda a: f32_bits(np.sqrt(f32_of(a))),
    "fcvt.f32.i32": lambda a: f32_bits(signed(a).astype(F32)),
    "fcvt.f32.u32": lambda a: f32_bits(np.asarray(a, U32).astype(F32)),
    "fcvt.i32.f32": lambda a: u32(f32_to_i32(f32_of(a), np.trunc)),
    "fcvt.f32.f16": lambda a: f32_bits((np.asarray(a, U32) & 0xFFFF).astype(np.uint16)
                                       .view(F16).astype(F32)),
    "fcvt.f16.f32": lambda a: np.asarray(f32_of(a)).astype(F16).view(np.uint16).astype(U32)[()],
})
