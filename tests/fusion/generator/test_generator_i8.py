"""i8 values in generated ACT SHAVE kernels, against the reference executor.

i8 is held like u8, one element per 2- or 4-byte slot, but sign-extended
(context.py).  Every path runs at both loop widths the slot gives: 4 elements
(a body with f32 values: i32 slots) and 8 (f16 or i8/u8 alone: i16 slots), on
3x37 elements so the last iteration is a masked tail.  The reference rounds to
i8 by truncation and saturation (NaN -> 0), and check_graph compares bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gen_testlib import SHAVE, Builder, check_graph
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.subgraph import tokenize
from vpuc.ir.types import ElemType

I8, U8, F16, F32 = ElemType.I8, ElemType.U8, ElemType.F16, ElemType.F32
SHAPE = (3, 37)
EDGES = [-128, 127, -1, 0, 1, -127, 126]          # both ends and the sign boundary


def _i8(shape, seed=0):
    x = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
    flat = x.reshape(-1)
    flat[:len(EDGES)] = EDGES[:flat.size]
    return x


def _floats(shape, seed=1):
    x = np.random.default_rng(seed).uniform(-300, 300, shape)
    specials = [math.nan, math.inf, -math.inf, -128.9, 127.9, -0.5, 0.99, -129.0, 128.0]
    flat = x.reshape(-1)
    flat[:len(specials)] = specials[:flat.size]
    return x


def _width(graph) -> set[int]:
    return {generate(s.body, s.name).lir.increment for s in tokenize(graph, SHAVE).subgraphs}


@pytest.mark.parametrize("target,width", [(F32, 4), (F16, 8)])
def test_i8_to_float(target, width):
    b = Builder()
    x = b.param(SHAPE, I8)
    b.result(b.op("Convert", x, to=target))
    g = b.build()
    assert _width(g) == {width}
    check_graph(g, {g.parameters[0].result: _i8(SHAPE)})


@pytest.mark.parametrize("source,width", [(F32, 4), (F16, 8)])
def test_float_to_i8_truncates_and_saturates(source, width):
    b = Builder()
    x = b.param(SHAPE, source)
    b.result(b.op("Convert", x, to=I8))
    g = b.build()
    assert _width(g) == {width}
    check_graph(g, {g.parameters[0].result: _floats(SHAPE)})


@pytest.mark.parametrize("source,target", [(I8, U8), (U8, I8), (I8, I8)])
def test_byte_to_byte_runs_eight_wide(source, target):
    """A body of bytes alone runs at f16's width (i16 slots): loads, stores, Convert."""
    b = Builder()
    x = b.param(SHAPE, source)
    b.result(b.op("Convert", x, to=target) if source is not target else b.op("Relu", x))
    g = b.build()
    assert _width(g) == {8}
    data = _i8(SHAPE) if source is I8 else np.random.default_rng(2).integers(0, 256, SHAPE)
    check_graph(g, {g.parameters[0].result: data})


@pytest.mark.parametrize("other,width", [(I8, 8), (F32, 4)])
def test_i8_arithmetic_through_f32(other, width):
    """i8 + i8 saturates, i8 * f32 rounds; a broadcast i8 row exercises the broadcast load."""
    b = Builder()
    x, y, row = b.param(SHAPE, I8), b.param(SHAPE, other), b.param((1, 1), I8)
    s = b.op("Add", x, b.op("Convert", y, to=I8) if other is not I8 else y)
    b.result(b.op("Multiply", s, row))
    if other is F32:
        b.result(b.op("Multiply", b.op("Convert", x, to=F32), y))
    g = b.build()
    assert _width(g) == {width}
    p = g.parameters
    ys = _i8(SHAPE, seed=5) if other is I8 else _floats(SHAPE, seed=6)
    check_graph(g, {p[0].result: _i8(SHAPE), p[1].result: ys,
                    p[2].result: np.array([[-3]], np.int8)})


@pytest.mark.parametrize("n", [1, 5, 8, 9, 16, 17])
def test_i8_tails(n):
    """Short and ragged rows: a masked load and store of fewer bytes than a vector."""
    b = Builder()
    x = b.param((n,), I8)
    b.result(b.op("Negative", x))
    b.result(b.op("Convert", x, to=F32))
    g = b.build()
    check_graph(g, {g.parameters[0].result: _i8((n,), seed=n)})


def test_u8_quantization_unrolls_with_a_scratch_area_per_copy():
    """A QuantizeLinear's integer half (f16 -> f32, divide, clamp, round, zero point, u8) and
    a DequantizeLinear of u8 pack and unpack through the stack scratch: their loops are
    unrolled (up to ``SCRATCH_COPIES`` copies, each packing in its own 64-byte area, so
    the copies interleave) and compute what the reference does bit for bit."""
    from vpuc.fusion.generator.kernel_emitter import SCRATCH_BYTES, SCRATCH_COPIES
    from vpuc.fusion.generator.mir import SP, Loop, Mem, walk_bodies
    b = Builder()
    x = b.param((4, 64), F16)
    v = b.op("Divide", b.op("Convert", x, to=F32), b.const(0.05))
    v = b.op("Clamp", v, min=-128.0, max=127.0)
    magic = b.const(1.5 * 2 ** 23)
    v = b.op("Subtract", b.op("Add", v, magic), magic)
    q = b.op("Convert", b.op("Add", v, b.const(128.0)), to=U8)
    b.result(q)
    g = b.build()
    kernels = check_graph(g, {g.parameters[0].result: np.random.default_rng(3).uniform(
        -8, 8, (4, 64)).astype(np.float16)})
    loops = [n for k in kernels for body in walk_bodies(k.mir.body) for n in body
             if isinstance(n, Loop) and n.info.get("unrolled", 1) > 1]
    assert loops
    offsets = {a.offset for loop in loops for n in loop.body for a in n.args
               if isinstance(a, Mem) and a.base == SP}
    copies = max(loop.info["unrolled"] for loop in loops)
    assert 1 < copies <= SCRATCH_COPIES
    assert len({o // SCRATCH_BYTES for o in offsets}) == copies       # an area per copy
