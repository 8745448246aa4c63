"""The Linear IR as text (``vpuc fuse --lir``), one expression per line, for humans and goldens.

    lir @g.sg0: shave, 8 elements per vector iteration
      master 1x8x20
      in0  %x  1x8x20xf16 NCHW
      out0 %z  1x8x20xf16 NCHW
      L1: dim 0, work 20, increment 8, main
        entry e5.in0 %x: ptr +1, fin 0, 2 B
      body:
        e0           %x:s4 = Parameter{index = 0, memory = in0} : 1x8x20xf16
        e9   L0      %c0:s6 = LoopBegin{loop_id = 0}
        e5   L0.L1     %x.v:v0 = Load{count = 8, memory = in0}(%x) : 1x8x20xf16

Columns: the expression id (``e5``; loop ports name ``e5.in0``), the loops it
runs in (outermost first), then the statement, indented by loop depth, with
each output's register once assigned (``vec#3`` abstract, ``v3`` physical).
"""

from __future__ import annotations

from vpuc.fusion.lir.expression import Expression
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.fusion.lir.loop_info import LoopInfo, LoopPort
from vpuc.fusion.lir.values import Value
from vpuc.ir.types import ElemType
from vpuc.vir.printer import format_attr


def attr_text(value) -> str:
    if isinstance(value, Value):
        return str(value)
    if isinstance(value, ElemType):
        return str(value)
    if isinstance(value, tuple) and value and all(isinstance(v, Value) for v in value):
        return "x".join(str(v) for v in value)
    return format_attr(value)


def shape_text(shape) -> str:
    return "x".join(str(d) if Value.of(d).static is not None or "+" not in str(d) and " " not in
                    str(d) else f"({d})" for d in shape) or "scalar"


def expression_text(expr: Expression) -> str:
    outs = []
    for conn, desc in zip(expr.outputs, expr.out_descs):
        outs.append(f"%{conn.name}" + (f":{desc.reg}" if desc.reg is not None else ""))
    attrs = ", ".join(f"{k} = {attr_text(v)}" for k, v in expr.attrs.items())
    text = f"{expr.kind}{{{attrs}}}" if attrs else expr.kind
    text += "(" + ", ".join(f"%{c.name}" for c in expr.inputs) + ")" if expr.inputs else ""
    if outs:
        text = ", ".join(outs) + " = " + text
    if len(expr.out_descs) == 1 and expr.kind not in ("LoopBegin", "Mask"):
        text += f" : {shape_text(expr.out_descs[0].shape)}x{expr.out_descs[0].elem}"
    return text


def port_text(lp: LoopPort, info: LoopInfo) -> str:
    head = f"{lp.port} %{lp.port.connector.name}"
    if not info.initialized:
        return head
    if not lp.is_incremented:
        return f"{head}: not incremented"
    return (f"{head}: ptr {_signed(lp.ptr_increment)}, fin {_signed(lp.finalization_offset)}, "
            f"{lp.data_size} B")


def _signed(v: Value) -> str:
    text = str(v)
    return text if text.startswith("-") else "+" + text if v != 0 else "0"


def loop_text(info: LoopInfo) -> list[str]:
    flags = [info.kind] if info.kind != "whole" else []
    if info.evaluate_once:
        flags.append("once")
    if info.counter_slot is not None:
        flags.append(f"counter at spill+{info.counter_slot}")
    head = (f"L{info.id}: dim {info.dim_idx}, work {info.work_amount}, "
            f"increment {info.increment}" + "".join(f", {f}" for f in flags))
    lines = [head]
    lines += ["  entry " + port_text(lp, info) for lp in info.entries]
    lines += ["  exit  " + port_text(lp, info) for lp in info.exits]
    return lines


def print_lir(lir: LinearIR) -> str:
    cfg = lir.config
    lines = [f"lir @{lir.name}: {cfg.target.name}, {lir.increment} elements per vector iteration"]
    master = f"  master {shape_text(lir.master_shape)}"
    if any(len(g) > 1 for g in lir.domain_groups) or len(lir.domain_groups) != len(
            lir.master_shape):
        master += " (original dims " + ", ".join(
            "+".join(str(k) for k in g) for g in lir.domain_groups) + ")"
    if lir.runtime_dims:
        master += "; " + ", ".join(f"{s} = in{a}.dims[{d}]" if lir.io[a].kind == "input"
                                   else f"{s} = {lir.io[a].memory}.dims[{d}]"
                                   for s, (a, d) in sorted(lir.runtime_dims.items()))
    lines.append(master)
    for arg in lir.io:
        layout = f" {arg.layout}" if arg.layout else ""
        order = f" dimsOrder {arg.dims_order:#x}" if arg.dims_order else ""
        lines.append(f"  {arg.memory:<5}%{arg.name}  {shape_text(arg.shape)}x{arg.elem}"
                     f"{layout}{order}")
    for info in lir.loops:
        lines += ["  " + line for line in loop_text(info)]
    frame = lir.frame
    if frame.size:
        lines.append(f"  frame {frame.size} B: scratchpad {frame.scratchpad_size} B at +0, "
                     f"spills {frame.spill_size} B at +{frame.spill_offset}")
    lines.append("  body:")
    width = max((len(_loops(e)) for e in lir.exprs), default=0)
    id_width = max((len(f"e{e.id}") for e in lir.exprs), default=2)
    for expr in lir.exprs:
        depth = len(expr.loop_ids)
        lines.append(f"    {'e' + str(expr.id):<{id_width}}  {_loops(expr):<{width}}  "
                     f"{'  ' * depth}{expression_text(expr)}".rstrip())
    return "\n".join(lines) + "\n"


def _loops(expr: Expression) -> str:
    return ".".join(f"L{i}" for i in expr.loop_ids)
