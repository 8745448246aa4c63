"""What a generated kernel records about itself: the body as VIR text, read back and checked
against the kernel's contract, and the tolerance its reference check uses."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.contract import kernel_decl
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_graph import (APPROXIMATE_TOLERANCE, CONTRACTED_TOLERANCE,
                                                body_text, kernel_tolerance, parse_body)
from vpuc.shave import KernelObject
from vpuc.vir.parser import parse_text

HEADER = "module @m arch NPU37XX\n"


def body(lines: str, file: str = "<test>"):
    return parse_text(HEADER + "graph @b {\n" + lines + "}\n", file).graphs[0]


def test_generate_records_the_body_it_was_given():
    b = body("  %x = Parameter() : 2x40xf32\n  %c = Constant(0.5) : f32\n"
             "  %y = Multiply(%x, %c)\n  %z = Add(%y, %x)\n  Result(%z)\n")
    kernel = generate(b, "k")
    text = kernel.obj.graph
    assert text == body_text("k", b) and text.startswith("module @k arch NPU37XX\n")
    assert KernelObject.from_elf(kernel.obj.to_elf()).graph == text
    again = parse_body(text, kernel.decl, "k.o")
    assert again.ops == b.ops                       # the body as given, not the optimized one
    assert any(op.kind == "FMA" for op in kernel.body.ops)


def test_file_constants_are_inlined(tmp_path):
    np.save(tmp_path / "w.npy", np.array([1.5, -2.0, 0.25, 4.0], np.float32))
    b = body('  %x = Parameter() : 4xf32\n  %w = Constant(file "w.npy") : 4xf32\n'
             "  %y = Add(%x, %w)\n  Result(%y)\n", str(tmp_path / "net.vir"))
    text = body_text("k", b)
    assert "file" not in text and "Constant([1.5, -2.0, 0.25, 4.0]) : 4xf32" in text


@pytest.mark.parametrize("lines,tolerance", [
    ("  %y = Relu(%x)\n", None),
    ("  %y = Erf(%x)\n", APPROXIMATE_TOLERANCE),
    ("  %c = Constant(3.0) : f32\n  %m = Multiply(%x, %c)\n  %y = Add(%m, %x)\n",
     CONTRACTED_TOLERANCE),
])
def test_tolerances_follow_the_generator_tests(lines, tolerance):
    b = body("  %x = Parameter() : 16xf32\n" + lines + "  Result(%y)\n")
    assert kernel_tolerance(b) == tolerance


def test_parse_errors_and_contract_mismatches_name_the_kernel_and_section():
    b = body("  %x = Parameter() : 16xf16\n  %y = Relu(%x)\n  Result(%y)\n")
    decl = kernel_decl("k", b)
    with pytest.raises(VpucError) as info:
        parse_body("module @k\ngraph @k {\n  %x = Parameter( : 16xf16\n}\n", decl, "a.blob:@k")
    text = info.value.render()
    assert "a.blob:@k:3:" in text and "kernel @k: the graph recorded in its kernel object " \
        "(section .note.vpuc.graph) is not valid VIR" in text
    other = body_text("k", body("  %x = Parameter() : 16xf32\n  %y = Relu(%x)\n  Result(%y)\n"))
    with pytest.raises(VpucError, match=r"does not match the kernel's contract: its Parameters "
                       r"and Results give \(in0: memref<16xf32>, out0: memref<16xf32>\), the "
                       r"kernel is declared \(in0: memref<16xf16>, out0: memref<16xf16>\)"):
        parse_body(other, decl, "a.blob:@k")
    with pytest.raises(VpucError, match="exactly one graph"):
        parse_body("module @k\n", decl, "a.blob:@k")
