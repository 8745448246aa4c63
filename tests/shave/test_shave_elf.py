"""Kernel ELF objects: readelf and pyelftools read them cleanly; corrupt input is a VpucError."""

import io
import shutil
import subprocess

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from test_shave_assembler import PROGRAMS
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave import KernelObject, assemble, disassemble_elf
from vpuc.shave.elf_layout import (EM_VPUC_SHAVE, SHN_ABS, SHT_NOBITS, SHT_PROGBITS, STB_GLOBAL,
                                   STB_LOCAL, STT_OBJECT, Elf32_Ehdr, Elf32_Shdr, RelocSpec,
                                   SectionSpec, SymbolSpec, read_elf32, write_elf32)


def objects():
    return {name: assemble(src, f"{name}.s") for name, src in PROGRAMS.items()}


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf not installed")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_readelf_prints_nothing_on_stderr(tmp_path, name):
    path = tmp_path / f"{name}.o"
    path.write_bytes(objects()[name].to_elf())
    result = subprocess.run(["readelf", "-a", "-W", str(path)], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stderr == ""
    assert "REL (Relocatable file)" in result.stdout and "0x7acc" in result.stdout


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pyelftools_reads_it_back(name):
    obj = objects()[name]
    elf = ELFFile(io.BytesIO(obj.to_elf()))
    assert elf.elfclass == 32 and elf.little_endian
    assert elf["e_machine"] == EM_VPUC_SHAVE          # unknown to pyelftools: the raw value
    assert elf["e_type"] == "ET_REL"
    for section in (".text", ".rodata", ".data"):
        assert elf.get_section_by_name(section).data() == obj.sections[section]
    symtab = elf.get_section_by_name(".symtab")
    names = {s.name: s for s in symtab.iter_symbols()}
    for sym in obj.symbols:
        entry = names[sym.name]
        assert entry["st_value"] == sym.value and entry["st_size"] == sym.size
        assert entry["st_info"]["bind"] == ("STB_GLOBAL" if sym.is_global else "STB_LOCAL")
    relocs = [(sec.name, r["r_offset"], r["r_info_type"], r["r_addend"])
              for sec in elf.iter_sections() if sec.name.startswith(".rela")
              for r in sec.iter_relocations()]
    assert relocs == [(".rela" + r.section, r.offset, r.type, r.addend) for r in obj.relocations]


def test_generic_writer_and_reader():
    blob = write_elf32(
        machine=0x1234, rela=False,
        sections=[SectionSpec(".blob", SHT_PROGBITS, b"abcdefgh", addralign=4),
                  SectionSpec(".bss", SHT_NOBITS, nobits_size=64, addralign=16)],
        symbols=[SymbolSpec("g", 4, 4, STB_GLOBAL, STT_OBJECT, ".blob"),
                 SymbolSpec("l", 0, section=".bss"), SymbolSpec("abs", 7, shndx=SHN_ABS)],
        relocations=[RelocSpec(".blob", 4, 2, "l")])
    elf = read_elf32(blob, "g.elf", machine=0x1234)
    assert elf.section(".blob").data == b"abcdefgh" and elf.header.e_machine == 0x1234
    assert elf.section(".bss").header.sh_size == 64 and elf.section(".rel.blob") is not None
    assert [(s.name, s.bind, s.section) for s in elf.symbols] == [
        ("", STB_LOCAL, None), ("l", STB_LOCAL, ".bss"), ("abs", STB_LOCAL, None),
        ("g", STB_GLOBAL, ".blob")]
    [reloc] = elf.relocations
    assert (reloc.section, reloc.offset, reloc.type, reloc.symbol.name) == (".blob", 4, 2, "l")
    parsed = ELFFile(io.BytesIO(blob))
    assert parsed.get_section_by_name(".symtab")["sh_info"] == 3
    with pytest.raises(VpucError, match="e_machine is 0x1234, expected 0x7acc"):
        KernelObject.from_elf(blob, "g.elf")


def _boundaries(blob: bytes) -> list[int]:
    header = Elf32_Ehdr.unpack_from(blob, 0, "x", "x")
    cuts = {0, 4, 16, Elf32_Ehdr.size, header.e_shoff, len(blob) - 1}
    for i in range(header.e_shnum):
        sh = Elf32_Shdr.unpack_from(blob, header.e_shoff + i * Elf32_Shdr.size, "x", "x")
        cuts |= {sh.sh_offset, sh.sh_offset + sh.sh_size // 2, sh.sh_offset + sh.sh_size,
                 header.e_shoff + i * Elf32_Shdr.size + 7}
    return sorted(c for c in cuts if 0 <= c < len(blob))


def _only_vpuc_errors(data: bytes) -> None:
    try:
        obj = KernelObject.from_elf(data, "bad.o")
        disassemble_elf(data, "bad.o")
        obj.to_elf()
    except VpucError as err:
        assert err.diagnostics and err.diagnostics[0].message


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_truncation_at_every_section_boundary(name):
    blob = objects()[name].to_elf()
    for cut in _boundaries(blob):
        with pytest.raises(VpucError) as info:
            KernelObject.from_elf(blob[:cut], "cut.o")
        assert isinstance(info.value.diagnostics[0].loc, BinLoc)


def test_truncation_message_names_section_and_offset():
    blob = objects()["softmax_like"].to_elf()
    with pytest.raises(VpucError) as info:
        KernelObject.from_elf(blob[:30], "cut.o")
    assert info.value.render() == ("cut.o: section ELF header at offset 0x0: error: truncated "
                                   "Elf32_Ehdr: need 52 bytes at offset 0x0, file has 30")
    header = Elf32_Ehdr.unpack_from(blob, 0, "x", "x")
    with pytest.raises(VpucError, match=r"section headers at offset 0x[0-9a-f]+: error: section "
                       r"header table \(9 entries"):
        KernelObject.from_elf(blob[:header.e_shoff + 10], "cut.o")


def test_random_byte_flips_raise_only_vpuc_errors():
    rng = np.random.default_rng(1234)
    blobs = [obj.to_elf() for obj in objects().values()]
    for case in range(400):
        data = bytearray(blobs[case % len(blobs)])
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        _only_vpuc_errors(bytes(data))


def test_header_field_corruption_raises_only_vpuc_errors():
    blob = objects()["softmax_like"].to_elf()
    for offset in range(Elf32_Ehdr.size):
        for value in (0x00, 0x01, 0x7F, 0xFF):
            data = bytearray(blob)
            data[offset] = value
            _only_vpuc_errors(bytes(data))


_SYMBOL_CASES = {
    "undefined": (SymbolSpec("ext", 0), "is not defined in .text, .rodata or .data"),
    "past the end": (SymbolSpec("far", 64, section=".text"), "is past the end of .text"),
    "bad name": (SymbolSpec("1bad", 0, section=".text"), "is not a valid identifier"),
    "repeated": (SymbolSpec("k", 0, section=".text"), "or is repeated"),
    "weak": (SymbolSpec("w", 0, bind=2, section=".text"), "has binding 2, expected STB_LOCAL"),
}


@pytest.mark.parametrize("case", sorted(_SYMBOL_CASES))
def test_a_bad_symbol_is_located_at_its_symtab_entry(case):
    """Each symbol check (checked together, located only on failure) names the symbol and
    its .symtab entry: index x 16 bytes."""
    from vpuc.shave.elf_layout import STT_FUNC
    bad, message = _SYMBOL_CASES[case]
    text = assemble("    .global k\n    .text\nk:\n    ret\n").text
    symbols = [SymbolSpec("k", 0, 0, STB_GLOBAL, STT_FUNC, ".text"), bad]
    blob = write_elf32(machine=EM_VPUC_SHAVE, symbols=symbols, sections=[
        SectionSpec(".text", SHT_PROGBITS, text, 6, 8), SectionSpec(".rodata", SHT_PROGBITS),
        SectionSpec(".data", SHT_PROGBITS)])
    with pytest.raises(VpucError, match=message) as info:
        KernelObject.from_elf(blob, "bad.o")
    loc = info.value.diagnostics[0].loc
    # after the null entry, locals then the others in order (k, then a weak w): a bad
    # local is entry 1; a repeated name is found at the second k, the global one
    index = 2 if case in ("repeated", "weak") else 1
    assert (loc.section, loc.offset) == (".symtab", index * 16)
    assert f"'{bad.name}'" in info.value.diagnostics[0].message
