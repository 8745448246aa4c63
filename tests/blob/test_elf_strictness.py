"""The ELF reader refuses what the ELF specification refuses (vpuc/shave/elf_checks.py).

Each case corrupts one header field of a real ELF blob (examples/clamp.vir), and
checks the exact error: the header or section it names, the offset and the
message.  Where ``readelf -a -W`` (binutils 2.40) reports the same bytes on
stderr, the case says so and the test checks it; the other cases break a rule
the gABI states that readelf does not check.
"""

from __future__ import annotations

import struct
import subprocess

import pytest
from blob_testlib import REPO, compiled, tool

from vpuc.blob import read_blob, write_blob
from vpuc.diagnostics import VpucError
from vpuc.shave import elf_layout as elf

CLAMP = REPO / "examples" / "clamp.vir"
FILE = "bad.elf"


def _blob() -> bytes:
    return write_blob(compiled(CLAMP), "elf")


def _put(data: bytes, offset: int, code: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<" + code, out, offset, value)
    return bytes(out)


class Layout:
    """Where the fields of the clean blob are."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        image = elf.read_elf32(data, "x")
        self.shoff = image.header.e_shoff
        self.index = {s.name: s.index for s in image.sections}
        self.sections = image.sections

    def sh(self, name: str, field: str) -> int:
        return self.shoff + 40 * self.index[name] + elf.Elf32_Shdr.offsets[field]

    def with_phdr(self, **fields) -> bytes:
        """The blob with one program header appended after everything else."""
        values = dict(p_type=1, p_offset=0x34, p_vaddr=0, p_paddr=0, p_filesz=4, p_memsz=4,
                      p_flags=4, p_align=4)
        values.update(fields)
        data = self.data + struct.pack("<8I", *values.values())
        data = _put(_put(_put(data, 28, "I", len(self.data)), 42, "H", 32), 44, "H", 1)
        return data


def _cases(lay: Layout):
    """(id, corrupted bytes, section named, offset, message, readelf complains)."""
    d, size = lay.data, len(lay.data)
    note = lay.sections[lay.index[".note.vpuc"]]
    nsec = len(lay.sections)
    yield ("phnum past eof", _put(_put(_put(d, 28, "I", size - 40), 42, "H", 32), 44, "H", 5),
           "program headers", size - 40,
           f"program header table (5 entries of 32 bytes at {size - 40:#x}) runs past the end "
           f"of the file ({size} bytes)", True)
    yield ("phentsize", _put(_put(_put(d, 28, "I", 52), 42, "H", 16), 44, "H", 1),
           "ELF header", 42, "e_phentsize is 16, expected 32 (the size of an Elf32_Phdr)", True)
    yield ("phoff without phnum", _put(d, 28, "I", 52), "ELF header", 28,
           "e_phoff is 0x34 but e_phnum is 0: a file without a program header table has "
           "e_phoff 0", True)
    yield ("segment filesz > memsz", lay.with_phdr(p_filesz=8, p_memsz=4),
           "program header #0", size + 16, "p_filesz 8 is larger than p_memsz 4", True)
    yield ("segment past eof", lay.with_phdr(p_offset=size + 30),
           "program header #0", size + 4,
           f"segment (4 bytes at {size + 30:#x}) runs past the end of the file ({size + 32} bytes)",
           False)
    yield ("p_align not a power of two", lay.with_phdr(p_align=3),
           "program header #0", size + 28, "p_align 3 is not 0 or a power of two", False)
    yield ("sh_addralign not a power of two", _put(d, lay.sh(".vpuc.strtab", "sh_addralign"),
                                                   "I", 3),
           f"section header #{lay.index['.vpuc.strtab']}", lay.sh(".vpuc.strtab", "sh_addralign"),
           "sh_addralign 3 is not 0 or a power of two", False)
    yield ("note alignment", _put(d, lay.sh(".note.vpuc", "sh_addralign"), "I", 16),
           f"section header #{note.index}", lay.sh(".note.vpuc", "sh_addralign"),
           "SHT_NOTE section with sh_addralign 16: ELF32 notes are 4-byte aligned", True)
    yield ("sh_link out of range", _put(d, lay.sh(".vpuc.strtab", "sh_link"), "I", 99),
           f"section header #{lay.index['.vpuc.strtab']}", lay.sh(".vpuc.strtab", "sh_link"),
           f"sh_link 99 is out of range: the file has {nsec} sections", True)
    yield ("sh_info out of range", _put(d, lay.sh(".rela.vpuc.tensors", "sh_info"), "I", 99),
           f"section header #{lay.index['.rela.vpuc.tensors']}",
           lay.sh(".rela.vpuc.tensors", "sh_info"),
           f"sh_info 99 is out of range: the file has {nsec} sections", True)
    yield ("section past eof", _put(d, lay.sh(".vpuc.strtab", "sh_size"), "I", size),
           f"section header #{lay.index['.vpuc.strtab']}", lay.sh(".vpuc.strtab", "sh_offset"),
           f"section contents ({size} bytes at "
           f"{lay.sections[lay.index['.vpuc.strtab']].header.sh_offset:#x}) run past the end "
           f"of the file ({size} bytes)", False)
    u32 = lay.sections[lay.index[".vpuc.u32"]].header
    strtab = lay.sections[lay.index[".vpuc.strtab"]].header
    yield ("sections overlap", _put(d, lay.sh(".vpuc.u32", "sh_offset"), "I", strtab.sh_offset),
           f"section header #{lay.index['.vpuc.strtab']}", strtab.sh_offset,
           f"section #{lay.index['.vpuc.strtab']} ({strtab.sh_offset:#x}.."
           f"{strtab.sh_offset + strtab.sh_size:#x}) overlaps section #{lay.index['.vpuc.u32']} "
           f"({strtab.sh_offset:#x}..{strtab.sh_offset + u32.sh_size:#x}); no byte of a file "
           "belongs to two sections", False)
    yield ("e_shstrndx out of range", _put(d, 50, "H", nsec + 3), "ELF header", 50,
           f"e_shstrndx {nsec + 3} is out of range: the file has {nsec} sections", False)
    yield ("e_ehsize", _put(d, 40, "H", 60), "ELF header", 40,
           "e_ehsize is 60, expected 52 (the size of an Elf32_Ehdr)", False)
    yield ("e_shentsize", _put(d, 46, "H", 44), "ELF header", 46,
           "e_shentsize is 44, expected 40 (the size of an Elf32_Shdr)", True)
    yield ("e_version", _put(d, 20, "I", 2), "ELF header", 20,
           "e_version is 2, expected EV_CURRENT (1)", False)
    yield ("note runs past its section", _put(d, note.header.sh_offset, "I", 1000),
           ".note.vpuc", 0, f"note (1000-byte name, 4-byte descriptor) runs past the end of the "
           f"section ({note.header.sh_size} bytes)", True)
    yield ("note descriptor runs past its section", _put(d, note.header.sh_offset + 4, "I", 64),
           ".note.vpuc", 0, f"note (5-byte name, 64-byte descriptor) runs past the end of the "
           f"section ({note.header.sh_size} bytes)", True)
    yield ("section 0 not null", _put(d, lay.shoff + 20, "I", 5), "section header #0",
           lay.shoff, "section header #0 is not all zero (SHT_NULL)", False)
    symtab = lay.sections[lay.index[".symtab"]].header
    yield ("symtab sh_info", _put(d, lay.sh(".symtab", "sh_info"), "I", 100), ".symtab", 0,
           f"symbol table sh_info 100 (one past the last local symbol) is not in "
           f"1..{symtab.sh_size // 16}", False)
    shstr = lay.sections[lay.index[".shstrtab"]].header
    yield ("section names not NUL-terminated",
           _put(d, shstr.sh_offset + shstr.sh_size - 1, "B", 0x41),
           "the section name table", shstr.sh_size - 1,
           "string table ends with byte 0x41, not NUL", False)


CASES = list(_cases(Layout(_blob()))) if CLAMP.exists() else []


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_reader_refuses_what_the_spec_refuses(case, tmp_path):
    _, data, where, offset, message, readelf_complains = case
    with pytest.raises(VpucError) as caught:
        read_blob(data, FILE)
    assert str(caught.value) == f"{FILE}: section {where} at offset {offset:#x}: error: {message}"
    if readelf_complains:
        path = tmp_path / FILE
        path.write_bytes(data)
        done = subprocess.run([tool("readelf"), "-a", "-W", str(path)], capture_output=True)
        assert done.stderr.strip(), "readelf accepts these bytes silently"


def test_the_clean_blob_and_the_kernel_objects_pass(tmp_path):
    """The rules hold for everything vpuc writes (readelf agrees: it prints nothing)."""
    program = compiled(CLAMP)
    read_blob(_blob(), "clamp.elf")
    for name, image in program.kernels.items():
        elf.read_elf32(image.elf, f"{name}.o")
    for obj in sorted((REPO / "kernels" / "build").glob("*.o")):
        elf.read_elf32(obj.read_bytes(), obj.name)


def test_kernel_objects_get_the_same_rules():
    """Kernel objects are read by the same reader: one rule of each kind, on clamp.o."""
    from vpuc.shave import KernelObject
    data = (REPO / "kernels" / "build" / "clamp.o").read_bytes()
    lay = Layout(data)
    text = lay.sh(".text", "sh_addralign")
    for bad, where, offset, message in (
            (_put(data, 40, "H", 60), "ELF header", 40,
             "e_ehsize is 60, expected 52 (the size of an Elf32_Ehdr)"),
            (_put(data, text, "I", 12), f"section header #{lay.index['.text']}", text,
             "sh_addralign 12 is not 0 or a power of two"),
            (_put(_put(_put(data, 28, "I", len(data) - 8), 42, "H", 32), 44, "H", 2),
             "program headers", len(data) - 8,
             f"program header table (2 entries of 32 bytes at {len(data) - 8:#x}) runs past "
             f"the end of the file ({len(data)} bytes)")):
        with pytest.raises(VpucError) as caught:
            KernelObject.from_elf(bad, "clamp.o")
        assert str(caught.value) == f"clamp.o: section {where} at offset {offset:#x}: error: " \
                                    f"{message}"
