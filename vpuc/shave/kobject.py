"""Kernel objects: the sections, symbols and relocations of one assembled kernel file.

A ``KernelObject`` is what the assembler produces and what travels inside the
blob.  Its on-disk form is an ELF32 little-endian relocatable file
(``ET_REL``, ``e_machine = EM_VPUC_SHAVE``) with ``.text``, ``.rodata``,
``.data``, ``.symtab``, ``.strtab``, ``.shstrtab`` and ``.rela.<section>``
where code or data holds the address of a symbol.

The loader places ``.text`` then ``.rodata`` in WIN_D and ``.data`` in WIN_E;
``link_kernel`` applies the relocations for given section addresses.

A generated kernel's object also records what it computes (``KernelObject.graph``:
the subgraph body as graph-level VIR text) and which LIR expression each
instruction came from (``KernelObject.tags``), as notes in a non-alloc
``SHT_NOTE`` section ``.note.vpuc.graph`` (``kernel_notes.py``; docs/blob-format.md,
"Kernel objects").  Kernel objects have always allowed any non-alloc ``SHT_NOTE``,
so older readers skip it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from enum import IntEnum

from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave import elf_layout as elf
from vpuc.shave.encoding import (WORD_BYTES, DecodeError, TextDecodeError, decode_text,
                                 decode_word)
# The notes' declarations, re-exported for the importers of kobject.
from vpuc.shave.kernel_notes import (GRAPH_SECTION, NOTE_ALIGN, NT_VPUC_GRAPH,  # noqa: F401
                                     NT_VPUC_TAGS, ExprTags, KernelNoteType, graph_note,
                                     notes_section, read_graph_note, read_notes)

SECTIONS = (".text", ".rodata", ".data")
SECTION_FLAGS = {
    ".text": elf.SHF_ALLOC | elf.SHF_EXECINSTR,
    ".rodata": elf.SHF_ALLOC,
    ".data": elf.SHF_ALLOC | elf.SHF_WRITE,
}
# .text holds 8-byte words; data sections are vector-aligned.
DEFAULT_ALIGN = {".text": 8, ".rodata": 16, ".data": 16}


class RelocType(IntEnum):
    """Relocation types of EM_VPUC_SHAVE (r_info low byte), used with SHT_RELA."""

    R_SHAVE_NONE = 0
    # The 32-bit little-endian word at r_offset becomes S + A (symbol address plus
    # addend).  In .text r_offset is an instruction's imm field (word offset + 4).
    R_SHAVE_ABS32 = 1


R_SHAVE_NONE, R_SHAVE_ABS32 = RelocType


@dataclass
class Symbol:
    name: str
    section: str            # one of SECTIONS
    value: int              # offset in the section
    size: int = 0
    is_global: bool = False
    type: int = elf.STT_NOTYPE


@dataclass
class Relocation:
    section: str            # the section being patched
    offset: int
    type: int
    symbol: str
    addend: int = 0


@dataclass
class KernelObject:
    name: str
    sections: dict[str, bytes] = field(default_factory=lambda: {s: b"" for s in SECTIONS})
    alignments: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_ALIGN))
    symbols: list[Symbol] = field(default_factory=list)
    relocations: list[Relocation] = field(default_factory=list)
    graph: str | None = None     # generated kernels: the subgraph body it computes (VIR)
    tags: ExprTags | None = None  # generated kernels: the LIR expression of each instruction

    @property
    def text(self) -> bytes:
        return self.sections[".text"]

    @property
    def rodata(self) -> bytes:
        return self.sections[".rodata"]

    @property
    def data(self) -> bytes:
        return self.sections[".data"]

    def symbol(self, name: str) -> Symbol:
        for sym in self.symbols:
            if sym.name == name:
                return sym
        raise VpucError(f"{self.name}: no symbol '{name}'")

    @property
    def entry_points(self) -> list[Symbol]:
        """The global functions of .text: one per kernel."""
        return [s for s in self.symbols
                if s.is_global and s.section == ".text" and s.type == elf.STT_FUNC]

    def entry_offset(self, name: str | None = None) -> int:
        """Offset in .text of the named entry point, or of the only one."""
        entries = self.entry_points
        if name is not None:
            sym = self.symbol(name)
            if sym not in entries:
                raise VpucError(f"{self.name}: '{name}' is not a global function in .text")
            return sym.value
        if len(entries) != 1:
            names = ", ".join(s.name for s in entries) or "none"
            raise VpucError(f"{self.name}: expected exactly one entry point (global function "
                            f"in .text), found {names}")
        return entries[0].value

    def to_elf(self) -> bytes:
        sections = [elf.SectionSpec(name, elf.SHT_PROGBITS, self.sections[name],
                                    flags=SECTION_FLAGS[name], addralign=self.alignments[name])
                    for name in SECTIONS]
        if self.graph is not None or self.tags is not None:
            sections.append(elf.SectionSpec(GRAPH_SECTION, elf.SHT_NOTE,
                                            notes_section(self.graph, self.tags),
                                            addralign=NOTE_ALIGN))
        symbols = [elf.SymbolSpec(s.name, s.value, s.size,
                                  elf.STB_GLOBAL if s.is_global else elf.STB_LOCAL, s.type,
                                  s.section) for s in self.symbols]
        relocs = [elf.RelocSpec(r.section, r.offset, r.type, r.symbol, r.addend)
                  for r in self.relocations]
        return elf.write_elf32(machine=elf.EM_VPUC_SHAVE, sections=sections, symbols=symbols,
                               relocations=relocs)

    @classmethod
    def from_elf(cls, data: bytes, filename: str = "<kernel>") -> "KernelObject":
        return _read_kernel_elf(bytes(data), filename)


# --- reading -----------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_.$][A-Za-z0-9_.$]*")

_ALLOWED_OTHER = (elf.SHT_NULL, elf.SHT_SYMTAB, elf.SHT_STRTAB, elf.SHT_RELA, elf.SHT_NOTE)


def _read_kernel_elf(data: bytes, file: str) -> KernelObject:
    image = elf.read_elf32(data, file, machine=elf.EM_VPUC_SHAVE)
    if image.header.e_type != elf.ET_REL:
        raise VpucError(f"e_type is {image.header.e_type}, expected ET_REL (1)",
                        BinLoc(file, "ELF header", 16))
    obj = KernelObject(file)
    seen: set[str] = set()
    notes: bytes | None = None
    for sec in image.sections:
        sh = sec.header
        if sec.name in SECTIONS:
            if sec.name in seen:
                raise VpucError(f"section {sec.name} appears twice", BinLoc(file, sec.name, 0))
            if sh.sh_type != elf.SHT_PROGBITS:
                raise VpucError(f"section {sec.name} has sh_type {sh.sh_type}, expected "
                                "SHT_PROGBITS", BinLoc(file, sec.name, 0))
            align = sh.sh_addralign
            if align < 1 or align & (align - 1) or align > 4096:
                raise VpucError(f"section {sec.name} has sh_addralign {align}, expected a "
                                "power of two up to 4096", BinLoc(file, sec.name, 0))
            seen.add(sec.name)
            obj.sections[sec.name] = sec.data
            obj.alignments[sec.name] = max(align, DEFAULT_ALIGN[sec.name])
        elif sec.name == GRAPH_SECTION and sh.sh_type == elf.SHT_NOTE and \
                not sh.sh_flags & elf.SHF_ALLOC:
            if sec.name in seen:
                raise VpucError(f"section {sec.name} appears twice", BinLoc(file, sec.name, 0))
            seen.add(sec.name)
            notes = sec.data
        elif sh.sh_type not in _ALLOWED_OTHER or sh.sh_flags & elf.SHF_ALLOC:
            raise VpucError(f"unexpected section '{sec.name}' (sh_type {sh.sh_type}); kernel "
                            "objects hold .text, .rodata and .data", BinLoc(file, sec.name, 0))
    if ".text" not in seen:
        raise VpucError("kernel object has no .text section", BinLoc(file, "section headers", 0))
    _check_text(obj.text, file)
    if notes is not None:
        found = read_notes(notes, file, len(obj.text) // WORD_BYTES)
        obj.graph, obj.tags = found.graph, found.tags
    _read_symbols(obj, image, file)
    _read_relocations(obj, image, file)
    return obj


def _check_text(text: bytes, file: str) -> None:
    """Every word of .text decodes (the decoded words are kept for the loader's Program:
    ``decode_text``)."""
    try:
        decode_text(text)
    except TextDecodeError as exc:
        raise VpucError(f"invalid instruction {exc.word:#018x}: {exc}",
                        BinLoc(file, ".text", exc.index * WORD_BYTES)) from None
    except DecodeError as exc:
        raise VpucError(str(exc), BinLoc(file, ".text", len(text))) from None


def _read_symbols(obj: KernelObject, image: elf.ElfFile, file: str) -> None:
    names: set[str] = set()
    sizes = {name: len(data) for name, data in obj.sections.items()}
    skipped = (elf.STT_SECTION, elf.STT_FILE)
    binds = (elf.STB_LOCAL, elf.STB_GLOBAL)
    for sym in image.symbols[1:]:
        if sym.type in skipped:
            continue
        # a library kernel has a hundred labels: the checks first, the location on failure
        size = sizes.get(sym.section)
        if size is None or sym.value > size or sym.name in names \
                or not _IDENT.fullmatch(sym.name) or sym.bind not in binds:
            _bad_symbol(obj, sym, names, file)
        names.add(sym.name)
        obj.symbols.append(Symbol(sym.name, sym.section, sym.value, sym.size,
                                  sym.bind == elf.STB_GLOBAL, sym.type))


def _bad_symbol(obj: KernelObject, sym, names: set[str], file: str) -> None:
    """Raise the located error of the first check ``sym`` fails (``_read_symbols``)."""
    where = BinLoc(file, ".symtab", sym.index * elf.Elf32_Sym.size)
    if sym.section not in SECTIONS:
        raise VpucError(f"symbol '{sym.name}' is not defined in .text, .rodata or .data "
                        "(kernel objects are self-contained)", where)
    if sym.value > len(obj.sections[sym.section]):
        raise VpucError(f"symbol '{sym.name}' value {sym.value:#x} is past the end of "
                        f"{sym.section}", where)
    if not _IDENT.fullmatch(sym.name) or sym.name in names:
        raise VpucError(f"symbol name '{sym.name}' is not a valid identifier or is "
                        "repeated", where)
    raise VpucError(f"symbol '{sym.name}' has binding {sym.bind}, expected STB_LOCAL "
                    "or STB_GLOBAL", where)


def _read_relocations(obj: KernelObject, image: elf.ElfFile, file: str) -> None:
    known = {s.name for s in obj.symbols}
    patched: set[tuple[str, int]] = set()
    for rel in image.relocations:
        where = BinLoc(file, rel.section, rel.offset)
        if rel.section not in SECTIONS:
            raise VpucError(f"relocation patches section {rel.section}", where)
        if rel.type != R_SHAVE_ABS32:
            raise VpucError(f"unknown relocation type {rel.type}, expected R_SHAVE_ABS32", where)
        if rel.symbol is None or rel.symbol.name not in known:
            raise VpucError("relocation refers to no kernel symbol", where)
        if rel.section == ".text":
            if rel.offset % WORD_BYTES != 4:
                raise VpucError("relocation in .text does not patch an imm field", where)
            word = struct.unpack_from("<Q", obj.text, rel.offset - 4)[0]
            if not any(op.kind == "sym" for op in decode_word(word).info.operands):
                raise VpucError("relocation patches an instruction without a symbol operand",
                                where)
        if (rel.section, rel.offset) in patched:
            raise VpucError("two relocations patch the same word", where)
        if obj.sections[rel.section][rel.offset:rel.offset + 4] != bytes(4):
            raise VpucError("relocated word is not zero (SHT_RELA keeps the addend in the "
                            "relocation)", where)
        patched.add((rel.section, rel.offset))
        obj.relocations.append(Relocation(rel.section, rel.offset, rel.type, rel.symbol.name,
                                          rel.addend))


# --- linking -----------------------------------------------------------------------

def link_kernel(obj: KernelObject, text_base: int, rodata_base: int,
                data_base: int) -> tuple[bytes, bytes, bytes]:
    """Apply the relocations for the given section addresses; returns the patched
    (.text, .rodata, .data)."""
    bases = {".text": text_base, ".rodata": rodata_base, ".data": data_base}
    for name, base in bases.items():
        if base % obj.alignments[name]:
            raise VpucError(f"{obj.name}: {name} address {base:#x} is not aligned to "
                            f"{obj.alignments[name]} bytes")
    out = {name: bytearray(obj.sections[name]) for name in SECTIONS}
    symbols = {s.name: s for s in obj.symbols}
    for rel in obj.relocations:
        sym = symbols[rel.symbol]
        value = bases[sym.section] + sym.value + rel.addend
        if not 0 <= value < 1 << 32:
            raise VpucError(f"{obj.name}: relocation at {rel.section}+{rel.offset:#x} against "
                            f"'{rel.symbol}' gives {value:#x}, outside 32 bits")
        struct.pack_into("<I", out[rel.section], rel.offset, value)
    return bytes(out[".text"]), bytes(out[".rodata"]), bytes(out[".data"])


def rodata_address(obj: KernelObject, text_base: int) -> int:
    """Where the loader puts .rodata: right after .text, aligned."""
    align = obj.alignments[".rodata"]
    end = text_base + len(obj.text)
    return (end + align - 1) // align * align
