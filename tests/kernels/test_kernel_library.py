"""The kernel library as objects: every kernel assembles, round-trips through the
disassembler byte for byte, is read cleanly by readelf and pyelftools; the shared
driver blocks are included from kernels/include/, not copied; the library API and
`vpuc kernels`."""

import io
import re
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from tests.tools import tool
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.kernel_library import (KERNEL_DIR, build_library, library_names, library_source,
                                 load_library_kernel)
from vpuc.shave import KernelObject, assemble, disassemble, disassemble_elf, disassemble_object
from vpuc.shave.elf_layout import EM_VPUC_SHAVE

NAMES = library_names()
EXPECTED = {"copy", "clamp", "relu", "sigmoid", "tanh", "gelu", "hswish", "swish", "add", "sub",
            "mul", "max", "min", "softmax", "reduce_sum", "reduce_mean", "convert", "runtime",
            "reduce_max", "log_softmax", "mvn", "gather", "topk"}
INCLUDE = re.compile(r'^\s*\.include "include/([a-z_]+\.inc)"', re.MULTILINE)
LABEL = re.compile(r"^([A-Za-z_.$][A-Za-z0-9_.$]*):", re.MULTILINE)
# a macro's body defines its labels in the kernel that invokes it, not in the block
MACRO_BODY = re.compile(r"^\s*\.macro\b.*?^\s*\.endm\b", re.MULTILINE | re.DOTALL)


def test_the_library_has_every_kernel():
    assert set(NAMES) == EXPECTED


@pytest.mark.parametrize("name", NAMES)
def test_entry_point_is_named_like_the_kernel(name):
    obj = load_library_kernel(name)
    assert [s.name for s in obj.entry_points] == [name]
    assert obj.entry_offset(name) == 0
    assert load_library_kernel(name) is obj                 # assembled once per process


@pytest.mark.parametrize("name", NAMES)
def test_assembler_disassembler_round_trip(name):
    obj = load_library_kernel(name)
    blob = obj.to_elf()
    text = disassemble_object(obj)
    assert assemble(text, f"{name}.dis.s").to_elf() == blob
    assert disassemble_elf(blob, obj.name) == text
    assert KernelObject.from_elf(blob, f"{name}.o").to_elf() == blob
    assert assemble(disassemble(obj.text), f"{name}.raw.s").text == obj.text


def test_readelf_reads_every_object_cleanly(tmp_path):
    for path in build_library(tmp_path):
        result = subprocess.run([tool("readelf"), "-a", "-W", str(path)], capture_output=True,
                                text=True)
        assert result.returncode == 0, path
        assert result.stderr == "", (path, result.stderr)
        assert "REL (Relocatable file)" in result.stdout and "0x7acc" in result.stdout


@pytest.mark.parametrize("name", NAMES)
def test_pyelftools_reads_every_object(name):
    obj = load_library_kernel(name)
    elf = ELFFile(io.BytesIO(obj.to_elf()))
    assert elf["e_machine"] == EM_VPUC_SHAVE and elf["e_type"] == "ET_REL"
    for section in (".text", ".rodata", ".data"):
        assert elf.get_section_by_name(section).data() == obj.sections[section]
    symbols = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
    assert symbols[name]["st_info"]["bind"] == "STB_GLOBAL"
    assert symbols[name]["st_info"]["type"] == "STT_FUNC"
    relocs = [(r["r_offset"], r["r_addend"]) for sec in elf.iter_sections()
              if sec.name.startswith(".rela") for r in sec.iter_relocations()]
    assert relocs == [(r.offset, r.addend) for r in obj.relocations]


def test_shared_blocks_are_included_once():
    # The driver, eltwise-row and reduce-row blocks (and copy's byte loop) live in
    # kernels/include/ and each kernel .includes them, so a fix reaches every kernel.
    includes = {name: INCLUDE.findall(library_source(name).read_text()) for name in NAMES}
    reductions = {"softmax", "reduce_sum", "reduce_mean", "reduce_max", "log_softmax", "mvn"}
    for name, found in includes.items():
        expected = ([] if name in ("runtime", "gather", "topk") else      # no driver
                    ["driver.inc", "reduce_row.inc" if name in reductions else "eltwise_row.inc"])
        expected += ["byte_copy.inc"] if name in ("copy", "convert", "gather") else []
        assert found == expected, name
    blocks = sorted(p.name for p in (KERNEL_DIR / "include").glob("*.inc"))
    assert blocks == ["byte_copy.inc", "driver.inc", "eltwise_row.inc", "reduce_row.inc"]
    # and no kernel carries a copy of a block: none defines one of the blocks' labels
    for block in blocks:
        labels = LABEL.findall(MACRO_BODY.sub("", (KERNEL_DIR / "include" / block).read_text()))
        assert labels
        for name in NAMES:
            own = set(LABEL.findall(library_source(name).read_text()))
            assert not own & set(labels), (name, block)


def test_unknown_kernel_is_a_clear_error():
    with pytest.raises(VpucError) as info:
        load_library_kernel("sigmod")
    message = info.value.diagnostics[0].message
    assert message.startswith("unknown library kernel 'sigmod'; expected one of add, clamp")


def test_build_library_writes_one_object_per_kernel(tmp_path):
    paths = build_library(tmp_path / "out")
    assert [p.name for p in paths] == [f"{n}.o" for n in NAMES]
    for path in paths:
        assert KernelObject.from_elf(path.read_bytes(), str(path)).to_elf() == path.read_bytes()
    assert KERNEL_DIR.name == "kernels" and (KERNEL_DIR / "clamp.s").is_file()


def test_cli_kernels_build_and_list(tmp_path, capsys):
    assert main(["kernels", "build", "-o", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(NAMES)
    for line, name in zip(lines, NAMES):
        path, size = line.split("  ")
        assert path == str(tmp_path / f"{name}.o")
        assert size == f"{(tmp_path / f'{name}.o').stat().st_size} bytes"
    assert main(["kernels", "list"]) == 0
    assert capsys.readouterr().out.split() == NAMES


def test_cli_kernels_errors(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    assert main(["kernels", "build", "-o", str(blocker / "sub")]) == 1
    assert "cannot create" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["kernels"])
    assert info.value.code == 2
