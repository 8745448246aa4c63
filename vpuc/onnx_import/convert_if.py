"""ONNX If of a condition known at import (an initializer, a Constant, or folded from
static shapes, as exporters' shape checks are): the taken branch's nodes are converted in
its place, one by one as any node is (folded when their inputs are constants), with the
branch's initializers known; the If's outputs are the branch's outputs.  The other branch
is never read.  A run-time condition is refused naming the node: the graph has no control
flow, and computing both branches and selecting would run the untaken one's side of every
shape check.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder


def inline_if(b: GraphBuilder, node, convert_node: Callable) -> None:
    from onnx import helper, numpy_helper
    if not b.is_known(node.input[0]):
        raise b.error(f"If on a run-time condition '{node.input[0]}' is not supported (the graph "
                      "has no control flow); a condition known at import inlines its branch")
    condition = np.asarray(b.array(node.input[0]))
    if condition.size != 1:
        raise b.error(f"If condition '{node.input[0]}' has {condition.size} values; expected one")
    taken = "then_branch" if bool(condition.reshape(-1)[0]) else "else_branch"
    branch = next(helper.get_attribute_value(a) for a in node.attribute if a.name == taken)
    for init in branch.initializer:
        b.known[init.name] = numpy_helper.to_array(init)
    for inner in branch.node:
        convert_node(inner)
    b.node = node
    for outer, inner in zip(node.output, branch.output):
        if outer:
            b.alias(outer, inner.name)
