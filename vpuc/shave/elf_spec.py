"""The ELF32 little-endian format as data: the ``e_ident`` values, the enums and the
records (``Elf32_Ehdr``, ``Elf32_Shdr``, ``Elf32_Sym`` ...) declared field by field.

Names follow the ELF specification (System V gABI) so the code reads like the
spec: ``e_ident``, ``sh_type``, ``SHT_PROGBITS``, ``STB_GLOBAL`` ...  Only the
relocatable subset vpuc needs is declared.
"""

from __future__ import annotations

import struct
from collections import namedtuple
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
