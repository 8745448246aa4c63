"""Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh, Acosh and Atanh in f32, composed from graph ops.

An f16 graph converts in and out (``f32_result``), so every step below rounds to f32 and the
result is rounded once to the graph's type.  The forms keep their relative accuracy where
the textbook formulas lose digits (near 0, and Asin, Acos and Atanh near +-1); the tests
state each bound (tests/onnx_import/test_more_ops.py):

- Tan ``sin(x) / cos(x)``, both by convert_math's Cody-Waite reduction and Taylor series.
- Atan: Cephes' ``atanf``: ``|x|`` reduced to ``|t| <= tan(pi/8)`` (``-1/x`` plus pi/2 above
  ``tan(3 pi/8)``, ``(x - 1)/(x + 1)`` plus pi/4 above ``tan(pi/8)``), then
  ``t + t^3 P(t^2)`` of degree 3 in ``t^2``; the sign put back.
- Asin: Cephes' ``asinf``: ``|x| <= 1/2``: ``a + a^3 Q(a^2)``; above, ``pi/2 - 2 asin(s)`` with
  ``s = sqrt((1 - |x|)/2)``: ``1 - |x|`` is exact there (Sterbenz), so nothing cancels near
  +-1.  Acos from the same series: ``pi/2 - asin(x)`` for ``|x| <= 1/2``, ``2 asin(s)`` above,
  ``pi - 2 asin(s)`` below.  ``|x| > 1``: the root of a negative number, NaN.
- Sinh: below 1 in magnitude the odd Taylor series to ``x^11`` (remainder below
  ``x^13 / 13!``, 1.6e-10 relative), no cancellation; above, ``(h/2) h - (1/2) / (h h)``
  with ``h = exp(|x|/2)``, which overflows only where sinh does.  Cosh
  ``(h/2) h + (1/2) / (h h)``, exact at 0.
- Asinh ``log1p(a + a^2 / (1 + sqrt(1 + a^2)))`` for ``a = |x|`` (no cancellation near 0),
  ``log(a) + log 2`` beyond 2^26 (where ``a^2`` would overflow and the two agree to
  ``1/(4 a^2)``); Acosh ``log1p(t + sqrt(t (t + 2)))``, ``t = x - 1`` exact near 1, the same
  ``log(x) + log 2`` beyond 2^26, NaN below 1; Atanh ``log1p(2a / (1 - a)) / 2``, ``1 - a``
  exact near 1, infinite at +-1.  ``log1p(z)`` is Goldberg's ``log(u) z / (u - 1)`` with
  ``u = 1 + z`` (``z`` itself where ``u`` rounds to 1), which cancels the rounding of ``u``.
"""

from __future__ import annotations

import math

from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_math import f32_constant, f32_result, in_f32, sine

ATAN_P = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
ASIN_P = (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1)
SINH_TAYLOR = tuple(1 / math.factorial(n) for n in (11, 9, 7, 5, 3))      # highest first
TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950
LARGE = 2.0 ** 26          # beyond it asinh(a) and acosh(a) are log(2a) to f32's precision
NAMED = {0.0: "zero", 0.5: "half", 1.0: "one", 2.0: "two", math.pi: "pi", math.pi / 2: "half_pi",
         math.pi / 4: "quarter_pi", math.log(2.0): "log2", LARGE: "large", TAN_PI_8: "tan_pi_8",
         TAN_3PI_8: "tan_3pi_8"}


class _F32:
    """f32 steps of one node: ``c(value)`` a constant, ``op(kind, *operands)`` a graph op."""

    def __init__(self, b: GraphBuilder) -> None:
        self.b = b

    def c(self, value: float) -> str:
        name = "nan" if math.isnan(value) else "inf" if math.isinf(value) else NAMED.get(value, "coef")
        return f32_constant(self.b, value, name)

    def op(self, kind: str, *operands: str, out: str | None = None) -> str:
        return self.b.op(kind, list(operands), out=out)

    def horner(self, z: str, coefs) -> str:
        poly = self.c(coefs[0])
        for coef in coefs[1:]:
            poly = self.op("Add", self.op("Multiply", poly, z), self.c(coef))
        return poly

    def odd_series(self, x: str, z: str, coefs) -> str:
        """``x + x z P(z)``: an odd series in x given ``z = x * x``."""
        return self.op("Add", x, self.op("Multiply", self.op("Multiply", x, z), self.horner(z, coefs)))

    def select(self, condition: str, yes: str, no: str, out: str | None = None) -> str:
        return self.b.op("Select", [condition, yes, no], out=out)

    def signed(self, x: str, magnitude: str, out: str | None) -> str:
        """``magnitude`` with x's sign (an odd function computed on ``|x|``)."""
        negative = self.op("Less", x, self.c(0.0))
        return self.select(negative, self.op("Negative", magnitude), magnitude, out=out)

    def log1p(self, z: str) -> str:
        u = self.op("Add", z, self.c(1.0))
        d = self.op("Subtract", u, self.c(1.0))
        goldberg = self.op("Multiply", self.op("Log", u), self.op("Divide", z, d))
        return self.select(self.op("Equal", d, self.c(0.0)), z, goldberg)


def _in_f32(compute):
    """A converter computing ``compute(f, x, out)`` on the node's input in f32."""
    def convert(b, node, attrs):
        x = in_f32(b, b.value(node.input[0]))
        f32_result(b, node, lambda out: compute(_F32(b), x, out))
    return convert


def _tan(f: _F32, x: str, out):
    sin_x, cos_x = sine(f.b, x, False, None), sine(f.b, x, True, None)
    return f.op("Divide", sin_x, cos_x, out=out)


def _atan(f: _F32, x: str, out):
    a = f.op("Abs", x)
    beyond = f.op("Greater", a, f.c(TAN_3PI_8))
    middle = f.op("Greater", a, f.c(TAN_PI_8))
    t = f.select(middle, f.op("Divide", f.op("Subtract", a, f.c(1.0)), f.op("Add", a, f.c(1.0))), a)
    t = f.select(beyond, f.op("Negative", f.op("Divide", f.c(1.0), a)), t)
    base = f.select(middle, f.c(math.pi / 4), f.c(0.0))
    base = f.select(beyond, f.c(math.pi / 2), base)
    series = f.odd_series(t, f.op("Multiply", t, t), ATAN_P)
    return f.signed(x, f.op("Add", base, series), out)


def _asin_parts(f: _F32, a: str) -> tuple[str, str]:
    """For ``a = |x|``: (a > 1/2, the series at a or at sqrt((1 - a)/2) above 1/2)."""
    upper = f.op("Greater", a, f.c(0.5))
    z = f.select(upper, f.op("Multiply", f.op("Subtract", f.c(1.0), a), f.c(0.5)), f.op("Multiply", a, a))
    t = f.select(upper, f.op("Sqrt", z), a)
    return upper, f.odd_series(t, z, ASIN_P)


def _asin(f: _F32, x: str, out):
    upper, series = _asin_parts(f, f.op("Abs", x))
    folded = f.op("Subtract", f.c(math.pi / 2), f.op("Multiply", series, f.c(2.0)))
    return f.signed(x, f.select(upper, folded, series), out)


def _acos(f: _F32, x: str, out):
    upper, series = _asin_parts(f, f.op("Abs", x))
    twice = f.op("Multiply", series, f.c(2.0))
    outer = f.select(f.op("Less", x, f.c(0.0)), f.op("Subtract", f.c(math.pi), twice), twice)
    # |x| <= 1/2: series is asin(|x|), so pi/2 - asin(x) is pi/2 -+ series
    inner = f.op("Subtract", f.c(math.pi / 2), f.signed(x, series, None))
    return f.select(upper, outer, inner, out=out)


def _exp_half(f: _F32, x: str) -> tuple[str, str, str]:
    """(h/2) h and (1/2) / (h h) for h = exp(|x| / 2), and ``|x| < 1``."""
    a = f.op("Abs", x)
    h = f.op("Exp", f.op("Multiply", a, f.c(0.5)))
    grow = f.op("Multiply", f.op("Multiply", h, f.c(0.5)), h)
    decay = f.op("Divide", f.c(0.5), f.op("Multiply", h, h))
    return grow, decay, f.op("Less", a, f.c(1.0))


def _sinh(f: _F32, x: str, out):
    grow, decay, small = _exp_half(f, x)
    series = f.odd_series(x, f.op("Multiply", x, x), SINH_TAYLOR)
    return f.select(small, series, f.signed(x, f.op("Subtract", grow, decay), None), out=out)


def _cosh(f: _F32, x: str, out):
    grow, decay, _ = _exp_half(f, x)
    return f.op("Add", grow, decay, out=out)


def _log_twice(f: _F32, a: str) -> str:
    return f.op("Add", f.op("Log", a), f.c(math.log(2.0)))


def _asinh(f: _F32, x: str, out):
    a = f.op("Abs", x)
    square = f.op("Multiply", a, a)
    root = f.op("Sqrt", f.op("Add", square, f.c(1.0)))
    z = f.op("Add", a, f.op("Divide", square, f.op("Add", root, f.c(1.0))))
    near = f.log1p(z)
    magnitude = f.select(f.op("Greater", a, f.c(LARGE)), _log_twice(f, a), near)
    return f.signed(x, magnitude, out)


def _acosh(f: _F32, x: str, out):
    t = f.op("Subtract", x, f.c(1.0))
    root = f.op("Sqrt", f.op("Multiply", t, f.op("Add", t, f.c(2.0))))
    value = f.select(f.op("Greater", x, f.c(LARGE)), _log_twice(f, x), f.log1p(f.op("Add", t, root)))
    return f.select(f.op("Less", x, f.c(1.0)), f.c(math.nan), value, out=out)


def _atanh(f: _F32, x: str, out):
    a = f.op("Abs", x)
    ratio = f.op("Divide", f.op("Multiply", a, f.c(2.0)), f.op("Subtract", f.c(1.0), a))
    half = f.op("Multiply", f.log1p(ratio), f.c(0.5))
    magnitude = f.select(f.op("Equal", a, f.c(1.0)), f.c(math.inf), half)   # log1p(inf): inf/inf
    return f.signed(x, magnitude, out)


TRIG_CONVERTERS = {
    "Tan": _in_f32(_tan), "Atan": _in_f32(_atan), "Asin": _in_f32(_asin), "Acos": _in_f32(_acos),
    "Sinh": _in_f32(_sinh), "Cosh": _in_f32(_cosh), "Asinh": _in_f32(_asinh),
    "Acosh": _in_f32(_acosh), "Atanh": _in_f32(_atanh),
}
