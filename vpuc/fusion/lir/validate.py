"""Invariants of a Linear IR, checked after every pass when ``config.verify`` is set.

- connectors and ports agree both ways (every input port is among its
  connector's consumers, every output connector's source is that port);
- every input is produced above its use (the LIR is a valid control flow);
- each loop's expressions are contiguous and loops nest (an expression's
  ``loop_ids`` list outer loops first, and an inner loop stays inside its outer one);
- LoopBegin/LoopEnd come in pairs around their loop and a LoopEnd reads one
  pointer per loop port plus the counter;
- loop ports point at expressions of the LIR that run inside the loop.

Violations raise ``VpucError`` naming the pass that broke them: they are bugs.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.lir.kinds import LOOP_BEGIN, LOOP_END
from vpuc.fusion.lir.linear_ir import LinearIR


def validate(lir: LinearIR, after: str = "") -> None:
    where = f" after {after}" if after else ""

    def fail(message: str) -> None:
        raise VpucError(f"internal: the LIR of @{lir.name} is invalid{where}: {message}")

    position = {id(e): i for i, e in enumerate(lir.exprs)}
    for i, expr in enumerate(lir.exprs):
        if len(expr.inputs) != len(expr.in_descs) or len(expr.outputs) != len(expr.out_descs):
            fail(f"e{expr.id} has ports without descriptors")
        for port in expr.input_ports():
            conn = port.connector
            if port not in conn.consumers:
                fail(f"{port} reads %{conn.name} but is not among its consumers")
            src = position.get(id(conn.source.expr))
            if src is None:
                fail(f"{port} reads %{conn.name} whose source e{conn.source.expr.id} is gone")
            if src >= i:
                fail(f"{port} reads %{conn.name} before e{conn.source.expr.id} produces it")
        for port in expr.output_ports():
            conn = port.connector
            if conn.source != port:
                fail(f"%{conn.name} is an output of e{expr.id} but names {conn.source} as source")
            for consumer in conn.consumers:
                if id(consumer.expr) not in position:
                    fail(f"%{conn.name} is read by e{consumer.expr.id}, which is not in the LIR")
    _check_loops(lir, position, fail)


def _check_loops(lir: LinearIR, position, fail) -> None:
    used = {lid for e in lir.exprs for lid in e.loop_ids}
    for lid in used:
        if lid not in lir.loops.loops:
            fail(f"expressions run in loop {lid}, which has no loop info")
        first, last = lir.loop_bounds(lid)
        for e in lir.exprs[first:last + 1]:
            marker = e.kind in (LOOP_BEGIN, LOOP_END) and e.attrs["loop_id"] == lid
            if lid not in e.loop_ids and not marker:
                fail(f"loop {lid} is not contiguous: e{e.id} sits inside it")
        outer = None
        for e in lir.loop_exprs(lid):
            prefix = tuple(e.loop_ids[:e.loop_ids.index(lid)])
            if outer is None:
                outer = prefix
            elif prefix != outer:
                fail(f"loop {lid} is nested in different loops ({outer} and {prefix})")
        begin = lir.loop_marker(LOOP_BEGIN, lid)
        end = lir.loop_marker(LOOP_END, lid)
        if (begin is None) != (end is None):
            fail(f"loop {lid} has a LoopBegin or a LoopEnd but not both")
        info = lir.loops.get(lid)
        if begin is not None:
            if first != position[id(begin)] or last != position[id(end)]:
                fail(f"LoopBegin/LoopEnd of loop {lid} do not enclose its expressions")
            if len(end.inputs) != len(info.ports) + 1 or end.inputs[-1] is not begin.outputs[0]:
                fail(f"LoopEnd of loop {lid} reads {len(end.inputs)} values; expected one "
                     f"pointer per port ({len(info.ports)}) and the counter")
        for lp in info.ports:
            e = lp.port.expr
            if id(e) not in position or lid not in e.loop_ids:
                fail(f"loop {lid} has a port {lp.port} outside the loop")
