"""The atoms of VIR text as the parser reads them: integer and float literals (with the
length guard Python needs), source locations, ``%``/``@`` references, tensor types and
memref patterns, and the rule callbacks' shared helpers (``TransformerHelpers``).

Values the grammar accepts but that are out of range (a dims order of the wrong rank, a
malformed memref) are reported to the parse's ``DiagnosticBag`` at their token.
"""

from __future__ import annotations

from lark import Token

from vpuc.diagnostics import DiagnosticBag, Loc
from vpuc.ir.module import Ref, Slice
from vpuc.ir.types import ELEM_BY_NAME, DimsOrder, Dynamic, MemRefPattern, TensorType

# Python refuses to convert longer decimal strings (a guard against quadratic time).
MAX_DECIMAL_DIGITS = 4300


class LiteralTooLong(ValueError):
    """A decimal integer literal longer than Python converts; carries the token."""

    def __init__(self, token) -> None:
        super().__init__(token)
        self.token = token


def parse_int(text: str) -> int:
    body = text.lstrip("+-")
    if len(body) > MAX_DECIMAL_DIGITS and body[:2] not in ("0x", "0X"):
        raise LiteralTooLong(text)
    value = int(body, 16) if body[:2] in ("0x", "0X") else int(body, 10)
    return -value if text.startswith("-") else value


def parse_number(token: Token) -> float | int:
    if token.type == "INT":
        return parse_int(token)
    return float(token)


class TransformerHelpers:
    """What the rule callbacks share.  Kept out of ``VirTransformer`` itself, so lark's
    ``v_args`` leaves these plain methods: a wrapped one builds a new wrapper (with
    ``functools.update_wrapper``) on every attribute access, a tenth of a long parse."""

    file: str
    bag: DiagnosticBag
    interned: dict

    def loc(self, token: Token) -> Loc:
        return Loc(self.file, token.line, token.column)

    def ref(self, token: Token) -> Ref:
        # Strip the sigil: %x and @k are stored as "x" and "k".
        return Ref(token[1:], Loc(self.file, token.line, token.column))

    def shared(self, value):
        """One object for equal immutable values of a parse (variant corners, DPU windows):
        a program of 100k tasks repeats a few of them tens of thousands of times."""
        return self.interned.setdefault(value, value)

    def shared_slice(self, start: int, stop: int, step: int = 1) -> Slice:
        # Slices are never changed after parsing, so views may share equal ones (``:``).
        key = ("slice", start, stop, step)
        found = self.interned.get(key)
        if found is None:
            found = self.interned[key] = Slice(start, stop, step)
        return found

    def int_(self, token: Token | None) -> int | None:
        return None if token is None else parse_int(token)

    def tensor_type(self, shaped: Token, order: DimsOrder | None) -> TensorType:
        *dims_text, elem_text = shaped.split("x")
        if len(shaped) > MAX_DECIMAL_DIGITS:
            raise LiteralTooLong(shaped)
        dims = tuple(Dynamic(int(d[3:])) if d.startswith("?") else int(d) for d in dims_text)
        if order is None:
            order = DimsOrder.identity(len(dims))
        elif order.rank != len(dims):
            self.bag.error(self.loc(shaped), f"dims order {order} has rank {order.rank} but the "
                           f"type {shaped} has rank {len(dims)}")
            order = DimsOrder.identity(len(dims))
        return TensorType(dims, ELEM_BY_NAME[elem_text], order)

    def memref_pattern(self, token: Token) -> MemRefPattern | None:
        inner = token[len("memref<"):-1].replace(" ", "")
        *dims_text, elem_text = inner.split("x") if inner else [""]
        elem = ELEM_BY_NAME.get(elem_text)
        if elem is None:
            self.bag.error(self.loc(token), f"unknown element type '{elem_text}' in {token}; "
                           "expected one of " + ", ".join(ELEM_BY_NAME))
            return None
        if dims_text == ["*"]:
            return MemRefPattern(elem, None)
        dims: list[int | None] = []
        for text in dims_text:
            if text == "?":
                dims.append(None)
            elif text.isdigit():
                dims.append(int(text))
            else:
                self.bag.error(self.loc(token), f"bad dim '{text}' in {token}; expected "
                               "memref<*xT> (any rank) or dims of sizes or '?', like memref<?x16xf16>")
                return None
        return MemRefPattern(elem, tuple(dims))
