"""Located diagnostics: the one error type users ever see.

Every user-facing failure in vpuc (a malformed .vir, a bad assembly line, a
corrupt blob, an out-of-bounds access in the simulator) is reported as a
``VpucError`` carrying one or more ``Diagnostic`` records.  The CLI catches
``VpucError`` and prints it; anything else escaping is a bug in vpuc.

A diagnostic names *where* (``file:line:col`` for text, or a blob section and
byte offset for binaries) and *what was expected*.  For text locations the
rendering shows the source line with a caret under the column, the way
compilers do.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from enum import Enum


# The source name of the program text lower-graph writes (``<lower-graph @NAME>``): no user
# writes it, so an error located there is a compiler bug (``vpuc.cli``).
LOWERED_SOURCE = "<lower-graph"

@dataclass(frozen=True, slots=True)
class Loc:
    """A position in a source text; line and col are 1-based."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class BinLoc:
    """A position in a binary: a named section (or blob part) and a byte offset."""

    file: str
    section: str
    offset: int

    def __str__(self) -> str:
        return f"{self.file}: section {self.section} at offset {self.offset:#x}"


UNKNOWN_LOC = Loc("<unknown>", 0, 0)


class Severity(Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    severity: Severity
    loc: Loc | BinLoc | None
    message: str
    notes: tuple[tuple[Loc | BinLoc | None, str], ...] = ()

    def render(self, sources: "SourceCache | None" = None) -> str:
        head = f"{self.loc}: " if _known(self.loc) else ""
        lines = [f"{head}{self.severity.value}: {self.message}"]
        lines += _snippet(self.loc, sources)
        for note_loc, note in self.notes:
            nhead = f"{note_loc}: " if _known(note_loc) else ""
            lines.append(f"{nhead}note: {note}")
            lines += _snippet(note_loc, sources)
        return "\n".join(lines)


def _known(loc: "Loc | BinLoc | None") -> bool:
    """Whether a location is worth printing (objects built outside a parse have none)."""
    return loc is not None and not (isinstance(loc, Loc) and loc.line <= 0)


class SourceCache:
    """Source texts by file name, so diagnostics can quote the offending line."""

    def __init__(self) -> None:
        # The text as given (the parser's own string, not a copy), split on the first quote:
        # a list of lines costs about 100 bytes a line for as long as the process lives.
        self._texts: dict[str, str | list[str]] = {}

    def add(self, file: str, text: str) -> None:
        self._texts[file] = text

    def line(self, file: str, line: int) -> str | None:
        lines = self._texts.get(file)
        if isinstance(lines, str):
            lines = self._texts[file] = lines.splitlines()
        if lines is None:
            try:
                with open(file, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except (OSError, UnicodeDecodeError):
                lines = []
            self._texts[file] = lines
        if 1 <= line <= len(lines):
            return lines[line - 1]
        return None


# Diagnostics without an explicit cache quote from this process-wide one; the
# parser registers every text it reads so in-memory sources are quotable too.
SOURCES = SourceCache()


def _snippet(loc: Loc | BinLoc | None, sources: SourceCache | None) -> list[str]:
    if not isinstance(loc, Loc) or loc.line <= 0:
        return []
    text = (sources or SOURCES).line(loc.file, loc.line)
    if text is None:
        return []
    expanded = text.expandtabs(1)
    caret = " " * max(loc.col - 1, 0) + "^"
    return [f"    {expanded}", f"    {caret}"]


class VpucError(Exception):
    """A user error: one or more diagnostics.  Exit code 1 at the CLI."""

    exit_code = 1

    def __init__(self, diagnostics: "list[Diagnostic] | Diagnostic | str",
                 loc: Loc | BinLoc | None = None) -> None:
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(Severity.ERROR, loc, diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__(self.render())

    def render(self, sources: SourceCache | None = None) -> str:
        return "\n".join(d.render(sources) for d in self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]


class UsageError(VpucError):
    """Wrong command-line arguments.  Exit code 2 at the CLI."""

    exit_code = 2


@dataclass
class DiagnosticBag:
    """Collects every diagnostic of a phase, so users see all errors at once."""

    items: list[Diagnostic] = field(default_factory=list)
    error_count: int = 0

    def error(self, loc: Loc | BinLoc | None, message: str,
              notes: tuple[tuple[Loc | BinLoc | None, str], ...] = ()) -> None:
        self.items.append(Diagnostic(Severity.ERROR, loc, message, notes))
        self.error_count += 1

    def warning(self, loc: Loc | BinLoc | None, message: str,
                notes: tuple[tuple[Loc | BinLoc | None, str], ...] = ()) -> None:
        self.items.append(Diagnostic(Severity.WARNING, loc, message, notes))

    @property
    def has_errors(self) -> bool:
        return self.error_count > 0

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity is Severity.WARNING]

    def raise_if_errors(self) -> None:
        """Raise a VpucError holding every diagnostic (sorted by location) if any is an error."""
        if self.has_errors:
            raise VpucError(sorted(self.items, key=_sort_key))


def _sort_key(diag: Diagnostic) -> tuple:
    loc = diag.loc
    if isinstance(loc, Loc):
        return (0, loc.file, loc.line, loc.col)
    if isinstance(loc, BinLoc):
        return (1, loc.file, loc.section, loc.offset)
    return (2, "", 0, 0)


def closest_name(word: str, candidates) -> str | None:
    """The candidate a misspelt ``word`` most likely meant (difflib's ratio >= 0.7: close
    enough to be a slip, like Multipy or %bufer, not any name sharing a few letters), or
    None: the one did-you-mean of every "unknown/undefined NAME" message."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.7)
    return close[0] if close else None
