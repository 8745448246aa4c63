"""``.macro NAME a, b`` ... ``.endm``: GNU-as-style macros, expanded before assembly.

A definition's body lines are kept, not assembled; ``NAME x, y`` later (after
optional labels) assembles the body with every ``\\a`` replaced by the text of
its argument, ``\\@`` by the number of the expansion (0, 1, ... in the order
expansions happen, so a macro can define labels like ``loop\\@``), and ``\\()``
by nothing (to end an argument name: ``\\op\\().f16``).  Substitution happens
outside comments only.  A macro is defined once, before its first use, and
takes exactly as many arguments as it names.  A body may invoke other macros,
up to ``MAX_DEPTH`` expansions deep (which also stops recursion); it may not
define one.

An expanded line is located at its line in the macro body, with a note ``in
expansion of macro NAME at file:line`` per level, then the invocation's own
include notes; a column inside a substituted argument is that of its ``\\p``
(``SourceLine.cols``, mapped back by the assembler).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vpuc.diagnostics import DiagnosticBag, Loc
from vpuc.shave.asm_include import SourceLine

MAX_DEPTH = 16
_IDENT = r"[A-Za-z_.$][A-Za-z0-9_.$]*"
_HEAD = re.compile(rf"^((?:\s*{_IDENT}\s*:)*)\s*(\S+)")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPE = re.compile(r"\\(@|\(\)|[A-Za-z_][A-Za-z0-9_]*)?")


@dataclass
class Macro:
    name: str
    params: tuple[str, ...]
    body: list[SourceLine]
    loc: Loc


class _MacroError(Exception):
    def __init__(self, loc: Loc, message: str, notes=()) -> None:
        super().__init__(message)
        self.loc, self.message, self.notes = loc, message, tuple(notes)


def _code(text: str) -> str:
    """``text`` without its comment."""
    cut = len(text)
    for marker in ("//", "#"):
        pos = text.find(marker)
        if 0 <= pos < cut:
            cut = pos
    return text[:cut]


def _split_args(line: SourceLine, text: str, start: int) -> list[tuple[str, int]]:
    """Arguments at top-level commas, each with its 0-based column."""
    body = text[start:]
    if not body.strip():
        return []
    args, depth, begin = [], 0, 0
    for i, ch in enumerate(body + ","):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth <= 0:
            piece = body[begin:i]
            col = start + begin + len(piece) - len(piece.lstrip())
            if not piece.strip():
                raise _MacroError(Loc(line.file, line.number, col + 1),
                                  "expected an argument before ','" if i < len(body)
                                  else "expected an argument after ','")
            args.append((piece.strip(), col))
            begin = i + 1
    return args


class _Expander:
    def __init__(self, bag: DiagnosticBag) -> None:
        self.bag = bag
        self.macros: dict[str, Macro] = {}
        self.count = 0                  # expansions so far: the value of \@
        self.out: list[SourceLine] = []

    def run(self, lines: list[SourceLine]) -> list[SourceLine]:
        i = 0
        while i < len(lines):
            line = lines[i]
            head = _HEAD.match(_code(line.text))
            if head and head.group(2) == ".macro":
                i = self._define(lines, i, head)
                continue
            try:
                if head and head.group(2) == ".endm":
                    raise _MacroError(Loc(line.file, line.number, head.start(2) + 1),
                                      "'.endm' without '.macro'")
                self._line(line, 0)
            except _MacroError as err:
                self.bag.error(err.loc, err.message, err.notes + line.via)
            i += 1
        return self.out

    def _define(self, lines: list[SourceLine], i: int, head: re.Match) -> int:
        line = lines[i]
        self.out.append(SourceLine(line.file, line.number, head.group(1), line.via))
        loc = Loc(line.file, line.number, head.start(2) + 1)
        code = _code(line.text)
        end = i + 1
        while end < len(lines):
            inner = _HEAD.match(_code(lines[end].text))
            if inner and inner.group(2) == ".endm":
                break
            if inner and inner.group(2) == ".macro":
                other = lines[end]
                self.bag.error(Loc(other.file, other.number, inner.start(2) + 1),
                               "'.macro' inside a macro definition (missing '.endm'?)",
                               other.via)
            end += 1
        try:
            if end == len(lines):
                raise _MacroError(loc, "missing '.endm' for this '.macro'")
            words = _split_args(line, code, head.end(2))
            if not words:
                raise _MacroError(loc, "expected '.macro NAME [param, ...]'")
            first, col = words[0]
            name, rest = (first.split(None, 1) + [""])[:2]
            if not re.fullmatch(_IDENT, name):
                raise _MacroError(Loc(line.file, line.number, col + 1),
                                  f"expected a macro name, got '{name}'")
            params = ([(rest.strip(), col + len(first) - len(rest.strip()))] if rest.strip()
                      else []) + words[1:]
            seen: list[str] = []
            for param, pcol in params:
                if not _PARAM.fullmatch(param) or param in seen:
                    what = "duplicate parameter" if param in seen else "expected a parameter name, got"
                    raise _MacroError(Loc(line.file, line.number, pcol + 1), f"{what} '{param}'")
                seen.append(param)
            if name in self.macros:
                raise _MacroError(Loc(line.file, line.number, col + 1),
                                  f"macro '{name}' is already defined",
                                  ((self.macros[name].loc, "first defined here"),))
            self.macros[name] = Macro(name, tuple(seen), lines[i + 1:end], loc)
        except _MacroError as err:
            self.bag.error(err.loc, err.message, err.notes + line.via)
        if end < len(lines):                     # keep labels in front of '.endm'
            last = lines[end]
            labels = _HEAD.match(_code(last.text)).group(1)
            if labels.strip():
                self.out.append(SourceLine(last.file, last.number, labels, last.via))
        return end + 1

    def _line(self, line: SourceLine, depth: int) -> None:
        code = _code(line.text)
        head = _HEAD.match(code)
        macro = self.macros.get(head.group(2)) if head else None
        if macro is None:
            self.out.append(line)
            return
        loc = Loc(line.file, line.number, head.start(2) + 1)
        if depth >= MAX_DEPTH:
            raise _MacroError(loc, f"macro expansions nested too deeply (the limit is "
                              f"{MAX_DEPTH} levels)")
        args = _split_args(line, code, head.end(2))
        if len(args) != len(macro.params):
            where = Loc(line.file, line.number, args[len(macro.params)][1] + 1) \
                if len(args) > len(macro.params) else loc
            n = len(macro.params)
            raise _MacroError(where, f"macro '{macro.name}' takes {n} argument"
                              f"{'s' if n != 1 else ''}, got {len(args)}",
                              ((macro.loc, "macro defined here"),))
        if head.group(1).strip():
            self.out.append(SourceLine(line.file, line.number, head.group(1), line.via))
        values = dict(zip(macro.params, (text for text, _ in args)))
        serial = str(self.count)
        self.count += 1
        via = ((None, f"in expansion of macro {macro.name} at {line.file}:{line.number}"),) \
            + line.via
        for body in macro.body:
            try:
                text, cols = self._substitute(body, values, serial)
                self._line(SourceLine(body.file, body.number, text, via, cols), depth + 1)
            except _MacroError as err:
                self.bag.error(err.loc, err.message, err.notes + via)

    def _substitute(self, body: SourceLine, values: dict[str, str],
                    serial: str) -> tuple[str, tuple[int, ...]]:
        """The body line with its escapes replaced, and for each index of the result
        (and one past its end) the 0-based column in the body line it came from."""
        code = _code(body.text)
        base = tuple(range(len(body.text) + 1))   # body lines are never expansions
        pieces: list[str] = []
        cols: list[int] = []
        pos = 0
        for match in _ESCAPE.finditer(code):
            pieces.append(code[pos:match.start()])
            cols.extend(base[pos:match.start()])
            value = self._escape(body, values, serial, match)
            pieces.append(value)
            cols.extend([base[match.start()]] * len(value))
            pos = match.end()
        pieces.append(body.text[pos:])
        cols.extend(base[pos:])
        return "".join(pieces), tuple(cols)

    @staticmethod
    def _escape(body: SourceLine, values: dict[str, str], serial: str,
                match: re.Match) -> str:
        key = match.group(1)
        if key == "@":
            return serial
        if key == "()":
            return ""
        if key in values:
            return values[key]
        where = Loc(body.file, body.number, match.start() + 1)
        if key is None:
            raise _MacroError(where, "expected a parameter name, '@' or '()' after '\\'")
        known = ", ".join(f"\\{p}" for p in values) or "none"
        raise _MacroError(where, f"unknown macro parameter '\\{key}' (parameters: {known})")


def expand_macros(lines: list[SourceLine], bag: DiagnosticBag) -> list[SourceLine]:
    """``lines`` with macro definitions removed and invocations expanded."""
    return _Expander(bag).run(lines)
