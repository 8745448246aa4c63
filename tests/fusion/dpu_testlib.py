"""Helpers for the lower-graph DPU tests: graph text with inline weights, compile, simulate."""

from __future__ import annotations

import copy

import numpy as np

from runtime_sim.simulator import simulate
from vpuc.arch import load_arch
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.reference.graph import run_graph, storage_dtype
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import compile_pipeline, parse_pipeline
from vpuc.vir.parser import parse_text



def values_text(array) -> str:
    return "[" + ", ".join(repr(float(v)) for v in np.ravel(array)) + "]"


def constant(name: str, shape: tuple, seed: int, elem: str = "f16", order: str = "",
             scale: int = 16) -> str:
    """A Constant of small exact values (multiples of 1/scale in [-0.5, 0.5])."""
    rng = np.random.default_rng(seed)
    data = rng.integers(-scale // 2, scale // 2 + 1, shape) / scale
    dims = "x".join(str(d) for d in shape)
    suffix = f" {order}" if order else ""
    return f"  %{name} = Constant({values_text(data)}) : {dims}x{elem}{suffix}\n"


def module(body: str, name: str = "net") -> str:
    return f"module @{name} arch NPU37XX\ngraph @main {{\n{body}}}\n"


def compile_text(text: str, path: str = "<test>", cmx_budget: int | None = None):
    """(graph before lowering, lowered module, pass context) of `vpuc compile` (with the
    compile option ``cmx_budget``)."""
    mod = parse_text(text, path)
    graph = copy.deepcopy(mod.graphs[0])
    ctx = PassContext(load_arch(mod.arch), cmx_budget=cmx_budget)
    PassManager(parse_pipeline(",".join(compile_pipeline(mod)))).run(mod, ctx)
    return graph, mod, ctx


def run_both(graph, program, seed: int = 0, low: float = -2, high: float = 2):
    """Simulate with random inputs; (simulation result, [(got, expected)] per Result)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for p in graph.parameters:
        dtype = np.dtype(storage_dtype(p.type.elem))
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max + 1, p.type.bound_shape)
            inputs[p.result] = values.astype(dtype)
        else:
            inputs[p.result] = rng.uniform(low, high, p.type.bound_shape).astype(dtype)
    result = simulate(program, inputs=inputs)
    assert not result.races
    expected = run_graph(graph, inputs)
    pairs = [(result.outputs[op.operands[0]], e) for op, e in zip(graph.results, expected)]
    return result, pairs


def assert_close(got, expected, ulps: float = 2.0) -> None:
    """Within ``ulps`` f16 ulps of the larger of the value and the tensor's largest
    magnitude / 8: the DPU rounds once after accumulating, bias and activation in f32,
    the reference rounds after each op, so a value that cancels keeps its operands' error."""
    assert got.shape == expected.shape and got.dtype == expected.dtype
    ulp = 2.0 ** (-7 if got.dtype.name == "bfloat16" else -10)
    g, e = got.astype(np.float64), expected.astype(np.float64)
    scale = np.maximum(np.abs(e), np.abs(e).max() / 8)
    tol = ulps * scale * ulp + 1e-6
    bad = np.abs(g - e) > tol
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; worst {np.abs(g - e).max()} "
                           f"at {np.unravel_index(np.argmax(np.abs(g - e) - tol), g.shape)}")


def ddr_copies(program):
    """The program's DMAs that copy DDR to DDR (neither side in CMX): the copies a layer
    by layer schedule makes for Reshape, Transpose and flatten chains."""
    symbols = SymbolTable(program.module)
    return [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DmaTask)
            and symbols.region(t.src).kind is not BufferKind.CMX
            and symbols.region(t.dst).kind is not BufferKind.CMX]


def se_model(tmp_path, channels: int = 32, size: int = 10, seed: int = 4,
             excite_on_act: bool = True) -> str:
    """A convolution, a squeeze-excite block (MobileNetV3's: GlobalAveragePool, 1x1, ReLU,
    1x1, HardSigmoid, the product) and a 1x1 projection.  ``excite_on_act``: a ReLU between
    the second 1x1 and the HardSigmoid (the 1x1's post-op), so the import cannot fold the
    HardSigmoid into the 1x1 and the excitation stays an ACT SHAVE task."""
    m = ModelBuilder(seed)
    x = m.input("x", [1, 16, size, size])
    x = m.node("Relu", [m.node("Conv", [x, m.weight((channels, 16, 3, 3)), m.weight((channels,), 0.1)],
                               kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    s = m.node("GlobalAveragePool", [x])
    s = m.node("Relu", [m.node("Conv", [s, m.weight((8, channels, 1, 1)), m.weight((8,), 0.1)],
                               kernel_shape=[1, 1])])
    s = m.node("Conv", [s, m.weight((channels, 8, 1, 1)), m.weight((channels,), 0.5)],
               kernel_shape=[1, 1])
    if excite_on_act:
        s = m.node("Relu", [s])
    y = m.node("Mul", [x, m.node("HardSigmoid", [s], alpha=1.0 / 6, beta=0.5)])
    y = m.node("Conv", [y, m.weight((16, channels, 1, 1))], kernel_shape=[1, 1])
    m.output(y)
    return m.save(tmp_path / f"se{channels}{'a' if excite_on_act else 'f'}.onnx", "se")
