"""Moving values between register forms: f32 chunks, booleans and masks (context.py).

Every op of the graph dialect is defined as "compute in f32, round to the
result's type" (``reference.py``).  Ops with an exact native instruction for
their type (f16 add, f32 anything, ...) use it directly; every other op works
on *f32 chunks*: ``to_f32`` widens a value to ``ceil(N / 4)`` registers of 4
f32 lanes, the op runs on each, and ``from_f32`` rounds back to the result's
register form exactly as the reference rounds (nearest even for floats;
truncation, saturation and NaN -> 0 for integers, like ``vcvt.i32.f32``).
"""

from __future__ import annotations

from vpuc.fusion.generator.context import (BF16, EXPANDED, F16, F32, I8, I32, U8, EmitContext,
                                           NotSupported)
from vpuc.fusion.generator.mir import Reg
from vpuc.ir.types import ElemType

HALF_BIAS = 0x6400           # f16 bits of 1024.0: OR-ing a byte into it gives 1024 + byte
I8_BIAS = 128                # i8 + 128 is a byte (0..255): the u8 conversions then apply


def chunks(ctx: EmitContext) -> int:
    return -(-ctx.n // 4)


def native_suffix(ctx: EmitContext, elem: ElemType) -> str | None:
    """The lane suffix of exact native arithmetic for ``elem`` values, if any."""
    if elem is F32:
        return "f32"
    if elem is F16:
        return "f16"
    return None


def to_f32(ctx: EmitContext, x: Reg, elem: ElemType) -> list[Reg]:
    c = chunks(ctx)
    if elem is F32:
        return [x]
    if elem in (F16, BF16):
        kind = "f16" if elem is F16 else "bf16"
        out = []
        for k in range(c):
            r = ctx.new("v")
            ctx.emit(("vcvtl" if k == 0 else "vcvth") + f".f32.{kind}", r, x)
            out.append(r)
        return out
    if elem is I32 or (elem in EXPANDED and ctx.slot == 4):
        r = ctx.new("v")
        ctx.emit("vcvt.f32.i32", r, x)             # u8 and i8 slots are i32 lanes
        return [r]
    if elem in EXPANDED and ctx.slot == 2:
        # i16 lanes 0..255 -> f16 (1024 + v) - 1024, exact -> f32; i8 is biased to a byte
        # first and the bias taken off in the same subtraction (1024..1279 are exact in f16)
        byte, offset = x, 1024.0
        if elem is I8:
            byte = ctx.new("v")
            ctx.emit("vadd.i16", byte, x, ctx.splat_int(I8_BIAS, 2))
            offset += I8_BIAS
        half = ctx.new("v")
        ctx.emit("vor", half, byte, ctx.splat_int(HALF_BIAS, 2))
        ctx.emit("vsub.f16", half, half, ctx.splat_f16(offset))
        return to_f32(ctx, half, F16)
    raise NotSupported(f"@{ctx.lir.name}: {elem} values in a loop of {ctx.n} elements")


def from_f32(ctx: EmitContext, parts: list[Reg], elem: ElemType, dst: Reg) -> None:
    """Round f32 chunks to ``elem``'s register form in ``dst``."""
    if elem is F32:
        ctx.emit("vmov", dst, parts[0])
        return
    if elem in (F16, BF16):
        kind = "f16" if elem is F16 else "bf16"
        ctx.emit(f"vcvt.{kind}.f32", dst, parts[0], parts[1] if len(parts) > 1 else parts[0])
        return
    if elem is I32:
        ctx.emit("vcvt.i32.f32", dst, parts[0])
        return
    if elem in EXPANDED:
        # saturate, truncate (NaN -> 0): the reference's round_to for integer types
        lo, hi = (0.0, 255.0) if elem is U8 else (-128.0, 127.0)
        clamped = []
        for p in parts:
            t = ctx.new("v")
            ctx.emit("vmax.f32", t, p, ctx.splat_f32(lo))
            ctx.emit("vmin.f32", t, t, ctx.splat_f32(hi))
            clamped.append(t)
        if ctx.slot == 4:
            ctx.emit("vcvt.i32.f32", dst, clamped[0])    # i8 comes out sign-extended
            return
        if ctx.slot == 2:
            # 1024 + byte as f16 has the byte in its low bits; an i8 is biased to a byte
            bias = 1024.0 if elem is U8 else 1024.0 + I8_BIAS
            biased = []
            for t in clamped:
                i = ctx.new("v")
                ctx.emit("vcvt.i32.f32", i, t)             # truncate (NaN -> 0)
                ctx.emit("vcvt.f32.i32", i, i)
                ctx.emit("vadd.f32", i, i, ctx.splat_f32(bias))
                biased.append(i)
            half = ctx.new("v")
            ctx.emit("vcvt.f16.f32", half, biased[0], biased[-1])
            if elem is U8:
                ctx.emit("vxor", dst, half, ctx.splat_int(HALF_BIAS, 2))
                return
            byte = ctx.new("v")
            ctx.emit("vxor", byte, half, ctx.splat_int(HALF_BIAS, 2))
            ctx.emit("vsub.i16", dst, byte, ctx.splat_int(I8_BIAS, 2))
            return
    raise NotSupported(f"@{ctx.lir.name}: {elem} results in a loop of {ctx.n} elements")


def compare_type(ctx: EmitContext, elem: ElemType) -> str | None:
    """Native compare suffix when ``elem`` fills the L-byte slots, else None (f32 chunks)."""
    if elem is F16 and ctx.slot == 2:
        return "f16"
    if elem is F32 and ctx.slot == 4:
        return "f32"
    return None


def masks_to_bool(ctx: EmitContext, masks: list[Reg], native: bool, dst: Reg) -> None:
    """Comparison masks (one on L-byte lanes, or one per f32 chunk) to a u8 boolean."""
    zero = ctx.splat_int(0, 4)
    if native or ctx.slot == 4:
        ctx.emit("vsel", dst, ctx.splat_int(1, ctx.slot), zero, masks[0])
        return
    if ctx.slot == 2:
        ones = []
        for m in masks:
            f = ctx.new("v")
            ctx.emit("vsel", f, ctx.splat_f32(1.0), zero, m)
            ones.append(f)
        half = ctx.new("v")
        ctx.emit("vcvt.f16.f32", half, ones[0], ones[-1])      # 1.0 = 0x3c00
        ctx.emit("vsrli.i16", dst, half, 13)                    # 0x3c00 >> 13 = 1
        return
    raise NotSupported(f"@{ctx.lir.name}: booleans in a loop of {ctx.n} elements")


def bool_zero_mask(ctx: EmitContext, cond: Reg) -> Reg:
    """A mask on L-byte lanes, set where the boolean ``cond`` is 0 (false)."""
    m = ctx.new("m")
    zero = ctx.splat_int(0, 4)
    if ctx.slot == 4:
        ctx.emit("vcmpeq.i32", m, cond, zero)
    elif ctx.slot == 2:
        ctx.emit("vcmpeq.f16", m, cond, zero)    # 0x0001 is a nonzero f16 (a subnormal)
    else:
        raise NotSupported(f"@{ctx.lir.name}: Select in a loop of {ctx.n} elements")
    return m


def elem_width(ctx: EmitContext, elem: ElemType) -> int:
    """Bytes per element in the register form (u8 and i8 are expanded to the slot)."""
    return ctx.slot if elem in EXPANDED else elem.nbytes
