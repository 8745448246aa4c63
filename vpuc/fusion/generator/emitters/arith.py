"""Emitters of the arithmetic ops that have one instruction per lane type.

f32 and f16 values use the native instruction: the ISA computes f16 lanes in
f32 and rounds once, exactly what the reference executor does per op, so the
result is bit-identical.  Other types (bf16, i32, u8) go through f32 chunks
(forms.py).  Ops whose reference formula takes several f32 steps before one
rounding (SquaredDifference) use the chunks for f16 too.
"""

from __future__ import annotations

from typing import Callable

from vpuc.fusion.generator.context import EmitContext
from vpuc.fusion.generator.forms import chunks, from_f32, native_suffix, to_f32
from vpuc.fusion.generator.mir import Reg
from vpuc.fusion.lir.expression import Expression

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


EMITTERS = {
    "Add": binary("vadd"), "Subtract": binary("vsub"), "Multiply": binary("vmul"),
    "Divide": binary("vdiv"), "Maximum": binary("vmax"), "Minimum": binary("vmin"),
    "Abs": unary("vabs"), "Negative": unary("vneg"), "Sqrt": unary("vsqrt"),
    "Exp": unary("vexp"), "Tanh": unary("vtanh"), "Log": unary("vlog"),
    "FMA": native_or_chunks(_fma_native, _fma_chunk),
    "Relu": native_or_chunks(_relu_native, _relu_chunk),
    "Clamp": native_or_chunks(_clamp_native, _clamp_chunk),
    "SquaredDifference": native_or_chunks(_sqdiff_native, _squared_difference, native_f16=False),
}
