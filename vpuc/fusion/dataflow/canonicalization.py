"""canonicalization: bring the plugin's input layouts into the body.

The tokenizer copies ops with their logical shapes; the kernel, though, walks
memory.  This pass gives every port its *memory shape* in one common storage
order, so the later stages schedule loops over memory dims directly:

1. Every Parameter gets a layout: the plugin's choice (``ctx.layouts``, planar
   or blocked) or, by default, planar in its type's dims order.
2. Ranks are equalised the numpy way: a Parameter of lower rank gets leading
   dims of 1.
3. The *base* layout is a blocked input's if there is one (all blocked inputs
   must agree), else the layout of the first input of full rank.  Every other
   input must store its non-1 dims in the same relative order (dims of 1 can
   sit anywhere without moving a byte); a planar input next to a blocked one
   must be 1 along the blocked dim, and gets a trailing 1 for its block.
4. Each Parameter's type becomes its memory shape in the base order (identity
   dims order), with a ``layout`` attribute naming its own layout; Results get
   the base layout; Broadcast targets are rewritten the same way; types are
   re-inferred.

Expects: a body fresh from the tokenizer (Parameters without ``layout``).
Guarantees: all ports have the same rank and storage order, broadcasting only
along dims of 1; a body already canonical is left alone.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.dataflow.base import DataflowContext, GraphPass
from vpuc.fusion.dataflow.layout import PortLayout
from vpuc.ir.graph import Graph
from vpuc.ir.types import DimsOrder, TensorType
from vpuc.verifier.graph import infer_graph


class Canonicalization(GraphPass):
    name = "canonicalization"

    def run(self, body: Graph, ctx: DataflowContext) -> bool:
        params, results = body.parameters, body.results
        if any("layout" in p.attrs for p in params):
            return False
        rank = max((op.type.rank for op in params + results), default=0)
        own = {}
        for param in params:
            layout = ctx.layouts.get(param.result) or PortLayout.planar(param.type.order.perm)
            if layout.rank != param.type.rank:
                raise VpucError(f"layout {layout} for %{param.result} has rank {layout.rank}; "
                                f"its type {param.type} has rank {param.type.rank}", param.loc)
            own[param.result] = layout.prepended(rank - param.type.rank)
        base = self._base(body, own, rank)
        # Check and compute everything first, so a body that cannot be canonicalized is untouched.
        new_types = {}
        for param in params:
            dims = (1,) * (rank - param.type.rank) + param.type.dims
            self._check_compatible(param, own[param.result], base, dims)
            new_types[id(param)] = (self._memory_type(base, dims, param.type), own[param.result])
        for result in results:
            dims = (1,) * (rank - result.type.rank) + result.type.dims
            new_types[id(result)] = (self._memory_type(base, dims, result.type), base)
        targets = {}
        for op in body.ops:
            if op.kind == "Broadcast":
                shape = tuple(op.attrs["shape"])
                targets[id(op)] = self._memory_type(base, (1,) * (rank - len(shape)) + shape,
                                                    op.type).dims
        for op in params + results:
            op.type, layout = new_types[id(op)]
            op.attrs["layout"] = str(layout)
        for op in body.ops:
            if op.kind == "Broadcast":
                op.attrs["shape"] = targets[id(op)]
        infer_graph(body)
        return True

    @staticmethod
    def _base(body: Graph, own: dict[str, PortLayout], rank: int) -> PortLayout:
        blocked = [(n, l) for n, l in own.items() if l.is_blocked]
        for name, layout in blocked[1:]:
            if layout != blocked[0][1]:
                where = next(p.loc for p in body.parameters if p.result == name)
                raise VpucError(f"inputs %{blocked[0][0]} ({blocked[0][1]}) and %{name} ({layout}) "
                                f"of @{body.name} are blocked differently; canonicalization needs "
                                "one blocked layout", where)
        if blocked:
            return blocked[0][1]
        full = [p for p in body.parameters if p.type.rank == rank]
        return own[full[0].result] if full else PortLayout.planar(DimsOrder.identity(rank).perm)

    @staticmethod
    def _check_compatible(param, layout: PortLayout, base: PortLayout, dims) -> None:
        where = f"input %{param.result} ({layout})"
        if layout.is_blocked:
            return    # equal to the base: checked in _base
        if base.is_blocked and dims[base.blocked_dim] != 1:
            raise VpucError(f"{where} is planar but the base layout {base} blocks a dim that "
                            f"{where} does not broadcast along (size {dims[base.blocked_dim]})",
                            param.loc)
        if layout.non_unit_order(dims) != PortLayout.planar(base.perm).non_unit_order(dims):
            raise VpucError(f"{where} stores its dims in another order than the base layout "
                            f"{base}; canonicalization needs one storage order", param.loc)

    @staticmethod
    def _memory_type(base: PortLayout, dims, logical: TensorType) -> TensorType:
        try:
            memory = base.memory_dims(tuple(dims))
        except ValueError as exc:
            raise VpucError(f"cannot lay out {logical} as {base}: {exc}") from None
        return TensorType(memory, logical.elem, DimsOrder.identity(len(memory)))
