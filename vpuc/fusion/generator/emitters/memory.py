"""Emitters of the LIR's own kinds: memory accesses, scalars, masks, copies, spills.

Parameter, Result and Buffer emit nothing: they *are* the pointer registers the
kernel emitter's prologue sets.  A Load or Store moving fewer elements than a
register holds has a mask input (insert-specific-iterations) and becomes
``vld.m``/``vst.m``; inactive lanes are not accessed, so a tail never touches
memory past its tensor.  u8 and i8 values live expanded to L-byte slots
(context.py): their loads unpack through the stack scratch with one strided
load (an i8 then sign-extended by a shift pair), their stores pack with
another (the low byte of a sign-extended slot is the i8's two's complement).
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.context import EXPANDED, I8, EmitContext, NotSupported
from vpuc.fusion.generator.forms import elem_width
from vpuc.fusion.generator.mir import SP, Mem
from vpuc.fusion.generator.values import materialize
from vpuc.fusion.lir.expression import Expression
from vpuc.fusion.lir.values import Value

SUFFIX = {1: "b", 2: "h", 4: "w"}


def _lanes(elem) -> int:
    return 16 // elem.nbytes


def _access(ctx: EmitContext, e: Expression, elem) -> tuple[bool, object]:
    count = Value.of(e.attrs["count"])
    masked = len(e.inputs) > 1
    if not masked and count != _lanes(elem):
        raise VpucError(f"internal: e{e.id} ({e.kind}) moves {count} {elem} elements "
                        "without a mask")
    return masked, (ctx.inp(e, 1) if masked else None)


def emit_nothing(ctx: EmitContext, e: Expression) -> None:
    return None


def emit_scalar(ctx: EmitContext, e: Expression) -> None:
    elem = e.out_descs[0].elem
    value = ctx.splat(float(e.attrs["value"]), elem)
    ctx.emit("vmov", ctx.out(e), value)


def emit_load(ctx: EmitContext, e: Expression) -> None:
    elem = e.in_descs[0].elem
    mem = Mem(ctx.inp(e, 0), int(e.attrs["offset"]))
    masked, mask = _access(ctx, e, elem)
    dst = ctx.out(e)
    if elem in EXPANDED and ctx.slot > 1:
        packed = ctx.new("v")
        if masked:
            ctx.emit("vld.m", packed, mem, mask)
        else:
            ctx.emit("vld", packed, mem)
        if elem is I8:
            sign_extend_bytes(ctx, packed, dst)
        else:
            unpack_bytes(ctx, packed, dst)
        return
    if masked:
        ctx.emit("vld.m", dst, mem, mask)
    else:
        ctx.emit("vld", dst, mem)


def unpack_bytes(ctx: EmitContext, packed, dst) -> None:
    """Bytes 0.. of ``packed`` into the low byte of each L-byte slot of ``dst``."""
    ctx.emit("vst", packed, ctx.scratch())
    ctx.emit(f"vlds.{SUFFIX[ctx.slot]}", dst, ctx.scratch(), ctx.int_reg(1))
    ctx.emit("vand", dst, dst, ctx.splat_int(0xFF, ctx.slot))


def sign_extend_bytes(ctx: EmitContext, packed, dst) -> None:
    """Bytes 0.. of ``packed``, sign-extended, into each L-byte slot of ``dst``."""
    ctx.emit("vst", packed, ctx.scratch())
    ctx.emit(f"vlds.{SUFFIX[ctx.slot]}", dst, ctx.scratch(), ctx.int_reg(1))
    bits = 8 * ctx.slot - 8                  # the byte to the slot's top, then back signed
    lane = f"i{8 * ctx.slot}"
    ctx.emit(f"vslli.{lane}", dst, dst, bits)
    ctx.emit(f"vsrai.{lane}", dst, dst, bits)


def emit_broadcast_load(ctx: EmitContext, e: Expression) -> None:
    elem = e.in_descs[0].elem
    mem = Mem(ctx.inp(e, 0), int(e.attrs["offset"]))
    dst = ctx.out(e)
    if elem in EXPANDED and ctx.slot > 1:
        s = ctx.new("s")
        ctx.emit("lb" if elem is I8 else "lbu", s, mem)
        ctx.emit(f"vbcast.{SUFFIX[ctx.slot]}", dst, s)
        return
    ctx.emit(f"vldb.{SUFFIX[elem.nbytes]}", dst, mem)


def emit_store(ctx: EmitContext, e: Expression) -> None:
    elem = e.out_descs[0].elem
    mem = Mem(ctx.out(e), int(e.attrs["offset"]))
    masked, mask = _access(ctx, e, elem)
    value = ctx.inp(e, 0)
    if elem in EXPANDED and ctx.slot > 1:
        ctx.emit("vst", value, ctx.scratch())
        packed = ctx.new("v")
        ctx.emit("vlds.b", packed, ctx.scratch(), ctx.int_reg(ctx.slot))
        value = packed
    if masked:
        ctx.emit("vst.m", value, mem, mask)
    else:
        ctx.emit("vst", value, mem)


def emit_mask(ctx: EmitContext, e: Expression) -> None:
    count = materialize(ctx, e.attrs["count"])
    ctx.emit(f"vmask.{SUFFIX[e.attrs['elem'].nbytes]}", ctx.out(e), count)


def emit_copy(ctx: EmitContext, e: Expression) -> None:
    src, dst = ctx.inp(e, 0), ctx.out(e)
    if src != dst:
        ctx.emit("vmov", dst, src)


def emit_move_broadcast(ctx: EmitContext, e: Expression) -> None:
    width = elem_width(ctx, e.in_descs[0].elem)
    s = ctx.new("s")
    ctx.emit(f"vext.{SUFFIX[width]}", s, ctx.inp(e, 0), 0)
    ctx.emit(f"vbcast.{SUFFIX[width]}", ctx.out(e), s)


def _slot(ctx: EmitContext, e: Expression) -> Mem:
    return Mem(SP, ctx.lir.frame.spill_offset + int(e.attrs["slot"]))


def emit_spill(ctx: EmitContext, e: Expression) -> None:
    cls, reg = e.attrs["cls"], ctx.inp(e, 0)
    if cls == "vec":
        ctx.emit("vst", reg, _slot(ctx, e))
    elif cls == "gpr":
        ctx.emit("sw", reg, _slot(ctx, e))
    elif cls == "mask":
        s = ctx.new("s")
        ctx.emit("mget", s, reg)
        ctx.emit("sw", s, _slot(ctx, e))
    else:
        raise NotSupported(f"spill of a {cls} register")


def emit_reload(ctx: EmitContext, e: Expression) -> None:
    cls, reg = e.attrs["cls"], ctx.out(e)
    if cls == "vec":
        ctx.emit("vld", reg, _slot(ctx, e))
    elif cls == "gpr":
        ctx.emit("lw", reg, _slot(ctx, e))
    elif cls == "mask":
        s = ctx.new("s")
        ctx.emit("lw", s, _slot(ctx, e))
        ctx.emit("mset", reg, s)
    else:
        raise NotSupported(f"reload of a {cls} register")


EMITTERS = {
    "Parameter": emit_nothing, "Result": emit_nothing, "Buffer": emit_nothing,
    "Scalar": emit_scalar, "Load": emit_load, "BroadcastLoad": emit_broadcast_load,
    "Store": emit_store, "Mask": emit_mask, "Copy": emit_copy,
    "MoveBroadcast": emit_move_broadcast, "Spill": emit_spill, "Reload": emit_reload,
}
