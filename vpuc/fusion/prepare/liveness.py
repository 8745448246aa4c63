"""Live ranges of the registers a Linear IR needs (shared by the register passes).

Positions are indices in ``lir.exprs``.  A range [start, end] is inclusive: the
register is busy from the expression that writes it through the last one
that reads it, so an output never shares a register with an input of the same
expression (emitters may write their result before reading every operand).

- A *pointer* register per memory (argument or Buffer register group) spans
  the whole kernel: the prologue loads every pointer, loops shift them.
- A loop *counter* spans its LoopBegin to its LoopEnd (none for loops that run
  once or keep their counter on the stack).
- A *value* spans its definition to its last use; a use inside a loop that
  does not contain the definition keeps the value alive to that loop's
  LoopEnd, since every iteration reads it again (a Scalar used in a loop is
  live through the whole loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.fusion.controlflow.clean_repeated_data_pointer_shifts import pointer_key
from vpuc.fusion.lir.expression import GPR, PortConnector, Reg
from vpuc.fusion.lir.kinds import LOOP_BEGIN, LOOP_END, is_pointer, output_class
from vpuc.fusion.lir.linear_ir import LinearIR


@dataclass
class LiveRange:
    reg: Reg                     # abstract
    start: int
    end: int
    role: str                    # pointer, counter or value
    connectors: list[PortConnector] = field(default_factory=list)

    def live_at(self, p: int) -> bool:
        return self.start <= p <= self.end


def compute_live_ranges(lir: LinearIR) -> list[LiveRange]:
    """Give every output an abstract register; returns the ranges, by class and number."""
    exprs = lir.exprs
    last = len(exprs) - 1
    position = {id(e): i for i, e in enumerate(exprs)}
    counts: dict[str, int] = {}
    ranges: list[LiveRange] = []
    pointers: dict[object, LiveRange] = {}

    def new(cls: str, start: int, end: int, role: str) -> LiveRange:
        reg = Reg(cls, counts.get(cls, 0))
        counts[cls] = reg.index + 1
        r = LiveRange(reg, start, end, role)
        ranges.append(r)
        return r

    ends = {e.attrs["loop_id"]: i for i, e in enumerate(exprs) if e.kind == LOOP_END}
    for i, expr in enumerate(exprs):
        for port, desc in zip(expr.output_ports(), expr.out_descs):
            conn = port.connector
            if is_pointer(expr):
                key = pointer_key(lir, port)
                if key not in pointers:
                    pointers[key] = new(GPR, 0, last, "pointer")
                r = pointers[key]
            elif expr.kind == LOOP_BEGIN:
                info = lir.loops.get(expr.attrs["loop_id"])
                if info.evaluate_once or info.counter_slot is not None:
                    desc.reg = None
                    continue
                r = new(GPR, i, ends[info.id], "counter")
            else:
                end = i
                for use in conn.consumers:
                    end = max(end, position[id(use.expr)])
                    for lid in use.expr.loop_ids:
                        if lid not in expr.loop_ids:
                            end = max(end, ends.get(lid, lir.loop_bounds(lid)[1]))
                r = new(output_class(expr, port.index), i, end, "value")
            r.connectors.append(conn)
            desc.reg = r.reg
    for expr in exprs:
        for conn, desc in zip(expr.inputs, expr.in_descs):
            desc.reg = conn.source.descriptor.reg
    return ranges


def pressure(ranges: list[LiveRange], cls: str, n: int) -> list[int]:
    counts = [0] * n
    for r in ranges:
        if r.reg.cls == cls:
            for p in range(r.start, r.end + 1):
                counts[p] += 1
    return counts
