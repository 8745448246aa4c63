"""``.include "path"``: a SHAVE assembly text expanded into its lines, each with its origin.

Inclusion is textual, like C's ``#include``: the included file's lines are
assembled in place of the directive, in the current section, sharing labels
and ``.equ`` constants with the rest.  A relative path is looked up in the
including file's directory first -- for text without a file (``"<asm>"``, or a
bare ``"k.s"``) that is the current directory -- then in each directory of the
include search path, in order.  Includes nest up to ``MAX_DEPTH`` deep; a file
that (directly or not) includes itself is an error.

Every expanded line remembers where it was included from, so a diagnostic in an
included file is located ``file:line:col`` in that file, with one note
``included from X:line`` per level.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from vpuc.diagnostics import SOURCES, DiagnosticBag, Loc
from vpuc.fileio import not_utf8

MAX_DEPTH = 16
# Lines a file may expand to, with its includes and (asm_macro) its macros and
# repetitions: a library kernel expands to < 2,000; the assembler takes ~0.1 ms a line.
MAX_LINES = 1 << 17
# Labels, then the directive (not a longer name such as '.includes'), then the rest.
_INCLUDE = re.compile(r"^(\s*(?:[A-Za-z_.$][A-Za-z0-9_.$]*\s*:\s*)*)(\.include)"
                      r"(?![A-Za-z0-9_.$])(.*)$")
_OPERAND = re.compile(r'^(\s*)"([^"]*)"\s*(?:(?://|#).*)?$')

Notes = tuple[tuple[Loc | None, str], ...]


@dataclass(frozen=True, slots=True)
class SourceLine:
    """One line to assemble: its file, 1-based number, text, and include notes."""

    file: str
    number: int
    text: str
    via: Notes = ()            # "included from X:line", innermost first
    cols: tuple[int, ...] | None = None   # macro expansions: text index -> body column


class _TooLong(Exception):
    """The expansion outgrew MAX_LINES (already reported)."""


class _IncludeError(Exception):
    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def expand(text: str, filename: str, include_path: Iterable[str | os.PathLike],
           bag: DiagnosticBag) -> list[SourceLine]:
    """The lines of ``text`` with every ``.include`` replaced by the included lines.

    A ``.include`` line itself stays, with the directive blanked out, so labels
    in front of it are still defined.  Errors of a directive go into ``bag``.
    """
    if isinstance(include_path, (str, os.PathLike)):
        include_path = (include_path,)          # one directory, not its characters
    search = tuple(os.fspath(d) for d in include_path)
    out: list[SourceLine] = []
    try:
        _expand(text, filename, (), ((os.path.realpath(filename), filename),), search, bag, out)
    except _TooLong:
        return []
    return out


def _expand(text: str, file: str, via: Notes, stack: tuple[tuple[str, str], ...],
            search: tuple[str, ...], bag: DiagnosticBag, out: list[SourceLine]) -> None:
    SOURCES.add(file, text)
    for number, raw in enumerate(text.splitlines(), start=1):
        match = _INCLUDE.match(raw)
        if match is None:
            out.append(SourceLine(file, number, raw, via))
            continue
        out.append(SourceLine(file, number, match.group(1), via))
        if len(out) > MAX_LINES:
            bag.error(Loc(file, number, match.start(2) + 1), f"includes expand to more than "
                      f"{MAX_LINES:,} lines; assembly stopped here", via)
            raise _TooLong()
        try:
            path, real, included = _open(match, Loc(file, number, match.start(2) + 1),
                                         via, stack, search)
        except _IncludeError as err:
            bag.error(err.loc, err.message, via)
            continue
        _expand(included, path, ((None, f"included from {file}:{number}"),) + via,
                stack + ((real, path),), search, bag, out)


def _open(match: re.Match, loc: Loc, via: Notes, stack: tuple[tuple[str, str], ...],
          search: tuple[str, ...]) -> tuple[str, str, str]:
    """Resolve and read the file a ``.include`` names: (path, real path, text)."""
    operand = _OPERAND.match(match.group(3))
    if operand is None or not operand.group(2):
        raise _IncludeError(loc, "expected '.include \"path\"'")
    name = operand.group(2)
    name_loc = Loc(loc.file, loc.line, match.start(3) + len(operand.group(1)) + 1)
    if len(via) >= MAX_DEPTH:
        raise _IncludeError(name_loc, f"includes nested too deeply (the limit is {MAX_DEPTH} "
                            "levels)")
    path = _find(name, loc.file, search, name_loc)
    real = os.path.realpath(path)
    reals = [real_path for real_path, _ in stack]
    if real in reals:
        shown = [shown for _, shown in stack[reals.index(real):]]
        raise _IncludeError(name_loc, "include cycle: " + " -> ".join(shown + [path]))
    try:
        with open(path, encoding="utf-8") as handle:
            return path, real, handle.read()
    except UnicodeDecodeError as exc:
        bad = not_utf8(path, exc, "assembly").diagnostics[0]
        raise _IncludeError(name_loc, f"include file '{path}' is not UTF-8 text: {bad.loc}: "
                            f"{bad.message}") from None
    except OSError as exc:
        raise _IncludeError(name_loc, f"cannot read include file '{path}': "
                            f"{exc.strerror or exc}") from None


def _find(name: str, including: str, search: tuple[str, ...], loc: Loc) -> str:
    """The first existing candidate for ``name``: the including file's directory, then
    the search path.  Absolute names are taken as they are."""
    if os.path.isabs(name):
        if os.path.exists(name):
            return name
        raise _IncludeError(loc, f"cannot find include file '{name}'")
    dirs = (os.path.dirname(including),) + search
    for directory in dirs:
        candidate = os.path.normpath(os.path.join(directory, name))
        if os.path.exists(candidate):
            return candidate
    looked = ", ".join(d or "." for d in dirs)
    raise _IncludeError(loc, f"cannot find include file '{name}' (searched {looked})")
