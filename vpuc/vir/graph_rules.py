"""The rule callbacks of VIR's graph blocks and provenance (``graph``, its ops, constants,
results and attributes; ``from "n" Op`` origins and ``layer "KEY" from ...`` lines),
mixed into the parser's ``VirTransformer``.

A graph is checked (names, arity, attributes, shapes; types inferred) as soon as it is
built, so the IR of a parsed graph is always fully typed.
"""

from __future__ import annotations

from lark import Token, Transformer, v_args

from vpuc.ir.graph import Graph, GraphOp
from vpuc.ir.module import ConstInit
from vpuc.ir.provenance import LayerSource, OnnxNode
from vpuc.ir.types import ELEM_BY_NAME, Dynamic, TensorType
from vpuc.verifier.graph import check_graph
from vpuc.vir.atoms import TransformerHelpers


@v_args(inline=True)
class GraphRules(TransformerHelpers, Transformer):
    """Graph and provenance rules; ``v_args`` wraps the methods defined here (lark wraps a
    class's own methods only, so ``VirTransformer`` inherits them wrapped)."""

    # ------------------------------------------------------------ graphs
    def graph_decl(self, kw, symbol, waits, updates, *ops) -> Graph:
        graph = Graph(symbol[1:], list(ops), loc=self.loc(kw), waits=waits or (),
                      updates=updates or ())
        # Names, arity, attributes and shapes are checked (and types inferred) here, so the
        # IR of a parsed graph is always fully typed.
        check_graph(graph, self.bag)
        return graph

    def graph_op(self, value, kind, attrs, args, type_, origin) -> GraphOp:
        return GraphOp(str(kind), value[1:], tuple(args or ()), attrs or {}, type_,
                       loc=self.loc(value), origin=origin or ())

    # ------------------------------------------------------------ provenance
    def onnx_origin(self, *nodes) -> tuple[OnnxNode, ...]:
        return tuple(nodes)

    def onnx_node(self, name, op_type) -> OnnxNode:
        return OnnxNode(name[1:-1], str(op_type))

    def layer_decl(self, kw, key, nodes) -> LayerSource:
        return LayerSource(key[1:-1], nodes, loc=self.loc(kw))

    def graph_const(self, value, kind, payload, type_) -> GraphOp:
        return GraphOp(str(kind), value[1:], (), {}, type_, const=payload, loc=self.loc(value))

    def graph_result(self, kw, attrs, args, type_) -> GraphOp:
        return GraphOp(str(kw), None, tuple(args or ()), attrs or {}, type_, loc=self.loc(kw))

    def graph_type(self, shaped, order) -> TensorType:
        return self.tensor_type(shaped, order)

    def payload_scalar(self, number) -> ConstInit:
        return ConstInit(values=(number,))

    def attr_dict(self, *attrs) -> dict:
        result: dict = {}
        for item in attrs:
            if item is None:
                continue
            name, value = item
            if name in result:
                self.bag.error(self.loc(name), f"attribute '{name}' is given twice")
            result[str(name)] = value
        return result

    def attr(self, name, value):
        return (name, value)

    def attr_value(self, value):
        if not isinstance(value, Token):
            return value          # a number or a list, already converted
        if value.type in ("TRUE", "FALSE"):
            return value.type == "TRUE"
        if value.type == "STRING":
            return str(value[1:-1])
        if value.type == "DYN_DIM":
            return Dynamic(int(value[3:]))
        if value.type == "SHAPED":
            if "x" in value:
                self.bag.error(self.loc(value), f"attribute value {value} is a tensor type; "
                               "expected an element type such as f32")
            return ELEM_BY_NAME[value.split("x")[-1]]
        return str(value)

    def attr_list(self, *items) -> tuple:
        return tuple(i for i in items if i is not None)

    def attr_item(self, value):
        if isinstance(value, Token):
            return Dynamic(int(value[3:]))
        return value
