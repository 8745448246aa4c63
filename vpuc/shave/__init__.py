"""The ACT SHAVE vector ISA toolchain: instruction table, assembler, disassembler,
kernel objects (ELF32 relocatable) and linking.  See docs/shave-isa.md."""

from vpuc.shave.assembler import assemble, assemble_file
from vpuc.shave.disassembler import (disassemble, disassemble_elf, disassemble_object,
                                     format_instruction)
from vpuc.shave.encoding import decode_word, encode_fields
from vpuc.shave.isa import BY_MNEMONIC, BY_OPCODE, INSTRUCTIONS, Instruction
from vpuc.shave.kobject import (R_SHAVE_ABS32, KernelObject, Relocation, RelocType, Symbol,
                                link_kernel, rodata_address)

__all__ = [
    "assemble", "assemble_file", "disassemble", "disassemble_elf", "disassemble_object", "format_instruction",
    "decode_word", "encode_fields", "BY_MNEMONIC", "BY_OPCODE", "INSTRUCTIONS", "Instruction",
    "KernelObject", "Relocation", "RelocType", "Symbol", "R_SHAVE_ABS32", "link_kernel",
    "rodata_address",
]
