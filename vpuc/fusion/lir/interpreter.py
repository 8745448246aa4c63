"""A numpy interpreter of the Linear IR: the executable meaning of the emitter's contract.

It runs a LIR the way generated code would, one expression at a time, so the
tests can compare any pipeline stage with the reference executor:

- memory: one flat array per kernel argument (dense, in its memory shape) and
  a byte array for the buffer scratchpad; a pointer register holds
  (region, byte offset); the prologue sets every pointer register (Parameter,
  Result, Buffer register group) to the start of its region;
- registers: once assign-registers ran, values live in *physical* registers
  (so a wrong allocation corrupts results); before, in their connectors;
- vectors hold ``lir.increment`` elements; a Load/Store moves ``count``
  elements (the mask's count when masked: inactive lanes read 0, write
  nothing); reading or writing outside a region raises;
- LoopBegin evaluates ``trip_count`` (skipping to the LoopEnd's finalization
  when the work amount is 0); LoopEnd adds ``ptr_increment * increment *
  data_size`` to each incremented port's pointer per iteration, loops back
  while the counter is not 0, then adds ``finalization_offset * data_size``;
  ``evaluate_once`` loops only finalize.  Before insert-specific-iterations a
  loop's work amount need not be a multiple of its increment: the last
  iteration of such a ``whole`` loop then does the remainder (its vector-wide
  accesses move fewer elements, its pointers move less), which is what the
  main + tail split computes, so every pipeline stage can be executed;
- elementwise kinds compute with ``reference.run_op`` on the vector.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.fusion.controlflow.clean_repeated_data_pointer_shifts import pointer_key
from vpuc.fusion.lir.expression import Expression, PortConnector
from vpuc.fusion.lir.kinds import (BROADCAST_LOAD, BUFFER, COPY, LOAD, LOOP_BEGIN, LOOP_END,
                                   MASK_KIND, MOVE_BROADCAST, PARAMETER, RELOAD, RESULT, SCALAR,
                                   SPILL, STORE, is_pointer)
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value
from vpuc.reference.graph import round_to, run_op, storage_dtype
from vpuc.ir.graph import GraphOp
from vpuc.ir.types import TensorType, DimsOrder


class LirInterpreter:
    def __init__(self, lir: LinearIR, inputs: list[np.ndarray]) -> None:
        self.lir = lir
        self.env = self._dims(inputs)
        self.memory: dict[str, np.ndarray] = {}
        for arg in lir.io:
            dtype = storage_dtype(arg.elem)
            if arg.kind == "input":
                self.memory[arg.memory] = np.ascontiguousarray(
                    round_to(np.asarray(inputs[arg.index], np.float64), arg.elem)).ravel()
            else:
                size = int(np.prod([Value.of(d).evaluate(self.env) for d in arg.shape]))
                self.memory[arg.memory] = np.full(size, np.nan if np.issubdtype(dtype, np.floating)
                                                  else 0, dtype)
        self.memory["scratch"] = np.zeros(max(lir.frame.scratchpad_size, 1), np.uint8)
        self.regs: dict[object, object] = {}
        self.spills: dict[int, object] = {}
        self.counters: dict[int, int] = {}
        self.remaining: dict[int, int] = {}      # elements left in a loop (partial last steps)
        self.step: dict[int, int] = {}           # elements the current iteration does
        self.physical = any(d.reg is not None and d.reg.physical
                            for e in lir.exprs for d in e.out_descs)
        self.steps = 0

    # ------------------------------------------------------------ registers
    def _key(self, expr: Expression, kind: str, i: int):
        conn: PortConnector = expr.inputs[i] if kind == "in" else expr.outputs[i]
        desc = expr.in_descs[i] if kind == "in" else expr.out_descs[i]
        if self.physical and desc.reg is not None:
            return desc.reg
        source = conn.source
        if is_pointer(source.expr):
            return ("ptr", pointer_key(self.lir, source))
        return id(conn)

    def read(self, expr: Expression, i: int):
        return self.regs[self._key(expr, "in", i)]

    def write(self, expr: Expression, i: int, value) -> None:
        self.regs[self._key(expr, "out", i)] = value

    def _dims(self, inputs: list[np.ndarray]) -> dict[str, int]:
        env = {}
        for sym, (arg, dim) in self.lir.runtime_dims.items():
            env[sym] = int(np.shape(inputs[arg])[::-1][dim])
        return env

    # ------------------------------------------------------------ run
    def run(self, max_steps: int = 5_000_000) -> list[np.ndarray]:
        lir = self.lir
        exprs = lir.exprs
        for e in exprs:                          # the prologue: every pointer register
            if is_pointer(e):
                region = "scratch" if e.attrs["memory"].startswith("buf") else e.attrs["memory"]
                self.write(e, 0, (region, 0))
        begins = {e.attrs["loop_id"]: i for i, e in enumerate(exprs) if e.kind == LOOP_BEGIN}
        ends = {e.attrs["loop_id"]: i for i, e in enumerate(exprs) if e.kind == LOOP_END}
        pc = 0
        while pc < len(exprs):
            self.steps += 1
            if self.steps > max_steps:
                raise VpucError(f"LIR interpreter: more than {max_steps} steps")
            e = exprs[pc]
            if e.kind == LOOP_BEGIN:
                info = lir.loops.get(e.attrs["loop_id"])
                if info.work_amount.evaluate(self.env) == 0:
                    self._finalize(exprs[ends[info.id]], info)
                    pc = ends[info.id] + 1
                    continue
                work = info.work_amount.evaluate(self.env)
                inc = info.increment.evaluate(self.env)
                self.counters[info.id] = -(-work // inc)
                self.remaining[info.id] = work
                self.step[info.id] = min(inc, work)
            elif e.kind == LOOP_END:
                info = lir.loops.get(e.attrs["loop_id"])
                if not info.evaluate_once:
                    inc = self.step[info.id]
                    self._shift(e, info, lambda lp: lp.ptr_increment.evaluate(self.env) * inc
                                if lp.is_incremented else 0)
                    self.counters[info.id] -= 1
                    self.remaining[info.id] -= inc
                    if self.counters[info.id] > 0:
                        self.step[info.id] = min(inc, self.remaining[info.id])
                        pc = begins[info.id] + 1
                        continue
                self._finalize(e, info)
            else:
                self._execute(e)
            pc += 1
        outs = []
        for arg in lir.io:
            if arg.kind == "output":
                shape = tuple(Value.of(d).evaluate(self.env) for d in arg.shape)
                outs.append(self.memory[arg.memory].reshape(shape))
        return outs

    def _shift(self, end: Expression, info, elements) -> None:
        for i, lp in enumerate(info.ports):
            delta = elements(lp) * lp.data_size
            if delta:
                region, offset = self.read(end, i)
                self._set_pointer(end, i, (region, offset + delta))

    def _set_pointer(self, end: Expression, i: int, value) -> None:
        self.regs[self._key(end, "in", i)] = value

    def _finalize(self, end: Expression, info) -> None:
        self._shift(end, info, lambda lp: lp.finalization_offset.evaluate(self.env))

    # ------------------------------------------------------------ expressions
    def _execute(self, e: Expression) -> None:
        n = self.lir.increment
        kind = e.kind
        if kind in (PARAMETER, RESULT, BUFFER):
            return
        if kind == SCALAR:
            dtype = storage_dtype(e.out_descs[0].elem)
            self.write(e, 0, round_to(np.full(n, e.attrs["value"], np.float64), e.out_descs[0].elem)
                       .astype(dtype))
        elif kind == MASK_KIND:
            self.write(e, 0, Value.of(e.attrs["count"]).evaluate(self.env))
        elif kind in (LOAD, BROADCAST_LOAD):
            elem = e.in_descs[0].elem
            data = self._view(self.read(e, 0), elem, e.attrs["offset"])
            if kind == BROADCAST_LOAD:
                self.write(e, 0, np.full(n, self._slice(data, 1)[0]))
            else:
                count = self._count(e)
                out = np.zeros(n, storage_dtype(elem))
                out[:count] = self._slice(data, count)
                self.write(e, 0, out)
        elif kind == STORE:
            value = self.read(e, 0)
            count = self._count(e)
            pointer = self.regs[self._key(e, "out", 0)]   # the pointer it writes through
            data = self._view(pointer, e.out_descs[0].elem, e.attrs["offset"])
            self._slice(data, count)[:] = value[:count]
        elif kind == SPILL:
            self.spills[e.attrs["slot"]] = self.read(e, 0)
        elif kind == RELOAD:
            self.write(e, 0, self.spills[e.attrs["slot"]])
        elif kind == COPY:
            self.write(e, 0, self.read(e, 0))
        elif kind == MOVE_BROADCAST:
            self.write(e, 0, np.full(n, self.read(e, 0)[0]))
        else:
            out = e.out_descs[0]
            op = GraphOp(kind, "v", (), dict(e.attrs), TensorType((n,), out.elem,
                                                                 DimsOrder.identity(1)))
            args = [self.read(e, i) for i in range(len(e.inputs))]
            self.write(e, 0, run_op(op, args))

    def _count(self, e: Expression) -> int:
        count = Value.of(e.attrs["count"]).evaluate(self.env)
        if e.loop_ids and count == self.lir.increment:
            count = min(count, self.step.get(e.loop_ids[-1], count))
        if len(e.inputs) > 1:
            mask = self.read(e, 1)
            if mask != count:
                raise VpucError(f"e{e.id}: mask of {mask} lanes for a {count}-element access")
        return count

    def _view(self, pointer, elem, offset: int):
        region, byte = pointer
        byte += offset
        dtype = np.dtype(storage_dtype(elem))
        buf = self.memory[region]
        if region == "scratch":
            if byte % dtype.itemsize:
                raise VpucError(f"unaligned scratchpad access at byte {byte}")
            return buf[byte:].view(dtype) if (len(buf) - byte) % dtype.itemsize == 0 else \
                buf[byte:byte + (len(buf) - byte) // dtype.itemsize * dtype.itemsize].view(dtype)
        if byte % buf.itemsize or byte < 0:
            raise VpucError(f"access to {region} at byte {byte}: outside or unaligned")
        return buf[byte // buf.itemsize:]

    @staticmethod
    def _slice(data: np.ndarray, count: int) -> np.ndarray:
        if count > len(data):
            raise VpucError(f"access of {count} elements runs past the end of its memory")
        return data[:count]


def run_lir(lir: LinearIR, inputs: Mapping[str, np.ndarray] | list[np.ndarray]) -> list[np.ndarray]:
    """Execute ``lir`` on input arrays (by argument order, or by body value name), in each
    argument's memory shape; returns the outputs in theirs."""
    if isinstance(inputs, Mapping):
        inputs = [inputs[a.name] for a in lir.io if a.kind == "input"]
    return LirInterpreter(lir, [np.asarray(x) for x in inputs]).run()
