"""Both blob formats for every example that compiles: read back to the same
Program, print back to the source program, byte-identical rewrites, and the
outside tools (flatc, readelf, pyelftools) accept every blob."""

import io
import json
import subprocess

import pytest
from blob_testlib import IDS, SOURCES, compiled, normalized, tool

from vpuc.blob import decode_blob, read_blob, write_blob
from vpuc.blob.elf_records import ENTRY_SYMBOL, VpucShFlags
from vpuc.diagnostics import UsageError, VpucError
from vpuc.vir.parser import parse_file, parse_text
from vpuc.vir.printer import print_module

FORMATS = ("fb", "elf")
OPTIONS = {"pipeline": "compile", "arch": "NPU37XX"}


@pytest.fixture(params=SOURCES, ids=IDS)
def source(request):
    return request.param


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_back_is_the_same_program(source, fmt):
    program = compiled(source)
    again = read_blob(write_blob(program, fmt, OPTIONS), f"{source.stem}.{fmt}")
    assert again.module == program.module
    assert again == program          # kernels, invocations, constants, aliases, provenance


@pytest.mark.parametrize("fmt", FORMATS)
def test_printed_program_is_equivalent_to_the_source(source, fmt):
    program = compiled(source)
    read = read_blob(write_blob(program, fmt, OPTIONS), "x").module
    text = print_module(read)
    assert parse_text(text, "printed.vir") == read
    original = parse_file(str(source))
    if original.graphs:
        # A graph module's task-level source is what lower-graph makes of it.
        from vpuc.arch import load_arch
        from vpuc.passes.base import PassContext
        from vpuc.passes.manager import PassManager
        from vpuc.passes.registry import parse_pipeline
        PassManager(parse_pipeline("lower-graph")).run(original, PassContext(load_arch(original.arch)))
        original.attributes.pop("graph", None)  # a note about the source, not blob content
        original.attributes.pop("graph-blocks", None)
    assert normalized(read, original) == original
    assert print_module(normalized(read, original)) == print_module(original)


@pytest.mark.parametrize("fmt", FORMATS)
def test_writing_is_deterministic(source, fmt):
    program = compiled(source)
    program.provenance = {"source": source.name, "tool": "test"}
    first = write_blob(program, fmt, OPTIONS)
    assert write_blob(program, fmt, OPTIONS) == first
    again = compiled(source)                 # equal dicts filled in another order
    again.provenance = {"tool": "test", "source": source.name}
    assert write_blob(again, fmt, dict(reversed(list(OPTIONS.items())))) == first


def test_both_formats_hold_the_same_content(source):
    program = compiled(source)
    fb = decode_blob(write_blob(program, "fb", OPTIONS), "x.blob")
    elf = decode_blob(write_blob(program, "elf", OPTIONS), "x.elf")
    assert fb.content == elf.content
    assert len(fb.digest) == len(elf.digest) == 32    # each the hash of its own bytes
    assert (fb.format, elf.format, fb.version, elf.version) == ("fb", "elf", (1, 6), (1, 6))


def test_flatc_decodes_every_flatbuffer_blob(source, tmp_path):
    flatc = tool("flatc")
    from vpuc.blob.fb_schema import SCHEMA_PATH
    blob = tmp_path / "x.blob"
    blob.write_bytes(write_blob(compiled(source), "fb", OPTIONS))
    done = subprocess.run([flatc, "--json", "--strict-json", "--raw-binary", "-o", str(tmp_path),
                           str(SCHEMA_PATH), "--", str(blob)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    decoded = json.loads((tmp_path / "x.json").read_text())
    assert decoded["header"]["version"] == {"major": 1, "minor": 6}
    assert decoded["header"]["architecture"]["name"] == "NPU37XX"


def test_kernel_data_is_64_byte_aligned(source):
    from schema.vpu_blob.Blob import Blob
    data = write_blob(compiled(source), "fb", OPTIONS)
    root = Blob.GetRootAs(data, 0)
    tables = [root.KernelData(i) for i in range(root.KernelDataLength())]
    tables += [root.Constants(i) for i in range(root.ConstantsLength())]
    for table in tables:
        offset = table._tab.Offset(4 if hasattr(table, "DataAsNumpy") and
                                   type(table).__name__ == "KernelData" else 6)
        if offset:
            assert table._tab.Vector(offset) % 64 == 0


def test_readelf_reads_every_elf_blob_silently(source, tmp_path):
    readelf = tool("readelf")
    blob = tmp_path / "x.elf"
    blob.write_bytes(write_blob(compiled(source), "elf", OPTIONS))
    done = subprocess.run([readelf, "-a", "-W", str(blob)], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stderr == ""
    assert "Relocation section '.rela.vpuc.tensors'" in done.stdout


def test_pyelftools_reads_every_elf_blob(source):
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    program = compiled(source)
    elf = ELFFile(io.BytesIO(write_blob(program, "elf", OPTIONS)))
    names = {s.name for s in elf.iter_sections()}
    assert {".note.vpuc", ".text.dmaTasks0", ".text.BarrierConfigs", ".text.MappedInference",
            ".text.ActKernelRanges", ".data.KernelParams", ".bss.ShaveStacks",
            ".symtab"} <= names
    assert elf.get_section_by_name(".bss.ShaveStacks")["sh_type"] == "SHT_NOBITS"
    symtab = next(s for s in elf.iter_sections() if isinstance(s, SymbolTableSection))
    symbols = {sym.name: sym for sym in symtab.iter_symbols()}
    assert symbols[ENTRY_SYMBOL]["st_info"]["bind"] == "STB_GLOBAL"
    for buffer in program.module.buffers:
        if buffer.kind.value in ("input", "output"):
            sym = symbols[buffer.name]
            section = elf.get_section(sym["st_shndx"])
            flag = (VpucShFlags.SHF_VPUC_NETWORK_INPUT if buffer.kind.value == "input"
                    else VpucShFlags.SHF_VPUC_NETWORK_OUTPUT)
            assert section["sh_flags"] & flag and sym["st_size"] == buffer.type.nbytes
    relocs = [r for s in elf.iter_sections() if s.name.startswith(".rela")
              for r in s.iter_relocations()]
    assert relocs and all(r["r_info_type"] == 1 for r in relocs)


def test_window_relocations_carry_cmx_offsets():
    from elftools.elf.elffile import ELFFile
    program = compiled(SOURCES[0])           # clamp: %in_cmx at 0, %out_cmx at 32768
    elf = ELFFile(io.BytesIO(write_blob(program, "elf", OPTIONS)))
    symtab = elf.get_section_by_name(".symtab")
    rela = elf.get_section_by_name(".rela.vpuc.tensors")
    addends = sorted(r["r_addend"] for r in rela.iter_relocations()
                     if symtab.get_symbol(r["r_info_sym"]).name == "vpuc.WIN_F")
    assert addends == sorted(b.offset for b in program.module.buffers if b.kind.value == "cmx")


def test_write_refuses_unknown_formats_and_unfit_values():
    program = compiled(SOURCES[0])
    with pytest.raises(UsageError, match="unknown blob format 'xml'"):
        write_blob(program, "xml")
    program.module.buffers[0].offset = -5      # no valid blob holds a negative DDR offset
    program.module.barriers[0].physical = 1 << 20
    for fmt in FORMATS:
        with pytest.raises(VpucError, match="cannot serialize"):
            write_blob(program, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_deduplicated_kernels_keep_one_image_and_their_aliases(fmt):
    from blob_testlib import REPO
    program = compiled(REPO / "tests/unit/data/clamp_asm.vir")   # two kernels, one code
    assert len(program.kernels) == 1 and len(program.kernel_aliases) == 2
    again = read_blob(write_blob(program, fmt), "x")
    assert again.kernel_aliases == program.kernel_aliases
    assert again.kernel_image("runtime") is again.kernels["builtin_clamp"]
