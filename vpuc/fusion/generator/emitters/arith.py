"""Emitters of the arithmetic ops that have one instruction per lane type.

f32 and f16 values use the native instruction: the ISA computes f16 lanes in
f32 and rounds once, exactly what the reference executor does per op, so the
result is bit-identical.  Other types (bf16, i32, u8) go through f32 chunks
(forms.py).  Ops whose reference formula takes several f32 steps before one
rounding (SquaredDifference) use the chunks for f16 too.

A 16-bit float divided by a constant (ONNX's Gelu: ``x / sqrt 2``) is
multiplied by the f32 reciprocal instead when that rounds to the same value
for every one of the type's 65536 inputs, checked here: ``vdiv`` keeps the
VAU for 4 cycles a vector, a multiply for 1 per f32 half.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from vpuc.fusion.generator.context import EmitContext
from vpuc.fusion.generator.forms import chunks, from_f32, native_suffix, to_f32
from vpuc.fusion.generator.mir import Reg
from vpuc.fusion.lir.expression import Expression
from vpuc.ir.types import ElemType
from vpuc.reference.graph import storage_dtype

ChunkFn = Callable[..., Reg]


def via_chunks(ctx: EmitContext, e: Expression, fn: ChunkFn) -> None:
    """Widen every input to f32 chunks, run ``fn(ctx, e, *inputs)`` per chunk, round back."""
    widened = [to_f32(ctx, ctx.inp(e, i), e.in_descs[i].elem) for i in range(len(e.inputs))]
    outs = [fn(ctx, e, *(w[k] for w in widened)) for k in range(chunks(ctx))]
    from_f32(ctx, outs, e.out_descs[0].elem, ctx.out(e))


def native_or_chunks(native: Callable[[EmitContext, Expression, str], None],
                     fn: ChunkFn, native_f16: bool = True):
    def emit(ctx: EmitContext, e: Expression) -> None:
        suffix = native_suffix(ctx, e.out_descs[0].elem)
        if suffix == "f32" or (suffix == "f16" and native_f16):
            native(ctx, e, suffix)
        else:
            via_chunks(ctx, e, fn)
    return emit


def _op(ctx: EmitContext, mnemonic: str, *args: Reg) -> Reg:
    r = ctx.new("v")
    ctx.emit(mnemonic, r, *args)
    return r


def binary(mnemonic: str):
    def native(ctx: EmitContext, e: Expression, suffix: str) -> None:
        ctx.emit(f"{mnemonic}.{suffix}", ctx.out(e), ctx.inp(e, 0), ctx.inp(e, 1))

    def chunk(ctx: EmitContext, e: Expression, a: Reg, b: Reg) -> Reg:
        return _op(ctx, f"{mnemonic}.f32", a, b)
    return native_or_chunks(native, chunk)


def unary(mnemonic: str):
    def native(ctx: EmitContext, e: Expression, suffix: str) -> None:
        ctx.emit(f"{mnemonic}.{suffix}", ctx.out(e), ctx.inp(e, 0))

    def chunk(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
        return _op(ctx, f"{mnemonic}.f32", x)
    return native_or_chunks(native, chunk)


def _fma_native(ctx: EmitContext, e: Expression, suffix: str) -> None:
    ctx.emit(f"vfma.{suffix}", ctx.out(e), ctx.inp(e, 0), ctx.inp(e, 1), ctx.inp(e, 2))


def _fma_chunk(ctx: EmitContext, e: Expression, a: Reg, b: Reg, c: Reg) -> Reg:
    # bf16: rounded to f32 then to bf16 (twice; the reference rounds once from f64)
    return _op(ctx, "vfma.f32", a, b, c)


def _relu_native(ctx: EmitContext, e: Expression, suffix: str) -> None:
    zero = ctx.splat(0.0, e.out_descs[0].elem)
    ctx.emit(f"vmax.{suffix}", ctx.out(e), ctx.inp(e, 0), zero)


def _relu_chunk(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    return _op(ctx, "vmax.f32", x, ctx.splat_f32(0.0))


def _clamp_native(ctx: EmitContext, e: Expression, suffix: str) -> None:
    # Rounding is monotonic, so max/min with the bounds rounded to the lane type equal
    # the reference's clip in f32 rounded afterwards.
    elem = e.out_descs[0].elem
    t = ctx.new("v")
    ctx.emit(f"vmax.{suffix}", t, ctx.inp(e, 0), ctx.splat(float(e.attrs["min"]), elem))
    ctx.emit(f"vmin.{suffix}", ctx.out(e), t, ctx.splat(float(e.attrs["max"]), elem))


def _clamp_chunk(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    t = _op(ctx, "vmax.f32", x, ctx.splat_f32(float(e.attrs["min"])))
    return _op(ctx, "vmin.f32", t, ctx.splat_f32(float(e.attrs["max"])))


def _squared_difference(ctx: EmitContext, e: Expression, a: Reg, b: Reg) -> Reg:
    d = _op(ctx, "vsub.f32", a, b)
    return _op(ctx, "vmul.f32", d, d)


def _sqdiff_native(ctx: EmitContext, e: Expression, suffix: str) -> None:
    d = ctx.new("v")
    ctx.emit("vsub.f32", d, ctx.inp(e, 0), ctx.inp(e, 1))
    ctx.emit("vmul.f32", ctx.out(e), d, d)


@lru_cache(maxsize=None)
def exact_reciprocal(divisor: float, elem: ElemType) -> float | None:
    """1/c in f32 when ``x * (1/c)`` in f32 rounds to the same ``elem`` value as the
    reference's ``x / c`` in f32 for every ``elem`` value x (all 65536: proof by
    exhaustion, NaN results equal whatever their bits), else None."""
    dtype = storage_dtype(elem)
    x = np.arange(1 << 16, dtype=np.uint16).view(dtype).astype(np.float32)
    c = np.float32(np.asarray(divisor, dtype=np.float64).astype(dtype))
    with np.errstate(all="ignore"):
        r = np.float32(1) / c
        quotient = (x / c).astype(dtype)
        product = (x * r).astype(dtype)
    same = (quotient.view(np.uint16) == product.view(np.uint16)) | (
        np.isnan(quotient.astype(np.float32)) & np.isnan(product.astype(np.float32)))
    return float(r) if same.all() else None


_divide_lanes = binary("vdiv")


def _divide(ctx: EmitContext, e: Expression) -> None:
    elem = e.out_descs[0].elem
    divisor = e.input_sources()[1]
    if (elem in (ElemType.F16, ElemType.BF16) and e.in_descs[0].elem is elem
            and e.in_descs[1].elem is elem and divisor.kind == "Scalar"):
        r = exact_reciprocal(float(divisor.attrs["value"]), elem)
        if r is not None:
            parts = [_op(ctx, "vmul.f32", w, ctx.splat_f32(r))
                     for w in to_f32(ctx, ctx.inp(e, 0), elem)]
            from_f32(ctx, parts, elem, ctx.out(e))
            return
    _divide_lanes(ctx, e)


EMITTERS = {
    "Add": binary("vadd"), "Subtract": binary("vsub"), "Multiply": binary("vmul"),
    "Divide": _divide, "Maximum": binary("vmax"), "Minimum": binary("vmin"),
    "Abs": unary("vabs"), "Negative": unary("vneg"), "Sqrt": unary("vsqrt"),
    "Exp": unary("vexp"), "Tanh": unary("vtanh"), "Log": unary("vlog"),
    "FMA": native_or_chunks(_fma_native, _fma_chunk),
    "Relu": native_or_chunks(_relu_native, _relu_chunk),
    "Clamp": native_or_chunks(_clamp_native, _clamp_chunk),
    "SquaredDifference": native_or_chunks(_sqdiff_native, _squared_difference, native_f16=False),
}
