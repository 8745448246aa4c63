"""Expressions, their ports, port descriptors and port connectors (the Snippets Design Guide's LIR pieces).

- ``Node``: what an expression computes: a kind and its attributes (the LIR's
  ``ov::Node``).  Kinds are listed in ``kinds.py``.
- ``Expression``: one node placed in a ``LinearIR``: its input and output
  ``PortConnector``s, one ``PortDescriptor`` per port, and ``loop_ids`` (the
  loops it runs in, outermost first).
- ``ExpressionPort``: (expression, "in"/"out", index), made on demand; it finds
  the port's descriptor and connector for you.
- ``PortDescriptor``: how the expression sees the data at a port: its memory
  ``shape`` (storage order, outermost first, padded to the master rank with
  leading 1s), element type, ``layout`` (a dims order over that shape,
  identity after canonicalization), ``subtensor`` (how many elements of the
  innermost dims one emission handles) and ``reg`` (the register holding the
  value, once register passes ran).
- ``PortConnector``: a value: its one source output port and its consumer
  input ports, in LIR order of insertion.

Expressions compare by identity; ports compare by (expression, type, index).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpuc.fusion.lir.values import IntLike, Value
from vpuc.ir.types import ElemType

GPR, VEC, MASK = "gpr", "vec", "mask"      # register classes


@dataclass(frozen=True)
class Reg:
    """A register: abstract (``vec#3``, numbered by InitLiveRanges) or physical (``v3``)."""

    cls: str
    index: int
    physical: bool = False

    def __str__(self) -> str:
        if self.physical:
            return {GPR: "s", VEC: "v", MASK: "m"}[self.cls] + str(self.index)
        return f"{self.cls}#{self.index}"


@dataclass
class Node:
    kind: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class PortDescriptor:
    shape: tuple[Value, ...]
    elem: ElemType
    layout: tuple[int, ...] = ()
    subtensor: tuple[IntLike, ...] = ()
    reg: Reg | None = None

    def __post_init__(self) -> None:
        self.shape = tuple(Value.of(d) for d in self.shape)
        if not self.layout:
            self.layout = tuple(range(len(self.shape)))

    def clone(self) -> "PortDescriptor":
        return PortDescriptor(self.shape, self.elem, self.layout, self.subtensor, self.reg)

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class ExpressionPort:
    expr: "Expression"
    type: str            # "in" or "out"
    index: int

    @property
    def descriptor(self) -> PortDescriptor:
        descs = self.expr.in_descs if self.type == "in" else self.expr.out_descs
        return descs[self.index]

    @property
    def connector(self) -> "PortConnector":
        conns = self.expr.inputs if self.type == "in" else self.expr.outputs
        return conns[self.index]

    def connected_ports(self) -> list["ExpressionPort"]:
        """An input's source, or an output's consumers."""
        conn = self.connector
        return [conn.source] if self.type == "in" else list(conn.consumers)

    def __str__(self) -> str:
        return f"e{self.expr.id}.{self.type}{self.index}"

    def __hash__(self) -> int:
        return hash((id(self.expr), self.type, self.index))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ExpressionPort) and other.expr is self.expr
                and other.type == self.type and other.index == self.index)


class PortConnector:
    """A value in the LIR: one source output port, any number of consumer input ports."""

    __slots__ = ("name", "source", "consumers")

    def __init__(self, name: str, source: ExpressionPort) -> None:
        self.name = name
        self.source = source
        self.consumers: list[ExpressionPort] = []

    def add_consumer(self, port: ExpressionPort) -> None:
        if port not in self.consumers:
            self.consumers.append(port)

    def remove_consumer(self, port: ExpressionPort) -> None:
        self.consumers = [c for c in self.consumers if c != port]

    @property
    def reg(self) -> Reg | None:
        return self.source.descriptor.reg

    def __repr__(self) -> str:
        return f"PortConnector(%{self.name})"


class Expression:
    """One node of the LIR; created and wired by ``LinearIR`` (never by hand)."""

    def __init__(self, eid: int, node: Node, in_descs: list[PortDescriptor],
                 out_descs: list[PortDescriptor], loop_ids: list[int] | None = None) -> None:
        self.id = eid
        self.node = node
        self.in_descs = list(in_descs)
        self.out_descs = list(out_descs)
        self.inputs: list[PortConnector] = []
        self.outputs: list[PortConnector] = []
        self.loop_ids: list[int] = list(loop_ids or [])
        # Physical registers live across this expression (not its own operands); set by
        # assign-registers so an emitter can see which registers it must not clobber.
        self.live_regs: frozenset[Reg] = frozenset()

    @property
    def kind(self) -> str:
        return self.node.kind

    @property
    def attrs(self) -> dict[str, Any]:
        return self.node.attrs

    def input_port(self, i: int) -> ExpressionPort:
        return ExpressionPort(self, "in", i)

    def output_port(self, i: int) -> ExpressionPort:
        return ExpressionPort(self, "out", i)

    def input_ports(self) -> list[ExpressionPort]:
        return [self.input_port(i) for i in range(len(self.inputs))]

    def output_ports(self) -> list[ExpressionPort]:
        return [self.output_port(i) for i in range(len(self.outputs))]

    def input_sources(self) -> list["Expression"]:
        return [c.source.expr for c in self.inputs]

    def consumers(self) -> list["Expression"]:
        seen: dict[int, Expression] = {}
        for conn in self.outputs:
            for port in conn.consumers:
                seen.setdefault(id(port.expr), port.expr)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"Expression(e{self.id} {self.kind})"
