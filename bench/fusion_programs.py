"""The programs bench/fusion_bench.py compares: an elementwise chain as a graph fused
by lower-graph, as one library kernel per op with intermediates in CMX (unfused), as
one generated kernel per op (per-op), and one layer per op with intermediates in DDR
(naive, from bench/naive_program.py).  Each builder returns the compiled program."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from naive_program import LIBRARY, build_naive_program, kernel_decls  # noqa: E402
from vpuc.arch import load_arch  # noqa: E402
from vpuc.fusion.blocked_program import Stage, Value, build_program  # noqa: E402
from vpuc.fusion.lower_graph_segments import lower  # noqa: E402
from vpuc.ir.module import ConstInit  # noqa: E402
from vpuc.ir.types import DimsOrder, ElemType, TensorType  # noqa: E402
from vpuc.passes.base import PassContext  # noqa: E402
from vpuc.passes.manager import PassManager  # noqa: E402
from vpuc.passes.registry import parse_pipeline  # noqa: E402
from vpuc.vir.parser import parse_text  # noqa: E402

SHAPE = (1, 64, 128, 128)
# (op, constant or attrs); the constant is the second operand of a binary op
CHAINS = {
    # BN-like scale and shift, ReLU6, a rescale, a clamp: FMA, max, min, FMA, max, min
    "affine": [("Multiply", 0.5), ("Add", 1.0), ("Relu", None), ("Minimum", 6.0),
               ("Multiply", 0.25), ("Add", -0.5), ("Maximum", -1.0), ("Clamp", (-0.75, 1.25))],
    # range limits only: folds to one max and one min (memory-bound)
    "clamps": [("Relu", None), ("Minimum", 6.0), ("Maximum", -1.0), ("Clamp", (-4.0, 4.0)),
               ("Minimum", 5.0), ("Maximum", 0.5), ("Relu", None), ("Clamp", (0.0, 3.0))],
    # activations (f32 inside): compute-bound
    "activations": [("Multiply", 0.5), ("Add", 1.0), ("HSwish", None), ("Multiply", 2.0),
                    ("Sigmoid", None), ("Add", -0.5), ("Tanh", None), ("Clamp", (-0.5, 0.5))],
}


def graph_text(chain, shape=SHAPE) -> str:
    dims = "x".join(map(str, shape))
    lines = ["module @fusion_bench arch NPU37XX", "graph @chain {",
             f"  %x = Parameter() : {dims}xf16 NHWC"]
    prev = "x"
    for i, (op, arg) in enumerate(chain):
        if op == "Clamp":
            lines.append(f"  %y{i} = Clamp{{min = {arg[0]}, max = {arg[1]}}}(%{prev})")
        elif arg is None:
            lines.append(f"  %y{i} = {op}(%{prev})")
        else:
            lines.append(f"  %k{i} = Constant({arg}) : f16")
            lines.append(f"  %y{i} = {op}(%{prev}, %k{i})")
        prev = f"y{i}"
    lines += [f"  Result(%{prev})", "}"]
    return "\n".join(lines) + "\n"


def compile_text(text: str, generated: dict | None = None):
    module = parse_text(text, "<fusion-bench>")
    ctx = PassContext(load_arch(module.arch))
    if generated:
        ctx.artifacts["generated-kernels"] = dict(generated)
    manager = PassManager(parse_pipeline("compile"))
    manager.run(module, ctx)
    return ctx.artifacts["program"], manager.timings


def fused_program(chain, blocks: int, shape=SHAPE):
    text = graph_text(chain, shape)
    module = parse_text(text, "<fusion-bench graph>")
    graph = module.graphs[0]
    generated, timings = {}, []
    clock = time.perf_counter()
    program_text = lower(graph, module, generated, timings, None, tiles=2, blocks=blocks)
    timings.append(("lower-graph (total)", time.perf_counter() - clock))
    clock = time.perf_counter()
    program, passes = compile_text(program_text, generated)
    timings.append(("compile passes (total)", time.perf_counter() - clock))
    timings += [(f"  {p.name}", p.seconds) for p in passes]
    return graph, program, timings, program_text


def unfused_program(chain, blocks: int, shape=SHAPE):
    t = TensorType(tuple(shape), ElemType.F16, _nhwc())
    one = TensorType((1, 1, 1, 1), ElemType.F16, t.order)
    values = [Value("x", t, "input"), Value("ta", t, "temp"), Value("tb", t, "temp"),
              Value("y", t, "output")]
    stages, decls = [], kernel_decls(chain)
    prev = "x"
    for i, (op, arg) in enumerate(chain):
        out = "y" if i == len(chain) - 1 else ("ta" if i % 2 == 0 else "tb")
        kernel = LIBRARY[op]
        if op == "Clamp":
            stages.append(Stage(kernel, [prev], [out], [("f16", arg[0]), ("f16", arg[1])]))
        elif arg is None:
            stages.append(Stage(kernel, [prev], [out]))
        else:
            values.append(Value(f"k{i}", one, "const", ConstInit(values=(arg,))))
            stages.append(Stage(kernel, [prev, f"k{i}"], [out]))
        prev = out
    text = build_program("unfused", decls, values, stages, axis=2, rank=4, extent=shape[2],
                         blocks=blocks)
    clock = time.perf_counter()
    program, _ = compile_text(text)
    return program, time.perf_counter() - clock, text


def part_body(chain, blocks: int, shape=SHAPE):
    """The chain's (first) subgraph body, typed for the part of a block one ACT SHAVE
    runs (as lower-graph generates it): a block's rows halved over two SHAVEs."""
    from vpuc.fusion.lower_act import retype
    from vpuc.fusion.subgraph import tokenize
    from vpuc.fusion.targets import get_target
    graph = parse_text(graph_text(chain, shape), "<chain>").graphs[0]
    return retype(tokenize(graph, get_target("shave")).subgraphs[0].body, 2, 4,
                  shape[2] // blocks // 2)


def per_op_kernels(chain, blocks: int, shape=SHAPE) -> tuple[dict, list[tuple[str, str]]]:
    """One generated kernel per op (the same generator, fusion off), each for the part
    of a block one ACT SHAVE runs: (objects by name, [(name, declaration)] in order)."""
    from vpuc.fusion.generator.generate import generate
    generated, kernels = {}, []
    for i, step in enumerate(chain):
        body = part_body([step], blocks, shape)
        name = f"op{i}_{step[0].lower()}"
        kernel = generate(body, name)
        generated[name] = kernel.obj
        params = ", ".join(f"{p.name}: {p.memref}" for p in kernel.decl.params)
        kernels.append((name, f"kernel @{name}({params}) from generated"))
    return generated, kernels


def per_op_program(chain, blocks: int, shape=SHAPE):
    """One generated kernel per op, intermediates in CMX: separates what fusion saves
    from what the generator's code quality saves."""
    t = TensorType(tuple(shape), ElemType.F16, _nhwc())
    values = [Value("x", t, "input"), Value("ta", t, "temp"), Value("tb", t, "temp"),
              Value("y", t, "output")]
    generated, kernels = per_op_kernels(chain, blocks, shape)
    stages, prev = [], "x"
    for i, (name, _) in enumerate(kernels):
        out = "y" if i == len(chain) - 1 else ("ta" if i % 2 == 0 else "tb")
        stages.append(Stage(name, [prev], [out]))
        prev = out
    text = build_program("per_op", [decl for _, decl in kernels], values, stages, axis=2,
                         rank=4, extent=shape[2], blocks=blocks)
    clock = time.perf_counter()
    program, _ = compile_text(text, generated)
    return program, time.perf_counter() - clock, text


def naive_generated_program(chain, blocks: int, shape=SHAPE):
    """One layer per op with intermediates in DDR, each layer a generated kernel."""
    generated, kernels = per_op_kernels(chain, blocks, shape)
    text = build_naive_program(chain, shape, blocks=blocks, axis=2, generated=kernels,
                               module="naive_generated")
    clock = time.perf_counter()
    program, _ = compile_text(text, generated)
    return program, time.perf_counter() - clock, text


def naive_program(chain, blocks: int, shape=SHAPE):
    """One layer per op, intermediates in DDR (bench/naive_program.py)."""
    text = build_naive_program(chain, shape, blocks=blocks, axis=2)
    clock = time.perf_counter()
    program, _ = compile_text(text)
    return program, time.perf_counter() - clock, text


def _nhwc() -> DimsOrder:
    from vpuc.ir.types import NAMED_ORDERS
    return DimsOrder(NAMED_ORDERS["NHWC"])
