"""What every SHAVE opcode does: the one definition, shared by the exact
interpreter and the vectorized fast path.

Value conventions (every function accepts an arbitrary leading batch shape
``...``; batched and unbatched operands broadcast against each other):

* scalar register, immediate: ``np.uint32``, shape ``(...)`` -- immediates are
  passed as their raw 32-bit pattern (floats too);
* vector register: ``np.uint8``, shape ``(..., 16)``; lane i of an n-byte lane
  type is bytes [i*n, (i+1)*n), little-endian;
* mask register: ``bool``, shape ``(..., 16)``; bit i governs vector byte i.

A semantic function takes the values its instruction *reads*, in operand order
(a memory operand contributes its base register and its offset; a register
pair contributes low and high), and returns what it *writes* (a tuple for a
register pair).  Loads and stores also take the ``WindowMemory`` first.
Branch conditions return bool; ``loop`` returns (new count, taken).

Floating point: lanes are widened to float32, computed there and rounded once to
the lane type (f16 via numpy float16, bf16 via ``ml_dtypes.bfloat16``), round to
nearest even.  f32 has more than 2*11+2 significand bits, so f16 + - * / sqrt
computed this way are correctly rounded.  ``vfma`` evaluates in float64.
Transcendentals use numpy's float32 functions on contiguous arrays, so a lane's
result never depends on the batch it is computed in.  All numpy warnings
(overflow, invalid, divide) must be silenced by the caller (``np.errstate``):
the ISA defines those results, it does not trap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from vpuc.shave.encoding import Decoded
from vpuc.shave.isa import BY_MNEMONIC, INSTRUCTIONS, NUM_MREGS, NUM_SREGS, NUM_VREGS, WIDTH

U32, I32, I64 = np.uint32, np.int32, np.int64
F16, F32, BF16 = np.float16, np.float32, ml_dtypes.bfloat16
_LANE_BYTE = {w: np.arange(16) % WIDTH[w] for w in WIDTH}
_LANE_INDEX = {w: np.arange(16) // WIDTH[w] for w in WIDTH}
_BYTES16 = np.arange(16, dtype=I64)
_MASK_BITS = np.arange(16, dtype=U32)


@dataclass(frozen=True)
class Semantic:
    mnemonic: str
    kind: str          # op, load, store, branch, loop, jump, call, ret, halt, nop
    fn: Callable | None


# --- the register file and what an instruction reads and writes ----------------------

# One numbering of all registers: s0..s31 = 0..31, v0..v31 = 32..63, m0..m7 = 64..71.
REGISTER_KEY_BASE = {"s": 0, "v": NUM_SREGS, "m": NUM_SREGS + NUM_VREGS}
NUM_REGISTER_KEYS = NUM_SREGS + NUM_VREGS + NUM_MREGS


def register_key(regfile: str, number: int) -> int:
    return REGISTER_KEY_BASE[regfile] + number


@dataclass(frozen=True)
class Access:
    """The operands of one decoded instruction, in the semantic function's order.

    ``reads`` items are ``("reg", key)`` or ``("imm", np.uint32)``; ``writes``
    are register keys, in the order the function returns them; ``branch`` is
    the pc-relative byte offset of a label operand, if any.  ``call`` also
    writes lr and ``ret`` reads it (not listed: they have no semantic function).
    """

    reads: tuple[tuple[str, object], ...]
    writes: tuple[int, ...]
    branch: int | None


def operand_access(dec: Decoded) -> Access:
    """The operands of ``dec`` (decoded words are shared and never change: computed once
    per word)."""
    found = _ACCESSES.get(id(dec))
    if found is None or found[0] is not dec:
        if len(_ACCESSES) >= 1 << 16:
            _ACCESSES.clear()
        found = _ACCESSES[id(dec)] = (dec, _operand_access(dec))
    return found[1]


_ACCESSES: dict[int, tuple[Decoded, Access]] = {}


def _operand_access(dec: Decoded) -> Access:
    reads: list[tuple[str, object]] = []
    writes: list[int] = []
    branch = None
    for op in dec.info.operands:
        kind = op.kind
        if kind == "mem":
            reads += [("reg", register_key("s", dec.fields[op.field])), ("imm", U32(dec.imm))]
        elif kind in ("imm", "f32", "f16", "sym"):
            reads.append(("imm", U32(dec.imm)))
        elif kind == "label":
            branch = int(np.int32(np.uint32(dec.imm)))
        else:
            key = register_key(kind[0], dec.fields[op.field])
            keys = [key, key + 1] if kind in ("sa2", "sd2") else [key]
            if kind in ("sa", "va", "ma", "su", "vu", "sa2"):
                reads += [("reg", k) for k in keys]
            if kind in ("sd", "vd", "md", "su", "vu", "sd2"):
                writes += keys
    return Access(tuple(reads), tuple(writes), branch)


# --- helpers ---------------------------------------------------------------------

def lanes(v: np.ndarray, dtype) -> np.ndarray:
    """A vector register (..., 16) as typed lanes (..., 16 // itemsize)."""
    return np.ascontiguousarray(v).view(dtype)


def to_bytes(x: np.ndarray, dtype) -> np.ndarray:
    """Typed lanes (..., n) back to a vector register (..., 16) of bytes."""
    return np.ascontiguousarray(x, dtype=dtype).view(np.uint8)


def _u32(x) -> np.ndarray:
    """Any integer result to uint32 (mod 2^32), keeping scalars scalar."""
    return (np.asarray(x).astype(I64) & 0xFFFFFFFF).astype(U32)[()]


def _s(x) -> np.ndarray:
    return np.asarray(x, dtype=U32).view(I32)[()]


def _bool_u32(x) -> np.ndarray:
    return np.asarray(x).astype(U32)[()]


def _address(base, offset) -> np.ndarray:
    if type(base) is U32 and type(offset) is U32:     # the interpreter's scalar case, cheaply
        return U32((int(base) + int(offset)) & 0xFFFFFFFF)
    return (np.asarray(base, U32) + np.asarray(offset, U32))[()]


def _repeat_mask(lane_mask: np.ndarray, width: int) -> np.ndarray:
    return np.repeat(lane_mask, width, axis=-1)


def _broadcast(*arrays: np.ndarray) -> list[np.ndarray]:
    return list(np.broadcast_arrays(*arrays))


# --- scalar integer ----------------------------------------------------------------

def _div(a, b):
    x, y = _s(a).astype(I64), _s(b).astype(I64)
    safe = np.where(y == 0, 1, y)
    quotient = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return _u32(np.where(y == 0, -1, quotient))


def _rem(a, b):
    x, y = _s(a).astype(I64), _s(b).astype(I64)
    safe = np.where(y == 0, 1, y)
    quotient = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return _u32(np.where(y == 0, x, x - quotient * safe))


def _divu(a, b):
    x, y = np.asarray(a, I64), np.asarray(b, I64)
    return _u32(np.where(y == 0, 0xFFFFFFFF, x // np.where(y == 0, 1, y)))


def _remu(a, b):
    x, y = np.asarray(a, I64), np.asarray(b, I64)
    return _u32(np.where(y == 0, x, x % np.where(y == 0, 1, y)))


def _mulh(a, b):
    return _u32((_s(a).astype(I64) * _s(b).astype(I64)) >> 32)


def _mulhu(a, b):
    return _u32((np.asarray(a, np.uint64) * np.asarray(b, np.uint64)) >> np.uint64(32))


def _sra(a, amount):
    return (_s(a) >> (_s(amount) & 31)).view(U32)


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
    "slt": lambda a, b: _bool_u32(_s(a) < _s(b)),
    "sltu": lambda a, b: _bool_u32(a < b),
    "seq": lambda a, b: _bool_u32(a == b),
    "sne": lambda a, b: _bool_u32(a != b),
    "min": lambda a, b: np.minimum(_s(a), _s(b)).view(U32),
    "max": lambda a, b: np.maximum(_s(a), _s(b)).view(U32),
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

def _f(a):
    return np.asarray(a, U32).view(F32)[()]


def _bits(x):
    return np.asarray(x, F32).view(U32)[()]


def _f32_to_i32(x, rounding: Callable) -> np.ndarray:
    wide = np.asarray(x, np.float64)
    clipped = np.clip(rounding(np.where(np.isnan(wide), 0.0, wide)), -2.0 ** 31, 2.0 ** 31 - 1)
    return clipped.astype(I64)


SCALAR_OPS.update({
    "fadd": lambda a, b: _bits(_f(a) + _f(b)),
    "fsub": lambda a, b: _bits(_f(a) - _f(b)),
    "fmul": lambda a, b: _bits(_f(a) * _f(b)),
    "fdiv": lambda a, b: _bits(_f(a) / _f(b)),
    "fmin": lambda a, b: _bits(np.minimum(_f(a), _f(b))),
    "fmax": lambda a, b: _bits(np.maximum(_f(a), _f(b))),
    "feq": lambda a, b: _bool_u32(_f(a) == _f(b)),
    "flt": lambda a, b: _bool_u32(_f(a) < _f(b)),
    "fle": lambda a, b: _bool_u32(_f(a) <= _f(b)),
    "fabs": lambda a: a & U32(0x7FFFFFFF),
    "fneg": lambda a: a ^ U32(0x80000000),
    "fsqrt": lambda a: _bits(np.sqrt(_f(a))),
    "fcvt.f32.i32": lambda a: _bits(_s(a).astype(F32)),
    "fcvt.f32.u32": lambda a: _bits(np.asarray(a, U32).astype(F32)),
    "fcvt.i32.f32": lambda a: _u32(_f32_to_i32(_f(a), np.trunc)),
    "fcvt.f32.f16": lambda a: _bits((np.asarray(a, U32) & 0xFFFF).astype(np.uint16)
                                    .view(F16).astype(F32)),
    "fcvt.f16.f32": lambda a: np.asarray(_f(a)).astype(F16).view(np.uint16).astype(U32)[()],
})


# --- memory ----------------------------------------------------------------------------

def _load(mem, address, size: int) -> np.ndarray:
    """(..., size) bytes at each address."""
    if np.ndim(address) == 0:
        return mem.read(int(address), size)
    return mem.read_rows(address, size)


def _store(mem, address, data: np.ndarray) -> None:
    if np.ndim(address) == 0 and data.ndim == 1:
        mem.write(int(address), data)
    else:
        rows = data.shape[:-1]          # the usual batch: one address per row of data
        shape = rows if np.shape(address) == rows else np.broadcast_shapes(np.shape(address),
                                                                          rows)
        mem.write_rows(np.broadcast_to(np.asarray(address, I64), shape), data)


def _scalar_bytes(value, dtype) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(value, U32).astype(dtype)[..., None]).view(np.uint8)


MEMORY_OPS: dict[str, tuple[str, Callable]] = {
    "lb": ("load", lambda m, b, o: _u32(_load(m, _address(b, o), 1).view(np.int8)[..., 0])),
    "lbu": ("load", lambda m, b, o: _load(m, _address(b, o), 1)[..., 0].astype(U32)),
    "lh": ("load", lambda m, b, o: _u32(_load(m, _address(b, o), 2).view(np.int16)[..., 0])),
    "lhu": ("load", lambda m, b, o: _load(m, _address(b, o), 2).view(np.uint16)[..., 0]
            .astype(U32)),
    "lw": ("load", lambda m, b, o: _load(m, _address(b, o), 4).view(U32)[..., 0]),
    "ld": ("load", lambda m, b, o: tuple(_load(m, _address(b, o), 8).view(U32)[..., i]
                                         for i in (0, 1))),
    "sb": ("store", lambda m, v, b, o: _store(m, _address(b, o), _scalar_bytes(v, np.uint8))),
    "sh": ("store", lambda m, v, b, o: _store(m, _address(b, o), _scalar_bytes(v, np.uint16))),
    "sw": ("store", lambda m, v, b, o: _store(m, _address(b, o), _scalar_bytes(v, U32))),
    "sd": ("store", lambda m, lo, hi, b, o: _store(
        m, _address(b, o), np.concatenate(_broadcast(_scalar_bytes(lo, U32),
                                                     _scalar_bytes(hi, U32)), axis=-1))),
    "vld": ("load", lambda m, b, o: _load(m, _address(b, o), 16)),
    "vst": ("store", lambda m, v, b, o: _store(m, _address(b, o), np.asarray(v, np.uint8))),
    "vld.m": ("load", lambda m, b, o, mask: m.gather(
        np.asarray(_address(b, o), I64)[..., None] + _BYTES16, mask)),
    "vst.m": ("store", lambda m, v, b, o, mask: _masked_store(m, _address(b, o), v, mask)),
}


def _masked_store(mem, address, data, mask) -> None:
    """``vst.m``: one address, or one per row of a batch of data or masks (a batch storing
    at one address: the last row wins, as one store after another)."""
    addresses = np.asarray(address, I64)[..., None] + _BYTES16
    shape = np.broadcast_shapes(addresses.shape, np.shape(data), np.shape(mask))
    mem.scatter(np.broadcast_to(addresses, shape), data, mask)


def _strided(base, offset, stride, w: str) -> np.ndarray:
    """Byte addresses (..., 16) of a strided access; stride is a signed byte count."""
    start = np.asarray(_address(base, offset), I64)[..., None]
    step = np.asarray(_s(stride), I64)[..., None]
    return (start + _LANE_INDEX[w] * step + _LANE_BYTE[w]) & 0xFFFFFFFF


def _lane_mask(mask: np.ndarray, w: str) -> np.ndarray:
    """A lane is active when the mask bit of its first byte is set."""
    first = np.asarray(mask)[..., ::WIDTH[w]]
    return _repeat_mask(first, WIDTH[w])


def _broadcast_load(mem, base, offset, w: str) -> np.ndarray:
    element = _load(mem, _address(base, offset), WIDTH[w])
    return np.concatenate([element] * (16 // WIDTH[w]), axis=-1)


for _w in WIDTH:
    MEMORY_OPS.update({
        f"vlds.{_w}": ("load", lambda m, b, o, s, w=_w: m.gather(_strided(b, o, s, w))),
        f"vsts.{_w}": ("store", lambda m, v, b, o, s, w=_w: m.scatter(_strided(b, o, s, w), v)),
        f"vlds.m.{_w}": ("load", lambda m, b, o, s, k, w=_w: m.gather(
            _strided(b, o, s, w), _lane_mask(k, w))),
        f"vsts.m.{_w}": ("store", lambda m, v, b, o, s, k, w=_w: m.scatter(
            _strided(b, o, s, w), v, _lane_mask(k, w))),
        f"vldb.{_w}": ("load", lambda m, b, o, w=_w: _broadcast_load(m, b, o, w)),
    })


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
    "mset": lambda s: ((np.asarray(s, U32)[..., None] >> _MASK_BITS) & 1).astype(bool),
    "mget": lambda m: (np.asarray(m).astype(U32) << _MASK_BITS).sum(axis=-1).astype(U32)[()],
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
_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(F16).astype(F32)


def _widen_f16(bits: np.ndarray) -> np.ndarray:
    """f16 lanes, given as their uint16 bit patterns, as float32."""
    return _F16_TO_F32.take(bits)


def _float_ops(suffix: str) -> dict[str, Callable]:
    ftype, utype, sign = FLOAT_TYPES[suffix]
    width = np.dtype(ftype).itemsize

    # f32 lanes are used in place (no function below writes to its inputs) and a
    # float32 result is not copied again: a batch's time is mostly such copies.
    def wide(v):                 # lanes widened to float32
        return _widen_f16(lanes(v, utype)) if ftype is F16 else lanes(v, ftype)

    def out(x):                  # float32 (or float64) lanes rounded to the lane type
        return to_bytes(np.asarray(x).astype(ftype, copy=False), ftype)

    def binary(op):
        return lambda a, b: out(_lanewise(op, wide(a), wide(b)))

    def unary(op):
        return lambda a: out(op(np.ascontiguousarray(wide(a))))

    def compare(op):
        return lambda a, b: _repeat_mask(op(wide(a), wide(b)), width)

    def tree_sum(a):
        x = wide(a)
        while x.shape[-1] > 1:   # ((l0+l1)+(l2+l3)) + ... in float32
            x = x[..., 0::2] + x[..., 1::2]
        return _bits(x[..., 0])

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
        "vredmax": lambda a: _bits(np.max(wide(a), axis=-1)),
        "vredmin": lambda a: _bits(np.min(wide(a), axis=-1)),
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
    return lambda a, b: _repeat_mask(op(lanes(a, I32), lanes(b, I32)), 4)


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
    "vredsum.i32": lambda a: _u32(lanes(a, U32).astype(I64).sum(axis=-1)),
})


# --- conversions ------------------------------------------------------------------------------

def _pack(a, b, ftype) -> np.ndarray:
    low, high = _broadcast(lanes(a, F32).astype(ftype), lanes(b, F32).astype(ftype))
    return to_bytes(np.concatenate([low, high], axis=-1), ftype)


VECTOR_OPS.update({
    "vcvtl.f32.f16": lambda a: to_bytes(_widen_f16(lanes(a, np.uint16)[..., :4]), F32),
    "vcvth.f32.f16": lambda a: to_bytes(_widen_f16(lanes(a, np.uint16)[..., 4:]), F32),
    "vcvt.f16.f32": lambda a, b: _pack(a, b, F16),
    "vcvtl.f32.bf16": lambda a: to_bytes(lanes(a, BF16)[..., :4].astype(F32), F32),
    "vcvth.f32.bf16": lambda a: to_bytes(lanes(a, BF16)[..., 4:].astype(F32), F32),
    "vcvt.bf16.f32": lambda a, b: _pack(a, b, BF16),
    "vcvt.f32.i32": lambda a: to_bytes(lanes(a, I32).astype(F32), F32),
    "vcvt.i32.f32": lambda a: to_bytes(_f32_to_i32(lanes(a, F32), np.trunc).astype(I32), I32),
    "vcvtr.i32.f32": lambda a: to_bytes(_f32_to_i32(lanes(a, F32), np.rint).astype(I32), I32),
})


# --- control ----------------------------------------------------------------------------------

BRANCH_CONDITIONS: dict[str, Callable] = {
    "beq": lambda a, b: a == b,
    "bne": lambda a, b: a != b,
    "blt": lambda a, b: _s(a) < _s(b),
    "bge": lambda a, b: _s(a) >= _s(b),
    "bltu": lambda a, b: a < b,
    "bgeu": lambda a, b: a >= b,
    "beqz": lambda a: a == 0,
    "bnez": lambda a: a != 0,
}


def _loop(count):
    remaining = count - U32(1)
    return remaining, remaining != 0


# --- the table ---------------------------------------------------------------------------------

def _build() -> dict[int, Semantic]:
    by_name: dict[str, Semantic] = {}
    for name, fn in {**SCALAR_OPS, **VECTOR_OPS}.items():
        by_name[name] = Semantic(name, "op", fn)
    for name, (kind, fn) in MEMORY_OPS.items():
        by_name[name] = Semantic(name, kind, fn)
    for name, fn in BRANCH_CONDITIONS.items():
        by_name[name] = Semantic(name, "branch", fn)
    by_name["loop"] = Semantic("loop", "loop", _loop)
    for name in ("j", "call", "ret", "halt", "nop"):
        by_name[name] = Semantic(name, {"j": "jump"}.get(name, name), None)
    missing = sorted(set(BY_MNEMONIC) - set(by_name))
    extra = sorted(set(by_name) - set(BY_MNEMONIC))
    assert not missing and not extra, f"semantics out of sync: missing {missing}, extra {extra}"
    return {ins.opcode: by_name[ins.mnemonic] for ins in INSTRUCTIONS}


SEMANTICS: dict[int, Semantic] = _build()
