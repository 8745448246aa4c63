"""The semantics of the vector instructions: moves, lanes and masks, f16/f32 floating
point (widened to float32 and rounded once), integer lanes and the conversions between
lane types."""

from __future__ import annotations

from typing import Callable

import numpy as np

from runtime_sim.isa.sem_scalar import f32_bits, f32_to_i32
from runtime_sim.isa.sem_values import (BF16, F16, F32, I32, I64, MASK_BITS, U32, broadcast_all,
                                        lanes, repeat_mask, to_bytes, u32)
from vpuc.shave.isa import WIDTH


# --- vector moves, lanes and masks ---------------------------------------------------------

_UINT = {"b": np.uint8, "h": np.uint16, "w": U32}


def _bcast(value, w: str) -> np.ndarray:
    low = np.asarray(value, U32).astype(_UINT[w])[..., None]
    return to_bytes(np.repeat(low, 16 // WIDTH[w], axis=-1), _UINT[w])


def _extract(v, imm, w: str):
    return lanes(v, _UINT[w])[..., int(imm)].astype(U32)[()]


def _insert(v, value, imm, w: str) -> np.ndarray:
    typed = lanes(v, _UINT[w])
    value = np.asarray(value, U32).astype(_UINT[w])
    shape = np.broadcast_shapes(typed.shape, value.shape + (typed.shape[-1],))
    out = np.array(np.broadcast_to(typed, shape))
    out[..., int(imm)] = value
    return to_bytes(out, _UINT[w])


def _vmask(count, w: str) -> np.ndarray:
    lanes_active = np.minimum(np.asarray(count, I64), 16 // WIDTH[w])
    return np.arange(16) < lanes_active[..., None] * WIDTH[w]


VECTOR_OPS: dict[str, Callable] = {
    "vmov": lambda a: a,
    "vsel": lambda a, b, m: np.where(m, a, b),
    "mand": lambda a, b: a & b,
    "mor": lambda a, b: a | b,
    "mxor": lambda a, b: a ^ b,
    "mnot": lambda a: ~a,
    "mset": lambda s: ((np.asarray(s, U32)[..., None] >> MASK_BITS) & 1).astype(bool),
    "mget": lambda m: (np.asarray(m).astype(U32) << MASK_BITS).sum(axis=-1).astype(U32)[()],
}
for _w in WIDTH:
    VECTOR_OPS[f"vbcast.{_w}"] = lambda s, w=_w: _bcast(s, w)
    VECTOR_OPS[f"vext.{_w}"] = lambda v, imm, w=_w: _extract(v, imm, w)
    VECTOR_OPS[f"vins.{_w}"] = lambda v, s, imm, w=_w: _insert(v, s, imm, w)
    VECTOR_OPS[f"vmask.{_w}"] = lambda s, w=_w: _vmask(s, w)


# --- vector floating point --------------------------------------------------------------

FLOAT_TYPES = {"f16": (F16, np.uint16, 0x8000), "f32": (F32, U32, 0x80000000)}

# f16 -> f32 of every bit pattern, made by numpy's own cast: a table lookup gives the
# same bits and is about twice as fast as the (scalar) cast on large batches.
F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(F16).astype(F32)


def widen_f16(bits: np.ndarray) -> np.ndarray:
    """f16 lanes, given as their uint16 bit patterns, as float32."""
    return F16_TO_F32.take(bits)


def _float_ops(suffix: str) -> dict[str, Callable]:
    ftype, utype, sign = FLOAT_TYPES[suffix]
    width = np.dtype(ftype).itemsize

    # f32 lanes are used in place (no function below writes to its inputs) and a
    # float32 result is not copied again: a batch's time is mostly such copies.
    def wide(v):                 # lanes widened to float32
        return widen_f16(lanes(v, utype)) if ftype is F16 else lanes(v, ftype)

    def out(x):                  # float32 (or float64) lanes rounded to the lane type
        return to_bytes(np.asarray(x).astype(ftype, copy=False), ftype)

    def binary(op):
        return lambda a, b: out(_lanewise(op, wide(a), wide(b)))

    def unary(op):
        return lambda a: out(op(np.ascontiguousarray(wide(a))))

    def compare(op):
        return lambda a, b: repeat_mask(op(wide(a), wide(b)), width)

    def tree_sum(a):
        x = wide(a)
        while x.shape[-1] > 1:   # ((l0+l1)+(l2+l3)) + ... in float32
            x = x[..., 0::2] + x[..., 1::2]
        return f32_bits(x[..., 0])

    return {
        "vadd": binary(np.add), "vsub": binary(np.subtract), "vmul": binary(np.multiply),
        "vdiv": binary(np.divide), "vmin": binary(np.minimum), "vmax": binary(np.maximum),
        "vfma": lambda a, b, c: out(wide(a).astype(np.float64) * wide(b).astype(np.float64)
                                    + wide(c).astype(np.float64)),
        "vabs": lambda a: to_bytes(lanes(a, utype) & utype(sign - 1), utype),
        "vneg": lambda a: to_bytes(lanes(a, utype) ^ utype(sign), utype),
        "vsqrt": unary(np.sqrt),
        "vcmpeq": compare(np.equal), "vcmplt": compare(np.less), "vcmple": compare(np.less_equal),
        "vexp": unary(np.exp), "vlog": unary(np.log), "vtanh": unary(np.tanh),
        "vrcp": unary(lambda x: F32(1) / x),
        "vrsqrt": unary(lambda x: F32(1) / np.sqrt(x)),
        "vredsum": tree_sum,
        "vredmax": lambda a: f32_bits(np.max(wide(a), axis=-1)),
        "vredmin": lambda a: f32_bits(np.min(wide(a), axis=-1)),
    }


for _suffix in FLOAT_TYPES:
    for _name, _fn in _float_ops(_suffix).items():
        VECTOR_OPS[f"{_name}.{_suffix}"] = _fn


# A batch against one unbatched vector (a kernel's constant): numpy broadcasts it in
# inner loops of one vector's lanes, several times slower than long ones.  Rows of
# many vectors against the vector repeated give the same elementwise result.
_LONG_ROW = 1024


def _lanewise(op, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``op(x, y)`` elementwise, x and y lanes (..., n) broadcasting as numpy does."""
    if x.ndim == 2 and y.ndim == 1:
        flat = _long_rows(x)
        if flat is not None:
            return op(flat, np.tile(y, flat.shape[1] // len(y))).reshape(x.shape)
    elif y.ndim == 2 and x.ndim == 1:
        flat = _long_rows(y)
        if flat is not None:
            return op(np.tile(x, flat.shape[1] // len(x)), flat).reshape(y.shape)
    return op(x, y)


def _long_rows(x: np.ndarray) -> np.ndarray | None:
    """``x`` (rows, n), C-contiguous, viewed as fewer rows of whole vectors."""
    rows, n = x.shape
    if not x.flags.c_contiguous or rows * n < 2 * _LONG_ROW:
        return None
    per_row = _LONG_ROW // n
    while rows % per_row:
        per_row //= 2
    return x.reshape(rows // per_row, per_row * n) if per_row > 1 else None


# vmax.f16 and vmin.f16 return one of their operands (widened to f32, compared,
# rounded back: exact), so for lanes that are not NaN they are a choice by the
# operands' order, made on the bits: no conversion.  On a tie (+0 against -0) numpy's
# maximum and minimum return the second operand; NaN lanes take the general form.
def _f16_order(bits: np.ndarray) -> np.ndarray:
    """int16 keys ordered as the f16 values, -0 equal to +0 (NaNs not ordered)."""
    s = bits.view(np.int16)
    t = (s >> 15) & np.int16(0x7FFF)         # 0x7FFF for negative values, else 0
    return (s ^ t) + (t & np.int16(1))


def _f16_choose(general: Callable, maximum: bool) -> Callable:
    def fn(a, b):
        x, y = lanes(a, np.uint16), lanes(b, np.uint16)
        pick = _lanewise(np.greater if maximum else np.less, _f16_order(x), _f16_order(y))
        select = np.uint16(0) - pick.view(np.uint8).astype(np.uint16)   # 0xFFFF: x
        chosen = _lanewise(np.bitwise_xor, y, _lanewise(np.bitwise_xor, x, y) & select)
        nan = _lanewise(np.bitwise_or, _f16_nan(x), _f16_nan(y))
        if nan.any():
            chosen = np.where(nan, lanes(general(a, b), np.uint16), chosen)
        return to_bytes(chosen, np.uint16)
    return fn


def _f16_nan(bits: np.ndarray):
    return (bits & np.uint16(0x7FFF)) > np.uint16(0x7C00)


for _name, _maximum in (("vmax.f16", True), ("vmin.f16", False)):
    VECTOR_OPS[_name] = _f16_choose(VECTOR_OPS[_name], _maximum)


# --- vector integer -------------------------------------------------------------------------

def _int_binary(dtype, op):
    return lambda a, b: to_bytes(op(lanes(a, dtype), lanes(b, dtype)), dtype)


def _int_shift(dtype, op):
    return lambda a, imm: to_bytes(op(lanes(a, dtype), dtype(int(imm))), dtype)


def _int_compare(op):
    return lambda a, b: repeat_mask(op(lanes(a, I32), lanes(b, I32)), 4)


VECTOR_OPS.update({
    "vadd.i8": _int_binary(np.uint8, np.add), "vadd.i16": _int_binary(np.uint16, np.add),
    "vadd.i32": _int_binary(U32, np.add), "vsub.i8": _int_binary(np.uint8, np.subtract),
    "vsub.i16": _int_binary(np.uint16, np.subtract), "vsub.i32": _int_binary(U32, np.subtract),
    "vmul.i16": _int_binary(np.uint16, np.multiply), "vmul.i32": _int_binary(U32, np.multiply),
    "vmin.i32": _int_binary(I32, np.minimum), "vmax.i32": _int_binary(I32, np.maximum),
    "vmin.u8": _int_binary(np.uint8, np.minimum), "vmax.u8": _int_binary(np.uint8, np.maximum),
    "vand": lambda a, b: a & b, "vor": lambda a, b: a | b, "vxor": lambda a, b: a ^ b,
    "vslli.i16": _int_shift(np.uint16, np.left_shift), "vslli.i32": _int_shift(U32, np.left_shift),
    "vsrli.i16": _int_shift(np.uint16, np.right_shift),
    "vsrli.i32": _int_shift(U32, np.right_shift),
    "vsrai.i16": _int_shift(np.int16, np.right_shift), "vsrai.i32": _int_shift(I32, np.right_shift),
    "vcmpeq.i32": _int_compare(np.equal), "vcmplt.i32": _int_compare(np.less),
    "vredsum.i32": lambda a: u32(lanes(a, U32).astype(I64).sum(axis=-1)),
})


# --- conversions ------------------------------------------------------------------------------

def _pack(a, b, ftype) -> np.ndarray:
    low, high = broadcast_all(lanes(a, F32).astype(ftype), lanes(b, F32).astype(ftype))
    return to_bytes(np.concatenate([low, high], axis=-1), ftype)


VECTOR_OPS.update({
    "vcvtl.f32.f16": lambda a: to_bytes(widen_f16(lanes(a, np.uint16)[..., :4]), F32),
    "vcvth.f32.f16": lambda a: to_bytes(widen_f16(lanes(a, np.uint16)[..., 4:]), F32),
    "vcvt.f16.f32": lambda a, b: _pack(a, b, F16),
    "vcvtl.f32.bf16": lambda a: to_bytes(lanes(a, BF16)[..., :4].astype(F32), F32),
    "vcvth.f32.bf16": lambda a: to_bytes(lanes(a, BF16)[..., 4:].astype(F32), F32),
    "vcvt.bf16.f32": lambda a, b: _pack(a, b, BF16),
    "vcvt.f32.i32": lambda a: to_bytes(lanes(a, I32).astype(F32), F32),
    "vcvt.i32.f32": lambda a: to_bytes(f32_to_i32(lanes(a, F32), np.trunc).astype(I32), I32),
    "vcvtr.i32.f32": lambda a: to_bytes(f32_to_i32(lanes(a, F32), np.rint).astype(I32), I32),
})


# --- the batch forms ----------------------------------------------------------------------
# The general forms above accept any operands (scalars, lists, any layout, a batch against
# one vector) at the price of a few numpy calls each, which on a fast-path batch of a few
# hundred rows cost more than the arithmetic.  Operands that are byte vectors of one shape
# whose lanes are contiguous -- every batch the fast paths make: loads copy, results are
# fresh -- go through the same ufuncs on the same lane types in the same order, so the
# same bits (``tests/shave/test_unbatched.py`` compares them with ``GENERAL``); anything
# else, or a layout ``view`` refuses (ValueError), takes the general form.

GENERAL: dict[str, Callable] = {}
_U8 = np.dtype(np.uint8)
_SMALL_F16_CHOICE = 512 * 16         # bytes of a batch vmin.f16 / vmax.f16 widens
_take = F16_TO_F32.take


def _batch_binary(name: str, fast: Callable) -> None:
    general = GENERAL[name] = VECTOR_OPS[name]

    def fn(a, b):
        if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == _U8 \
                and b.dtype == _U8 and a.shape == b.shape:
            try:
                return fast(a, b)
            except ValueError:
                pass
        return general(a, b)
    VECTOR_OPS[name] = fn


def _batch_unary(name: str, fast: Callable) -> None:
    general = GENERAL[name] = VECTOR_OPS[name]

    def fn(a):
        if type(a) is np.ndarray and a.dtype == _U8:
            try:
                return fast(a)
            except ValueError:
                pass
        return general(a)
    VECTOR_OPS[name] = fn


def _batch_fma(name: str, widen: Callable, ftype) -> None:
    general = GENERAL[name] = VECTOR_OPS[name]

    def fn(a, b, c):
        if type(a) is np.ndarray and type(b) is np.ndarray and type(c) is np.ndarray \
                and a.dtype == _U8 and b.dtype == _U8 and c.dtype == _U8 \
                and a.shape == b.shape == c.shape:
            try:
                return (widen(a).astype(np.float64) * widen(b).astype(np.float64)
                        + widen(c).astype(np.float64)).astype(ftype).view(np.uint8)
            except ValueError:
                pass
        return general(a, b, c)
    VECTOR_OPS[name] = fn


def _wide_f32(v):
    return v.view(F32)


def _wide_f16(v):
    return _take(v.view(np.uint16))


for _name, _op in (("vadd", np.add), ("vsub", np.subtract), ("vmul", np.multiply),
                   ("vdiv", np.divide), ("vmin", np.minimum), ("vmax", np.maximum)):
    _batch_binary(f"{_name}.f32", lambda a, b, op=_op: op(a.view(F32), b.view(F32)).view(np.uint8))
    if _name not in ("vmin", "vmax"):
        _batch_binary(f"{_name}.f16", lambda a, b, op=_op:
                      op(_wide_f16(a), _wide_f16(b)).astype(F16).view(np.uint8))
    else:
        # ``_f16_choose`` (the general form) picks on the bits, faster from about 512 rows
        # on; below, the float form it stands for (widened, compared, rounded back) is
        _batch_binary(f"{_name}.f16", lambda a, b, op=_op, choose=VECTOR_OPS[f"{_name}.f16"]: (
            op(_wide_f16(a), _wide_f16(b)).astype(F16).view(np.uint8)
            if a.size <= _SMALL_F16_CHOICE else choose(a, b)))
_batch_fma("vfma.f32", _wide_f32, F32)
_batch_fma("vfma.f16", _wide_f16, F16)
for _name, _op in (("vexp", np.exp), ("vsqrt", np.sqrt), ("vtanh", np.tanh), ("vlog", np.log)):
    # contiguous, as the general form gives them: numpy's SIMD and strided loops of a
    # transcendental function may round differently
    _batch_unary(f"{_name}.f32", lambda a, op=_op:
                 op(np.ascontiguousarray(a.view(F32))).view(np.uint8))
_batch_unary("vcvtl.f32.f16", lambda a: _take(a.view(np.uint16)[..., :4]).view(np.uint8))
_batch_unary("vcvth.f32.f16", lambda a: _take(a.view(np.uint16)[..., 4:]).view(np.uint8))
_batch_binary("vcvt.f16.f32", lambda a, b: np.concatenate(
    (a.view(F32), b.view(F32)), axis=-1).astype(F16).view(np.uint8))
