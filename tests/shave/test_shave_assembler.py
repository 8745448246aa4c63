"""Assembler and disassembler: round trips, directives, relocations, exact error texts."""

import struct
from pathlib import Path

import numpy as np
import pytest

from vpuc.diagnostics import VpucError
from vpuc.shave import (R_SHAVE_ABS32, KernelObject, assemble, disassemble, disassemble_elf,
                        disassemble_object, link_kernel)
from vpuc.shave.elf_layout import STT_FUNC, STT_NOTYPE, STT_OBJECT

CLAMP = (Path(__file__).parents[2] / "docs" / "shave-isa.md").read_text().split(
    "```asm\n")[1].split("```")[0]

SOFTMAX_LIKE = """
    .global rowsum, helper
    .equ ROW, 4 * 8
    .text
rowsum:                         // f32 sum of a row, via a helper routine
    addi sp, sp, -16
    sw lr, 12(sp)
    la s4, consts
    vldb.w v9, 0(s4)
    li s5, ROW / 16
    li.f32 s6, 0.0
again:
    vld v1, 0(s2)
    vcvtl.f32.f16 v2, v1
    vcvth.f32.f16 v3, v1
    vadd.f32 v4, v2, v3
    call helper
    fadd s6, s6, s7
    addi s2, s2, 16
    loop s5, again
    lw lr, 12(sp)
    addi sp, sp, 16
    ret
    .align 16
helper:
    vredsum.f32 s7, v4
    ret
    .rodata
    .align 32
consts: .float 1.0, -0.5, inf
    .float16 0.25, nan
    .half 0x7fff
    .byte -1, 255
    .dword 0x1122334455667788
    .data
ptrs:
    .word consts+8, rowsum, 0x1f000000
buf: .zero 16
end_of_data:
"""

PROGRAMS = {"clamp": CLAMP, "softmax_like": SOFTMAX_LIKE,
            "tiny": "    .global k\nk:\n    halt\n",
            "loop_only": "    .global k\nk:\n    li s1, 3\nl:\n    loop s1, l\n    beq s1, s1, .+8\n"
                         "    nop\n    j .-16\n"}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_object_round_trip_is_byte_identical(name):
    obj = assemble(PROGRAMS[name], f"{name}.s")
    blob = obj.to_elf()
    text = disassemble_object(obj)
    assert assemble(text, "again.s").to_elf() == blob
    assert disassemble_elf(blob, f"{name}.s") == text
    assert KernelObject.from_elf(blob, f"{name}.o").to_elf() == blob


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_raw_text_round_trip(name):
    obj = assemble(PROGRAMS[name], f"{name}.s")
    assert assemble(disassemble(obj.text), "raw.s").text == obj.text


def test_symbols_and_relocations():
    obj = assemble(SOFTMAX_LIKE, "s.s")
    syms = {s.name: s for s in obj.symbols}
    assert syms["rowsum"].type == STT_FUNC and syms["rowsum"].is_global
    assert syms["rowsum"].size == syms["helper"].value          # up to the next function
    assert syms["helper"].size == len(obj.text) - syms["helper"].value
    assert syms["again"].type == STT_NOTYPE and not syms["again"].is_global
    assert syms["consts"].type == STT_OBJECT and syms["end_of_data"].value == 28
    assert obj.alignments == {".text": 16, ".rodata": 32, ".data": 16}
    assert [(r.section, r.offset, r.symbol, r.addend) for r in obj.relocations] == [
        (".text", 2 * 8 + 4, "consts", 0), (".data", 0, "consts", 8), (".data", 4, "rowsum", 0)]
    assert all(r.type == R_SHAVE_ABS32 for r in obj.relocations)
    assert [s.name for s in obj.symbols][-2:] == ["rowsum", "helper"]   # locals first
    assert obj.entry_points == [syms["rowsum"], syms["helper"]]


def test_data_directives_bytes():
    obj = assemble(SOFTMAX_LIKE, "s.s")
    ro = obj.rodata
    assert struct.unpack_from("<3f", ro, 0)[:2] == (1.0, -0.5) and np.isinf(struct.unpack_from("<f", ro, 8)[0])
    assert ro[12:14] == np.float16(0.25).tobytes() and ro[14:16] == b"\x00\x7e"
    assert ro[16:18] == b"\xff\x7f" and ro[18:20] == b"\xff\xff"
    assert ro[20:28] == bytes.fromhex("8877665544332211")
    assert obj.data[8:12] == struct.pack("<I", 0x1F000000) and obj.data[12:28] == bytes(16)


def test_link_kernel_applies_relocations():
    obj = assemble(SOFTMAX_LIKE, "s.s")
    text, rodata, data = link_kernel(obj, 0x1D000000, 0x1D000100, 0x1E000000)
    consts = 0x1D000100 + obj.symbol("consts").value
    assert struct.unpack_from("<I", text, 2 * 8 + 4)[0] == consts
    assert struct.unpack_from("<II", data, 0) == (consts + 8, 0x1D000000)
    assert rodata == obj.rodata
    with pytest.raises(VpucError, match=r"\.rodata address 0x1d000110 is not aligned to 32"):
        link_kernel(obj, 0x1D000000, 0x1D000110, 0x1E000000)


def test_equ_expressions_and_aliases():
    obj = assemble("    .equ A, 3\n    .equ B, (A << 4) | 1\n    addi sp, lr, B * 2 - ~0\n"
                   "    lw s1, -A(sp)\n", "e.s")
    assert disassemble(obj.text).splitlines()[1:] == ["    addi sp, lr, 99", "    lw s1, -3(sp)"]


ERRORS = {
    "    vadd.f61 v1, v2, v3\n": ("k.s:1:5", "unknown mnemonic 'vadd.f61'; did you mean 'vadd.f16'?"),
    "    add s1, s32, s2\n": ("k.s:1:13", "register 's32' out of range: scalar registers are s0..s31"),
    "    vld v40, 0(s1)\n": ("k.s:1:9", "register 'v40' out of range: vector registers are v0..v31"),
    "    vmask.h m8, s1\n": ("k.s:1:13", "register 'm8' out of range: mask registers are m0..m7"),
    "    vmax.f16 v3, s1, v2\n": ("k.s:1:18", "expected a vector register (v0..v31) for operand 2 "
                                 "of 'vmax.f16', got 's1'"),
    "loop:\n    nop\n    bnez s1, lop\n": ("k.s:3:14", "undefined label 'lop'; did you mean 'loop'?"),
    "    slli s1, s2, 40\n": ("k.s:1:18", "immediate 40 out of range for 'slli' (0..31)"),
    "    addi s1, s2, 0x100000000\n": ("k.s:1:18", "immediate 4294967296 out of range for 'addi' "
                                      "(-2147483648..4294967295)"),
    "    add s1, s2\n": ("k.s:1:5", "'add' takes 3 operands (sd, sa, sb), got 2"),
    "    add s1, s2, s3, s4\n": ("k.s:1:21", "'add' takes 3 operands (sd, sa, sb), got 4"),
    "    lw s1, 4[s2]\n": ("k.s:1:12", "expected a memory operand 'offset(sN)' for operand 2 of "
                          "'lw', got '4[s2]'"),
    "    add s1, s2,\n": ("k.s:1:16", "expected an operand after ','"),
    "    add s1, , s2\n": ("k.s:1:13", "expected an operand before ','"),
    "    ld s5, 0(s2)\n": ("k.s:1:8", "'ld' needs an even register (the pair s5:s6 is not allowed)"),
    "a:\n    nop\na:\n": ("k.s:3:1", "label 'a' is already defined"),
    "    .wrod 5\n": ("k.s:1:5", "unknown directive '.wrod'; did you mean '.word'?"),
    "    .word 5\n": ("k.s:1:5", "'.word' emits data, which belongs in .rodata or .data, not .text"),
    "    .data\n    nop\n": ("k.s:2:5", "instruction 'nop' in .data; instructions belong in .text"),
    "    beqz s1, tbl\n    .rodata\ntbl: .word 1\n": (
        "k.s:1:14", "branch target 'tbl' is in .rodata; branches need a label in .text"),
    "    la s1, tabel\n    .rodata\ntable: .word 1\n": (
        "k.s:1:12", "undefined symbol 'tabel'; did you mean 'table'?"),
    "    .global main\n    nop\n": ("k.s:1:13", "global symbol 'main' is never defined"),
    "    li.f16 s1, 70000\n": ("k.s:1:16", "float literal 70000 overflows f16"),
    "    li.f32 s1, 1.5x\n": ("k.s:1:16", "expected a float literal (e.g. 1.5, -2e-3, inf, nan or "
                             "0x raw bits), got '1.5x'"),
    "    addi s1, s1, 3 + foo\n": ("k.s:1:22", "unknown constant 'foo' (define it with .equ before use)"),
    "s3:\n": ("k.s:1:1", "'s3' is a register name and cannot be a label"),
    "    .rodata\n    .align 3\n": ("k.s:2:12", "alignment 3 is not a power of two"),
}


@pytest.mark.parametrize("source", sorted(ERRORS))
def test_error_messages(source):
    with pytest.raises(VpucError) as info:
        assemble(source, "k.s")
    [diag] = info.value.diagnostics
    assert (str(diag.loc), diag.message) == ERRORS[source]


def test_all_errors_reported_at_once_with_carets():
    source = "start:\n    vadd.f61 v1, v2, v3\n    add s1, s32, s2\n    bnez s1, strat\n"
    with pytest.raises(VpucError) as info:
        assemble(source, "many.s")
    rendered = info.value.render()
    assert [str(d.loc) for d in info.value.diagnostics] == ["many.s:2:5", "many.s:3:13",
                                                            "many.s:4:14"]
    assert "        add s1, s32, s2\n                ^" in rendered


def test_doc_error_example_is_current():
    doc = (Path(__file__).parents[2] / "docs" / "shave-isa.md").read_text()
    source = doc.split("the source line and a caret")[1].split("```asm\n")[1].split("```")[0]
    expected = doc.split("the assembler reports:\n\n```\n")[1].split("```")[0]
    with pytest.raises(VpucError) as info:
        assemble(source, "k.s")
    assert info.value.render() + "\n" == expected


def test_assemble_file(tmp_path):
    from vpuc.shave import assemble_file
    path = tmp_path / "k.s"
    path.write_text("    .global k\nk:\n    halt\n")
    assert assemble_file(str(path)).entry_offset() == 0
    with pytest.raises(VpucError, match="cannot read assembly file"):
        assemble_file(str(tmp_path / "missing.s"))
