"""`.rept` / `.irp` ... `.endr`: repetition, substitution, nesting with macros, `\\@`,
and diagnostics (exact texts)."""

from pathlib import Path

import pytest

from vpuc.diagnostics import VpucError
from vpuc.shave import assemble
from vpuc.shave.asm_macro import MAX_REPT


def errors(text: str) -> str:
    with pytest.raises(VpucError) as info:
        assemble(text, "k.s")
    return info.value.render()


def same(text: str, flat: str) -> None:
    obj, ref = assemble(text, "k.s"), assemble(flat, "flat.s")
    assert obj.sections == ref.sections
    assert [(s.name, s.value) for s in obj.symbols] == [(s.name, s.value) for s in ref.symbols]


def test_rept_repeats_and_zero_is_nothing():
    same("k:  .rept 3\n    nop\n    .endr\n    .rept 0\n    halt\n    .endr\n    halt\n",
         "k:\n    nop\n    nop\n    nop\n    halt\n")
    same("k:\n    .rept 0x2\n    li s1, 1\n    .endr\n    halt\n",
         "k:\n    li s1, 1\n    li s1, 1\n    halt\n")


def test_irp_substitutes_each_value():
    same("k:\n    .irp r, s1, s2, s3   // \\r in a comment stays\n    li \\r, 7\n    .endr\n"
         "    .irp off, 0, 16\n    vld v1, \\off(s2)\n    .endr\n    .irp x\n    nop \\x\n"
         "    .endr\n    halt\n",
         "k:\n    li s1, 7\n    li s2, 7\n    li s3, 7\n    vld v1, 0(s2)\n"
         "    vld v1, 16(s2)\n    nop\n    halt\n")


def test_nesting_with_each_other_and_macros():
    text = (".macro m a\n    .irp r, s1, s2\n    .rept 2\n    addi \\r, \\r, \\a\n    .endr\n"
            "    .endr\n.endm\n.macro ld r, v\n    li \\r, \\v\n.endm\n"
            "k:  m 3\n    .irp i, 1, 2\n    .irp j, 3, 4\n    ld s\\i\\j, \\i\\()\\j\n    .endr\n"
            "    .endr\n    halt\n")
    flat = "k:\n" + "".join(f"    addi {r}, {r}, 3\n" * 2 for r in ("s1", "s2")) + "".join(
        f"    li s{i}{j}, {i}{j}\n" for i in (1, 2) for j in (3, 4)) + "    halt\n"
    same(text, flat)


def test_serial_in_repetitions():
    # in a macro body: the macro's number; outside: the expansions so far
    text = (".macro m\n    .rept 2\n    addi s1, s1, \\@\n    .endr\n.endm\n"
            "k:  m\n    .irp r, s2\n    li \\r, \\@\n    .endr\n    m\n    halt\n")
    flat = ("k:\n    addi s1, s1, 0\n    addi s1, s1, 0\n    li s2, 1\n"
            "    addi s1, s1, 1\n    addi s1, s1, 1\n    halt\n")
    same(text, flat)


def test_errors_in_a_repetition_name_the_body_line_and_the_expansion():
    assert errors("k:\n    .rept 2\n    vadd.f61 v1, v2, v3\n    .endr\n") == (
        "k.s:3:5: error: unknown mnemonic 'vadd.f61'; did you mean 'vadd.f16'?\n"
        "        vadd.f61 v1, v2, v3\n"
        "        ^\n"
        "note: in repetition 1 of .rept at k.s:2\n"
        "k.s:3:5: error: unknown mnemonic 'vadd.f61'; did you mean 'vadd.f16'?\n"
        "        vadd.f61 v1, v2, v3\n"
        "        ^\n"
        "note: in repetition 2 of .rept at k.s:2")
    text = ".macro m a\n  .irp r, v1, s2\n  vadd.f16 \\r, \\a, v3\n  .endr\n.endm\nk: m v4\n"
    assert errors(text) == (
        "k.s:3:12: error: expected a vector register (v0..v31) for operand 1 of 'vadd.f16', "
        "got 's2'\n"
        "      vadd.f16 \\r, \\a, v3\n"
        "               ^\n"
        "note: in .irp r = s2 at k.s:2\n"
        "note: in expansion of macro m at k.s:6")


def test_missing_and_stray_endr():
    assert errors("k:\n  .rept 2\n  nop\n") == (
        "k.s:2:3: error: missing '.endr' for this '.rept'\n"
        "      .rept 2\n"
        "      ^")
    assert errors("k:\n  .irp r, 1\n  .rept 1\n  .endr\n") == (
        "k.s:2:3: error: missing '.endr' for this '.irp'\n"
        "      .irp r, 1\n"
        "      ^")
    assert errors("k:\n  nop\n  .endr\n") == (
        "k.s:3:3: error: '.endr' without '.rept' or '.irp'\n"
        "      .endr\n"
        "      ^")
    assert errors(".macro m\n  nop\n  .endr\n.endm\nk: m\n") == (
        "k.s:3:3: error: '.endr' without '.rept' or '.irp'\n"
        "      .endr\n"
        "      ^\n"
        "note: in expansion of macro m at k.s:5")


def test_bad_counts_and_heads():
    assert errors("k:\n  .rept x\n  .endr\n  .rept -1\n  .endr\n  .rept\n  .endr\n"
                  f"  .rept {MAX_REPT + 1}\n  .endr\n") == (
        f"k.s:2:9: error: expected a count from 0 to {MAX_REPT} for '.rept', got 'x'\n"
        "      .rept x\n"
        "            ^\n"
        f"k.s:4:9: error: expected a count from 0 to {MAX_REPT} for '.rept', got '-1'\n"
        "      .rept -1\n"
        "            ^\n"
        "k.s:6:3: error: expected '.rept COUNT'\n"
        "      .rept\n"
        "      ^\n"
        f"k.s:8:9: error: expected a count from 0 to {MAX_REPT} for '.rept', got "
        f"'{MAX_REPT + 1}'\n"
        f"      .rept {MAX_REPT + 1}\n"
        "            ^")
    assert errors("k:\n  .irp\n  .endr\n  .irp 3, 4\n  .endr\n") == (
        "k.s:2:3: error: expected '.irp SYMBOL, value, ...'\n"
        "      .irp\n"
        "      ^\n"
        "k.s:4:8: error: expected a symbol name, got '3'\n"
        "      .irp 3, 4\n"
        "           ^")


def test_unknown_names_in_a_body():
    assert errors("k:\n  .rept 1\n  li s1, \\x\n  .endr\n  .irp r, 1\n  li s1, \\y\n  .endr\n") == (
        "k.s:3:10: error: unknown name '\\x' in a '.rept' (only '\\@' and '\\()' are replaced)\n"
        "      li s1, \\x\n"
        "             ^\n"
        "note: in repetition 1 of .rept at k.s:2\n"
        "k.s:6:10: error: unknown .irp symbol '\\y' (symbol: \\r)\n"
        "      li s1, \\y\n"
        "             ^\n"
        "note: in .irp r = 1 at k.s:5")


def test_no_macro_definition_in_a_repetition():
    assert errors("k:\n  .rept 1\n  .macro m\n  .endm\n  .endr\n").splitlines()[0] == (
        "k.s:3:3: error: '.macro' inside a '.rept' or '.irp' (missing '.endr'?)")


def test_doc_repetition_example_is_current():
    doc = (Path(__file__).parents[2] / "docs" / "shave-isa.md").read_text()
    part = doc.split("**Repetitions.**")[1]
    source = part.split("```asm\n")[1].split("```")[0]
    assemble("k:\n" + source, "k.s")
    expected = part.split("innermost first")[1].split("```\n")[1].split("```")[0]
    text = "k:\n    .irp r, v1, s5\n    vld      \\r, 0(s12)\n    .endr\n"
    assert errors(text) + "\n" == expected
