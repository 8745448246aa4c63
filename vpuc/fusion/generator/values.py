"""Run-time integers: a LIR ``Value`` (a polynomial in dim symbols) as scalar code.

``materialize`` emits the instructions that compute a value into a fresh
virtual register, the straightforward way, at the point of use: each dim
symbol ``Dk`` is loaded from the MemRefData that ``lir.runtime_dims`` names
(``dimsAddr``, then the dim), each monomial is multiplied out with ``muli``
and ``mul``, ``//`` and ``%`` by a constant use ``divu`` and ``remu``.
Repeated loads, loop-invariant recomputation and multiplications by powers of
two are left to the clean-ups (CSE, hoisting, strength reduction), which is
where their savings are measured.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.context import EmitContext
from vpuc.fusion.generator.mir import Mem, Reg
from vpuc.fusion.lir.values import Atom, Value

M_DIMS = 12            # MemRefData.dimsAddr


def load_dim(ctx: EmitContext, symbol: str) -> Reg:
    where = ctx.lir.runtime_dims.get(symbol)
    if where is None:
        raise VpucError(f"internal: @{ctx.lir.name} has no MemRefData for the run-time dim "
                        f"{symbol}")
    arg, dim = where
    dims = ctx.memref_field(arg, M_DIMS)
    out = ctx.new("s")
    ctx.emit("lw", out, Mem(dims, 4 * dim), note=symbol)
    return out


def _atom(ctx: EmitContext, atom: Atom) -> Reg:
    if atom.op == "sym":
        return load_dim(ctx, atom.name)
    inner = materialize(ctx, atom.inner)
    divisor = ctx.int_reg(atom.divisor)
    out = ctx.new("s")
    ctx.emit("divu" if atom.op == "//" else "remu", out, inner, divisor)
    return out


def materialize(ctx: EmitContext, value) -> Reg:
    """A register holding ``value`` (static values are one ``li``)."""
    value = Value.of(value)
    if value.static is not None:
        return ctx.int_reg(value.static)
    total: Reg | None = None
    for mono, coef in value.terms:
        if not mono:
            term = ctx.int_reg(coef)
        else:
            term = _atom(ctx, mono[0])
            for atom in mono[1:]:
                factor = _atom(ctx, atom)
                prod = ctx.new("s")
                ctx.emit("mul", prod, term, factor)
                term = prod
            if coef != 1:
                scaled = ctx.new("s")
                ctx.emit("muli", scaled, term, coef)
                term = scaled
        if total is None:
            total = term
        else:
            acc = ctx.new("s")
            ctx.emit("add", acc, total, term)
            total = acc
    assert total is not None
    return total


def add_to(ctx: EmitContext, reg: Reg, value, note: str = "") -> None:
    """``reg += value`` (an immediate when static)."""
    value = Value.of(value)
    if value.static is not None:
        ctx.emit("addi", reg, reg, value.static, note=note)
        return
    amount = materialize(ctx, value)
    ctx.emit("add", reg, reg, amount, note=note)
