"""insert-specific-iterations: a vector-wide main body plus a masked tail (OpenVINO's pass).

A loop whose work amount is not a multiple of its increment is split:

- the *main* loop keeps the body, runs ``work - work % increment`` elements
  (``increment * (Dk // increment)`` for a run-time dim) and leaves its
  pointers where the tail continues (finalization offsets 0);
- the *tail* loop is a copy of the body placed right after it, with increment
  = work amount = the remainder, so it runs once; it keeps the original
  finalization offsets, which return every pointer to where the main loop
  found it.  Its vector-wide Loads, Stores and BroadcastLoads move ``count`` =
  remainder elements.

A loop shorter than one vector becomes a tail in place.  With a run-time work
amount both loops exist and either may run zero times (``may_be_empty``).

**Masks.**  Every Load or Store that moves fewer elements than its vector
holds (a tail, or a narrow type in a loop sized for a wide one) gets a mask as
an extra input: a ``Mask{count, elem}`` expression, one per distinct (count,
element size), placed before the loop nest of its first user.  On ACT SHAVE
the emitter materializes it with ``vmask.{b,h,w} m, s`` where ``s`` holds the
count (``li`` for a static count; computed from the MemRefData dims for
``Dk % n``), and the access becomes ``vld.m vd, off(sa), m`` / ``vst.m va,
off(sa), m``: inactive lanes are neither read nor written, so a tail at the
very end of a buffer never touches memory past it.  A count of 1 is a mask
too (one lane).  BroadcastLoads are never masked: ``vldb`` reads one element.

Expects: loops inserted and cleaned (the control-flow pipeline ran).
Guarantees: every loop's work amount is a multiple of its increment or equals
it; every partial memory access has a mask input.
"""

from __future__ import annotations

from copy import deepcopy

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.builder import vector_lanes
from vpuc.fusion.lir.expression import Expression, Node, PortConnector, PortDescriptor
from vpuc.fusion.lir.kinds import (BROADCAST_LOAD, LOAD, LOOP_BEGIN, LOOP_END, MASK_KIND, STORE)
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.loop_info import LoopInfo
from vpuc.fusion.lir.values import Value


def copy_loop(lir: LinearIR, loop_id: int, suffix: str) -> dict[int, int]:
    """Copy a loop (LoopBegin to LoopEnd, nested loops included) right after itself.

    Values produced inside get new connectors; values from outside are shared.  Returns
    the map from old to new loop ids; the new loop infos copy the old ones with their
    ports moved to the copied expressions."""
    first, last = lir.loop_bounds(loop_id)
    segment = lir.exprs[first:last + 1]
    ids = sorted({lid for e in segment for lid in e.loop_ids if lid not in
                  segment[0].loop_ids} | {loop_id})
    new_ids = {}
    for lid in ids:
        old = lir.loops.get(lid)
        info = lir.loops.add_info(LoopInfo(0, old.dim_idx, old.work_amount, old.increment,
                                           [], [], old.kind, old.evaluate_once, old.initialized))
        new_ids[lid] = info.id
    conns: dict[int, PortConnector] = {}
    exprs: dict[int, Expression] = {}
    copies = []
    for e in segment:
        attrs = deepcopy(e.attrs)
        if e.kind in (LOOP_BEGIN, LOOP_END):
            attrs["loop_id"] = new_ids[attrs["loop_id"]]
        inputs = [conns.get(id(c), c) for c in e.inputs]
        names = [f"{c.name}.{suffix}" for c in e.outputs]
        copy = lir.create_expression(Node(e.kind, attrs), inputs,
                                     [d.clone() for d in e.out_descs],
                                     [new_ids.get(lid, lid) for lid in e.loop_ids], names,
                                     [d.clone() for d in e.in_descs])
        for old_conn, new_conn in zip(e.outputs, copy.outputs):
            conns[id(old_conn)] = new_conn
        exprs[id(e)] = copy
        copies.append(copy)
    lir.exprs[last + 1:last + 1] = copies
    for lid in ids:
        old, new = lir.loops.get(lid), lir.loops.get(new_ids[lid])
        move = lambda lp: lp.with_port(type(lp.port)(exprs[id(lp.port.expr)], lp.port.type,
                                                       lp.port.index))
        new.entries = [move(lp) for lp in old.entries]
        new.exits = [move(lp) for lp in old.exits]
    return new_ids


def _vector_wide(lir: LinearIR, expr: Expression) -> bool:
    return expr.kind in (LOAD, STORE, BROADCAST_LOAD) and expr.attrs["count"] == lir.increment


class InsertSpecificIterationsPass(LirPass):
    name = "insert-specific-iterations"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for info in list(lir.loops):
            inc = info.increment.static
            if info.kind != "whole" or inc is None or inc == 1:
                continue
            work = info.work_amount
            if work.static is not None and work.static % inc == 0:
                continue
            tail = work % inc
            main = (work // inc) * inc
            if main == 0:
                info.increment, info.kind = tail, "tail"
                self._narrow(lir, info.id, tail)
                changed = True
                continue
            new_ids = copy_loop(lir, info.id, "tail")
            tail_info = lir.loops.get(new_ids[info.id])
            tail_info.work_amount, tail_info.increment, tail_info.kind = tail, tail, "tail"
            info.work_amount, info.kind = main, "main"
            for lp in info.ports:
                lp.finalization_offset = Value(0)
            self._narrow(lir, tail_info.id, tail)
            changed = True
        return self._insert_masks(lir) or changed

    @staticmethod
    def _narrow(lir: LinearIR, loop_id: int, count: Value) -> None:
        for e in lir.loop_exprs(loop_id):
            if _vector_wide(lir, e):
                e.attrs["count"] = count
            for desc in e.in_descs + e.out_descs:
                if desc.subtensor == (lir.increment,):
                    desc.subtensor = (count,)

    @staticmethod
    def _insert_masks(lir: LinearIR) -> bool:
        masks: dict[tuple, PortConnector] = {}
        changed = False
        for expr in list(lir.exprs):
            if expr.kind not in (LOAD, STORE) or len(expr.inputs) > 1:
                continue
            desc = expr.in_descs[0] if expr.kind == LOAD else expr.out_descs[0]
            count = Value.of(expr.attrs["count"])
            if count == vector_lanes(lir.config.target, desc.elem):
                continue
            key = (count, desc.elem.nbytes)
            if key not in masks:
                first = expr.loop_ids[0] if expr.loop_ids else None
                at = lir.loop_bounds(first)[0] if first is not None else lir.position(expr)
                mask = lir.create_expression(
                    Node(MASK_KIND, {"count": count, "elem": desc.elem}), [],
                    [PortDescriptor((), desc.elem)], [], names=[f"mask{len(masks)}"])
                lir.insert(at, mask)
                masks[key] = mask.outputs[0]
            lir.add_input(expr, masks[key], PortDescriptor((), desc.elem))
            changed = True
        return changed
