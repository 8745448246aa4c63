"""Small in-place rewriting helpers for subgraph bodies."""

from __future__ import annotations

from vpuc.ir.graph import PARAMETER, RESULT, Graph, GraphOp
from vpuc.ir.module import Ref


def replace_uses(body: Graph, old: str, new: str) -> None:
    """Make every reader of ``old`` read ``new``."""
    for op in body.ops:
        if old in op.operands:
            op.operands = tuple(Ref(new, o.loc) if o == old else o for o in op.operands)


def remove_dead(body: Graph) -> None:
    """Drop ops whose value nobody reads; Parameters stay (they are the kernel's interface)."""
    while True:
        read = {o for op in body.ops for o in op.operands}
        keep = [op for op in body.ops
                if op.kind in (RESULT, PARAMETER) or op.result in read]
        if len(keep) == len(body.ops):
            return
        body.ops = keep


def users(body: Graph, name: str) -> list[GraphOp]:
    return [op for op in body.ops if name in op.operands]


def producer(body: Graph, name: str) -> GraphOp | None:
    return next((op for op in body.ops if op.result == name), None)
