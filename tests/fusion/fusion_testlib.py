"""Helpers for the fusion tests: build graphs in Python, draw random ones with hypothesis."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.graph import Graph, GraphOp
from vpuc.ir.module import ConstInit, Ref
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.verifier.graph import check_graph
from vpuc.vir.parser import parse_text


def ttype(dims, elem=ElemType.F32) -> TensorType:
    return TensorType(tuple(dims), elem, DimsOrder.identity(len(dims)))


class Builder:
    """Appends ops to a graph; ``build()`` infers types (and fails on any error)."""

    def __init__(self, name: str = "g") -> None:
        self.ops: list[GraphOp] = []
        self.name = name
        self.count = 0

    def _fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def param(self, dims, elem=ElemType.F32, name=None) -> str:
        name = name or self._fresh()
        self.ops.append(GraphOp("Parameter", name, (), {}, ttype(dims, elem)))
        return name

    def const(self, value, dims=(), elem=ElemType.F32, name=None) -> str:
        name = name or self._fresh()
        values = tuple(np.ravel(value).tolist()) if np.ndim(value) else (value,)
        init = ConstInit(values=values)
        self.ops.append(GraphOp("Constant", name, (), {}, ttype(dims, elem), const=init))
        return name

    def op(self, kind, *operands, name=None, **attrs) -> str:
        name = name or self._fresh()
        self.ops.append(GraphOp(kind, name, tuple(Ref(o) for o in operands), dict(attrs)))
        return name

    def result(self, value) -> None:
        self.ops.append(GraphOp("Result", None, (Ref(value),)))

    def build(self) -> Graph:
        graph = Graph(self.name, list(self.ops))
        bag = DiagnosticBag()
        check_graph(graph, bag)
        assert not bag.has_errors, [d.message for d in bag.errors]
        return graph


def graph_of(text: str) -> Graph:
    """The first graph of a VIR snippet given without its module header."""
    return parse_text("module @t\n" + text, "<test>").graphs[0]


def random_inputs(graph: Graph, seed: int = 0, dynamic: dict | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for op in graph.parameters:
        shape = tuple(d if isinstance(d, int) else (dynamic or {}).get(op.result, d.bound)
                      for d in op.type.dims)
        inputs[op.result] = rng.uniform(-3, 3, size=shape)
    return inputs


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


# ----------------------------------------------------------------- random elementwise graphs

UNARY = ["Abs", "Negative", "Relu", "Exp", "Sigmoid", "Tanh", "Gelu", "Sqrt", "Floor", "Swish",
         "HSwish", "Erf", "Clamp", "Elu"]
BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power",
          "SquaredDifference"]
COMPARE = ["Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"]
BASE = (1, 4, 3, 5)   # N, C, H, W


@st.composite
def elementwise_graphs(draw, max_ops: int = 30, layers: bool = True):
    """A random graph of up to ``max_ops`` ops: elementwise ops on shapes that broadcast to
    BASE, random scalar and tensor constants, branches (operands drawn from every value
    so far, the newest most often), a few ops the tokenizer leaves alone (Softmax, 1x1
    Convolution), and a Result for every value nobody reads plus up to two more."""
    b = Builder("rand")
    values: list[tuple[str, tuple]] = []   # (name, dims), all f32
    shapes = st.sampled_from([BASE, (1, 4, 1, 1), (1, 1, 3, 5), (5,), (3, 1), (1, 4, 3, 1)])
    for _ in range(draw(st.integers(1, 3))):
        dims = draw(shapes)
        values.append((b.param(dims), dims))
    n_ops = draw(st.integers(1, max_ops))
    for _ in range(n_ops):
        choice = draw(st.sampled_from(["unary"] * 4 + ["binary"] * 4 + ["const"] * 2 +
                                      ["select", "broadcast"] + (["layer"] * 2 if layers else [])))
        # Mostly chains (the newest value), sometimes a branch from any earlier value.
        pick = st.sampled_from(values[-1:] * 3 + values)
        if choice == "unary":
            (x, dims), kind = draw(pick), draw(st.sampled_from(UNARY))
            attrs = {"Clamp": {"min": -1.0, "max": 2.0}, "Elu": {"alpha": 0.5}}.get(kind, {})
            values.append((b.op(kind, x, **attrs), dims))
        elif choice == "binary":
            (x, dx), (y, dy) = draw(pick), draw(pick)
            values.append((b.op(draw(st.sampled_from(BINARY)), x, y), _bcast(dx, dy)))
        elif choice == "const":
            (x, dx) = draw(pick)
            if draw(st.booleans()):
                c = b.const(draw(st.sampled_from([0.5, 2.0, -1.0, 3.0])),
                            draw(st.sampled_from([(), (1, 1, 1, 1)])))
                cdims = ()
            else:
                cdims = draw(st.sampled_from([(1, 4, 1, 1), (1, 1, 1, 5)]))
                c = b.const(np.linspace(-2, 2, int(np.prod(cdims))), cdims)
            kind = draw(st.sampled_from(BINARY))
            values.append((b.op(kind, x, c), _bcast(dx, cdims)))
        elif choice == "select":
            (x, dx), (y, dy), (z, dz) = draw(pick), draw(pick), draw(pick)
            cond = b.op(draw(st.sampled_from(COMPARE)), x, y)
            values.append((b.op("Select", cond, y, z), _bcast(_bcast(dx, dy), dz)))
        elif choice == "broadcast":
            (x, dx) = draw(pick)
            values.append((b.op("Broadcast", x, shape=_bcast(dx, BASE)), _bcast(dx, BASE)))
        else:
            full = [(v, d) for v, d in values if len(d) == 4 and d[1] == BASE[1]]
            if full and draw(st.booleans()):
                x, dx = draw(st.sampled_from(full))
                w = b.const(np.linspace(-1, 1, 16), (4, 4, 1, 1))
                values.append((b.op("Convolution", x, w), dx))
            else:
                x, dx = draw(pick)
                values.append((b.op("Softmax", x, axis=-1), dx))
    # Every value nobody reads is a Result (so no op is dead), plus a few read ones.
    names = [v for v, _ in values[-n_ops:]]
    read = {o for op in b.ops for o in op.operands}
    results = {n for n in names if n not in read} | set(draw(st.lists(st.sampled_from(names),
                                                                     max_size=2)))
    for name in sorted(results, key=names.index):
        b.result(name)
    return b.build()


def _bcast(a: tuple, b: tuple) -> tuple:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))


def both_schedules(path, x: np.ndarray, reference: bool = False) -> dict:
    """The model at ``path`` compiled under ``--schedule naive`` and ``default`` and each
    simulated with ``x`` for its input (``reference``: with the per-layer reference check,
    ``Simulation.layer_check``): schedule -> (program, simulation)."""
    from vpuc import api
    from vpuc.ir.module import BufferKind
    out = {}
    for schedule in ("naive", "default"):
        program = api.compile(path, schedule=schedule)
        inputs = {b.name: x for b in program.module.buffers if b.kind is BufferKind.INPUT}
        out[schedule] = program, api.simulate(program, inputs, reference=reference)
    return out


def layers_within_bounds(runs: dict) -> None:
    """Each schedule of ``both_schedules(..., reference=True)`` computes every layer within
    the bound ``runtime_sim/layer_check`` derives from the arithmetic, against vpuc's f16
    graph reference fed the inputs the simulation gave it.  Two schedules cut the layers
    into other blocks, so BLAS may sum the same f32 terms in other orders and an f16 store
    land one ulp apart near a tie: their outputs are not compared bit for bit."""
    for schedule, (program, sim) in runs.items():
        check = sim.layer_check
        assert check is not None, schedule
        assert not check.failed, (schedule, [(r.layer, r.failures) for r in check.failed])
        # every value a segment materializes is compared, filed under the layer of its
        # first writer (a Concat's result held in CMX under its first operand's), so the
        # layers that only write into another's value have no row; the output's has one
        checked = [r.layer for r in check.layers]
        assert checked and set(checked) <= {layer.key for layer in program.module.layers}
        assert program.module.layers[-1].key in checked, schedule


def buffer_roots(program):
    """``name -> the buffer it lives in`` for a program's buffers and views (the symbol
    table's resolved region: a chain of views walked to its root)."""
    from vpuc.ir.symbols import SymbolTable
    symbols = SymbolTable(program.module)
    return lambda name: symbols.region(name).root.name

