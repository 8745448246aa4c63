"""A small ELF32 writer: content sections, then the generated symbol, string and
relocation tables and the section name table, laid out as the gABI requires."""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.shave.elf_spec import (ELFCLASS32, ELFDATA2LSB, ELFMAG, ELFOSABI_NONE, ET_REL,
                                 EV_CURRENT, SHF_INFO_LINK, SHN_UNDEF, SHT_NOBITS, SHT_NULL,
                                 SHT_REL, SHT_RELA, SHT_STRTAB, SHT_SYMTAB, STB_LOCAL, STT_NOTYPE,
                                 STV_DEFAULT, Elf32_Ehdr, Elf32_Rel, Elf32_Rela, Elf32_Shdr,
                                 Elf32_Sym, elf32_r_info, elf32_st_info)


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
