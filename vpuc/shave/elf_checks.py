"""The ELF specification's structural rules, checked before an ELF32 file is read.

``read_elf32`` (``vpuc.shave.elf_reader``) calls these on every file it reads,
blobs and kernel objects alike.  Each rule is one the System V gABI states
("ELF Header", "Sections", "Program Header"); a file breaking
it is refused with a ``VpucError`` naming the header or section and the file
offset of the offending field (for a section's contents: the offset inside
the section).  ``readelf -a -W`` (binutils 2.40) reports most of these files
on stderr too; ``tests/blob/test_elf_strictness.py`` pins which.

The notes inside an SHT_NOTE section are checked by the code that reads them,
which names what the note is for: ``vpuc.shave.kernel_notes`` (a kernel's
``.note.vpuc.graph``) and ``vpuc.blob.reader_elf`` (a blob's ``.note.vpuc``).

Extended numbering (``e_shnum`` 0 with the count in section 0, ``SHN_XINDEX``)
is refused: vpuc writes at most a few dozen sections.
"""

from __future__ import annotations

from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave.elf_spec import (EV_CURRENT, PT_LOAD, SHF_INFO_LINK, SHN_XINDEX, SHT_NOBITS,
                                 SHT_NOTE, SHT_NULL, SHT_REL, SHT_RELA, Elf32_Ehdr, Elf32_Nhdr,
                                 Elf32_Phdr, Elf32_Shdr)

EHDR_SIZE, PHDR_SIZE, SHDR_SIZE = Elf32_Ehdr.size, Elf32_Phdr.size, Elf32_Shdr.size
_E, _SH, _P = Elf32_Ehdr.offsets, Elf32_Shdr.offsets, Elf32_Phdr.offsets


def _power_of_two_or_zero(value: int) -> bool:
    return value & (value - 1) == 0


def check_header(ehdr, size: int, file: str) -> None:
    """The ELF header's own fields and the bounds of both header tables."""
    def fail(field: str, message: str, where: str = "ELF header", offset: int | None = None):
        return VpucError(message, BinLoc(file, where, _E[field] if offset is None else offset))

    if ehdr.e_version != EV_CURRENT:
        raise fail("e_version", f"e_version is {ehdr.e_version}, expected EV_CURRENT "
                                f"({EV_CURRENT})")
    if ehdr.e_ehsize != EHDR_SIZE:
        raise fail("e_ehsize", f"e_ehsize is {ehdr.e_ehsize}, expected {EHDR_SIZE} (the size "
                               "of an Elf32_Ehdr)")
    if ehdr.e_phnum == 0:
        if ehdr.e_phoff != 0:
            raise fail("e_phoff", f"e_phoff is {ehdr.e_phoff:#x} but e_phnum is 0: a file "
                                  "without a program header table has e_phoff 0")
    else:
        if ehdr.e_phentsize != PHDR_SIZE:
            raise fail("e_phentsize", f"e_phentsize is {ehdr.e_phentsize}, expected "
                                      f"{PHDR_SIZE} (the size of an Elf32_Phdr)")
        if ehdr.e_phoff == 0:
            raise fail("e_phoff", f"e_phnum is {ehdr.e_phnum} but e_phoff is 0")
        if ehdr.e_phoff + ehdr.e_phnum * PHDR_SIZE > size:
            raise fail("e_phnum", f"program header table ({ehdr.e_phnum} entries of "
                                  f"{PHDR_SIZE} bytes at {ehdr.e_phoff:#x}) runs past the end "
                                  f"of the file ({size} bytes)",
                       "program headers", ehdr.e_phoff)
    if ehdr.e_shnum == 0:
        raise fail("e_shnum", "e_shnum is 0: the file has no section header table"
                   + (" (extended section numbering is not supported)" if ehdr.e_shoff else ""))
    if ehdr.e_shentsize != SHDR_SIZE:
        raise fail("e_shentsize", f"e_shentsize is {ehdr.e_shentsize}, expected {SHDR_SIZE} "
                                  "(the size of an Elf32_Shdr)")
    if ehdr.e_shstrndx == 0 or ehdr.e_shstrndx >= ehdr.e_shnum:
        why = ("SHN_UNDEF: the file has no section name table" if ehdr.e_shstrndx == 0 else
               "SHN_XINDEX: extended section numbering is not supported"
               if ehdr.e_shstrndx == SHN_XINDEX else
               f"out of range: the file has {ehdr.e_shnum} sections")
        raise fail("e_shstrndx", f"e_shstrndx {ehdr.e_shstrndx} is {why}")
    if ehdr.e_shoff == 0 or ehdr.e_shoff + ehdr.e_shnum * SHDR_SIZE > size:
        raise fail("e_shoff", f"section header table ({ehdr.e_shnum} entries at "
                              f"{ehdr.e_shoff:#x}) runs past the end of the file ({size} bytes)"
                   if ehdr.e_shoff else "e_shoff is 0 but e_shnum is not",
                   "section headers", ehdr.e_shoff)


def check_program_headers(data: bytes, ehdr, file: str) -> None:
    """Each segment inside the file, p_filesz <= p_memsz, p_align a power of two and,
    for PT_LOAD, p_vaddr congruent to p_offset modulo p_align."""
    for i in range(ehdr.e_phnum):
        at = ehdr.e_phoff + i * PHDR_SIZE
        ph = Elf32_Phdr.unpack_from(data, at, file, f"program header #{i}")
        p_offset, p_vaddr, p_filesz, p_memsz, p_align = \
            ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_memsz, ph.p_align
        where = f"program header #{i}"
        if p_offset + p_filesz > len(data):
            raise VpucError(f"segment ({p_filesz} bytes at {p_offset:#x}) runs past the end of "
                            f"the file ({len(data)} bytes)",
                            BinLoc(file, where, at + _P["p_offset"]))
        if p_filesz > p_memsz:
            raise VpucError(f"p_filesz {p_filesz} is larger than p_memsz {p_memsz}",
                            BinLoc(file, where, at + _P["p_filesz"]))
        if not _power_of_two_or_zero(p_align):
            raise VpucError(f"p_align {p_align} is not 0 or a power of two",
                            BinLoc(file, where, at + _P["p_align"]))
        if ph.p_type == PT_LOAD and p_align > 1 and (p_vaddr - p_offset) % p_align:
            raise VpucError(f"p_vaddr {p_vaddr:#x} and p_offset {p_offset:#x} are not congruent "
                            f"modulo p_align {p_align}", BinLoc(file, where, at + _P["p_vaddr"]))


def check_section_headers(headers: list, ehdr, size: int, file: str) -> None:
    """Section 0 null; every alignment a power of two; every sh_link (and the sh_info
    of relocation sections) a section index; contents inside the file; no two
    sections, nor a section and a header table, sharing a byte."""
    shnum = len(headers)

    def where(i: int, field: str) -> BinLoc:
        return BinLoc(file, f"section header #{i}", ehdr.e_shoff + i * SHDR_SIZE + _SH[field])

    if any(headers[0]):
        raise VpucError("section header #0 is not all zero (SHT_NULL)",
                        BinLoc(file, "section header #0", ehdr.e_shoff))
    spans = [(0, EHDR_SIZE, "the ELF header"),
             (ehdr.e_shoff, ehdr.e_shoff + shnum * SHDR_SIZE, "the section header table")]
    if ehdr.e_phnum:
        spans.append((ehdr.e_phoff, ehdr.e_phoff + ehdr.e_phnum * PHDR_SIZE,
                      "the program header table"))
    for i, sh in enumerate(headers[1:], start=1):
        if not _power_of_two_or_zero(sh.sh_addralign):
            raise VpucError(f"sh_addralign {sh.sh_addralign} is not 0 or a power of two",
                            where(i, "sh_addralign"))
        if sh.sh_addralign > 1 and sh.sh_addr % sh.sh_addralign:
            raise VpucError(f"sh_addr {sh.sh_addr:#x} is not a multiple of sh_addralign "
                            f"{sh.sh_addralign}", where(i, "sh_addr"))
        if sh.sh_link >= shnum:
            raise VpucError(f"sh_link {sh.sh_link} is out of range: the file has {shnum} "
                            "sections", where(i, "sh_link"))
        if (sh.sh_type in (SHT_REL, SHT_RELA) or sh.sh_flags & SHF_INFO_LINK) and \
                sh.sh_info >= shnum:
            raise VpucError(f"sh_info {sh.sh_info} is out of range: the file has {shnum} "
                            "sections", where(i, "sh_info"))
        if sh.sh_type == SHT_NOTE and sh.sh_addralign > 4:
            raise VpucError(f"SHT_NOTE section with sh_addralign {sh.sh_addralign}: ELF32 "
                            "notes are 4-byte aligned", where(i, "sh_addralign"))
        if sh.sh_type in (SHT_NOBITS, SHT_NULL):
            continue
        if sh.sh_offset + sh.sh_size > size:
            raise VpucError(f"section contents ({sh.sh_size} bytes at {sh.sh_offset:#x}) run "
                            f"past the end of the file ({size} bytes)", where(i, "sh_offset"))
        if sh.sh_size:
            spans.append((sh.sh_offset, sh.sh_offset + sh.sh_size, f"section #{i}"))
    spans.sort()
    for (start, end, what), (next_start, next_end, other) in zip(spans, spans[1:]):
        if next_start < end:
            raise VpucError(f"{other} ({next_start:#x}..{next_end:#x}) overlaps {what} "
                            f"({start:#x}..{end:#x}); no byte of a file belongs to two sections",
                            BinLoc(file, other.replace("section #", "section header #"),
                                   next_start))


def check_string_table(data: bytes, name: str, file: str) -> None:
    """A non-empty string table starts and ends with a NUL byte."""
    if data and (data[0] != 0 or data[-1] != 0):
        at = 0 if data[0] != 0 else len(data) - 1
        raise VpucError(f"string table {'starts' if at == 0 else 'ends'} with byte "
                        f"{data[at]:#04x}, not NUL", BinLoc(file, name, at))
