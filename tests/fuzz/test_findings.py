"""Regression tests for what fuzzing found (issue 10, part 8), each with its exact message.

The located errors of .vir files are golden tests (tests/golden/errors/:
buffer_beyond_address_space, graph_tensor_beyond_address_space,
arch_did_you_mean, unknown_arch, number_too_long); these are the cases that
compile and run, and the ones whose input is not a .vir text.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.shave.assembler import assemble, assemble_file
from vpuc.vir.parser import parse_file, parse_text

REPO = Path(__file__).resolve().parents[2]
DIGITS = "1" * 400       # an integer literal beyond the float range


def run_vir(tmp_path: Path, text: str, capsys, *extra: str) -> tuple[int, str, str]:
    path = tmp_path / "case.vir"
    path.write_text(text)
    code = main(["run", str(path), "--reference", "--output-dir", str(tmp_path / "out"), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


RANK0_CONSTANTS = """module @m arch NPU37XX

graph @main {
  %a = Constant(2.0) : f16
  %b = Constant(3.0) : f16
  %y = Multiply(%a, %b)
  Result(%y)
}
"""


def test_a_rank0_result_of_constants_compiles_and_runs(tmp_path, capsys):
    # Was: internal error: IndexError in blocked_program.block_type.  Rank-0 values move
    # whole (no views), and a block whose reads are all folded into the kernel loads nothing.
    code, out, err = run_vir(tmp_path, RANK0_CONSTANTS, capsys)
    assert code == 0, err
    assert "output %y: matches the numpy reference" in out
    y = np.load(tmp_path / "out" / "y.npy")
    assert y.shape == () and y.dtype == np.float16 and float(y) == 6.0


def test_rank0_parameters_and_a_rank0_output_beside_a_blocked_one(tmp_path, capsys):
    code, out, err = run_vir(tmp_path, """module @m arch NPU37XX

graph @main {
  %x = Parameter() : 1x16x8x8xf16 NCHW
  %s = Parameter() : f16
  %a = Constant(2.0) : f16
  %c = Multiply(%s, %a)
  %y = Multiply(%x, %c)
  %z = Sigmoid(%c)
  Result(%y)
  Result(%z)
}
""", capsys, "--input", "s=f16=0.75")
    assert code == 0, err
    assert "output %y: matches the numpy reference" in out
    assert "output %z: matches the numpy reference" in out
    z = np.load(tmp_path / "out" / "z.npy")
    # sigmoid(1.5) in f16: the tolerance is f16's half ulp at 0.82 plus the kernel's error
    assert z.shape == () and abs(float(z) - 1 / (1 + math.exp(-1.5))) < 2e-3


def test_an_integer_beyond_float_range_in_a_graph_attribute_means_inf(tmp_path, capsys):
    # Was: OverflowError (exit 3).  The same number written with '.0' already meant inf.
    text = (REPO / "examples" / "fused_chain.vir").read_text().replace(
        "max = 4", f"max = {DIGITS}").replace("1x64x128x128xf16", "1x8x16x16xf16")
    module = parse_text(text, "clamp.vir")
    clamp = next(op for op in module.graphs[0].ops if op.kind == "Clamp")
    assert clamp.attrs["max"] == math.inf
    negative = parse_text(text.replace("min = -4", f"min = -{DIGITS}"), "c.vir")
    assert next(op for op in negative.graphs[0].ops if op.kind == "Clamp").attrs["min"] == -math.inf
    code, out, err = run_vir(tmp_path, text, capsys)
    assert code == 0, err
    assert "output %y: matches the numpy reference" in out


def test_an_integer_beyond_float_range_in_a_dpu_post_op_means_inf(tmp_path, capsys):
    text = (REPO / "examples" / "dwconv_pool.vir").read_text().replace(
        "post clamp(0.0, 6.0)", f"post clamp(0.0, {DIGITS})")
    path = tmp_path / "dw.vir"
    path.write_text(text)
    module = parse_file(path)
    post = next(t.post for tl in module.task_lists for t in tl.tasks
                if getattr(t, "post", None) is not None)
    assert post.params == (0.0, math.inf)
    assert main(["compile", str(path), "-o", str(tmp_path / "dw.blob")]) == 0


def test_non_utf8_vir_is_located_at_the_bad_byte(tmp_path, capsys):
    path = tmp_path / "bad.vir"
    path.write_bytes(b"module @m arch NPU37XX\n// caf\xc3\xa9 \xff\n")
    assert main(["compile", str(path)]) == 1
    assert capsys.readouterr().err == (f"{path}:2:9: error: byte 0xff is not UTF-8 text; VIR "
                                       "files are UTF-8\n")


def test_non_utf8_assembly_is_located_at_the_bad_byte(tmp_path):
    path = tmp_path / "k.s"
    path.write_bytes(b"    .text\n    nop  # \xe9\n")
    with pytest.raises(VpucError) as info:
        assemble_file(path)
    assert info.value.render() == (f"{path}:2:12: error: byte 0xe9 is not UTF-8 text; "
                                   "assembly files are UTF-8")


def _asm_error(text: str) -> str:
    with pytest.raises(VpucError) as info:
        assemble(text, "k.s")
    return info.value.render()


def test_nested_repetitions_are_capped_by_their_product():
    # Was: 11.6 GB before the 16 MiB window was checked.
    assert _asm_error("    .text\n    .rept 65536\n    .rept 65536\n    nop\n    .endr\n"
                      "    .endr\n") == (
        "k.s:4:1: error: macros and repetitions expand to more than 131,072 lines (nested "
        "'.rept' counts multiply); assembly stopped here\n"
        "        nop\n    ^\n"
        "note: in repetition 65533 of .rept at k.s:3\n"
        "note: in repetition 2 of .rept at k.s:2")


def test_empty_nested_repetitions_are_capped_too():
    assert "expand to more than 131,072 lines" in _asm_error(
        "    .text\n    .rept 65536\n    .rept 65536\n    .endr\n    .endr\n")


def test_one_repetition_of_the_largest_count_still_assembles():
    obj = assemble("    .global f\n    .text\nf:\n    .rept 65536\n    nop\n    .endr\n    ret\n",
                   "k.s")
    assert len(obj.sections[".text"]) == 65537 * 8


def test_data_beyond_the_code_window_stops_at_once():
    # Was: 15.3 GB for .rept 65536 of .zero 16777216.
    assert _asm_error("    .data\n    .zero 16777216\n    .zero 1\n") == (
        "k.s:3:11: error: '.zero 1' makes the object outgrow the 16 MiB window it is "
        "loaded into\n        .zero 1\n              ^")
    assert _asm_error("    .data\n    .rept 2\n    .zero 8388608\n    .endr\n    .word 1\n"
                      ) == ("k.s:5:1: error: the object outgrows the 16 MiB window it is loaded "
                            "into (.text 0 bytes, .rodata 0 bytes, .data 16,777,220 bytes); "
                            "assembly stopped here\n        .word 1\n    ^")


def test_includes_are_capped_by_the_lines_they_expand_to(tmp_path):
    (tmp_path / "big.inc").write_text("    nop\n" * 1000)
    path = tmp_path / "k.s"
    path.write_text("    .text\n" + '    .include "big.inc"\n' * 200)
    with pytest.raises(VpucError) as info:
        assemble_file(path)
    assert info.value.render().splitlines()[0] == (
        f"{path}:133:5: error: includes expand to more than 131,072 lines; assembly stopped here")


@pytest.mark.parametrize("text, message", [
    ("    .data\n    .word " + "1" * 5000 + "\n",
     "k.s:2:11: error: number of 5000 characters is too long"),
    ("    .data\n    .word " + "(" * 200 + "1" + ")" * 200 + "\n",
     "k.s:2:111: error: expression nested more than 100 levels deep"),
    ("    .text\n    vadd.f16 v1, v2, v" + "1" * 5000 + "\n",
     "k.s:2:22: error: expected a vector register (v0..v31) for operand 3 of 'vadd.f16', got "
     "'v" + "1" * 5000 + "'"),
])
def test_assembly_literals_too_long_or_too_deep(text, message):
    assert _asm_error(text).splitlines()[0] == message


def test_graph_constant_file_is_relative_to_the_vir_file(tmp_path, monkeypatch, capsys):
    # Issue 10, section 7: like a task-level const, not relative to the working directory.
    (tmp_path / "net" / "data").mkdir(parents=True)
    scale = (np.arange(16, dtype=np.float32) / 8 - 1).reshape(1, 16, 1, 1)
    np.save(tmp_path / "net" / "data" / "scale.npy", scale)
    (tmp_path / "net" / "g.vir").write_text("""module @m arch NPU37XX

graph @main {
  %x = Parameter() : 1x16x8x8xf16 NCHW
  %s = Constant(file "data/scale.npy") : 1x16x1x1xf16 NCHW
  %y = Multiply(%x, %s)
  Result(%y)
}
""")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float16)
    np.save("x.npy", x)
    assert main(["run", "../net/g.vir", "--input", "x=@x.npy", "--output-dir", "out"]) == 0, \
        capsys.readouterr().err
    y = np.load("out/y.npy")
    # The scales are multiples of 1/8 in [-1, 1): x * s is exact in f32, rounded once to f16.
    expected = (x.astype(np.float32) * scale).astype(np.float16)
    assert np.array_equal(y, expected)
