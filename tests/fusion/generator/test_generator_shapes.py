"""Generated kernels on random shapes: ranks 1 to 6, tails, broadcasting, layouts, dynamic dims.

Every kernel runs on the exact interpreter and the fast path (identical CMX
bytes and cycles) and matches the reference executor bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from gen_testlib import Builder, check_graph, run_both, same
from fusion_testlib import graph_of
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.run import run_kernel, written_meta
from vpuc.reference.graph import run_graph
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ElemType

RNG = np.random.default_rng(7)


def _chain(b: Builder, x: str, y: str, elem) -> str:
    """A small chain touching arithmetic, an activation and a broadcast operand."""
    c = b.const(0.75, elem=elem)
    t = b.op("Multiply", x, c)
    t = b.op("Add", t, y)
    t = b.op("Sigmoid", t)
    return b.op("Maximum", t, y)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("elem", [ElemType.F16, ElemType.F32])
def test_random_ranks_and_broadcasting(seed, elem):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 7))
    dims = tuple(int(d) for d in rng.integers(1, 6, rank))
    dims = dims[:-1] + (int(rng.integers(1, 40)),)        # an innermost dim with tails
    bdims = tuple(d if rng.random() < 0.5 else 1 for d in dims)  # broadcast along some dims
    if rng.random() < 0.3:
        bdims = bdims[int(rng.integers(0, rank)):]         # or a lower rank
    b = Builder()
    x, y = b.param(dims, elem), b.param(bdims or (1,), elem)
    b.result(_chain(b, x, y, elem))
    g = b.build()
    inputs = {p.result: rng.uniform(-3, 3, p.type.bound_shape) for p in g.parameters}
    check_graph(g, inputs)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 1000])
def test_tails(n):
    b = Builder()
    x = b.param((n,), ElemType.F16)
    b.result(b.op("HSwish", b.op("Relu", x)))
    g = b.build()
    check_graph(g, {g.parameters[0].result: RNG.uniform(-5, 5, (n,))})


def test_nhwc_and_nchw_operands():
    g = graph_of("""
graph @g {
  %x = Parameter() : 1x16x5x7xf16 NHWC
  %b = Parameter() : 1x16x1x1xf16 NHWC
  %y = Add(%x, %b)
  %z = Tanh(%y)
  Result(%z)
}""")
    inputs = {p.result: RNG.uniform(-2, 2, p.type.bound_shape) for p in g.parameters}
    check_graph(g, inputs)


def test_several_outputs_and_inner_results():
    g = graph_of("""
graph @g {
  %x = Parameter() : 3x5x33xf32
  %a = Exp(%x)
  %b = Multiply(%a, %x)
  %c = Negative(%b)
  Result(%a)
  Result(%c)
}""")
    check_graph(g, {"x": RNG.uniform(-2, 2, (3, 5, 33))})


DYNAMIC = """
graph @g {
  %x = Parameter() : 1x?<=40x37xf16
  %y = Parameter() : 1x1x37xf16
  %c = Constant(0.5) : f16
  %a = Multiply(%x, %c)
  %b = Add(%a, %y)
  %s = Sigmoid(%b)
  Result(%s)
}"""


@pytest.mark.parametrize("rows", [0, 1, 2, 13, 40])
@pytest.mark.parametrize("meta", [True, False])
def test_dynamic_dims(rows, meta):
    """Run-time sizes are read from the MemRefData; a dynamic output gets its dims written."""
    g = graph_of(DYNAMIC)
    sub = tokenize(g, get_target("shave")).subgraphs[0]
    kernel = generate(sub.body, "dyn")
    x = RNG.uniform(-3, 3, (1, rows, 37))
    y = RNG.uniform(-3, 3, (1, 1, 37))
    expected = run_graph(sub.body, {"x": x, "y": y})[0]
    run = run_both(kernel, [x, y], [expected.shape], dynamic_meta=meta)
    assert same(expected, run.outputs[0])
    if meta:
        dims, strides = written_meta(run, 2)
        assert dims == [37, rows, 1]
        assert strides == [16, 16 * 37, 16 * 37 * rows]


def test_dynamic_innermost_dim():
    g = graph_of("""
graph @g {
  %x = Parameter() : 2x?<=50xf32
  %y = Relu(%x)
  %z = Sqrt(%y)
  Result(%z)
}""")
    sub = tokenize(g, get_target("shave")).subgraphs[0]
    kernel = generate(sub.body, "dyn")
    for n in (1, 3, 4, 5, 17, 50):
        x = RNG.uniform(-3, 3, (2, n))
        expected = run_graph(sub.body, {"x": x})[0]
        assert same(expected, run_both(kernel, [x], [expected.shape]).outputs[0])


def test_in_place_output():
    """Writing the output over the input (same buffer) is allowed: each element is read first."""
    b = Builder()
    x = b.param((4, 50), ElemType.F16)
    b.result(b.op("Tanh", b.op("Abs", x)))
    g = b.build()
    kernel = generate(g, "inplace")
    x = RNG.uniform(-2, 2, (4, 50))
    expected = run_graph(g, {g.parameters[0].result: x})[0]
    from vpuc.fusion.generator import run as runmod
    placed, end = runmod._place([g.parameters[0].type], [(4, 50)], False)
    cmx = np.zeros(end + 4096, np.uint8)
    cmx[placed[0].offset:placed[0].offset + placed[0].nbytes] = np.frombuffer(
        x.astype(np.float16).tobytes(), np.uint8)
    from vpuc.abi.params import layout_window_e
    from runtime_sim.isa.invoke import invoke_kernel
    image = layout_window_e(kernel.obj.data, [placed[0].memref(), placed[0].memref()],
                            runmod.WIN_E)
    for fast in (False, True):
        mem = cmx.copy()
        invoke_kernel(kernel.obj, mem, image.image, image.args_offset, image.args_size, fast=fast)
        got = mem[placed[0].offset:placed[0].offset + placed[0].nbytes].view(np.float16)
        assert same(expected, got.reshape(4, 50))


def test_misaligned_operands():
    b = Builder()
    x, y = b.param((3, 21), ElemType.F16), b.param((3, 21), ElemType.F16)
    b.result(b.op("SquaredDifference", x, y))
    g = b.build()
    inputs = {p.result: RNG.uniform(-2, 2, (3, 21)) for p in g.parameters}
    check_graph(g, inputs, skew=3)
