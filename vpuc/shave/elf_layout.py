"""ELF32 little-endian: structures and enums as data, a small writer, a checked reader,
under one name (most callers say ``from vpuc.shave import elf_layout as elf``).

The parts live in ``elf_spec.py`` (the gABI's values and records), ``elf_writer.py``
(``write_elf32``) and ``elf_reader.py`` (``read_elf32``, every offset checked, the
structural rules of ``elf_checks.py`` first).  Nothing here is specific to SHAVE
kernels: the blob container reuses the writer and the reader.
"""

from vpuc.shave.elf_reader import (ElfFile, ElfReloc, ElfSection, ElfSymbol, read_elf32,
                                   read_relocations)
from vpuc.shave.elf_spec import (EI_NIDENT, ELFCLASS32, ELFDATA2LSB, ELFMAG, ELFOSABI_NONE,
                                 EM_VPUC_SHAVE, ET_DYN, ET_EXEC, ET_NONE, ET_REL, EV_CURRENT,
                                 PT_LOAD, SHF_ALLOC, SHF_EXECINSTR, SHF_INFO_LINK, SHF_MERGE,
                                 SHF_STRINGS, SHF_WRITE, SHN_ABS, SHN_COMMON, SHN_LORESERVE,
                                 SHN_UNDEF, SHN_XINDEX, SHT_DYNAMIC, SHT_HASH, SHT_NOBITS,
                                 SHT_NOTE, SHT_NULL, SHT_PROGBITS, SHT_REL, SHT_RELA, SHT_STRTAB,
                                 SHT_SYMTAB, STB_GLOBAL, STB_LOCAL, STB_WEAK, STT_FILE, STT_FUNC,
                                 STT_NOTYPE, STT_OBJECT, STT_SECTION, STV_DEFAULT, Elf32_Ehdr,
                                 Elf32_Nhdr, Elf32_Phdr, Elf32_Rel, Elf32_Rela, Elf32_Shdr,
                                 Elf32_Sym, ElfType, ShFlags, ShType, StBind, StType, Struct,
                                 elf32_r_info, elf32_st_info)
from vpuc.shave.elf_writer import RelocSpec, SectionSpec, SymbolSpec, write_elf32

__all__ = [
    "EI_NIDENT", "ELFCLASS32", "ELFDATA2LSB", "ELFMAG", "ELFOSABI_NONE", "EM_VPUC_SHAVE", "ET_DYN",
    "ET_EXEC", "ET_NONE", "ET_REL", "EV_CURRENT", "PT_LOAD", "SHF_ALLOC", "SHF_EXECINSTR",
    "SHF_INFO_LINK", "SHF_MERGE", "SHF_STRINGS", "SHF_WRITE", "SHN_ABS", "SHN_COMMON",
    "SHN_LORESERVE", "SHN_UNDEF", "SHN_XINDEX", "SHT_DYNAMIC", "SHT_HASH", "SHT_NOBITS",
    "SHT_NOTE", "SHT_NULL", "SHT_PROGBITS", "SHT_REL", "SHT_RELA", "SHT_STRTAB", "SHT_SYMTAB",
    "STB_GLOBAL", "STB_LOCAL", "STB_WEAK", "STT_FILE", "STT_FUNC", "STT_NOTYPE", "STT_OBJECT",
    "STT_SECTION", "STV_DEFAULT", "Elf32_Ehdr", "Elf32_Nhdr", "Elf32_Phdr", "Elf32_Rel",
    "Elf32_Rela", "Elf32_Shdr", "Elf32_Sym", "ElfFile", "ElfReloc", "ElfSection", "ElfSymbol",
    "ElfType", "RelocSpec", "SectionSpec", "ShFlags", "ShType", "StBind", "StType", "Struct",
    "SymbolSpec", "elf32_r_info", "elf32_st_info", "read_elf32", "read_relocations", "write_elf32",
]
