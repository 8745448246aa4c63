"""Integers the kernel knows at compile time, or computes from run-time dims.

Work amounts, increments, pointer shifts and tail counts of a Linear IR are
``Value``s: an integer polynomial over *dim symbols* ``D0``, ``D1``, ... (the
run-time size of master dim k of the subgraph, outermost first), with floor
division and remainder by positive constants as atoms:

    16*D2            a pointer increment along a dynamic dim
    -(16*D1*D2)      written ``-16*D1*D2``: a finalization offset
    8*(D3 // 8)      the main body's work amount of an 8-wide loop over D3
    D3 % 8           its tail

A static value is just an int (``Value(5) == 5``), so passes compute with
``+ - * // %`` and never branch on "is it dynamic".  The emitter evaluates a
dynamic value once, in the kernel prologue or at a LoopBegin, from the dims of
the MemRefData named by ``LinearIR.runtime_dims`` (``evaluate`` is the
reference semantics; ``parse(str(v)) == v``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Union

IntLike = Union[int, "Value"]


@dataclass(frozen=True)
class Atom:
    """A factor of a monomial: a dim symbol, or ``(inner // divisor)`` / ``(inner % divisor)``."""

    op: str                    # "sym", "//" or "%"
    name: str = ""             # for "sym"
    inner: "Value | None" = None
    divisor: int = 0

    def key(self) -> str:
        return self.name if self.op == "sym" else f"({self.inner} {self.op} {self.divisor})"

    def evaluate(self, env: Mapping[str, int]) -> int:
        if self.op == "sym":
            if self.name not in env:
                raise KeyError(f"no run-time value for dim {self.name}")
            return int(env[self.name])
        inner = self.inner.evaluate(env)
        return inner // self.divisor if self.op == "//" else inner % self.divisor

    def symbols(self) -> set[str]:
        return {self.name} if self.op == "sym" else self.inner.symbols()


Monomial = tuple[Atom, ...]     # sorted by key; () is the constant term


class Value:
    """An immutable integer polynomial in dim symbols (see the module docstring)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, x: "IntLike | dict[Monomial, int]" = 0) -> None:
        if isinstance(x, Value):
            terms = x.terms
        elif isinstance(x, dict):
            # Constant term first, then by degree; plain dim symbols before // and % atoms.
            terms = tuple(sorted(((m, c) for m, c in x.items() if c),
                                 key=lambda t: (len(t[0]), [(a.op != "sym", a.key())
                                                            for a in t[0]])))
        else:
            if isinstance(x, bool) or not isinstance(x, int):
                raise TypeError(f"a Value is built from an int, not {type(x).__name__}")
            terms = (((), x),) if x else ()
        object.__setattr__(self, "terms", terms)
        object.__setattr__(self, "_hash", hash(terms))

    # ------------------------------------------------------------ constructors
    @staticmethod
    def sym(name: str) -> "Value":
        return Value({(Atom("sym", name),): 1})

    @staticmethod
    def of(x: IntLike) -> "Value":
        return x if isinstance(x, Value) else Value(x)

    # ------------------------------------------------------------ queries
    @property
    def is_static(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def static(self) -> int | None:
        """The int this value is, or None if it depends on run-time dims."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and not self.terms[0][0]:
            return self.terms[0][1]
        return None

    def symbols(self) -> set[str]:
        return {s for m, _ in self.terms for a in m for s in a.symbols()}

    def evaluate(self, env: Mapping[str, int] | None = None) -> int:
        total = 0
        for mono, coef in self.terms:
            prod = coef
            for atom in mono:
                prod *= atom.evaluate(env or {})
            total += prod
        return total

    def divides_exactly(self, divisor: int) -> bool:
        return all(c % divisor == 0 for _, c in self.terms)

    # ------------------------------------------------------------ arithmetic
    def _dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    def __add__(self, other: IntLike) -> "Value":
        out = self._dict()
        for m, c in Value.of(other).terms:
            out[m] = out.get(m, 0) + c
        return Value(out)

    __radd__ = __add__

    def __neg__(self) -> "Value":
        return Value({m: -c for m, c in self.terms})

    def __sub__(self, other: IntLike) -> "Value":
        return self + (-Value.of(other))

    def __rsub__(self, other: IntLike) -> "Value":
        return Value.of(other) - self

    def __mul__(self, other: IntLike) -> "Value":
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in Value.of(other).terms:
                mono = tuple(sorted(m1 + m2, key=Atom.key))
                out[mono] = out.get(mono, 0) + c1 * c2
        return Value(out)

    __rmul__ = __mul__

    def __floordiv__(self, divisor: int) -> "Value":
        divisor = _positive(divisor)
        if self.static is not None:
            return Value(self.static // divisor)
        if self.divides_exactly(divisor):
            return Value({m: c // divisor for m, c in self.terms})
        return Value({(Atom("//", inner=self, divisor=divisor),): 1})

    def __mod__(self, divisor: int) -> "Value":
        divisor = _positive(divisor)
        if self.static is not None:
            return Value(self.static % divisor)
        if self.divides_exactly(divisor):
            return Value(0)
        return Value({(Atom("%", inner=self, divisor=divisor),): 1})

    # ------------------------------------------------------------ comparisons with ints
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            return self.static == other
        return isinstance(other, Value) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return bool(self.terms)

    def __repr__(self) -> str:
        return f"Value({self})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for i, (mono, coef) in enumerate(self.terms):
            factors = [a.key() for a in mono]
            mag = abs(coef)
            body = "*".join(([str(mag)] if mag != 1 or not factors else []) + factors)
            if i == 0:
                parts.append(("-" if coef < 0 else "") + body)
            else:
                parts.append((" - " if coef < 0 else " + ") + body)
        return "".join(parts)


def _positive(divisor) -> int:
    if isinstance(divisor, Value):
        if divisor.static is None:
            raise ValueError(f"division by the run-time value {divisor}")
        divisor = divisor.static
    if not isinstance(divisor, int) or divisor <= 0:
        raise ValueError(f"division by {divisor}; expected a positive int")
    return divisor


def static_or_none(x: IntLike) -> int | None:
    return x if isinstance(x, int) else x.static


def to_json(x: IntLike) -> int | str:
    """An int stays an int; a dynamic value becomes its text."""
    s = Value.of(x).static
    return s if s is not None else str(x)


def from_json(x: int | str) -> Value:
    return Value(x) if isinstance(x, int) else parse(x)


def product(values) -> Value:
    out = Value(1)
    for v in values:
        out = out * v
    return out


# ----------------------------------------------------------------- parsing

_TOKEN = re.compile(r"\s*(\d+|[A-Za-z_][A-Za-z0-9_]*|//|[-+*%()])")


def parse(text: str) -> Value:
    """The inverse of ``str(value)``: ints, names, ``+ - * // %`` and parentheses."""
    tokens = _tokens(text)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def expr() -> Value:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term() -> Value:
        value = factor()
        while peek() in ("*", "//", "%"):
            op = take()
            rhs = factor()
            value = value * rhs if op == "*" else (value // rhs if op == "//" else value % rhs)
        return value

    def factor() -> Value:
        tok = take() if peek() is not None else None
        if tok is None:
            raise ValueError(f"'{text}': unexpected end")
        if tok == "-":
            return -factor()
        if tok == "(":
            value = expr()
            if take() != ")":
                raise ValueError(f"'{text}': expected ')'")
            return value
        if tok.isdigit():
            return Value(int(tok))
        if tok[0].isalpha() or tok[0] == "_":
            return Value.sym(tok)
        raise ValueError(f"'{text}': unexpected '{tok}'")

    value = expr()
    if pos != len(tokens):
        raise ValueError(f"'{text}': unexpected '{tokens[pos]}'")
    return value


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"'{text}': cannot read '{text[pos:]}'")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens
