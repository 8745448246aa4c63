"""The text substitution of ``.macro`` bodies and ``.rept`` / ``.irp`` repetitions:
``\\name``, ``\\@`` and ``\\()`` replaced outside comments, each character of the
result mapped back to its column in the source line; the ``.irp`` blocks nested in a
body (their symbols are replaced there, not here); the errors of both, located
(``asm_macro.py`` states the rules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vpuc.diagnostics import Loc
from vpuc.shave.asm_include import SourceLine

BLOCKS = (".rept", ".irp")
IDENTIFIER = r"[A-Za-z_.$][A-Za-z0-9_.$]*"
LINE_HEAD = re.compile(rf"^((?:\s*{IDENTIFIER}\s*:)*)\s*(\S+)")
_ESCAPE = re.compile(r"\\(@|\(\)|[A-Za-z_][A-Za-z0-9_]*)?")


@dataclass
class Substitution:
    """How the lines of a macro body or a repetition are substituted: the values
    of the names, ``\\@``, the notes of the expansion, and per line the names of
    the ``.irp`` blocks around it inside these lines (kept for those blocks) and
    whether it is inside one at all (``\\()`` is then kept too)."""
    values: dict[str, str]
    serial: str
    via: tuple
    scopes: list[tuple[frozenset, bool]]
    kind: str                   # "macro" or ".irp" / ".rept": names its escapes


def line_word(line: SourceLine) -> tuple[re.Match | None, str | None]:
    head = LINE_HEAD.match(strip_comment(line.text))
    return head, (head.group(2) if head else None)


def irp_scopes(lines: list[SourceLine]) -> list[tuple[frozenset, bool]]:
    """Per line: the ``.irp`` symbols of the blocks (among ``lines``) around it, and
    whether any block is around it."""
    stack: list[str] = []
    out = []
    for line in lines:
        head, word = line_word(line)
        out.append((frozenset(s for s in stack if s), bool(stack)))
        if word == ".endr" and stack:
            stack.pop()
        elif word in BLOCKS:
            sym = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", strip_comment(line.text)[head.end(2):]) \
                if word == ".irp" else None
            stack.append(sym.group(1) if sym else "")
    return out


def column_loc(line: SourceLine, col: int) -> Loc:
    """The location of 0-based column ``col`` of ``line`` (in its source line when
    it was substituted)."""
    if line.cols is not None:
        col = line.cols[min(max(col, 0), len(line.cols) - 1)]
    return Loc(line.file, line.number, col + 1)


class MacroError(Exception):
    def __init__(self, loc: Loc, message: str, notes=()) -> None:
        super().__init__(message)
        self.loc, self.message, self.notes = loc, message, tuple(notes)


def strip_comment(text: str) -> str:
    """``text`` without its comment."""
    cut = len(text)
    for marker in ("//", "#"):
        pos = text.find(marker)
        if 0 <= pos < cut:
            cut = pos
    return text[:cut]


def substitute(line: SourceLine, ctx: Substitution, i: int) -> tuple[str, tuple[int, ...]]:
    """Line ``i`` of ``ctx`` with its escapes replaced, and for each index of the
    result (and one past its end) the 0-based column in the source line it came
    from."""
    code = strip_comment(line.text)
    base = line.cols if line.cols is not None else tuple(range(len(line.text) + 1))
    pieces: list[str] = []
    cols: list[int] = []
    pos = 0
    for match in _ESCAPE.finditer(code):
        pieces.append(code[pos:match.start()])
        cols.extend(base[pos:match.start()])
        value = _escape(line, ctx, ctx.scopes[i], match)
        pieces.append(value)
        cols.extend([base[match.start()]] * len(value))
        pos = match.end()
    pieces.append(line.text[pos:])
    cols.extend(base[pos:])
    return "".join(pieces), tuple(cols)

def _escape(line: SourceLine, ctx: Substitution, scope: tuple[frozenset, bool],
            match: re.Match) -> str:
    key = match.group(1)
    if key == "@":
        return ctx.serial
    if key == "()":
        return match.group(0) if scope[1] else ""
    if key in scope[0]:
        return match.group(0)         # an inner .irp's symbol: replaced there
    if key in ctx.values:
        return ctx.values[key]
    where = column_loc(line, match.start())
    what = {"macro": ("parameter", "macro parameter", "parameters"),
            ".irp": ("symbol", ".irp symbol", "symbol")}.get(ctx.kind)
    if what is None:
        raise MacroError(where, "expected '@' or '()' after '\\' in a '.rept'" if key is None
                         else f"unknown name '\\{key}' in a '.rept' (only '\\@' and "
                         "'\\()' are replaced)")
    if key is None:
        raise MacroError(where, f"expected a {what[0]} name, '@' or '()' after '\\'")
    known = ", ".join(f"\\{p}" for p in ctx.values) or "none"
    raise MacroError(where, f"unknown {what[1]} '\\{key}' ({what[2]}: {known})")
