"""Emitters of comparisons, Select and Convert.

A comparison makes a mask (natively when its operands fill the L-byte slots,
otherwise one per f32 chunk) and turns it into a u8 boolean (0 or 1 per
slot).  Select turns its condition back into a mask (``cond == 0``) and picks
lane by lane with ``vsel``; values narrower than a slot are selected as f32
chunks.  Convert widens to f32 chunks and rounds to the target type, which is
exactly the reference's ``astype`` (nearest even for floats; truncation,
saturation and NaN -> 0 for integers).
"""

from __future__ import annotations

from vpuc.fusion.generator.context import EmitContext
from vpuc.fusion.generator.forms import (bool_zero_mask, compare_type, elem_width, from_f32,
                                         masks_to_bool, to_f32)
from vpuc.fusion.lir.expression import Expression

# kind -> (mnemonic, swap operands, negate)
COMPARISONS = {
    "Equal": ("vcmpeq", False, False), "NotEqual": ("vcmpeq", False, True),
    "Less": ("vcmplt", False, False), "LessEqual": ("vcmple", False, False),
    "Greater": ("vcmplt", True, False), "GreaterEqual": ("vcmple", True, False),
}


def comparison(kind: str):
    mnemonic, swap, negate = COMPARISONS[kind]

    def emit(ctx: EmitContext, e: Expression) -> None:
        elem = e.in_descs[0].elem
        a, b = ctx.inp(e, 0), ctx.inp(e, 1)
        suffix = compare_type(ctx, elem)
        if suffix is not None:
            pairs, native = [(a, b)], True
        else:
            wa, wb = to_f32(ctx, a, elem), to_f32(ctx, b, e.in_descs[1].elem)
            pairs, native, suffix = list(zip(wa, wb)), False, "f32"
        masks = []
        for x, y in pairs:
            m = ctx.new("m")
            ctx.emit(f"{mnemonic}.{suffix}", m, *((y, x) if swap else (x, y)))
            if negate:
                ctx.emit("mnot", m, m)
            masks.append(m)
        masks_to_bool(ctx, masks, native, ctx.out(e))
    return emit


def emit_select(ctx: EmitContext, e: Expression) -> None:
    elem = e.out_descs[0].elem
    false = bool_zero_mask(ctx, ctx.inp(e, 0))
    a, b = ctx.inp(e, 1), ctx.inp(e, 2)
    if elem_width(ctx, elem) == ctx.slot:
        ctx.emit("vsel", ctx.out(e), b, a, false)
        return
    # narrower values (f16 in a loop of 4): select their f32 widening (one chunk)
    wa, wb = to_f32(ctx, a, elem), to_f32(ctx, b, e.in_descs[2].elem)
    picked = []
    for x, y in zip(wa, wb):
        r = ctx.new("v")
        ctx.emit("vsel", r, y, x, false)
        picked.append(r)
    from_f32(ctx, picked, elem, ctx.out(e))


def emit_convert(ctx: EmitContext, e: Expression) -> None:
    source, target = e.in_descs[0].elem, e.out_descs[0].elem
    x = ctx.inp(e, 0)
    if source is target:
        ctx.emit("vmov", ctx.out(e), x)
        return
    from_f32(ctx, to_f32(ctx, x, source), target, ctx.out(e))


EMITTERS = {**{kind: comparison(kind) for kind in COMPARISONS},
            "Select": emit_select, "Convert": emit_convert}
