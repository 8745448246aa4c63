"""A ReduceMean/ReduceSum/ReduceMax over axes that are not adjacent in memory, as a chain
of reductions over adjacent runs of them.

The library kernels reduce one dim, so ``lower_library`` merges the reduced axes into
one: only axes adjacent in memory merge (ReduceMean over H and C of an NCHW tensor, or
over N and W, do not).  ``lower-graph`` calls ``split_reductions`` before tokenizing:
each run of axes adjacent in memory becomes a reduction of its own, keeping its dims so
the next run's axes keep their numbers, and a Reshape drops them at the end when the op
does not keep them.  The result is the same in exact arithmetic: a mean over A and B is
the mean over B of the means over A (every group has the same count), sums and maxima
are associative.  In f16 each reduction of the chain rounds its result once more (the
kernels accumulate in f32).

Expects: a typed graph.
Guarantees: every ReduceMean, ReduceSum and ReduceMax reduces axes adjacent in memory;
a split op's value is defined by the chain's last op, at its location and provenance;
the graph is re-typed.
"""

from __future__ import annotations

from vpuc.ir.graph import Graph, GraphOp, fresh_in
from vpuc.verifier.graph import infer_graph

REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax")


def memory_runs(axes, perm: tuple[int, ...]) -> list[list[int]]:
    """``axes`` (logical) in runs that are adjacent in memory (``perm``: the logical dims
    from outermost to innermost), outermost run first."""
    runs: list[list[int]] = []
    for position in sorted(perm.index(a) for a in axes):
        if runs and perm.index(runs[-1][-1]) == position - 1:
            runs[-1].append(perm[position])
        else:
            runs.append([perm[position]])
    return runs


def split_reductions(graph: Graph) -> bool:
    """Rewrite ``graph`` in place; True when some reduction was split."""
    index = graph.index()
    taken = {op.result for op in graph.ops}
    ops: list[GraphOp] = []
    changed = False
    for op in graph.ops:
        if op.kind not in REDUCTIONS:
            ops.append(op)
            continue
        x = index.producer(op.operands[0]).type
        rank = x.rank
        runs = memory_runs({a % rank for a in op.attrs["axes"]}, x.order.perm) if rank else []
        if len(runs) < 2:
            ops.append(op)
            continue
        changed = True
        value = op.operands[0]
        for n, run in enumerate(runs):
            last = n == len(runs) - 1
            result = op.result if last and op.attrs["keep_dims"] else fresh_in(f"{op.result}.part{n}", taken)
            ops.append(GraphOp(op.kind, result, (value,), {"axes": tuple(sorted(run)), "keep_dims": True},
                               loc=op.loc, origin=op.origin))
            value = result
        if not op.attrs["keep_dims"]:
            ops.append(GraphOp("Reshape", op.result, (value,), {"shape": tuple(op.type.dims)},
                               loc=op.loc, origin=op.origin))
    if changed:
        graph.ops = ops
        infer_graph(graph)
    return changed

