"""The ACT SHAVE vector ISA toolchain: instruction table, assembler, disassembler,
kernel objects (ELF32 relocatable) and linking.  See docs/shave-isa.md.

The names below are imported on first use (PEP 562): a reader that needs one
submodule (a blob reader: ``kernel_notes``) does not load the assembler."""

from importlib import import_module

# Each exported name and the submodule that defines it.
_HOME = {
    "assemble": "assembler", "assemble_file": "assembler",
    "disassemble": "disassembler", "disassemble_elf": "disassembler",
    "disassemble_object": "disassembler", "format_instruction": "disassembler",
    "decode_word": "encoding", "encode_fields": "encoding",
    "BY_MNEMONIC": "isa", "BY_OPCODE": "isa", "INSTRUCTIONS": "isa", "Instruction": "isa",
    "KernelObject": "kobject", "Relocation": "kobject", "RelocType": "kobject",
    "Symbol": "kobject", "R_SHAVE_ABS32": "kobject", "link_kernel": "kobject",
    "rodata_address": "kobject",
}

__all__ = list(_HOME)


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'vpuc.shave' has no attribute '{name}'")
    value = getattr(import_module(f"vpuc.shave.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
