"""lower-graph: a graph-level module to a task-level program with generated ACT SHAVE kernels.

For each graph block: tokenize it for ACT SHAVE (``vpuc.fusion.subgraph``),
generate one kernel per subgraph (``vpuc.fusion.generator``), and replace the
graph with a program (``blocked_program.py``): the network's Parameters become
``input`` buffers, its Results ``output`` buffers, tensor Constants read by a
subgraph ``const`` buffers; the tensors are cut into blocks along one axis
(double-buffered CMX slots, alternating over the tiles, the two ACT SHAVEs of a
tile each taking half of a block), and every block is DMA in -> one ACT SHAVE
task per subgraph, in the condensed graph's order, values between subgraphs
staying in CMX -> DMA out.  Each kernel is generated for the shape of its part
of a block (static trip counts), declared ``kernel @<graph>.sgN(...) from
generated`` with its generated contract, and its ELF object goes to
``ctx.artifacts["generated-kernels"]``, where assign-windows finds it.

A Softmax over the last logical dim, which the tokenizer leaves out, runs
as the library's ``softmax`` kernel in the same block pipeline (the blocks are
then never cut along that dim).  Other ops left out (Convolution, MatMul,
MaxPool, Reshape, Transpose, other Softmax axes) are not lowered yet: the pass
stops with an error naming them.  Graphs with run-time dims run as one block (no slicing of a dynamic
dim).  ``ctx.artifacts["fusion-print"]``, when set by the command line, is
called with (stage, text) after every generator stage (``--print-lir``,
``--print-after-all``); the pass itself never prints.

Expects: a verified module whose graph blocks are typed; no task lists beside them.
Guarantees: no graph block is left; every subgraph has a kernel declaration,
its generated object in ``ctx.artifacts["generated-kernels"]``, buffers,
views, barriers and tasks; the module verifies.
"""

from __future__ import annotations

import copy
import time

from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import Stage, Value, block_type, build_program, sanitize
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.reference import constant_value
from vpuc.fusion.subgraph import Tokenization, tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, Graph
from vpuc.ir.module import ConstInit, Module
from vpuc.ir.types import Dynamic, TensorType
from vpuc.passes.base import ModulePass, PassContext
from vpuc.verifier.graph import infer_graph
from vpuc.vir.parser import parse_text

CMX_BUDGET = 1 << 20          # bytes of one tile's CMX the two slots of a block may use


class LowerGraphPass(ModulePass):
    name = "lower-graph"

    def run(self, module: Module, ctx: PassContext) -> None:
        if not module.graphs:
            return
        if module.task_lists or module.buffers:
            raise VpucError(f"module @{module.name} has graph blocks and task-level buffers or "
                            "tasks; lowering graphs into an existing program is not supported yet",
                            module.loc)
        if len(module.graphs) > 1:
            raise VpucError(f"module @{module.name} has {len(module.graphs)} graph blocks; "
                            "lowering one graph per module is supported so far", module.loc)
        graph = module.graphs[0]
        generated = ctx.artifacts.setdefault("generated-kernels", {})
        timings = ctx.artifacts.setdefault("fusion-timings", [])
        hook = ctx.artifacts.get("fusion-print")
        text = lower(graph, module, generated, timings, hook, ctx.arch.tiles)
        lowered = parse_text(text, f"<lower-graph @{graph.name}>")
        module.kernels += lowered.kernels
        module.runtime = lowered.runtime
        module.buffers += lowered.buffers
        module.views += lowered.views
        module.barriers += lowered.barriers
        module.task_lists += lowered.task_lists
        module.graphs = []
        module.attributes["graph"] = "lowered"


def lower(graph: Graph, module: Module, generated: dict, timings: list, hook, tiles: int,
          blocks: int | None = None, config=None) -> str:
    """The VIR text of the program for ``graph`` (see the module docstring); ``blocks``
    overrides the number of blocks (it must divide the extent of the chosen axis)."""
    clock = time.perf_counter()
    tok = tokenize(graph, get_target("shave"))
    timings.append(("tokenize", time.perf_counter() - clock))
    library = {i for i in tok.left_out if _library_softmax(graph.ops[i])}
    unsupported = sorted(set(tok.left_out) - library)
    if unsupported:
        ops = ", ".join(f"{graph.ops[i].label} ({graph.ops[i].kind}: {tok.left_out[i].detail})"
                        for i in unsupported)
        raise VpucError(f"graph @{graph.name}: {ops} cannot be fused into ACT SHAVE kernels; "
                        "lowering them (DPU or library tasks) is not supported yet", graph.loc)
    master = _master(graph)
    rank = len(master)
    values, names = _values(graph, tok, library)
    axis, chosen = _split(graph, values, master, {rank - 1} if library else set())
    if blocks is None or axis is None:
        blocks = chosen
    chunk = master[axis] // blocks if axis is not None else None
    parts = 2 if chunk is not None and chunk % 2 == 0 else 1
    stages, decls = [], []
    for kind, n in tok.condensed_order():
        if kind == "op" and n in library:
            op = graph.ops[n]
            kernel = f"softmax_{op.type.elem}"
            decl = (f"kernel @{kernel}(input: memref<*x{op.type.elem}>, output: "
                    f"memref<*x{op.type.elem}>) from library \"softmax\"")
            if decl not in decls:
                decls.append(decl)
            stages.append(Stage(kernel, [names[op.operands[0]]], [names[op.result]],
                                parts=parts))
            continue
        if kind != "sg":
            continue
        sub = tok.subgraphs[n]
        body = sub.body
        if chunk is not None:
            body = retype(body, axis, rank, chunk // parts)
        name = sanitize(f"{graph.name}.{sub.name}")
        show = (lambda stage, text, k=name: hook(f"@{k} {stage}", text)) if hook else None
        kernel = generate(body, name, print_after=show, config=config)
        timings += [(f"{name}: {stage}", t) for stage, t in kernel.timings]
        generated[name] = kernel.obj
        params = ", ".join(f"{p.name}: {p.memref}" for p in kernel.decl.params)
        decls.append(f"kernel @{name}({params}) from generated")
        stages.append(Stage(name, [names[v] for v in sub.inputs], [names[v] for v in sub.outputs],
                            parts=parts))
    text = build_program(sanitize(module.name), decls, values, stages,
                         axis=axis if axis is not None else 0, rank=rank,
                         extent=master[axis] if axis is not None else 1,
                         blocks=blocks, tiles=tiles, arch=module.arch)
    return text


def _master(graph: Graph) -> tuple:
    from vpuc.ir.graph_ops import broadcast_shapes
    return broadcast_shapes(*(op.type.dims for op in graph.ops if op.type is not None))


def _library_softmax(op) -> bool:
    """A Softmax over the last logical dim: the library kernel's reduced axis."""
    if op.kind != "Softmax" or op.type.elem.value not in ("f16", "f32"):
        return False
    return op.attrs["axis"] % op.type.rank == op.type.rank - 1


def _split(graph: Graph, values: list[Value], master: tuple,
           forbidden: set[int]) -> tuple[int | None, int]:
    """The axis to cut along and the number of blocks (None, 1: the whole tensors)."""
    if any(isinstance(d, Dynamic) for d in master):
        return None, 1
    total = sum(v.type.nbytes for v in values)
    first = next((op for op in graph.parameters if op.type.rank == len(master)), None)
    order = first.type.order.perm if first is not None else tuple(range(len(master)))
    for axis in order:                        # outermost in memory first
        extent = master[axis]
        if extent < 2 or axis in forbidden:
            continue
        for blocks in range(1, extent + 1):
            if extent % blocks:
                continue
            if blocks >= 4 or blocks == extent:
                if 2 * total // blocks <= CMX_BUDGET:
                    return axis, blocks
    return None, 1


def _values(graph: Graph, tok: Tokenization,
            library: set[int]) -> tuple[list[Value], dict[str, str]]:
    names: dict[str, str] = {}
    values: list[Value] = []
    outputs = {op.operands[0] for op in graph.results}
    index = graph.index()
    crossing = {v for sub in tok.subgraphs for v in sub.inputs + sub.outputs}
    crossing |= {v for i in library for v in graph.ops[i].operands + (graph.ops[i].result,)}
    taken: set[str] = set()

    def fresh(base: str) -> str:
        name, n = sanitize(base), 1
        while name in taken:
            name = f"{sanitize(base)}.{n}"
            n += 1
        taken.add(name)
        return name

    for op in graph.ops:
        if op.result is None or op.kind == RESULT:
            continue
        used = [i for i in index.users.get(op.result, []) if i in tok.owner or i in library]
        if op.kind == PARAMETER:
            names[op.result] = fresh(op.result)
            values.append(Value(names[op.result], op.type, "input"))
        elif op.kind == CONSTANT and not op.is_scalar_constant and used:
            names[op.result] = fresh(op.result)
            init = op.const if op.const.path is None else ConstInit(
                values=tuple(constant_value(op).ravel().tolist()))
            values.append(Value(names[op.result], op.type, "const", init))
        elif op.kind != CONSTANT and op.result in crossing:
            names[op.result] = fresh(op.result)
            values.append(Value(names[op.result], op.type, "temp",
                                also_output=op.result in outputs))
    for v in outputs:
        if graph.ops[index.position[v]].kind == PARAMETER:
            raise VpucError(f"graph @{graph.name}: Result(%{v}) returns an input unchanged; "
                            "not supported yet", graph.loc)
    return values, names


def retype(body: Graph, axis: int, rank: int, size: int) -> Graph:
    """A copy of a subgraph body whose dims along master ``axis`` are ``size``."""
    out = copy.deepcopy(body)
    for op in out.ops:
        if op.type is not None and (op.kind in (PARAMETER, RESULT)):
            op.type = block_type(op.type, axis, rank, size)
        if op.kind == "Broadcast":
            t = TensorType(tuple(op.attrs["shape"]), op.type.elem, op.type.order)
            op.attrs["shape"] = block_type(t, axis, rank, size).dims
    infer_graph(out)
    return out
