"""Helpers for the Linear IR tests: lower graphs, run LIRs, draw random bodies."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fusion_testlib import Builder, graph_of
from vpuc.fusion.dataflow import DataflowContext, pipeline_names, run_dataflow
from vpuc.fusion.lir.interpreter import run_lir
from vpuc.fusion.lir.linear_ir import LinearIR, LoweringConfig
from vpuc.fusion.lir.pipeline import lower_subgraph
from vpuc.reference.graph import run_graph
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import Graph
from vpuc.ir.types import Dynamic, ElemType

SHAVE = get_target("shave")


def bodies(graph: Graph | str, target=SHAVE) -> list[Graph]:
    """The data-flow-optimized subgraph bodies of a graph (or of VIR text)."""
    if isinstance(graph, str):
        graph = graph_of(graph)
    out = []
    for sub in tokenize(graph, target).subgraphs:
        run_dataflow(sub.body, DataflowContext(target), pipeline_names(target))
        out.append(sub.body)
    return out


def lower(graph: Graph | str, passes: list[str] | None = None, **config) -> LinearIR:
    """The LIR of the first (only) subgraph of ``graph``."""
    body = bodies(graph)[0]
    return lower_subgraph(body, SHAVE, LoweringConfig(SHAVE, **config), passes)


def inputs_for(body: Graph, sizes: dict[int, int] | None = None, seed: int = 0) -> dict:
    """Random inputs; a dynamic dim at master position k takes ``sizes[k]`` (default: its bound)."""
    rng = np.random.default_rng(seed)
    rank = max(op.type.rank for op in body.ops if op.type is not None)
    out = {}
    for op in body.parameters:
        dims = op.type.dims
        pad = rank - len(dims)
        shape = tuple((sizes or {}).get(pad + k, d.bound) if isinstance(d, Dynamic) else d
                      for k, d in enumerate(dims))
        out[op.result] = rng.uniform(-3, 3, size=shape)
    return out


def check_lir(body: Graph, lir: LinearIR, inputs: dict) -> None:
    """The LIR computes exactly what the reference executor computes for the body."""
    expected = run_graph(body, inputs)
    got = run_lir(lir, inputs)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        e = np.asarray(e).reshape(g.shape)
        assert e.dtype == g.dtype
        assert np.array_equal(e, g, equal_nan=True), (e.ravel()[:16], g.ravel()[:16])


# ----------------------------------------------------------------- random bodies
UNARY = ["Abs", "Negative", "Relu", "Exp", "Sigmoid", "Tanh", "Sqrt", "Floor", "HSwish", "Erf",
         "Clamp", "Gelu", "Swish"]
BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference"]
COMPARE = ["Less", "GreaterEqual", "Equal"]


@st.composite
def lir_graphs(draw, max_ops: int = 10):
    """A random elementwise graph for the LIR: f16 or f32, rank 1 to 4, odd innermost sizes
    (tails), broadcasting in every dim including the innermost, some dims dynamic, scalar
    constants, comparisons with Select, and Convert round trips to the other float type.
    Returns (graph, run-time sizes of the dynamic dims by master position)."""
    elem = draw(st.sampled_from([ElemType.F16, ElemType.F32]))
    other = ElemType.F32 if elem is ElemType.F16 else ElemType.F16
    rank = draw(st.integers(1, 4))
    base = [draw(st.integers(1, 13)) for _ in range(rank)]
    dynamic = [draw(st.booleans()) and base[k] > 1 and draw(st.booleans()) for k in range(rank)]
    sizes = {k: draw(st.integers(1, base[k])) for k in range(rank) if dynamic[k]}
    b = Builder("r")
    values: list[tuple[str, tuple]] = []       # (name, broadcast mask: True where full)

    def dims(mask) -> tuple:
        return tuple((Dynamic(base[k]) if dynamic[k] else base[k]) if m else 1
                     for k, m in enumerate(mask))

    for _ in range(draw(st.integers(1, 3))):
        mask = tuple(draw(st.booleans()) for _ in range(rank))
        values.append((b.param(dims(mask), elem), mask))
    for _ in range(draw(st.integers(1, max_ops))):
        choice = draw(st.sampled_from(["unary"] * 3 + ["binary"] * 3 + ["scalar", "select",
                                                                       "convert"]))
        pick = st.sampled_from(values[-1:] * 2 + values)
        x, mx = draw(pick)
        if choice == "unary":
            kind = draw(st.sampled_from(UNARY))
            attrs = {"min": -1.0, "max": 2.0} if kind == "Clamp" else {}
            values.append((b.op(kind, x, **attrs), mx))
        elif choice == "binary":
            y, my = draw(pick)
            values.append((b.op(draw(st.sampled_from(BINARY)), x, y),
                           tuple(p or q for p, q in zip(mx, my))))
        elif choice == "scalar":
            c = b.const(draw(st.sampled_from([0.5, 2.0, -1.5])), (), elem)
            values.append((b.op(draw(st.sampled_from(BINARY)), x, c), mx))
        elif choice == "select":
            y, my = draw(pick)
            cond = b.op(draw(st.sampled_from(COMPARE)), x, y)
            full = tuple(p or q for p, q in zip(mx, my))
            values.append((b.op("Select", cond, x, y), full))
        else:
            wide = b.op("Convert", x, to=other)
            back = b.op("Convert", b.op(draw(st.sampled_from(["Relu", "Abs", "Negative"])), wide),
                        to=elem)
            values.append((back, mx))
    b.result(values[-1][0])
    if len(values) > 2 and draw(st.booleans()):
        b.result(values[draw(st.integers(0, len(values) - 2))][0])
    return b.build(), sizes
