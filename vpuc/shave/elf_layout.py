"""ELF32 little-endian: structures and enums as data, a small writer, a checked reader.

Names follow the ELF specification (System V gABI) so the code reads like the
spec: ``e_ident``, ``sh_type``, ``SHT_PROGBITS``, ``STB_GLOBAL`` ...  Only the
relocatable subset vpuc needs is declared, but nothing here is specific to
SHAVE kernels: the blob container reuses the writer and the reader.

The reader never trusts the file: every offset and size is checked before use,
the ELF specification's structural rules first (``vpuc.shave.elf_checks``), and
every failure is a ``VpucError`` naming the file, the section (or header) and
the byte offset.
"""

from __future__ import annotations

import struct
from collections import namedtuple
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

from vpuc.diagnostics import BinLoc, VpucError

# --- e_ident -------------------------------------------------------------------

EI_NIDENT = 16
ELFMAG = b"\x7fELF"
ELFCLASS32 = 1
ELFDATA2LSB = 1
EV_CURRENT = 1
ELFOSABI_NONE = 0

# e_machine: 0x7ACC is assigned to no real architecture (not in the gABI registry nor
# among binutils' unofficial values; readelf prints "<unknown>: 0x7acc").
EM_VPUC_SHAVE = 0x7ACC


class ElfType(IntEnum):
    ET_NONE = 0
    ET_REL = 1
    ET_EXEC = 2
    ET_DYN = 3


class ShType(IntEnum):
    SHT_NULL = 0
    SHT_PROGBITS = 1
    SHT_SYMTAB = 2
    SHT_STRTAB = 3
    SHT_RELA = 4
    SHT_HASH = 5
    SHT_DYNAMIC = 6
    SHT_NOTE = 7
    SHT_NOBITS = 8
    SHT_REL = 9


class ShFlags(IntFlag):
    SHF_WRITE = 0x1
    SHF_ALLOC = 0x2
    SHF_EXECINSTR = 0x4
    SHF_MERGE = 0x10
    SHF_STRINGS = 0x20
    SHF_INFO_LINK = 0x40


class StBind(IntEnum):
    STB_LOCAL = 0
    STB_GLOBAL = 1
    STB_WEAK = 2


class StType(IntEnum):
    STT_NOTYPE = 0
    STT_OBJECT = 1
    STT_FUNC = 2
    STT_SECTION = 3
    STT_FILE = 4


STV_DEFAULT = 0
SHN_UNDEF = 0
SHN_LORESERVE = 0xFF00
SHN_ABS = 0xFFF1
SHN_COMMON = 0xFFF2
SHN_XINDEX = 0xFFFF

# The enum members under their spec names, for code that reads like the spec.
ET_NONE, ET_REL, ET_EXEC, ET_DYN = ElfType
(SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOTE,
 SHT_NOBITS, SHT_REL) = ShType
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = ShFlags.SHF_WRITE, ShFlags.SHF_ALLOC, ShFlags.SHF_EXECINSTR
SHF_MERGE, SHF_STRINGS = ShFlags.SHF_MERGE, ShFlags.SHF_STRINGS
SHF_INFO_LINK = ShFlags.SHF_INFO_LINK
STB_LOCAL, STB_GLOBAL, STB_WEAK = StBind
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = StType


def elf32_st_info(bind: int, typ: int) -> int:
    return (bind << 4) | (typ & 0xF)


def elf32_r_info(sym: int, typ: int) -> int:
    return (sym << 8) | (typ & 0xFF)


# --- structures ----------------------------------------------------------------

class Struct:
    """A packed little-endian record declared as (field name, struct code) pairs."""

    def __init__(self, name: str, fields: tuple[tuple[str, str], ...]) -> None:
        self.name = name
        self.fields = fields
        self._struct = struct.Struct("<" + "".join(code for _, code in fields))
        self.size = self._struct.size
        self.record = namedtuple(name, [fname for fname, _ in fields])
        # Byte offset of each field, for relocations that patch one field of a record.
        self.offsets: dict[str, int] = {}
        for index, (fname, _) in enumerate(fields):
            prefix = "<" + "".join(code for _, code in fields[:index])
            self.offsets[fname] = struct.calcsize(prefix)

    def pack_values(self, *values: object) -> bytes:
        """Pack every field, in declaration order (the fast path for big tables)."""
        return self._struct.pack(*values)

    def unpack_all(self, data: bytes, file: str, where: str) -> list:
        """Unpack a section that is a table of these records; a partial record is a VpucError."""
        if len(data) % self.size:
            raise VpucError(f"section of {self.name} records is {len(data)} bytes, not a "
                            f"multiple of {self.size}", BinLoc(file, where, len(data)))
        make = self.record._make
        return [make(values) for values in self._struct.iter_unpack(data)]

    def pack(self, **values: object) -> bytes:
        """Pack; fields not given are zero."""
        unknown = set(values) - set(self.record._fields)
        if unknown:
            raise ValueError(f"{self.name} has no field(s) {sorted(unknown)}")
        defaults = {fname: (b"" if code.endswith("s") else 0) for fname, code in self.fields}
        defaults.update(values)
        return self._struct.pack(*(defaults[fname] for fname, _ in self.fields))

    def unpack_from(self, data: bytes, offset: int, file: str, where: str):
        """Unpack one record at ``offset``; a truncated record is a VpucError."""
        if offset < 0 or offset + self.size > len(data):
            raise VpucError(f"truncated {self.name}: need {self.size} bytes at offset "
                            f"{offset:#x}, file has {len(data)}", BinLoc(file, where, offset))
        return self.record._make(self._struct.unpack_from(data, offset))


Elf32_Ehdr = Struct("Elf32_Ehdr", (
    ("e_ident", "16s"), ("e_type", "H"), ("e_machine", "H"), ("e_version", "I"),
    ("e_entry", "I"), ("e_phoff", "I"), ("e_shoff", "I"), ("e_flags", "I"),
    ("e_ehsize", "H"), ("e_phentsize", "H"), ("e_phnum", "H"), ("e_shentsize", "H"),
    ("e_shnum", "H"), ("e_shstrndx", "H"),
))
Elf32_Shdr = Struct("Elf32_Shdr", (
    ("sh_name", "I"), ("sh_type", "I"), ("sh_flags", "I"), ("sh_addr", "I"),
    ("sh_offset", "I"), ("sh_size", "I"), ("sh_link", "I"), ("sh_info", "I"),
    ("sh_addralign", "I"), ("sh_entsize", "I"),
))
# Program headers: vpuc writes none, the reader checks those a file has.
Elf32_Phdr = Struct("Elf32_Phdr", (
    ("p_type", "I"), ("p_offset", "I"), ("p_vaddr", "I"), ("p_paddr", "I"), ("p_filesz", "I"),
    ("p_memsz", "I"), ("p_flags", "I"), ("p_align", "I"),
))
PT_LOAD = 1
Elf32_Sym = Struct("Elf32_Sym", (
    ("st_name", "I"), ("st_value", "I"), ("st_size", "I"), ("st_info", "B"),
    ("st_other", "B"), ("st_shndx", "H"),
))
Elf32_Rel = Struct("Elf32_Rel", (("r_offset", "I"), ("r_info", "I")))
Elf32_Rela = Struct("Elf32_Rela", (("r_offset", "I"), ("r_info", "I"), ("r_addend", "i")))
# A note entry's header; the name (n_namesz bytes, NUL included) and the descriptor
# (n_descsz bytes) follow, each padded to 4 bytes in ELF32.
Elf32_Nhdr = Struct("Elf32_Nhdr", (("n_namesz", "I"), ("n_descsz", "I"), ("n_type", "I")))


# --- writer --------------------------------------------------------------------

@dataclass
class SectionSpec:
    """A content section to write (symbol, string and relocation tables are generated)."""

    name: str
    sh_type: int
    data: bytes = b""
    flags: int = 0
    addralign: int = 1
    entsize: int = 0
    addr: int = 0
    nobits_size: int = 0          # sh_size of an SHT_NOBITS section


@dataclass
class SymbolSpec:
    name: str
    value: int
    size: int = 0
    bind: int = STB_LOCAL
    type: int = STT_NOTYPE
    section: str | None = None    # None: SHN_UNDEF (or ``shndx`` when given)
    shndx: int | None = None


@dataclass
class RelocSpec:
    section: str                  # the section being patched
    offset: int
    type: int
    symbol: str                   # symbol name ("" for none)
    addend: int = 0


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment if alignment > 1 else value


class _StringTable:
    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self._index: dict[str, int] = {"": 0}

    def add(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.data)
            self.data += text.encode("utf-8") + b"\0"
        return self._index[text]


def write_elf32(*, machine: int, sections: list[SectionSpec],
                symbols: list[SymbolSpec] = (), relocations: list[RelocSpec] = (),
                e_type: int = ET_REL, e_flags: int = 0, e_entry: int = 0,
                rela: bool = True) -> bytes:
    """Write an ELF32 LE file: sections, then .symtab/.strtab, .rel[a].*, .shstrtab."""
    shstrtab = _StringTable()
    strtab = _StringTable()
    out = [SectionSpec("", SHT_NULL)] + list(sections)
    index_of = {s.name: i for i, s in enumerate(out) if s.name}

    # ELF wants every local symbol before the first global one (sh_info says where).
    ordered = sorted(symbols, key=lambda s: s.bind != STB_LOCAL)
    sym_index = {s.name: i + 1 for i, s in enumerate(ordered)}
    first_global = 1 + sum(1 for s in ordered if s.bind == STB_LOCAL)
    symtab = bytearray(Elf32_Sym.pack())
    for sym in ordered:
        if sym.shndx is not None:
            shndx = sym.shndx
        elif sym.section is None:
            shndx = SHN_UNDEF
        else:
            shndx = index_of[sym.section]
        symtab += Elf32_Sym.pack(st_name=strtab.add(sym.name), st_value=sym.value,
                                 st_size=sym.size, st_info=elf32_st_info(sym.bind, sym.type),
                                 st_other=STV_DEFAULT, st_shndx=shndx)
    symtab_index = len(out)
    strtab_index = symtab_index + 1
    links: dict[int, tuple[int, int]] = {symtab_index: (strtab_index, first_global)}
    out.append(SectionSpec(".symtab", SHT_SYMTAB, bytes(symtab), addralign=4,
                           entsize=Elf32_Sym.size))
    out.append(SectionSpec(".strtab", SHT_STRTAB, bytes(strtab.data)))

    entry_struct = Elf32_Rela if rela else Elf32_Rel
    prefix = ".rela" if rela else ".rel"
    for target in [s.name for s in sections]:
        entries = [r for r in relocations if r.section == target]
        if not entries:
            continue
        table = bytearray()
        for r in entries:
            info = elf32_r_info(sym_index[r.symbol] if r.symbol else 0, r.type)
            fields = dict(r_offset=r.offset, r_info=info)
            if rela:
                fields["r_addend"] = r.addend
            table += entry_struct.pack(**fields)
        links[len(out)] = (symtab_index, index_of[target])
        out.append(SectionSpec(prefix + target, SHT_RELA if rela else SHT_REL, bytes(table),
                               flags=SHF_INFO_LINK, addralign=4, entsize=entry_struct.size))

    shstrndx = len(out)
    out.append(SectionSpec(".shstrtab", SHT_STRTAB))
    names = [shstrtab.add(s.name) for s in out]
    out[shstrndx].data = bytes(shstrtab.data)

    body = bytearray(Elf32_Ehdr.size)
    headers = bytearray(Elf32_Shdr.pack())
    for i, sec in enumerate(out[1:], start=1):
        offset = _align(len(body), max(sec.addralign, 1))
        body += bytes(offset - len(body))
        size = sec.nobits_size if sec.sh_type == SHT_NOBITS else len(sec.data)
        if sec.sh_type != SHT_NOBITS:
            body += sec.data
        link, info = links.get(i, (0, 0))
        headers += Elf32_Shdr.pack(sh_name=names[i], sh_type=sec.sh_type, sh_flags=int(sec.flags),
                                   sh_addr=sec.addr, sh_offset=offset, sh_size=size,
                                   sh_link=link, sh_info=info, sh_addralign=sec.addralign,
                                   sh_entsize=sec.entsize)
    shoff = _align(len(body), 4)
    body += bytes(shoff - len(body)) + headers
    ident = ELFMAG + bytes([ELFCLASS32, ELFDATA2LSB, EV_CURRENT, ELFOSABI_NONE]) + bytes(8)
    body[:Elf32_Ehdr.size] = Elf32_Ehdr.pack(
        e_ident=ident, e_type=e_type, e_machine=machine, e_version=EV_CURRENT, e_entry=e_entry,
        e_shoff=shoff, e_flags=e_flags, e_ehsize=Elf32_Ehdr.size, e_shentsize=Elf32_Shdr.size,
        e_shnum=len(out), e_shstrndx=shstrndx)
    return bytes(body)


# --- reader --------------------------------------------------------------------

@dataclass
class ElfSection:
    index: int
    name: str
    header: tuple                  # an Elf32_Shdr record
    data: bytes                    # empty for SHT_NOBITS


@dataclass
class ElfSymbol:
    index: int
    name: str
    value: int
    size: int
    bind: int
    type: int
    shndx: int
    section: str | None           # name of the defining section, None if special


@dataclass
class ElfReloc:
    section: str                  # the section being patched
    offset: int
    type: int
    symbol: ElfSymbol | None
    addend: int


@dataclass
class ElfFile:
    header: tuple                  # an Elf32_Ehdr record
    sections: list[ElfSection]
    symbols: list[ElfSymbol] = field(default_factory=list)
    relocations: list[ElfReloc] = field(default_factory=list)

    def section(self, name: str) -> ElfSection | None:
        return next((s for s in self.sections if s.name == name), None)


def _c_string(table: bytes, offset: int, file: str, where: str) -> str:
    if offset >= len(table):
        raise VpucError(f"string offset {offset:#x} is outside the string table "
                        f"({len(table)} bytes)", BinLoc(file, where, offset))
    end = table.find(b"\0", offset)
    if end < 0:
        raise VpucError("unterminated string in string table", BinLoc(file, where, offset))
    try:
        return table[offset:end].decode("utf-8")
    except UnicodeDecodeError:
        raise VpucError("string is not valid UTF-8", BinLoc(file, where, offset)) from None


def read_elf32(data: bytes, file: str, *, machine: int | None = None,
               relocations: bool = True) -> ElfFile:
    """Parse an ELF32 LE file with every offset checked; errors are VpucErrors.
    ``relocations=False`` leaves the relocation sections unread (``read_relocations``), for
    a caller that reads them as columns."""
    from vpuc.shave import elf_checks as checks   # it reads this module's structs
    data = bytes(data)
    ehdr = Elf32_Ehdr.unpack_from(data, 0, file, "ELF header")
    ident = ehdr.e_ident
    if ident[:4] != ELFMAG:
        raise VpucError("not an ELF file (bad magic)", BinLoc(file, "ELF header", 0))
    idents = ((4, ELFCLASS32, "ELFCLASS32"), (5, ELFDATA2LSB, "ELFDATA2LSB (little-endian)"),
              (6, EV_CURRENT, "EV_CURRENT"))
    for pos, want, what in idents:
        if ident[pos] != want:
            raise VpucError(f"e_ident[{pos}] is {ident[pos]}, expected {what}",
                            BinLoc(file, "ELF header", pos))
    if machine is not None and ehdr.e_machine != machine:
        raise VpucError(f"e_machine is {ehdr.e_machine:#x}, expected {machine:#x}",
                        BinLoc(file, "ELF header", 18))
    checks.check_header(ehdr, len(data), file)
    checks.check_program_headers(data, ehdr, file)
    headers = [Elf32_Shdr.unpack_from(data, ehdr.e_shoff + i * Elf32_Shdr.size, file,
                                      "section headers") for i in range(ehdr.e_shnum)]
    checks.check_section_headers(headers, ehdr, len(data), file)
    contents = [b"" if sh.sh_type in (SHT_NOBITS, SHT_NULL) else
                data[sh.sh_offset:sh.sh_offset + sh.sh_size] for sh in headers]
    if headers[ehdr.e_shstrndx].sh_type != SHT_STRTAB:
        raise VpucError(f"e_shstrndx {ehdr.e_shstrndx} names a section of type "
                        f"{headers[ehdr.e_shstrndx].sh_type:#x}, not a string table",
                        BinLoc(file, "ELF header", 50))
    shstrtab = contents[ehdr.e_shstrndx]
    checks.check_string_table(shstrtab, "the section name table", file)
    sections = [ElfSection(i, _c_string(shstrtab, sh.sh_name, file, ".shstrtab") if i else "",
                           sh, contents[i]) for i, sh in enumerate(headers)]
    for sec in sections:
        if sec.header.sh_type == SHT_STRTAB and sec.index != ehdr.e_shstrndx:
            checks.check_string_table(sec.data, sec.name, file)
    elf = ElfFile(ehdr, sections)
    symtabs = [s for s in sections if s.header.sh_type == SHT_SYMTAB]
    if len(symtabs) > 1:
        raise VpucError("more than one symbol table", BinLoc(file, symtabs[1].name, 0))
    if symtabs:
        elf.symbols = _read_symbols(elf, symtabs[0], file)
    if relocations:
        elf.relocations = read_relocations(elf, file)
    return elf


def read_relocations(elf: ElfFile, file: str) -> list[ElfReloc]:
    """Every entry of every relocation section, checked."""
    symtab = next((s for s in elf.sections if s.header.sh_type == SHT_SYMTAB), None)
    return [reloc for sec in elf.sections if sec.header.sh_type in (SHT_RELA, SHT_REL)
            for reloc in _read_relocs(elf, sec, symtab, file)]


def _read_symbols(elf: ElfFile, symtab: ElfSection, file: str) -> list[ElfSymbol]:
    sh = symtab.header
    if sh.sh_entsize != Elf32_Sym.size or sh.sh_size % Elf32_Sym.size:
        raise VpucError(f"symbol table entry size {sh.sh_entsize} / size {sh.sh_size} is not "
                        f"a whole number of {Elf32_Sym.size}-byte entries",
                        BinLoc(file, symtab.name, 0))
    if sh.sh_link >= len(elf.sections) or elf.sections[sh.sh_link].header.sh_type != SHT_STRTAB:
        raise VpucError(f"symbol table sh_link {sh.sh_link} is not a string table",
                        BinLoc(file, symtab.name, 0))
    strtab = elf.sections[sh.sh_link].data
    count = sh.sh_size // Elf32_Sym.size
    if not 0 < sh.sh_info <= count:
        raise VpucError(f"symbol table sh_info {sh.sh_info} (one past the last local symbol) "
                        f"is not in 1..{count}", BinLoc(file, symtab.name, 0))
    symbols = []
    for i in range(sh.sh_size // Elf32_Sym.size):
        offset = i * Elf32_Sym.size
        st = Elf32_Sym.unpack_from(symtab.data, offset, file, symtab.name)
        name = _c_string(strtab, st.st_name, file, elf.sections[sh.sh_link].name)
        section = None
        if 0 < st.st_shndx < SHN_LORESERVE:
            if st.st_shndx >= len(elf.sections):
                raise VpucError(f"symbol '{name}' has section index {st.st_shndx}, file has "
                                f"{len(elf.sections)} sections", BinLoc(file, symtab.name, offset))
            section = elf.sections[st.st_shndx].name
        if (st.st_info >> 4 == STB_LOCAL) != (i < sh.sh_info):
            raise VpucError(f"symbol #{i} '{name}' is {'local' if i >= sh.sh_info else 'not local'}"
                            f" but sh_info is {sh.sh_info}: every local symbol comes before the "
                            "others", BinLoc(file, symtab.name, offset))
        symbols.append(ElfSymbol(i, name, st.st_value, st.st_size, st.st_info >> 4,
                                 st.st_info & 0xF, st.st_shndx, section))
    return symbols


def _read_relocs(elf: ElfFile, sec: ElfSection, symtab: ElfSection | None,
                 file: str) -> list[ElfReloc]:
    sh = sec.header
    entry = Elf32_Rela if sh.sh_type == SHT_RELA else Elf32_Rel
    if sh.sh_entsize != entry.size or sh.sh_size % entry.size:
        raise VpucError(f"relocation entry size {sh.sh_entsize} / size {sh.sh_size} is not a "
                        f"whole number of {entry.size}-byte entries", BinLoc(file, sec.name, 0))
    if symtab is None or sh.sh_link != symtab.index:
        raise VpucError(f"relocation section sh_link {sh.sh_link} is not the symbol table",
                        BinLoc(file, sec.name, 0))
    if not 0 < sh.sh_info < len(elf.sections):
        raise VpucError(f"relocation section sh_info {sh.sh_info} names no section",
                        BinLoc(file, sec.name, 0))
    target = elf.sections[sh.sh_info]
    target_size = target.header.sh_size
    relocs = []
    for i in range(sh.sh_size // entry.size):
        offset = i * entry.size
        r = entry.unpack_from(sec.data, offset, file, sec.name)
        sym_index = r.r_info >> 8
        if sym_index >= len(elf.symbols):
            raise VpucError(f"relocation refers to symbol #{sym_index}, the symbol table has "
                            f"{len(elf.symbols)}", BinLoc(file, sec.name, offset))
        if r.r_offset + 4 > target_size:
            raise VpucError(f"relocation at {target.name}+{r.r_offset:#x} is outside the "
                            f"section ({target_size} bytes)", BinLoc(file, sec.name, offset))
        relocs.append(ElfReloc(target.name, r.r_offset, r.r_info & 0xFF,
                               elf.symbols[sym_index] if sym_index else None,
                               getattr(r, "r_addend", 0)))
    return relocs
