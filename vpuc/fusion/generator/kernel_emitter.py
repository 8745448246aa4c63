"""The kernel emitter: a prepared Linear IR to the structured MIR of a whole kernel.

OpenVINO's KernelEmitter, for ACT SHAVE's ABI (``s0`` = argsAddr, ``sp`` in
WIN_E).  It owns what no single expression does:

- the **prologue**: reserve the frame (the LIR's scratchpad and spill slots,
  plus the u8 scratch), point every data-pointer register at its data
  (``dataAddr`` of MemRefData *i*, i.e. ``lw reg, 32*i(s0)``; a Buffer register
  group at the scratchpad), and for a dynamic output whose ``isStatic`` is 0
  write its dims and dense strides (from the run-time dims of the inputs);
- the **loops**: a LoopBegin sets its counter to the trip count (read from the
  MemRefData dims when it depends on a run-time dim) and opens a ``Loop``
  (guarded when the count may be 0); its LoopEnd adds each pointer's
  per-iteration shift at the end of the body and its finalization offset
  after the loop.  Loops that run once (``evaluate_once``) have no counter
  and no back edge; one whose work amount may be 0 becomes an ``If``;
- the **mapping of registers**: the LIR's physical registers are used as they
  are, emitter temporaries are virtual (``regalloc.py`` places them);
- the **epilogue**: status 0 in ``s0``, ``halt``.

Every other expression is emitted by the target machine's emitter for its kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.context import EmitContext
from vpuc.fusion.generator.mir import ARGS, SP, If, Inst, Loop, Mem, Reg, S
from vpuc.fusion.generator.values import add_to, materialize
from vpuc.fusion.lir.contract import kernel_pointers, loop_shifts
from vpuc.fusion.lir.kinds import LOOP_BEGIN, LOOP_END
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.values import Value, product

M_STATIC, M_DIMS, M_STRIDES = 4, 12, 16
COUNTER_TEMP = S(3)          # an emitter temporary: the counter of a loop whose count is spilled


@dataclass
class MirKernel:
    name: str
    body: list                             # structured MIR: prologue, loops, ...
    tail: list[Inst] = field(default_factory=list)   # the epilogue
    frame_size: int = 0
    counters: dict = field(default_factory=lambda: {"s": 0, "v": 0, "m": 0})
    # sp + this: the u8 scratch area, SCRATCH_COPIES areas of SCRATCH_BYTES (None: unused)
    scratch_offset: int | None = None

    def fresh(self, file: str) -> Reg:
        """A new virtual register (clean-ups that need temporaries)."""
        self.counters[file] += 1
        return Reg(file, self.counters[file], virtual=True)


# The u8 pack and unpack scratch (``emitters/memory.py``): a pack's strided byte load reads
# 16 lanes 4 bytes apart, 64 bytes.  One area per copy of an unrolled loop body
# (``cleanup/unroll.py``), so the copies' packs do not share memory and interleave.
SCRATCH_BYTES = 64
SCRATCH_COPIES = 4


def _reg(lir_reg) -> Reg:
    return Reg({"gpr": "s", "vec": "v", "mask": "m"}[lir_reg.cls], lir_reg.index)


def emit_kernel(lir: LinearIR, target, output_ranks: list[int]) -> MirKernel:
    """``output_ranks``: the rank of each output's MemRefData (the LIR pads shapes)."""
    ctx = EmitContext(lir, target)
    body: list = []
    ctx.body = body
    stack: list[tuple] = []                    # open loops: (info, node or None, outer body)
    for expr in lir.exprs:
        ctx.tag = expr.id
        if expr.kind == LOOP_BEGIN:
            stack.append(_open_loop(ctx, lir, expr))
        elif expr.kind == LOOP_END:
            _close_loop(ctx, lir, expr, stack.pop())
        else:
            emitter = target.emitter(expr)
            emitter(ctx, expr)
    if stack:
        raise VpucError(f"internal: @{lir.name} has a LoopBegin without its LoopEnd")
    prologue = _prologue(ctx, lir, output_ranks)
    ctx.tag = "epilogue"
    tail = [Inst("li", [ARGS, 0], "epilogue", "status: ok"), Inst("halt", [], "epilogue")]
    return MirKernel(lir.name, prologue + body, tail, ctx.frame_size, ctx._next,
                     ctx.scratch_offset if ctx.uses_scratch else None)


def _open_loop(ctx: EmitContext, lir: LinearIR, begin) -> tuple:
    info = lir.loops.get(begin.attrs["loop_id"])
    outer = ctx.body
    inner: list = []
    if info.evaluate_once:
        node = None
        if info.may_be_empty:
            work = materialize(ctx, info.work_amount)
            node = If(work, inner, "zero", begin.id)
            outer.append(node)
        else:
            inner = outer                      # straight-line: the body stays where it is
    else:
        trip = info.trip_count
        dynamic = Value.of(trip).static is None
        if info.counter_slot is not None:
            counter, slot = COUNTER_TEMP, lir.frame.spill_offset + info.counter_slot
        else:
            counter, slot = _reg(begin.out_descs[0].reg), None
        if dynamic:
            ctx.emit("mov", counter, materialize(ctx, trip), note=f"trip count {trip}")
        else:
            ctx.emit("li", counter, Value.of(trip).static, note="trip count")
        node = Loop(counter, inner, guard=dynamic or info.may_be_empty, slot=slot, tag=begin.id,
                    name=f"L{info.id} ({info.kind}, dim {info.dim_idx})",
                    info={"lir_loop": info.id})
        outer.append(node)
    ctx.body = inner
    return info, node, outer


def _close_loop(ctx: EmitContext, lir: LinearIR, end, opened: tuple) -> None:
    info, node, outer = opened
    shifts = loop_shifts(lir, info.id)
    if isinstance(node, Loop):
        for shift in shifts:
            if shift.reg is not None and shift.step_bytes != 0:
                add_to(ctx, _reg(shift.reg), shift.step_bytes, note="pointer increment")
    ctx.body = outer
    for shift in shifts:
        if shift.reg is not None and shift.final_bytes != 0:
            add_to(ctx, _reg(shift.reg), shift.final_bytes, note="finalization offset")


def _prologue(ctx: EmitContext, lir: LinearIR, output_ranks: list[int]) -> list:
    saved = ctx.body
    ctx.body = prologue = []
    ctx.tag = "prologue"
    if ctx.uses_scratch or lir.frame.size:
        scratch = SCRATCH_BYTES * SCRATCH_COPIES if ctx.uses_scratch else 0
        ctx.frame_size = -(-(lir.frame.size + scratch) // 16) * 16
        ctx.emit("addi", SP, SP, -ctx.frame_size, note="frame")
    else:
        ctx.frame_size = 0
    for p in kernel_pointers(lir):
        if p.reg is None:
            continue
        if p.arg_index is not None:
            ctx.emit("lw", _reg(p.reg), Mem(ARGS, 32 * p.arg_index), note=f"{p.memory} dataAddr")
        else:
            ctx.emit("addi", _reg(p.reg), SP, 0, note=f"{p.memory}: scratchpad")
    outputs = [a for a in lir.io if a.kind == "output"]
    for arg, rank in zip(outputs, output_ranks):
        if all(Value.of(d).static is not None for d in arg.shape):
            continue
        _write_output_dims(ctx, lir, arg, rank)
    ctx.body = saved
    return prologue


def _write_output_dims(ctx: EmitContext, lir: LinearIR, arg, rank: int) -> None:
    """A dynamic output (isStatic = 0): write its dims and dense strides (bits)."""
    static = ctx.memref_field(arg.index, M_STATIC)
    guarded: list = []
    ctx.body.append(If(static, guarded, "nonzero", "prologue"))
    outer, ctx.body = ctx.body, guarded
    dims = ctx.memref_field(arg.index, M_DIMS)
    strides = ctx.memref_field(arg.index, M_STRIDES)
    shape = list(arg.shape)[::-1][:rank]          # memory order, innermost first
    zero = ctx.int_reg(0)
    for j, d in enumerate(shape):
        ctx.emit("sw", materialize(ctx, d), Mem(dims, 4 * j), note=f"dims[{j}]")
        stride = product(shape[:j]) * (arg.elem.nbytes * 8)
        ctx.emit("sw", materialize(ctx, stride), Mem(strides, 8 * j), note=f"strides[{j}]")
        ctx.emit("sw", zero, Mem(strides, 8 * j + 4))
    ctx.body = outer
