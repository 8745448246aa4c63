"""IR module → canonical VIR text.

The output parses back to an equal module.  Declarations are grouped by kind in
a fixed order (kernels, runtime, buffers, views, barriers, task lists, graphs),
one statement per line, two-space indentation inside blocks.
"""

from __future__ import annotations

import re

from vpuc.ir.graph import CONSTANT, RESULT, SCALAR, Graph, GraphOp
from vpuc.ir.graph_ops import OPS
from vpuc.ir.provenance import origin_text, print_layer
from vpuc.ir.module import Barrier, Buffer, BufferKind, KernelDecl, Module, View, format_number
from vpuc.ir.tasks import DmaMode, DmaTask, DpuTask, DpuVariant, SwKernelTask, TaskList


def _values(names) -> str:
    return ", ".join(f"%{n}" for n in names)


def _sync(waits, updates) -> str:
    text = ""
    if waits:
        text += f" waits({_values(waits)})"
    if updates:
        text += f" updates({_values(updates)})"
    return text


def _label(label: str | None) -> str:
    return f"{label}: " if label else ""


def print_kernel(kernel: KernelDecl) -> str:
    params = ", ".join(str(p) for p in kernel.params)
    return f"kernel @{kernel.name}({params}) from {kernel.source}"


def print_buffer(buffer: Buffer) -> str:
    kind = "const" if buffer.kind is BufferKind.CONST else str(buffer.kind)
    text = f"{kind} %{buffer.name} : {buffer.type}"
    if buffer.tile is not None:
        text += f" tile {buffer.tile}"
    if buffer.offset is not None:
        text += f" at {buffer.offset}"
    if buffer.init is not None:
        text += f" = {buffer.init}"
    return text


def print_view(view: View) -> str:
    slices = ", ".join(_slice(s) for s in view.slices)
    return f"view %{view.name} = %{view.base}[{slices}]"


def _slice(s) -> str:
    if s.stop == -1:  # open stop, kept as written
        text = f"{s.start}:"
        return text if s.step == 1 else f"{text}:{s.step}"
    return str(s)


def print_barrier(barrier: Barrier) -> str:
    if barrier.physical is None:
        return f"barrier %{barrier.name}"
    return f"barrier %{barrier.name} = physical {barrier.physical}"


def print_dma(task: DmaTask) -> str:
    mode = "" if task.mode is DmaMode.COPY else f"{task.mode} "
    return (f"{_label(task.label)}dma {mode}%{task.src} -> %{task.dst} channel {task.channel}"
            + _sync(task.waits, task.updates))


def _ints(values) -> str:
    return ", ".join(str(v) for v in values)


def print_variant(variant: DpuVariant) -> str:
    return (f"{_label(variant.label)}variant start({_ints(variant.start)}) "
            f"end({_ints(variant.end)})" + _mode(variant.mode)
            + _sync(variant.waits, variant.updates))


def _mode(mode: str | None) -> str:
    return f" mode({mode})" if mode else ""


def print_dpu(task: DpuTask, indent: str) -> list[str]:
    head = f"{_label(task.label)}dpu {task.op} on tile {task.tile} in({_values(task.inputs)})"
    if task.weights is not None:
        head += f" weights(%{task.weights})"
    if task.bias is not None:
        head += f" bias(%{task.bias})"
    head += f" out({_values((task.output, *task.broadcast_outputs))})"
    for name in ("kernel", "stride", "pad", "dilation"):
        values = getattr(task, name)
        if values is not None:
            head += f" {name}({_ints(values)})"
    if task.quant is not None:
        q = task.quant
        head += f" quant scale(%{q.scale}) zero_point({q.in_zero_point}, {q.out_zero_point})"
    head += _mode(task.mode)
    if task.post is not None:
        head += f" post {task.post.kind}"
        if task.post.params:
            head += "(" + ", ".join(format_number(p) for p in task.post.params) + ")"
    head += _sync(task.waits, task.updates) + " {"
    lines = [indent + head]
    lines += [indent + "  " + print_variant(v) for v in task.variants]
    lines.append(indent + "}")
    return lines


def print_sw(task: SwKernelTask, indent: str) -> list[str]:
    inputs = ", ".join(f"%{b.buffer} as %{b.alias}" for b in task.inputs)
    outputs = ", ".join(f"%{b.buffer} as %{b.alias}" for b in task.outputs)
    head = (f"{_label(task.label)}sw @{task.kernel} on tile {task.tile} inputs({inputs}) "
            f"outputs({outputs})" + _sync(task.waits, task.updates) + " {")
    lines = [indent + head]
    for const in task.consts:
        lines.append(f"{indent}  %{const.name} = const {format_number(const.value)} : {const.elem}")
    lines.append(f"{indent}  run({_values(task.run_args)})")
    lines.append(indent + "}")
    return lines


def print_task_list(task_list: TaskList) -> list[str]:
    lines = [f"tasks {task_list.executor} {{"]
    for task in task_list.tasks:
        if isinstance(task, DmaTask):
            lines.append("  " + print_dma(task))
        elif isinstance(task, DpuTask):
            lines += print_dpu(task, "  ")
        else:
            lines += print_sw(task, "  ")
    lines.append("}")
    return lines


_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_BARE = re.compile(r"(?:bf16|f16|f32|f64|u8|i8|u16|i16|u32|i32|i64|true|false|inf|nan)")


def format_attr(value) -> str:
    """An attribute value as VIR writes it (lists in brackets, names bare when they can be)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return format_number(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, str) and not (_BARE_WORD.fullmatch(value) and not _NOT_BARE.fullmatch(value)):
        return f'"{value}"'
    return str(value)


def _attrs(op: GraphOp) -> str:
    spec = OPS.get(op.kind)
    shown = []
    for name, value in op.attrs.items():
        attr = spec.attr(name) if spec else None
        if attr is not None and type(value) is type(attr.default) and value == attr.default:
            continue  # defaults are implied
        shown.append(f"{name} = {format_attr(value)}")
    return "{" + ", ".join(shown) + "}" if shown else ""


def print_graph_op(op: GraphOp, operand_type=None) -> str:
    """One graph statement; ``operand_type`` lets a Result omit a type equal to its operand's."""
    args = _values(op.operands)
    if op.kind in (CONSTANT, SCALAR) and op.const is not None:
        init = op.const
        if op.type is not None and op.type.rank == 0 and init.values is not None and len(init.values) == 1:
            payload = format_number(init.values[0])
        else:
            payload = str(init)
        return f"%{op.result} = {op.kind}({payload}) : {op.type}"
    head = f"{op.kind}{_attrs(op)}({args})"
    if op.result is not None:
        head = f"%{op.result} = {head}"
    if op.type is not None and not (op.kind == RESULT and op.type == operand_type):
        head += f" : {op.type}"
    if op.origin:
        head += " " + origin_text(op.origin)
    return head


def print_graph(graph: Graph) -> list[str]:
    types = {op.result: op.type for op in graph.ops if op.result is not None}
    lines = [f"graph @{graph.name}{_sync(graph.waits, graph.updates)} {{"]
    for op in graph.ops:
        operand_type = types.get(op.operands[0]) if op.operands else None
        lines.append("  " + print_graph_op(op, operand_type))
    lines.append("}")
    return lines


def print_module(module: Module) -> str:
    lines = [f"module @{module.name} arch {module.arch}"]
    for key, value in sorted(module.attributes.items()):
        lines.append(f"// {key}: {value}")
    sections: list[list[str]] = [
        [print_kernel(k) for k in module.kernels],
        [f"runtime @{module.runtime.kernel} stacks({_ints(module.runtime.stacks)})"]
        if module.runtime else [],
        [print_buffer(b) for b in module.buffers],
        [print_view(v) for v in module.views],
        [print_barrier(b) for b in module.barriers],
    ]
    for task_list in module.task_lists:
        sections.append(print_task_list(task_list))
    sections.append([print_layer(layer) for layer in module.layers])
    for graph in module.graphs:
        sections.append(print_graph(graph))
    for section in sections:
        if section:
            lines.append("")
            lines += section
    return "\n".join(lines) + "\n"
