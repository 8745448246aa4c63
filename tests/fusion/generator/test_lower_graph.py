"""lower-graph and `vpuc compile` on graph-level modules: end to end through the simulator."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from runtime_sim.simulator import simulate
from vpuc.arch import load_arch
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.reference.graph import run_graph
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import PIPELINES, compile_pipeline, parse_pipeline
from vpuc.vir.parser import parse_text

CHAIN = """module @net arch NPU37XX
graph @g {
  %x = Parameter() : 1x16x32x24xf16 NHWC
  %b = Constant(splat 0.25) : 1x16x1x1xf16 NHWC
  %c = Constant(0.5) : f16
  %a = Multiply(%x, %c)
  %s = Add(%a, %b)
  %r = Relu(%s)
  %t = Tanh(%r)
  %h = HSwish(%t)
  Result(%h)
  Result(%r)
}
"""


def compile_module(text: str):
    module = parse_text(text, "<test>")
    graph = copy.deepcopy(module.graphs[0]) if module.graphs else None
    ctx = PassContext(load_arch(module.arch))
    PassManager(parse_pipeline(",".join(compile_pipeline(module)))).run(module, ctx)
    return graph, module, ctx


def simulate_against_numpy(graph, program, seed=0, exact=True):
    rng = np.random.default_rng(seed)
    inputs = {p.result: rng.uniform(-3, 3, p.type.bound_shape).astype(np.float16)
              for p in graph.parameters}
    result = simulate(program, inputs=inputs)
    assert not result.races
    expected = run_graph(graph, inputs)
    for op, e in zip(graph.results, expected):
        got = result.outputs[op.operands[0]]
        if exact:
            assert np.array_equal(got, e, equal_nan=True)
        else:
            assert np.allclose(got.astype(np.float32), e.astype(np.float32), rtol=2e-3, atol=1e-3)
    return result


def test_graph_module_compiles_and_simulates_like_numpy():
    graph, module, ctx = compile_module(CHAIN)
    assert not module.graphs and module.attributes["graph"] == "lowered"
    kernels = [k for k in module.kernels if str(k.source) == "generated"]
    assert kernels and set(ctx.artifacts["generated-kernels"]) == {k.name for k in kernels}
    program = ctx.artifacts["program"]
    # Multiply + Add became an FMA: within rounding of the unfused graph
    simulate_against_numpy(graph, program, exact=False)


def test_blocks_alternate_tiles_and_use_both_shaves():
    graph, module, ctx = compile_module(CHAIN)
    act = next(tl for tl in module.task_lists if tl.executor.name == "ACT_SHAVE")
    tiles = {t.tile for t in act.tasks}
    assert tiles == {0, 1}
    assert len(act.tasks) % 2 == 0


def test_exact_chain_is_bit_identical_end_to_end():
    text = CHAIN.replace("%a = Multiply(%x, %c)", "%a = Maximum(%x, %c)")
    graph, _, ctx = compile_module(text)
    simulate_against_numpy(graph, ctx.artifacts["program"], exact=True)


def test_dynamic_graph_runs_as_one_block():
    text = """module @dyn arch NPU37XX
graph @g {
  %x = Parameter() : 1x?<=64x40xf16
  %y = Sigmoid(%x)
  %z = Abs(%y)
  Result(%z)
}
"""
    graph, module, ctx = compile_module(text)
    act = next(tl for tl in module.task_lists if tl.executor.name == "ACT_SHAVE")
    assert len(act.tasks) == 1
    program = ctx.artifacts["program"]
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (1, 64, 40)).astype(np.float16)
    result = simulate(program, inputs={"x": x})
    assert np.array_equal(result.outputs["z"], run_graph(graph, {"x": x})[0], equal_nan=True)


def test_layers_are_not_supported_yet():
    # Softmax over a non-last axis runs as a library kernel (lower_library.py), a
    # reduction over axes apart in memory as a chain of them (split_reductions.py); a
    # non-last axis of a dynamic shape has no lowering yet
    text = """module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x?<=64x40xf16
  %s = Softmax{axis = 1}(%x)
  Result(%s)
}
"""
    with pytest.raises(VpucError, match=r"Softmax.*the axis is not the last logical dim and "
                                        r"the shape is dynamic"):
        compile_module(text)


def test_a_reduction_over_axes_apart_in_memory_runs_as_a_chain():
    text = """module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x8x4x4xf16
  %s = ReduceSum{axes = [1, 3]}(%x)
  %r = Relu(%s)
  Result(%r)
}
"""
    graph, module, ctx = compile_module(text)
    x = np.random.default_rng(2).uniform(-3, 3, (1, 8, 4, 4)).astype(np.float16)
    got = simulate(ctx.artifacts["program"], inputs={"x": x}).outputs["r"].astype(np.float64)
    want = np.maximum(x.astype(np.float64).sum(axis=(1, 3), keepdims=True), 0)
    # two f16 roundings (the sum over C, then over W of 4 of those): u of each partial
    u = 2.0 ** -11
    bound = u * (np.abs(want) + 4 * np.abs(x.astype(np.float64)).sum(axis=(1, 3), keepdims=True))
    assert np.all(np.abs(got - want) <= bound)


def test_task_level_modules_compile_as_before():
    module = parse_text(open("examples/clamp.vir").read(), "examples/clamp.vir")
    assert compile_pipeline(module) == PIPELINES["compile"]


def test_generated_kernel_without_a_graph_is_an_error(tmp_path):
    path = tmp_path / "g.vir"
    path.write_text("""module @m arch NPU37XX
kernel @k(input: memref<*xf16>, output: memref<*xf16>) from generated
kernel @runtime() from library "runtime"
runtime @runtime stacks(16384, 16384)
cmx %x : 8xf16 tile 0
cmx %y : 8xf16 tile 0
tasks ACT_SHAVE {
  sw @k on tile 0 inputs(%x as %a) outputs(%y as %b) { run(%a, %b) }
}
""")
    assert main(["compile", str(path), "-o", str(tmp_path / "g.blob")]) == 1


def test_vpuc_compile_prints_lir_and_generator_stages(tmp_path, capsys):
    path = tmp_path / "net.vir"
    path.write_text(CHAIN)
    assert main(["compile", str(path), "-o", str(tmp_path / "net.blob"), "--print-lir",
                 "--time-passes"]) == 0
    err = capsys.readouterr().err
    assert "lir @g.sg0" in err and "lower-graph stages" in err and "g.sg0: regalloc" in err
    assert main(["compile", str(path), "-o", str(tmp_path / "net.blob"),
                 "--print-after-all"]) == 0
    err = capsys.readouterr().err
    for stage in ("lir:mark-loops", "mir:emit", "mir:licm", "mir:schedule", "asm"):
        assert stage in err
    assert (tmp_path / "net.blob").stat().st_size > 0


def test_softmax_over_the_last_dim_runs_as_the_library_kernel():
    text = """module @m arch NPU37XX
graph @g {
  %x = Parameter() : 1x8x16x32xf16 NCHW
  %c = Constant(0.5) : f16
  %a = Multiply(%x, %c)
  %s = Softmax{axis = 3}(%a)
  %r = Relu(%s)
  %t = Tanh(%r)
  Result(%t)
  Result(%s)
}
"""
    graph, module, ctx = compile_module(text)
    assert any(str(k.source) == 'library "softmax"' for k in module.kernels)
    # the library softmax is within 1 ulp of numpy (docs/kernels.md)
    simulate_against_numpy(graph, ctx.artifacts["program"], exact=False)
