"""Emitters of the multi-instruction ops, computed in f32 chunks and rounded once.

Each mirrors the reference executor's f32 formula step by step, so wherever
the ISA's transcendentals are numpy's float32 functions the result is
bit-identical:

- Sigmoid ``1 / (1 + exp(-x))`` (``vrcp`` is the correctly rounded ``1/x``);
  Swish ``x * sigmoid(beta x)``; HSwish ``x * clip(x + 3, 0, 6) * (1/6)``;
  Elu ``x > 0 ? x : alpha (exp(x) - 1)``; Gelu (tanh) in the reference's order;
  Floor from a truncating conversion (exact, keeps -0, NaN and |x| >= 2^23);
  PowerStatic with exponents 0, 1, 2, 0.5, -1 (numpy's exact special cases).
- Erf: Eigen's rational approximation ``x P(x^2) / Q(x^2)`` on ``[-4, 4]``
  (degree 13 / 8; 6.5e-8 absolute error in exact arithmetic, at most 4 f32
  ulp measured in f32; tests/fusion/generator/test_generator_math.py); Gelu
  (erf) uses it.
- Power and the other PowerStatic exponents: ``exp(b log|a|)`` with the
  product's rounding error added back (``vfma``), the sign of odd integer
  exponents (|b| >= 2^24 and infinities count as even), NaN for a negative base
  and a non-integer exponent (but ``pow(-inf, b)`` = inf or 0, as IEEE says),
  and ``pow(a, 0) = pow(1, b) = 1``.  Relative error about ``(3 + 2 |b log a|)``
  f32 ulp (the logarithm's error, amplified).
- SoftPlus as numpy's ``logaddexp(0, x)`` = ``max(x, 0) + log1p(exp(-|x|))`` with
  ``log1p`` by Goldberg's formula (the ISA has no log1p); Mish ``x tanh(softplus(x))``
  in f32 where the reference rounds its softplus and tanh to the tensor's type: both
  within a few f32 ulp, not bit for bit.
"""

from __future__ import annotations

import math

from vpuc.fusion.generator.context import EmitContext, f32_of
from vpuc.fusion.generator.emitters.arith import via_chunks
from vpuc.fusion.generator.mir import Reg
from vpuc.fusion.lir.expression import Expression

ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
         -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
         -1.60960333262415e-02)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
         -7.37332916720468e-03, -1.42647390514189e-02)


def _op(ctx: EmitContext, mnemonic: str, *args) -> Reg:
    r = ctx.new("m" if mnemonic.startswith("vcmp") or mnemonic in ("mand", "mnot", "mor")
                else "v")
    ctx.emit(mnemonic, r, *args)
    return r


def _c(ctx: EmitContext, value: float) -> Reg:
    return ctx.splat_f32(value)


def sigmoid(ctx: EmitContext, x: Reg) -> Reg:
    e = _op(ctx, "vexp.f32", _op(ctx, "vneg.f32", x))
    return _op(ctx, "vrcp.f32", _op(ctx, "vadd.f32", e, _c(ctx, 1.0)))


def erf(ctx: EmitContext, x: Reg) -> Reg:
    x = _op(ctx, "vmin.f32", _op(ctx, "vmax.f32", x, _c(ctx, -4.0)), _c(ctx, 4.0))
    x2 = _op(ctx, "vmul.f32", x, x)
    p = _c(ctx, ERF_P[0])
    for coef in ERF_P[1:]:
        p = _op(ctx, "vfma.f32", p, x2, _c(ctx, coef))
    p = _op(ctx, "vmul.f32", p, x)
    q = _c(ctx, ERF_Q[0])
    for coef in ERF_Q[1:]:
        q = _op(ctx, "vfma.f32", q, x2, _c(ctx, coef))
    return _op(ctx, "vdiv.f32", p, q)


def _sigmoid(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    return sigmoid(ctx, x)


def _swish(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    beta = f32_of(e.attrs.get("beta", 1.0))
    z = x if beta == 1.0 else _op(ctx, "vmul.f32", x, _c(ctx, beta))
    return _op(ctx, "vmul.f32", x, sigmoid(ctx, z))


def _hswish(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    t = _op(ctx, "vadd.f32", x, _c(ctx, 3.0))
    t = _op(ctx, "vmin.f32", _op(ctx, "vmax.f32", t, _c(ctx, 0.0)), _c(ctx, 6.0))
    return _op(ctx, "vmul.f32", _op(ctx, "vmul.f32", x, t), _c(ctx, 1 / 6))


def _elu(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    em1 = _op(ctx, "vsub.f32", _op(ctx, "vexp.f32", x), _c(ctx, 1.0))
    neg = _op(ctx, "vmul.f32", _c(ctx, float(e.attrs["alpha"])), em1)
    positive = _op(ctx, "vcmplt.f32", _c(ctx, 0.0), x)
    return _op(ctx, "vsel", x, neg, positive)


def _gelu(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    half = _op(ctx, "vmul.f32", _c(ctx, 0.5), x)
    if e.attrs.get("approximation", "erf") == "tanh":
        k = _op(ctx, "vmul.f32", _c(ctx, 0.044715), x)
        k = _op(ctx, "vmul.f32", _op(ctx, "vmul.f32", k, x), x)
        inner = _op(ctx, "vmul.f32", _c(ctx, math.sqrt(2 / math.pi)), _op(ctx, "vadd.f32", x, k))
        t = _op(ctx, "vtanh.f32", inner)
    else:
        t = erf(ctx, _op(ctx, "vmul.f32", x, _c(ctx, 1 / math.sqrt(2))))
    return _op(ctx, "vmul.f32", half, _op(ctx, "vadd.f32", _c(ctx, 1.0), t))


def _erf(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    return erf(ctx, x)


def log1p(ctx: EmitContext, z: Reg) -> Reg:
    """``log(1 + z)`` accurate where ``1 + z`` rounds (Goldberg: ``log(u) z / (u - 1)``
    with ``u = 1 + z``, which cancels the rounding of ``u``; ``z`` itself where ``u`` is 1)."""
    one = _c(ctx, 1.0)
    u = _op(ctx, "vadd.f32", z, one)
    d = _op(ctx, "vsub.f32", u, one)
    scaled = _op(ctx, "vmul.f32", _op(ctx, "vlog.f32", u), _op(ctx, "vdiv.f32", z, d))
    return _op(ctx, "vsel", z, scaled, _op(ctx, "vcmpeq.f32", d, _c(ctx, 0.0)))


def softplus(ctx: EmitContext, x: Reg) -> Reg:
    """numpy's ``logaddexp(0, x)``: ``max(x, 0) + log1p(exp(-|x|))``, exp never overflowing."""
    tail = log1p(ctx, _op(ctx, "vexp.f32", _op(ctx, "vneg.f32", _op(ctx, "vabs.f32", x))))
    return _op(ctx, "vadd.f32", _op(ctx, "vmax.f32", x, _c(ctx, 0.0)), tail)


def _softplus(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    return softplus(ctx, x)


def _mish(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    return _op(ctx, "vmul.f32", x, _op(ctx, "vtanh.f32", softplus(ctx, x)))


def _floor(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    f = _op(ctx, "vcvt.f32.i32", _op(ctx, "vcvt.i32.f32", x))       # trunc(x)
    below = _op(ctx, "vcmplt.f32", x, f)                              # negative non-integers
    f = _op(ctx, "vsel", _op(ctx, "vsub.f32", f, _c(ctx, 1.0)), f, below)
    f = _op(ctx, "vor", f, _op(ctx, "vand", x, ctx.splat_int(0x80000000, 4)))   # keeps -0
    small = _op(ctx, "vcmplt.f32", _op(ctx, "vabs.f32", x), _c(ctx, 8388608.0))
    return _op(ctx, "vsel", f, x, small)                              # |x| >= 2^23, NaN: x


def power(ctx: EmitContext, a: Reg, b: Reg, exponent: float | None = None) -> Reg:
    """``a ** b`` in f32 (see the module docstring); ``exponent`` when b is a constant."""
    la = _op(ctx, "vlog.f32", _op(ctx, "vabs.f32", a))
    z = _op(ctx, "vmul.f32", b, la)
    err = _op(ctx, "vfma.f32", b, la, _op(ctx, "vneg.f32", z))       # exact product error
    r = _op(ctx, "vexp.f32", z)
    fixed = _op(ctx, "vfma.f32", r, err, r)
    r = _op(ctx, "vsel", fixed, r, _op(ctx, "vcmpeq.f32", fixed, fixed))   # keep inf / NaN
    zero = _c(ctx, 0.0)
    negative = _op(ctx, "mand", _op(ctx, "vcmplt.f32", a, zero),          # -inf < a < 0
                   _op(ctx, "vcmplt.f32", _c(ctx, -math.inf), a))
    if exponent is None:
        trunc = _op(ctx, "vcvt.i32.f32", b)
        big = _op(ctx, "vcmple.f32", _c(ctx, 16777216.0), _op(ctx, "vabs.f32", b))  # even, inf
        integer = _op(ctx, "mor", _op(ctx, "vcmpeq.f32", _op(ctx, "vcvt.f32.i32", trunc), b), big)
        one_i = ctx.splat_int(1, 4)
        odd = _op(ctx, "mand", _op(ctx, "vcmpeq.i32", _op(ctx, "vand", trunc, one_i), one_i),
                  _op(ctx, "mnot", big))
        signed = _op(ctx, "vcmplt.i32", a, ctx.splat_int(0, 4))    # sign bit, -0 included
        r = _op(ctx, "vsel", _op(ctx, "vneg.f32", r), r, _op(ctx, "mand", signed, odd))
        r = _op(ctx, "vsel", _c(ctx, math.nan), r,
                _op(ctx, "mand", negative, _op(ctx, "mnot", integer)))
        one = _c(ctx, 1.0)
        r = _op(ctx, "vsel", one, r, _op(ctx, "vcmpeq.f32", b, zero))
        return _op(ctx, "vsel", one, r, _op(ctx, "vcmpeq.f32", a, one))
    if not math.isfinite(exponent) or abs(exponent) >= 2 ** 24 or float(exponent).is_integer():
        if math.isfinite(exponent) and abs(exponent) < 2 ** 24 and int(exponent) % 2:
            signed = _op(ctx, "vcmplt.i32", a, ctx.splat_int(0, 4))
            r = _op(ctx, "vsel", _op(ctx, "vneg.f32", r), r, signed)
    else:
        r = _op(ctx, "vsel", _c(ctx, math.nan), r, negative)
    one = _c(ctx, 1.0)
    return _op(ctx, "vsel", one, r, _op(ctx, "vcmpeq.f32", a, one))


def _power(ctx: EmitContext, e: Expression, a: Reg, b: Reg) -> Reg:
    return power(ctx, a, b)


def _power_static(ctx: EmitContext, e: Expression, x: Reg) -> Reg:
    p = f32_of(float(e.attrs["power"]))
    if p == 0.0:
        return _c(ctx, 1.0)
    if p == 1.0:
        return x
    if p == 2.0:
        return _op(ctx, "vmul.f32", x, x)
    if p == 0.5:
        return _op(ctx, "vsqrt.f32", x)
    if p == -1.0:
        return _op(ctx, "vrcp.f32", x)
    return power(ctx, x, _c(ctx, p), p)


def compound(fn):
    def emit(ctx: EmitContext, e: Expression) -> None:
        via_chunks(ctx, e, fn)
    return emit


EMITTERS = {
    "Sigmoid": compound(_sigmoid), "Swish": compound(_swish), "HSwish": compound(_hswish),
    "Elu": compound(_elu), "Gelu": compound(_gelu), "Erf": compound(_erf),
    "Floor": compound(_floor), "Power": compound(_power),
    "PowerStatic": compound(_power_static),
    "SoftPlus": compound(_softplus), "Mish": compound(_mish),
}
