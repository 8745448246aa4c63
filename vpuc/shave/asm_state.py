"""The assembler's working state, shared by its passes (``assembler`` reads lines,
``asm_resolve`` resolves labels and builds the object)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vpuc.diagnostics import DiagnosticBag, Loc
from vpuc.shave.asm_include import Notes
from vpuc.shave.isa import Instruction
from vpuc.shave.kobject import DEFAULT_ALIGN, SECTIONS, Relocation
from vpuc.shave.literals import ExprError, parse_int_expr

# An object's sections are loaded into one 16 MiB window (WIN_D, vpuc/archs/): the
# assembler stops as soon as its output outgrows that, not after building it.
MAX_OBJECT_BYTES = 1 << 24

IDENT = r"[A-Za-z_.$][A-Za-z0-9_.$]*"
SYMREF = re.compile(rf"^({IDENT})\s*(?:([+-])(.*))?$", re.S)


@dataclass
class Text:
    """One operand's text and where it starts."""

    text: str
    loc: Loc


@dataclass
class PendingInsn:
    offset: int
    info: Instruction
    fields: dict[str, int]
    deferred: Text | None = None       # a label or symbol operand resolved in pass 2
    deferred_kind: str = ""
    via: Notes = ()                    # where its line was included from


@dataclass
class State:
    name: str                          # the object's name: the top-level file
    file: str = ""                     # the file of the line being assembled
    via: Notes = ()                    # and where that file was included from
    bag: DiagnosticBag = field(default_factory=DiagnosticBag)
    section: str = ".text"
    data: dict[str, bytearray] = field(default_factory=lambda: {s: bytearray() for s in SECTIONS})
    align: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_ALIGN))
    labels: dict[str, tuple[str, int, Loc]] = field(default_factory=dict)
    label_order: list[str] = field(default_factory=list)
    globals: dict[str, tuple[Loc, Notes]] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)
    insns: list[PendingInsn] = field(default_factory=list)
    data_refs: list[tuple[str, int, Text, Notes]] = field(default_factory=list)
    relocations: list[Relocation] = field(default_factory=list)


class LineError(Exception):
    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def shift(loc: Loc, by: int) -> Loc:
    return Loc(loc.file, loc.line, loc.col + by)


def int_operand(st: State, text: Text, bounds: tuple[int, int],
                mnemonic: str | None = None) -> int:
    """An integer expression operand within ``bounds``."""
    try:
        value = parse_int_expr(text.text, st.constants)
    except ExprError as err:
        raise LineError(shift(text.loc, err.column), str(err)) from None
    low, high = bounds
    if not low <= value <= high:
        owner = f" for '{mnemonic}'" if mnemonic else ""
        raise LineError(text.loc, f"immediate {value} out of range{owner} ({low}..{high})")
    return value


def looks_like_symbol(st: State, text: str) -> bool:
    match = SYMREF.match(text)
    return bool(match) and match.group(1) not in st.constants
