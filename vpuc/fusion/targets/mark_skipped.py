"""Mark ops a backend fuses into a preceding layer as ``skipped-by-plugin``.

OpenVINO's ``SnippetsMarkSkipped`` (Snippets Design Guide, §Plugin integration): a layer of ``ANCHORS`` whose output feeds
exactly one op starts a *post-op chain*; each link is an op the backend applies
while the layer's result is still in its accumulators (a bias Add with a
per-channel constant, an activation).  The tokenizer never takes a marked op,
so the layer keeps its post-ops.  Each target says which links it can take and
how many (``ChainRule``), and which layers it fuses into at all (``anchor_ok``:
a backend that cannot run the layer applies none of its post-ops, so they stay
for the tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vpuc.ir.graph import CONSTANT, RESULT, Graph, GraphIndex, GraphOp

SKIPPED = "skipped-by-plugin"
ANCHORS = ("Convolution", "MatMul", "GroupConvolution", "ConvolutionBackpropData",
           "GroupConvolutionBackpropData")


@dataclass(frozen=True)
class ChainRule:
    backend: str                  # who fuses, for the message ("DPU", "oneDNN")
    activations: frozenset[str]   # unary ops it applies as a post-op
    bias_kinds: frozenset[str]    # binary ops with a per-channel constant (bias, scale)
    max_biases: int               # how many bias/scale links one layer takes
    max_activations: int          # how many activation links
    activation_last: bool         # nothing follows the activation (a DPU's bias comes first)
    anchor_ok: Callable[[GraphOp, GraphIndex], bool] | None = None   # None: every anchor


def _per_channel_constant(op: GraphOp, data: str, anchor: GraphOp, index: GraphIndex) -> bool:
    """``op`` combines ``data`` with a constant broadcast along everything but the channel."""
    others = [o for o in op.operands if o != data]
    if len(others) != 1 or len(op.operands) != 2:
        return False
    const = index.producer(others[0])
    if const is None or const.kind != CONSTANT or op.type != index.producer(data).type:
        return False
    axis = anchor.type.rank - 1 if anchor.kind == "MatMul" else 1
    dims = (1,) * (anchor.type.rank - const.type.rank) + const.type.dims
    return len(dims) == anchor.type.rank and all(d == 1 for i, d in enumerate(dims) if i != axis)


def mark_post_op_chains(graph: Graph, rule: ChainRule) -> None:
    index = graph.index()
    for op in graph.ops:
        op.marks.pop(SKIPPED, None)
    for anchor in graph.ops:
        if anchor.kind not in ANCHORS:
            continue
        if rule.anchor_ok is not None and not rule.anchor_ok(anchor, index):
            continue
        mark_chain(graph, index, anchor, rule)


def mark_chain(graph: Graph, index: GraphIndex, anchor: GraphOp, rule: ChainRule) -> None:
    """Mark the post-op chain ``rule`` allows after ``anchor``."""
    current, biases, activations = anchor, 0, 0
    while True:
        users = index.users.get(current.result, [])
        if len(users) != 1:
            break       # the layer's raw output is needed elsewhere: no post-op
        nxt = graph.ops[users[0]]
        if nxt.kind == RESULT:
            break
        closed = rule.activation_last and activations > 0
        if nxt.kind in rule.activations and activations < rule.max_activations and not closed:
            what, activations = "activation", activations + 1
        elif (nxt.kind in rule.bias_kinds and biases < rule.max_biases and not closed
              and _per_channel_constant(nxt, current.result, anchor, index)):
            what, biases = ("bias" if nxt.kind == "Add" else "scale"), biases + 1
        else:
            break
        nxt.marks[SKIPPED] = f"{rule.backend} applies it as a post-op ({what}) of %{anchor.result}"
        current = nxt
