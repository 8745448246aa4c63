"""optimize-domain: merge master dims that every port treats alike (OpenVINO's OptimizeDomain).

A kernel's loop nest has one loop per master dim, and only the innermost loop
is vectorized.  Two adjacent dims can be walked as one when every port either
broadcasts along both (extent 1 in both) or is dense along both (the master's
extent in both): its memory is then one run of the product.  Master dims of
static size 1 need no loop at all and are dropped.  So a dense 1x64x128x128
body becomes one loop of 1048576 elements, and 1x64x128x128 plus a per-channel
1x64x1x1 becomes 64 x 16384.

Expects: a LIR fresh from the builder (no loops yet).
Guarantees: every port shape and the master shape use the merged dims
(``domain_groups`` lists the original master dims of each; run-time sizes are
products of the original ``Dk``); the kernel arguments keep their original
memory shapes; MoveBroadcast's ``dim`` is the new innermost size.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value, product


class OptimizeDomainPass(LirPass):
    name = "optimize-domain"

    def run(self, lir: LinearIR) -> bool:
        if lir.loops.loops:
            return False
        descs = [d for e in lir.exprs for d in e.in_descs + e.out_descs]
        master = lir.master_shape
        kept = [k for k, d in enumerate(master) if d != 1] or [len(master) - 1]
        groups: list[list[int]] = []
        for k in kept:
            if groups and all((d.shape[groups[-1][-1]] == 1) == (d.shape[k] == 1) for d in descs):
                groups[-1].append(k)
            else:
                groups.append([k])
        if len(groups) == len(master):
            return False
        for d in descs:
            d.shape = tuple(product(d.shape[k] for k in g) for g in groups)
            d.layout = tuple(range(len(groups)))
        lir.master_shape = tuple(product(master[k] for k in g) for g in groups)
        old_groups = lir.domain_groups
        lir.domain_groups = [tuple(o for k in g for o in old_groups[k]) for g in groups]
        for expr in lir.exprs:
            if expr.kind == "MoveBroadcast":
                expr.attrs["dim"] = Value.of(lir.master_shape[-1])
        return True
