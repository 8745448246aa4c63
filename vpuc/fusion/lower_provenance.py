"""The ``layer`` lines of a lowered program: which ONNX nodes each segment's tasks came from.

``lower-graph`` names every task of a segment ``KEY.*`` (the segment's prefix); this module
turns a segment's graph ops (a DPU layer with its folded post-ops, a fused ACT run's
subgraphs and library stages, a DMA or library op) into ``layer "KEY" from "n1" Op1, ...``
from the ops' ``origin`` (vpuc/ir/provenance.py).  Graphs written by hand carry no origins
and get no layer lines; their reports fall back to the task labels.
"""

from __future__ import annotations

from vpuc.fusion.blocked_program import label
from vpuc.ir.graph import Graph, GraphOp
from vpuc.ir.provenance import LayerSource, OnnxNode, merged, print_layer


def segment_ops(graph: Graph, tok, seg) -> list[GraphOp]:
    """The graph ops one segment of ``lower-graph`` computes."""
    if seg.layer is not None:
        return [seg.layer.op] + list(seg.layer.chain) + list(seg.folded)
    if seg.dma is not None:
        return [seg.dma]
    if seg.library is not None:
        return [seg.library.op]
    ops: list[GraphOp] = []
    for kind, n in seg.units:
        ops += ([graph.ops[n]] if kind == "op"
                else [graph.ops[i] for i in tok.subgraphs[n].ops])
    return ops


class LayerTable:
    """The layer lines of one program, keyed by task prefix (a repeated key merges)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[OnnxNode, ...]] = {}

    def add(self, prefix: str, ops: list[GraphOp]) -> None:
        nodes = merged(op.origin for op in ops)
        if not nodes:
            return
        key = label(prefix).removesuffix(".")
        self.nodes[key] = merged([self.nodes.get(key, ()), nodes])

    def lines(self) -> list[str]:
        return [print_layer(LayerSource(key, nodes)) for key, nodes in self.nodes.items()]


def locate_layers(lowered_layers, graph: Graph) -> None:
    """Give each parsed layer line the location of the graph op its first ONNX node built
    (the user's model, not the lowered text), so an error about a layer's tasks found by
    a later pass (assign-physical-barriers) points where the user can look."""
    loc_of = {}
    for op in graph.ops:
        for node in op.origin:
            loc_of.setdefault(node, op.loc)
    for layer in lowered_layers:
        loc = next((loc_of[n] for n in layer.nodes if n in loc_of), None)
        if loc is not None:
            layer.loc = loc
