"""Where a kernel argument's direction comes from: the library's contract for library
kernels, else the declaration; none for scalars and undeclared asm/elf/generated memrefs."""

from vpuc.ir.module import Direction
from vpuc.kernel_contracts import kernel_directions
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

IN, OUT, INOUT = Direction.IN, Direction.OUT, Direction.INOUT


def _kernels(text: str):
    return {k.name: k for k in parse_text("module @m\n" + text).kernels}


def test_directions_come_from_the_contract_then_the_declaration():
    kernels = _kernels(
        'kernel @clamp(input: memref<*xf16>, output: memref<*xf16>, lo: f16, hi: f16) '
        'from library "clamp"\n'
        'kernel @acc(acc: inout memref<*xf32>, x: memref<*xf32>, s: f32) from asm "a.s"\n'
        'kernel @gen(in0: memref<*xf16>, out0: memref<*xf16>) from generated\n'
        # a declaration that does not match its contract keeps what it declares
        'kernel @bad(x: in memref<*xf16>) from library "relu"\n')
    assert kernel_directions(kernels["clamp"]) == [IN, OUT, None, None]
    assert kernel_directions(kernels["acc"]) == [INOUT, None, None]
    assert kernel_directions(kernels["gen"]) == [None, None]
    assert kernel_directions(kernels["bad"]) == [IN]


def test_directions_round_trip_and_are_part_of_equality():
    text = ('kernel @k(a: in memref<*xf16>, b: inout memref<4x?xf32>, c: out memref<*xi8>, '
            'd: memref<*xf16>, s: i32) from asm "k.s"\n')
    module = parse_text("module @m\n" + text)
    assert [p.direction for p in module.kernels[0].params] == [IN, INOUT, OUT, None, None]
    assert parse_text(print_module(module)) == module
    other = parse_text("module @m\n" + text.replace("c: out", "c: inout"))
    assert other != module
