"""The emitter's view of a prepared Linear IR: what to set up and what each loop does.

``lower_subgraph`` leaves everything in the LIR; these helpers read it in the
shape an emitter wants (see docs/lir.md for the full contract):

- ``kernel_pointers``: every data pointer register and how the prologue sets
  it: ``lw reg, 32*index(s0)`` (``dataAddr`` of MemRefData ``index``) for an
  argument, the scratchpad base (``sp`` + 0 after reserving ``frame.size``)
  for a Buffer register group;
- ``loop_shifts``: per loop, the byte amount each pointer register moves after
  every iteration and once after the loop (several ports on one register are
  summed; zero moves are left out);
- ``runtime_values``: every dynamic value the kernel must compute (work
  amounts, trip counts, shifts, mask counts), each a ``Value`` over ``Dk``
  read from ``lir.runtime_dims``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.fusion.controlflow.clean_repeated_data_pointer_shifts import pointer_key
from vpuc.fusion.lir.expression import Reg
from vpuc.fusion.lir.kinds import BUFFER, LOOP_END, MASK_KIND, MEMORY_ACCESS, PARAMETER, STORE
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value


@dataclass(frozen=True)
class PointerInit:
    reg: Reg | None
    memory: str          # in<i>, out<j>, or buf<k> (the first Buffer of its register group)
    arg_index: int | None   # MemRefData index for an argument, None for the scratchpad


@dataclass(frozen=True)
class LoopShift:
    reg: Reg | None
    step_bytes: Value    # added after every iteration
    final_bytes: Value   # added once after the last iteration


def kernel_pointers(lir: LinearIR) -> list[PointerInit]:
    found: dict[object, PointerInit] = {}
    for expr in lir.exprs:
        if expr.kind in (PARAMETER, BUFFER, STORE):
            port = expr.output_port(0)
            key = pointer_key(lir, port)
            if key in found:
                continue
            memory = expr.attrs["memory"]
            arg = lir.arg(memory)
            found[key] = PointerInit(expr.out_descs[0].reg, memory,
                                     arg.index if arg is not None else None)
    return list(found.values())


def loop_shifts(lir: LinearIR, loop_id: int) -> list[LoopShift]:
    info = lir.loops.get(loop_id)
    end = lir.loop_marker(LOOP_END, loop_id)
    totals: dict[object, list] = {}
    for i, lp in enumerate(info.ports):
        reg = end.in_descs[i].reg if end is not None else None
        key = reg if reg is not None else pointer_key(lir, lp)
        step = lp.ptr_increment * info.increment * lp.data_size if lp.is_incremented else Value(0)
        final = lp.finalization_offset * lp.data_size
        entry = totals.setdefault(key, [reg, Value(0), Value(0)])
        entry[1] = entry[1] + step
        entry[2] = entry[2] + final
    return [LoopShift(reg, step, final) for reg, step, final in totals.values()
            if step != 0 or final != 0]


def runtime_values(lir: LinearIR) -> list[Value]:
    """The distinct dynamic values the generated code computes, in first-use order."""
    seen: dict[Value, None] = {}

    def add(v) -> None:
        v = Value.of(v)
        if v.static is None:
            seen.setdefault(v, None)

    for info in lir.loops:
        add(info.work_amount)
        add(info.increment)
        add(info.trip_count)
        for shift in loop_shifts(lir, info.id):
            add(shift.step_bytes)
            add(shift.final_bytes)
    for expr in lir.exprs:
        if expr.kind == MASK_KIND or expr.kind in MEMORY_ACCESS:
            add(expr.attrs["count"])
    return list(seen)
