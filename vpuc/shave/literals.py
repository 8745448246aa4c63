"""Numbers in assembly: integer expressions and float literals, parsed and printed.

Integer expressions: decimal, ``0x`` hex, ``0b`` binary (``_`` separators
allowed), names of ``.equ`` constants, unary ``- + ~``, binary ``* / % + - << >>
& ^ |`` with C precedence and parentheses.  ``/`` and ``%`` round toward zero as
in C.

Float literals: a decimal (``1.5``, ``-2e-3``, ``7``), ``inf``, ``-inf``, ``nan``,
or a ``0x`` hex integer giving the raw bit pattern (that is how the
disassembler prints NaNs).  A finite literal that rounds to infinity is an
error.
"""

from __future__ import annotations

import re

import numpy as np


class ExprError(ValueError):
    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(message)
        self.column = column          # 0-based offset in the parsed text


_TOKEN = re.compile(r"\s*(?:(0[xX][0-9A-Fa-f_]+|0[bB][01_]+|[0-9][0-9_]*)"
                    r"|([A-Za-z_.$][A-Za-z0-9_.$]*)|(<<|>>|[-+*/%&|^~()]))")
# binary operator -> (precedence, function); higher binds tighter
_BINARY = {
    "|": (1, lambda a, b: a | b), "^": (2, lambda a, b: a ^ b), "&": (3, lambda a, b: a & b),
    "<<": (4, lambda a, b: a << b), ">>": (4, lambda a, b: a >> b),
    "+": (5, lambda a, b: a + b), "-": (5, lambda a, b: a - b),
    "*": (6, lambda a, b: a * b), "/": (6, None), "%": (6, None),
}


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match:
            column = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise ExprError(f"unexpected '{text[column]}' in expression '{text.strip()}'", column)
        number, name, op = match.groups()
        kind, value = ("num", number) if number else ("name", name) if name else ("op", op)
        tokens.append((kind, value, match.start(match.lastindex)))
        pos = match.end()
    return tokens


MAX_NESTING = 100          # parentheses and unary operators (recursion depth)


class _Parser:
    def __init__(self, text: str, constants: dict[str, int]) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0
        self.constants = constants
        self.depth = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "", len(self.text))

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expression(self, min_prec: int = 1) -> int:
        left = self.unary()
        while True:
            kind, op, column = self.peek()
            if kind != "op" or op not in _BINARY or _BINARY[op][0] < min_prec:
                return left
            self.take()
            right = self.expression(_BINARY[op][0] + 1)
            if op in ("/", "%"):
                if right == 0:
                    raise ExprError("division by zero in expression", column)
                quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
                left = quotient if op == "/" else left - quotient * right
            elif op in ("<<", ">>") and not 0 <= right < 64:
                raise ExprError(f"shift by {right} in expression", column)
            else:
                left = _BINARY[op][1](left, right)

    def unary(self) -> int:
        kind, value, column = self.take()
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExprError(f"expression nested more than {MAX_NESTING} levels deep", column)
        try:
            return self._unary(kind, value, column)
        finally:
            self.depth -= 1

    def _unary(self, kind: str, value: str, column: int) -> int:
        if kind == "op" and value in "-+~":
            operand = self.unary()
            return {"-": -operand, "+": operand, "~": ~operand}[value]
        if kind == "op" and value == "(":
            inner = self.expression()
            if self.take()[1] != ")":
                raise ExprError("expected ')' in expression", column)
            return inner
        if kind == "num":
            if len(value) > 100:          # (no operand is wider than 64 bits)
                raise ExprError(f"number of {len(value)} characters is too long", column)
            return int(value.replace("_", ""), 0) if not re.fullmatch(r"0[0-9_]+", value) \
                else int(value.replace("_", ""), 10)
        if kind == "name":
            if value not in self.constants:
                raise ExprError(f"unknown constant '{value}' (define it with .equ before use)",
                                column)
            return self.constants[value]
        shown = value or "end of operand"
        raise ExprError(f"expected a number, got '{shown}'", column)


def parse_int_expr(text: str, constants: dict[str, int] | None = None) -> int:
    if not text.strip():
        raise ExprError("expected an integer, got nothing", 0)
    parser = _Parser(text, constants or {})
    value = parser.expression()
    kind, rest, column = parser.peek()
    if kind != "end":
        raise ExprError(f"unexpected '{rest}' after expression", column)
    return value


_FLOAT_TYPES = {32: (np.float32, np.uint32), 16: (np.float16, np.uint16)}
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf|nan)",
                      re.IGNORECASE)


def parse_float(text: str, bits: int) -> int:
    """Bit pattern of a float literal in the given width (32 or 16)."""
    text = text.strip()
    ftype, utype = _FLOAT_TYPES[bits]
    if re.fullmatch(r"0[xX][0-9A-Fa-f_]+", text):
        raw = int(text.replace("_", ""), 16)
        if raw >> bits:
            raise ExprError(f"raw bit pattern {text} does not fit in {bits} bits")
        return raw
    if not _DECIMAL.fullmatch(text):
        raise ExprError(f"expected a float literal (e.g. 1.5, -2e-3, inf, nan or 0x raw bits), "
                        f"got '{text}'")
    with np.errstate(over="ignore"):
        value = np.array(float(text), dtype=ftype)
    if np.isinf(value) and "inf" not in text.lower():
        raise ExprError(f"float literal {text} overflows f{bits}")
    return int(value.view(utype))


def format_float(raw: int, bits: int) -> str:
    """The shortest literal that parses back to exactly ``raw``."""
    ftype, utype = _FLOAT_TYPES[bits]
    value = np.array(raw, dtype=utype).view(ftype)[()]
    if np.isnan(value):
        return f"{raw:#x}"
    if np.isinf(value):
        return "-inf" if value < 0 else "inf"
    magnitude = abs(float(value))
    if magnitude == 0 or 1e-4 <= magnitude < 1e7:
        text = np.format_float_positional(value, unique=True, trim="0")
    else:
        text = np.format_float_scientific(value, unique=True, trim="0")
    if parse_float(text, bits) != raw:          # pragma: no cover - safety net
        return f"{raw:#x}"
    return text


def format_int(value: int) -> str:
    """Signed decimal for small values, hex for large ones (addresses, masks)."""
    signed = value - (1 << 32) if value >= 1 << 31 else value
    return str(signed) if -65536 < signed < 65536 else f"{value:#x}"
