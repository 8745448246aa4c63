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

``.rept N`` ... ``.endr`` assembles its body N times (N a decimal or hex
integer, 0 to ``MAX_REPT``; a file expands to at most ``MAX_EXPANSION`` lines and
repetitions in all); ``.irp SYM, A, B`` ... ``.endr`` assembles it once per
value with ``\\SYM`` replaced by it (no values: once, with ``\\SYM`` empty).  Both
nest with each other and with macros; as in GNU as, the enclosing substitution
comes first (a macro's ``\\p`` and ``\\@`` inside a ``.irp`` in its body are replaced
when the macro expands), and ``\\@`` in a repetition outside any macro is the
number of macro expansions so far (a repetition is not counted).  ``\\()`` ends a
symbol name as in macros.

An expanded line is located at its line in the macro body, with a note ``in
expansion of macro NAME at file:line`` per level (``in repetition K of .rept at
file:line``, ``in .irp SYM = VALUE at file:line`` for repetitions), then the
invocation's own include notes; a column inside a substituted argument is that
of its ``\\p`` (``SourceLine.cols``, mapped back by the assembler).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vpuc.diagnostics import DiagnosticBag, Loc
from vpuc.shave.asm_include import MAX_LINES, SourceLine
from vpuc.shave.asm_substitute import (BLOCKS, IDENTIFIER, LINE_HEAD, MacroError, Substitution,
                                      column_loc, irp_scopes, line_word, strip_comment,
                                      substitute)

MAX_DEPTH = 16
MAX_REPT = 65536
# Lines expanded (and repetitions of empty bodies), over the whole file: the product
# of nested counts is capped, not only each count (the cap of asm_include).
MAX_EXPANSION = MAX_LINES
_COUNT = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]+")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Macro:
    name: str
    params: tuple[str, ...]
    body: list[SourceLine]
    loc: Loc


def split_commas(body: str) -> list[tuple[str, int, bool]]:
    """``body`` split at top-level commas (not inside parentheses): per piece, its text
    stripped, the offset in ``body`` of its first non-blank character, and whether it
    is the last piece.  The assembler's operands and the macro arguments both use it."""
    if not body.strip():
        return []
    pieces, depth, begin = [], 0, 0
    for i, ch in enumerate(body + ","):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth <= 0:
            piece = body[begin:i]
            pieces.append((piece.strip(), begin + len(piece) - len(piece.lstrip()),
                           i == len(body)))
            begin = i + 1
    return pieces


def _split_args(line: SourceLine, text: str, start: int) -> list[tuple[str, int]]:
    """Arguments at top-level commas, each with its 0-based column."""
    args = []
    for piece, offset, last in split_commas(text[start:]):
        col = start + offset
        if not piece:
            raise MacroError(Loc(line.file, line.number, col + 1),
                             "expected an argument after ','" if last
                             else "expected an argument before ','")
        args.append((piece, col))
    return args


class _OverBudget(Exception):
    def __init__(self, line: SourceLine) -> None:
        super().__init__(line)
        self.line = line


class _Expander:
    def __init__(self, bag: DiagnosticBag) -> None:
        self.bag = bag
        self.macros: dict[str, Macro] = {}
        self.count = 0                  # expansions so far: the value of \@
        self.out: list[SourceLine] = []
        self.spent = 0                  # lines expanded and repetitions run

    def run(self, lines: list[SourceLine]) -> list[SourceLine]:
        try:
            self._lines(lines, 0, None)
        except _OverBudget as over:
            line = over.line
            self.bag.error(Loc(line.file, line.number, 1),
                           f"macros and repetitions expand to more than {MAX_EXPANSION:,} lines "
                           "(nested '.rept' counts multiply); assembly stopped here", line.via)
            return []
        return self.out

    def _spend(self, line: SourceLine, via) -> None:
        self.spent += 1
        if self.spent > MAX_EXPANSION:
            raise _OverBudget(SourceLine(line.file, line.number, line.text, via))

    def _lines(self, lines: list[SourceLine], depth: int, ctx: Substitution | None) -> None:
        """Expand ``lines``: top-level text (``ctx`` None: macro definitions are
        taken here) or a macro body / repetition, substituted line by line."""
        i = 0
        while i < len(lines):
            line = lines[i]
            self._spend(line, line.via if ctx is None else ctx.via)
            head, word = line_word(line)
            if word == ".macro" and ctx is None:
                i = self._define(lines, i, head)
                continue
            if word in BLOCKS:
                i = self._block(lines, i, head, depth, ctx)
                continue
            try:
                if word == ".endm" and ctx is None:
                    raise MacroError(Loc(line.file, line.number, head.start(2) + 1),
                                     "'.endm' without '.macro'")
                if word == ".endr":
                    raise MacroError(column_loc(line, head.start(2)),
                                     "'.endr' without '.rept' or '.irp'")
                self._line(self._apply(ctx, i, line), depth)
            except MacroError as err:
                self.bag.error(err.loc, err.message,
                               err.notes + (line.via if ctx is None else ctx.via))
            i += 1

    def _apply(self, ctx: Substitution | None, i: int, line: SourceLine) -> SourceLine:
        """Line ``i`` of the lines ``ctx`` substitutes, substituted."""
        if ctx is None:
            return line
        text, cols = substitute(line, ctx, i)
        return SourceLine(line.file, line.number, text, ctx.via, cols)

    def _block(self, lines: list[SourceLine], i: int, head: re.Match, depth: int,
               ctx: Substitution | None) -> int:
        """The ``.rept`` or ``.irp`` at ``lines[i]`` expanded; the index after its
        ``.endr``."""
        line, word = lines[i], head.group(2)
        via = line.via if ctx is None else ctx.via
        level, end = 0, i + 1
        while end < len(lines):
            inner, other = line_word(lines[end])
            if other in BLOCKS:
                level += 1
            elif other == ".endr":
                if level == 0:
                    break
                level -= 1
            elif other in (".macro", ".endm") and ctx is None:
                self.bag.error(column_loc(lines[end], inner.start(2)),
                               f"'{other}' inside a '.rept' or '.irp' (missing '.endr'?)",
                               lines[end].via)
            end += 1
        if end == len(lines):
            self.bag.error(column_loc(line, head.start(2)), f"missing '.endr' for this '{word}'",
                           via)
            return end
        body: list[SourceLine] = []
        try:
            first = self._apply(ctx, i, line)
            for k in range(i + 1, end):      # the enclosing substitution first
                try:
                    body.append(self._apply(ctx, k, lines[k]))
                except MacroError as err:
                    self.bag.error(err.loc, err.message, err.notes + via)
            head = LINE_HEAD.match(strip_comment(first.text))
            sym, values = self._block_head(first, head)
        except MacroError as err:
            self.bag.error(err.loc, err.message, err.notes + via)
            return end + 1
        if head.group(1).strip():
            self.out.append(SourceLine(line.file, line.number, head.group(1), via))
        scopes, serial = irp_scopes(body), str(self.count)
        where = f"{line.file}:{line.number}"
        for n, value in enumerate(values, 1):
            note = f"in repetition {n} of .rept at {where}" if sym is None \
                else f"in .irp {sym} = {value} at {where}"
            if not body:                 # (a body's lines count themselves)
                self._spend(line, ((None, note),) + via)
            self._lines(body, depth + 1, Substitution(
                {} if sym is None else {sym: value}, serial, ((None, note),) + via, scopes,
                word))
        labels = LINE_HEAD.match(strip_comment(lines[end].text)).group(1)
        if labels.strip():                       # keep labels in front of '.endr'
            self.out.append(SourceLine(lines[end].file, lines[end].number, labels, via))
        return end + 1

    @staticmethod
    def _block_head(line: SourceLine, head: re.Match) -> tuple[str | None, list[str]]:
        """``.rept N``: (None, N empty values); ``.irp SYM, A, ...``: (SYM, values)."""
        word, code = head.group(2), strip_comment(line.text)
        args = _split_args(line, code, head.end(2))
        if word == ".rept":
            if len(args) != 1:
                raise MacroError(column_loc(line, head.start(2) if not args else args[1][1]),
                                 "expected '.rept COUNT'")
            text, col = args[0]
            if not _COUNT.fullmatch(text) or int(text, 0) > MAX_REPT:
                raise MacroError(column_loc(line, col), f"expected a count from 0 to {MAX_REPT} "
                                 f"for '.rept', got '{text}'")
            return None, [""] * int(text, 0)
        if not args:
            raise MacroError(column_loc(line, head.start(2)), "expected '.irp SYMBOL, value, ...'")
        sym, col = args[0]
        if not _PARAM.fullmatch(sym):
            raise MacroError(column_loc(line, col), f"expected a symbol name, got '{sym}'")
        return sym, [text for text, _ in args[1:]] or [""]

    def _define(self, lines: list[SourceLine], i: int, head: re.Match) -> int:
        line = lines[i]
        self.out.append(SourceLine(line.file, line.number, head.group(1), line.via))
        loc = Loc(line.file, line.number, head.start(2) + 1)
        code = strip_comment(line.text)
        end = i + 1
        while end < len(lines):
            inner = LINE_HEAD.match(strip_comment(lines[end].text))
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
                raise MacroError(loc, "missing '.endm' for this '.macro'")
            words = _split_args(line, code, head.end(2))
            if not words:
                raise MacroError(loc, "expected '.macro NAME [param, ...]'")
            first, col = words[0]
            name, rest = (first.split(None, 1) + [""])[:2]
            if not re.fullmatch(IDENTIFIER, name):
                raise MacroError(Loc(line.file, line.number, col + 1),
                                 f"expected a macro name, got '{name}'")
            params = ([(rest.strip(), col + len(first) - len(rest.strip()))] if rest.strip()
                      else []) + words[1:]
            seen: list[str] = []
            for param, pcol in params:
                if not _PARAM.fullmatch(param) or param in seen:
                    what = "duplicate parameter" if param in seen else "expected a parameter name, got"
                    raise MacroError(Loc(line.file, line.number, pcol + 1), f"{what} '{param}'")
                seen.append(param)
            if name in self.macros:
                raise MacroError(Loc(line.file, line.number, col + 1),
                                 f"macro '{name}' is already defined",
                                 ((self.macros[name].loc, "first defined here"),))
            self.macros[name] = Macro(name, tuple(seen), lines[i + 1:end], loc)
        except MacroError as err:
            self.bag.error(err.loc, err.message, err.notes + line.via)
        if end < len(lines):                     # keep labels in front of '.endm'
            last = lines[end]
            labels = LINE_HEAD.match(strip_comment(last.text)).group(1)
            if labels.strip():
                self.out.append(SourceLine(last.file, last.number, labels, last.via))
        return end + 1

    def _line(self, line: SourceLine, depth: int) -> None:
        code = strip_comment(line.text)
        head = LINE_HEAD.match(code)
        macro = self.macros.get(head.group(2)) if head else None
        if macro is None:
            self.out.append(line)
            return
        loc = Loc(line.file, line.number, head.start(2) + 1)
        if depth >= MAX_DEPTH:
            raise MacroError(loc, f"macro expansions nested too deeply (the limit is "
                             f"{MAX_DEPTH} levels)")
        args = _split_args(line, code, head.end(2))
        if len(args) != len(macro.params):
            where = Loc(line.file, line.number, args[len(macro.params)][1] + 1) \
                if len(args) > len(macro.params) else loc
            n = len(macro.params)
            raise MacroError(where, f"macro '{macro.name}' takes {n} argument"
                             f"{'s' if n != 1 else ''}, got {len(args)}",
                             ((macro.loc, "macro defined here"),))
        if head.group(1).strip():
            self.out.append(SourceLine(line.file, line.number, head.group(1), line.via))
        serial = str(self.count)
        self.count += 1
        via = ((None, f"in expansion of macro {macro.name} at {line.file}:{line.number}"),) \
            + line.via
        self._lines(macro.body, depth + 1, Substitution(
            dict(zip(macro.params, (text for text, _ in args))), serial, via,
            irp_scopes(macro.body), "macro"))

def expand_macros(lines: list[SourceLine], bag: DiagnosticBag) -> list[SourceLine]:
    """``lines`` with macro definitions removed, invocations and ``.rept`` / ``.irp``
    blocks expanded."""
    return _Expander(bag).run(lines)
