"""`.include "path"`: resolution, nesting, cycles, and diagnostics located in the
included file (exact texts)."""

from pathlib import Path

import pytest

from vpuc.diagnostics import VpucError
from vpuc.shave import assemble, assemble_file
from vpuc.shave.asm_include import MAX_DEPTH

FLAT = """    .global k
    .equ N, 3
k:
    li s1, N
body:
    addi s1, s1, -1
    bnez s1, body
    la s2, tbl
    halt
    .rodata
tbl: .word 7
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def errors(call) -> str:
    with pytest.raises(VpucError) as info:
        call()
    return info.value.render()


def test_nested_includes_assemble_like_the_flat_text(tmp_path):
    write(tmp_path, {
        "k.s": '    .global k\n    .include "inc/consts.inc"\nk:  .include "inc/body.inc"  // c\n'
               "    halt\n    .rodata\ntbl: .word 7\n",
        "inc/consts.inc": "    .equ N, 3\n",
        # relative to inc/, the including file's directory
        "inc/body.inc": '    li s1, N\n    .include "loop.inc"\n    la s2, tbl\n',
        "inc/loop.inc": "body:\n    addi s1, s1, -1\n    bnez s1, body\n",
    })
    flat = assemble(FLAT, "flat.s")
    obj = assemble_file(tmp_path / "k.s")
    assert obj.sections == flat.sections and obj.relocations == flat.relocations
    assert [(s.name, s.value) for s in obj.symbols] == [(s.name, s.value) for s in flat.symbols]
    assert obj.name == str(tmp_path / "k.s")
    text = (tmp_path / "k.s").read_text()
    assert assemble(text, str(tmp_path / "k.s")).to_elf() == obj.to_elf()


def test_search_path_after_the_including_directory(tmp_path):
    write(tmp_path, {"src/k.s": '    .global k\nk:\n    .include "x.inc"\n',
                     "src/x.inc": "    halt\n",
                     "lib/x.inc": "    nop\n    halt\n",
                     "lib/y.inc": "    nop\n"})
    assert len(assemble_file(tmp_path / "src/k.s", [tmp_path / "lib"]).text) == 8
    (tmp_path / "src/x.inc").unlink()
    assert len(assemble_file(str(tmp_path / "src/k.s"), [str(tmp_path / "lib")]).text) == 16
    source = f'k:\n    .include "{tmp_path / "lib/y.inc"}"\n    .include "y.inc"\n'
    assert len(assemble(source, "t.s", include_path=[tmp_path / "lib"]).text) == 16


def test_text_without_a_file_includes_from_the_current_directory(tmp_path, monkeypatch):
    write(tmp_path, {"inc/h.inc": "    halt\n"})
    monkeypatch.chdir(tmp_path)
    assert len(assemble('k:\n    .include "inc/h.inc"\n').text) == 8
    assert len(assemble('k:\n    .include "inc/h.inc"\n', "k.s").text) == 8


def test_missing_include(tmp_path):
    write(tmp_path, {"k.s": 'k:\n    .include "nope.inc"\n    halt\n'})
    k = tmp_path / "k.s"
    assert errors(lambda: assemble_file(k, [tmp_path / "lib"])) == (
        f"{k}:2:14: error: cannot find include file 'nope.inc' (searched {tmp_path}, "
        f"{tmp_path / 'lib'})\n"
        '        .include "nope.inc"\n'
        "                 ^")
    assert errors(lambda: assemble('    .include "/nonexistent/x.inc"\n', "k.s")) == (
        "k.s:1:14: error: cannot find include file '/nonexistent/x.inc'\n"
        '        .include "/nonexistent/x.inc"\n'
        "                 ^")


def test_include_cycle(tmp_path):
    write(tmp_path, {"k.s": '    .include "a.inc"\n',
                     "a.inc": '    nop\n    .include "sub/b.inc"\n',
                     "sub/b.inc": '    .include "../a.inc"\n'})
    root = tmp_path
    assert errors(lambda: assemble_file(root / "k.s")) == (
        f"{root}/sub/b.inc:1:14: error: include cycle: {root}/a.inc -> {root}/sub/b.inc -> "
        f"{root}/a.inc\n"
        '        .include "../a.inc"\n'
        "                 ^\n"
        f"note: included from {root}/a.inc:2\n"
        f"note: included from {root}/k.s:1")
    write(tmp_path, {"self.s": '    .include "self.s"\n'})
    assert errors(lambda: assemble_file(root / "self.s")).splitlines()[0] == (
        f"{root}/self.s:1:14: error: include cycle: {root}/self.s -> {root}/self.s")


def test_errors_inside_an_included_file(tmp_path, monkeypatch):
    write(tmp_path, {"inc/row.inc": "row:\n    li s1, 1\n    vadd.f61 v1, v2, v3\n"
                                    "    bnez s1, strat\n    .word tbl\n",
                     "inc/outer.inc": '    .global gone\n    .include "row.inc"\n'})
    monkeypatch.chdir(tmp_path)
    source = "start:\n    li s1, 1\n    li s2, 2\n    li s3, 3\n    li s4, 4\n    li s5, 5\n" \
             '    .include "inc/row.inc"\n'
    assert errors(lambda: assemble(source, "k.s")) == (
        "inc/row.inc:3:5: error: unknown mnemonic 'vadd.f61'; did you mean 'vadd.f16'?\n"
        "        vadd.f61 v1, v2, v3\n"
        "        ^\n"
        "note: included from k.s:7\n"
        "inc/row.inc:4:14: error: undefined label 'strat'; did you mean 'start'?\n"
        "        bnez s1, strat\n"
        "                 ^\n"
        "note: included from k.s:7\n"
        "inc/row.inc:5:5: error: '.word' emits data, which belongs in .rodata or .data, "
        "not .text\n"
        "        .word tbl\n"
        "        ^\n"
        "note: included from k.s:7")
    # nested: one note per level, innermost first; errors of pass 2 and duplicates too
    rendered = errors(lambda: assemble('row:\n    .include "inc/outer.inc"\n', "k.s"))
    assert rendered.splitlines()[:6] == [
        "inc/outer.inc:1:13: error: global symbol 'gone' is never defined",
        "        .global gone",
        "                ^",
        "note: included from k.s:2",
        "inc/row.inc:1:1: error: label 'row' is already defined",
        "    row:"]
    assert rendered.splitlines()[6:12] == [
        "    ^",
        "k.s:1:1: note: first defined here",
        "    row:",
        "    ^",
        "note: included from inc/outer.inc:2",
        "note: included from k.s:2"]


def test_doc_include_example_is_current(tmp_path, monkeypatch):
    doc = (Path(__file__).parents[2] / "docs" / "shave-isa.md").read_text()
    expected = doc.split("where it was included from:\n\n```\n")[1].split("```")[0]
    write(tmp_path, {"inc/row.inc": "row:\n    li s1, 1\n    vadd.f61 v1, v2, v3\n"})
    monkeypatch.chdir(tmp_path)
    source = "k:\n" + "    nop\n" * 5 + '    .include "inc/row.inc"\n'
    assert errors(lambda: assemble(source, "k.s")) + "\n" == expected


def test_depth_limit(tmp_path):
    files = {f"d{i}.inc": f'    .include "d{i + 1}.inc"\n' for i in range(MAX_DEPTH + 1)}
    write(tmp_path, files)
    rendered = errors(lambda: assemble_file(tmp_path / "d0.inc"))
    lines = rendered.splitlines()
    assert lines[0] == (f"{tmp_path}/d{MAX_DEPTH}.inc:1:14: error: includes nested too deeply "
                        f"(the limit is {MAX_DEPTH} levels)")
    assert len([line for line in lines if line.startswith("note: included from")]) == MAX_DEPTH
    files[f"d{MAX_DEPTH}.inc"] = "    halt\n"
    write(tmp_path, files)
    assert len(assemble_file(tmp_path / "d0.inc").text) == 8


@pytest.mark.parametrize("line, message", [
    ("    .include nope.inc", "k.s:1:5: error: expected '.include \"path\"'"),
    ('    .include ""', "k.s:1:5: error: expected '.include \"path\"'"),
    ('    .include "a.inc", "b.inc"', "k.s:1:5: error: expected '.include \"path\"'"),
    ("    .inclde \"a.inc\"", "k.s:1:5: error: unknown directive '.inclde'; did you mean "
                               "'.include'?"),
])
def test_malformed_include(line, message):
    assert errors(lambda: assemble(line + "\n", "k.s")).splitlines()[0] == message


def test_unreadable_include(tmp_path):
    (tmp_path / "dir.inc").mkdir()
    (tmp_path / "bad.inc").write_bytes(b"\xff\xfe")
    k = tmp_path / "k.s"
    k.write_text('    .include "dir.inc"\n    .include "bad.inc"\n')
    lines = errors(lambda: assemble_file(k)).splitlines()
    assert lines[0] == f"{k}:1:14: error: cannot read include file '{tmp_path}/dir.inc': " \
                       "Is a directory"
    assert lines[3] == (f"{k}:2:14: error: include file '{tmp_path}/bad.inc' is not UTF-8 text: "
                        f"{tmp_path}/bad.inc:1:1: byte 0xff is not UTF-8 text; assembly files "
                        "are UTF-8")
