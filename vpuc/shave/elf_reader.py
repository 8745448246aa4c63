"""The checked ELF32 reader.  It never trusts the file: every offset and size is checked
before use, the ELF specification's structural rules first (``vpuc.shave.elf_checks``),
and every failure is a ``VpucError`` naming the file, the section (or header) and the
byte offset."""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave import elf_checks as checks
from vpuc.shave.elf_spec import (ELFCLASS32, ELFDATA2LSB, ELFMAG, EV_CURRENT, SHN_LORESERVE,
                                 SHT_NOBITS, SHT_NULL, SHT_REL, SHT_RELA, SHT_STRTAB, SHT_SYMTAB,
                                 STB_LOCAL, Elf32_Ehdr, Elf32_Rel, Elf32_Rela, Elf32_Shdr,
                                 Elf32_Sym)


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
