"""The graph dialect: ops on tensors, as an OpenVINO model has them.

A ``Graph`` is a list of ``GraphOp`` in topological order (every operand is
defined above its use), written in VIR as::

    graph @net {
      %x = Parameter() : 1x64x128x128xf16 NCHW
      %c = Constant(0.5) : f16
      %y = Multiply(%x, %c) : 1x64x128x128xf16 NCHW
      %z = Clamp{min = 0, max = 6}(%y)
      Result(%z)
    }

Every op but ``Result`` defines one value, named like the op's result.  The
kinds, their arity, attributes and shape rules are in ``graph_ops.py``; the
verifier (``vpuc/verifier/graph.py``) resolves operands and infers every
``type``.  The same dataclasses hold a fusion *subgraph body* (Parameters, the
fused ops, Results), which the data-flow optimizer rewrites in place.

Like the rest of the IR, objects refer to values by name and keep source
locations out of equality, so ``parse(print(g)) == g``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

from vpuc.diagnostics import UNKNOWN_LOC, Loc
from vpuc.ir.module import ConstInit, Ref
from vpuc.ir.provenance import OnnxNode
from vpuc.ir.types import Dim, Dynamic, ElemType, TensorType

# An attribute value: numbers, booleans, names (enums, layouts), element types,
# dims (int or Dynamic) and lists of those.
AttrScalar = Union[int, float, bool, str, ElemType, Dynamic]
AttrValue = Union[AttrScalar, tuple]

def number_as_float(value: int | float) -> float:
    """A VIR number as a float.  An integer beyond the float range rounds to +-inf,
    as IEEE rounding (and the same number written with a '.0') gives."""
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


# Op kinds with a role in the graph rather than a computation.
PARAMETER, CONSTANT, RESULT, SCALAR = "Parameter", "Constant", "Result", "Scalar"
SOURCE_KINDS = frozenset({PARAMETER, CONSTANT, SCALAR})


@dataclass
class GraphOp:
    """One op.  ``result`` is the value it defines (None only for Result).

    ``type`` is the result's tensor type; for a Result it is the type of the
    graph output it produces (normally its operand's type).  ``const`` holds
    the payload of a Constant or Scalar.  ``marks`` are facts analyses attach
    (e.g. ``skipped-by-plugin``); they are not part of the op's meaning.
    """

    kind: str
    result: str | None
    operands: tuple[Ref, ...] = ()
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    type: TensorType | None = None
    const: ConstInit | None = None
    loc: Loc = field(default=UNKNOWN_LOC, compare=False, repr=False)
    marks: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # The ONNX node(s) the importer built the op from (vpuc/ir/provenance.py); like the
    # location, not part of the op's meaning.
    origin: tuple[OnnxNode, ...] = field(default=(), compare=False, repr=False)

    @property
    def label(self) -> str:
        """How reports name the op: its value, or Result(%v)."""
        if self.result is not None:
            return f"%{self.result}"
        return f"{self.kind}(" + ", ".join(f"%{o}" for o in self.operands) + ")"

    @property
    def is_source(self) -> bool:
        return self.kind in SOURCE_KINDS

    @property
    def is_scalar_constant(self) -> bool:
        """A Constant or Scalar holding exactly one element (the tokenizer inlines these)."""
        return (self.kind in (CONSTANT, SCALAR) and self.type is not None
                and self.type.is_static and self.type.num_elements == 1)

    def scalar_value(self) -> float | int:
        assert self.const is not None
        if self.const.splat is not None:
            return self.const.splat
        assert self.const.values
        return self.const.values[0]


@dataclass
class Graph:
    name: str
    ops: list[GraphOp] = field(default_factory=list)
    loc: Loc = field(default=UNKNOWN_LOC, compare=False, repr=False)
    # Barriers the block's first tasks wait on and its last tasks update, when it shares
    # a module with task lists or other blocks (docs/vir.md, "Several graph blocks").
    waits: tuple[Ref, ...] = ()
    updates: tuple[Ref, ...] = ()

    @property
    def parameters(self) -> list[GraphOp]:
        return [op for op in self.ops if op.kind == PARAMETER]

    @property
    def results(self) -> list[GraphOp]:
        return [op for op in self.ops if op.kind == RESULT]

    def index(self) -> "GraphIndex":
        """Producers and users of every value (rebuild after any rewrite)."""
        return GraphIndex(self)

    def value_type(self, name: str) -> TensorType | None:
        for op in self.ops:
            if op.result == name:
                return op.type
        return None

    def fresh_name(self, base: str) -> str:
        """A value name not used in this graph: ``base``, ``base.1``, ``base.2``, ..."""
        return fresh_in(base, {op.result for op in self.ops})


def fresh_in(base: str, taken: set) -> str:
    """``base``, ``base.1``, ``base.2``, ...: the first not in ``taken``, which it joins (a
    rewrite naming several new values before the graph has them)."""
    name, n = base, 1
    while name in taken:
        name, n = f"{base}.{n}", n + 1
    taken.add(name)
    return name


class GraphIndex:
    """Def-use information of a graph at one moment.

    ``position[name]`` is the index of the op defining ``name``;
    ``users[name]`` lists the indices of the ops reading it, in graph order
    (an op reading a value twice appears once).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.position: dict[str, int] = {}
        self.users: dict[str, list[int]] = {}
        for i, op in enumerate(graph.ops):
            for operand in dict.fromkeys(op.operands):
                self.users.setdefault(operand, []).append(i)
            if op.result is not None:
                self.position.setdefault(op.result, i)
                self.users.setdefault(op.result, [])

    def producer(self, name: str) -> GraphOp | None:
        i = self.position.get(name)
        return None if i is None else self.graph.ops[i]

    def consumers(self, name: str) -> Iterator[GraphOp]:
        for i in self.users.get(name, ()):
            yield self.graph.ops[i]


def is_scalar_shape(dims: tuple[Dim, ...]) -> bool:
    return all(d == 1 for d in dims)
