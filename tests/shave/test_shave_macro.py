"""`.macro` / `.endm`: substitution, `\\@`, nesting, and diagnostics (exact texts)."""

from pathlib import Path

import pytest

from vpuc.diagnostics import VpucError
from vpuc.shave import assemble, assemble_file
from vpuc.shave.asm_macro import MAX_DEPTH

MACROS = """    .global k
    .macro bin op, d, a, b        // \\op stays in comments
    \\op\\().f16 \\d, \\a, \\b
lp\\@:
    bnez s1, lp\\@
    .endm
    .macro two op
    bin \\op, v1, v2, v3
    bin \\op, v4, (v5), v6
    .endm
k:  two vadd
    halt
"""

FLAT = """    .global k
k:
    vadd.f16 v1, v2, v3
lp1:
    bnez s1, lp1
    vadd.f16 v4, v5, v6
lp2:
    bnez s1, lp2
    halt
"""


def errors(text: str) -> str:
    with pytest.raises(VpucError) as info:
        assemble(text, "k.s")
    return info.value.render()


def test_expansion_matches_the_flat_text():
    obj, flat = assemble(MACROS.replace("(v5)", "v5"), "k.s"), assemble(FLAT, "flat.s")
    assert obj.sections == flat.sections
    assert [(s.name, s.value) for s in obj.symbols] == [(s.name, s.value) for s in flat.symbols]


def test_macro_from_an_include_and_labels_around_it(tmp_path):
    (tmp_path / "m.inc").write_text(".macro ld r, v\n    li \\r, \\v\n.endm\n")
    (tmp_path / "k.s").write_text('    .include "m.inc"\nk: ld s1, 3\n    halt\n')
    flat = assemble("k:\n    li s1, 3\n    halt\n")
    obj = assemble_file(tmp_path / "k.s")
    assert obj.sections == flat.sections
    assert [(s.name, s.value) for s in obj.symbols] == [("k", 0)]


def test_redefined_macro():
    assert errors(".macro m a\n  nop\n.endm\n.macro m\n.endm\n") == (
        "k.s:4:8: error: macro 'm' is already defined\n"
        "    .macro m\n"
        "           ^\n"
        "k.s:1:1: note: first defined here\n"
        "    .macro m a\n"
        "    ^")


def test_wrong_argument_count():
    assert errors(".macro m a, b\n  li \\a, \\b\n.endm\nk:\n  m s1\n  m s1, 2, 3\n") == (
        "k.s:5:3: error: macro 'm' takes 2 arguments, got 1\n"
        "      m s1\n"
        "      ^\n"
        "k.s:1:1: note: macro defined here\n"
        "    .macro m a, b\n"
        "    ^\n"
        "k.s:6:12: error: macro 'm' takes 2 arguments, got 3\n"
        "      m s1, 2, 3\n"
        "               ^\n"
        "k.s:1:1: note: macro defined here\n"
        "    .macro m a, b\n"
        "    ^")


def test_missing_endm_and_stray_endm():
    assert errors("k:\n  .macro m a\n  nop\n") == (
        "k.s:2:3: error: missing '.endm' for this '.macro'\n"
        "      .macro m a\n"
        "      ^")
    assert errors("k:\n  nop\n  .endm\n") == (
        "k.s:3:3: error: '.endm' without '.macro'\n"
        "      .endm\n"
        "      ^")


def test_unknown_parameter():
    assert errors(".macro m a\n  li \\a, \\c\n.endm\nk: m s1\n") == (
        "k.s:2:10: error: unknown macro parameter '\\c' (parameters: \\a)\n"
        "      li \\a, \\c\n"
        "             ^\n"
        "note: in expansion of macro m at k.s:4")


def test_errors_in_an_expansion_point_at_the_body_line():
    text = ".macro inner r\n  li \\r, 1\n  vadd.f61 v1, v2, v3\n.endm\n" \
           ".macro outer r\n  inner \\r\n.endm\nk:\n  outer s4\n"
    assert errors(text) == (
        "k.s:3:3: error: unknown mnemonic 'vadd.f61'; did you mean 'vadd.f16'?\n"
        "      vadd.f61 v1, v2, v3\n"
        "      ^\n"
        "note: in expansion of macro inner at k.s:6\n"
        "note: in expansion of macro outer at k.s:9")


def test_recursion_hits_the_depth_limit():
    rendered = errors(".macro m\n  m\n.endm\nk: m\n").splitlines()
    assert rendered[0] == (f"k.s:2:3: error: macro expansions nested too deeply "
                           f"(the limit is {MAX_DEPTH} levels)")
    assert rendered[3:] == ["note: in expansion of macro m at k.s:2"] * (MAX_DEPTH - 1) + [
        "note: in expansion of macro m at k.s:4"]


def test_doc_macro_example_is_current():
    doc = (Path(__file__).parents[2] / "docs" / "shave-isa.md").read_text()
    source = doc.split("**Macros.**")[1].split("```asm\n")[1].split("```")[0]
    expected = doc.split("a note per expansion level:\n\n```\n")[1].split("```")[0]
    assert errors(source) + "\n" == expected
