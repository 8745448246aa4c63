"""lower-graph: a graph-level module to a task-level program (ACT SHAVE kernels and DPU tasks).

For each graph block: tokenize it for ACT SHAVE (``vpuc.fusion.subgraph``),
generate one kernel per subgraph (``vpuc.fusion.generator``), lower the layers
the tokenizer leaves out to DPU tasks (``lower_dpu``), and replace the graph
with a program: the network's Parameters become ``input`` buffers, its Results
``output`` buffers, tensor Constants read by a subgraph or a layer ``const``
buffers.

The condensed graph's order (subgraphs and left-out ops, topologically sorted)
is cut into **segments**, run one after another:

- an *ACT segment* is a run of consecutive subgraphs (and library softmaxes)
  whose shapes broadcast together: a block pipeline (``blocked_program.py``):
  the tensors are cut into blocks along one axis (double-buffered CMX slots,
  alternating over the tiles, the two ACT SHAVEs of a tile each taking half of
  a block), and every block is DMA in -> one ACT SHAVE task per stage, values
  between stages staying in CMX -> DMA out.  Each kernel is generated for the
  shape of its part of a block (static trip counts), declared ``kernel
  @<graph>.sgN(...) from generated`` with its generated contract, and its ELF
  object goes to ``ctx.artifacts["generated-kernels"]``, where assign-windows
  finds it;
- a *DPU segment* is one Convolution, MatMul or MaxPool with the post-ops the
  marking pass left to the DPU (bias, activation) folded in (``lower_dpu.py``);
- a *DMA segment* is one data-movement op (Reshape, Transpose, Concat, Slice,
  Gather, Pad, DepthToSpace, SpaceToDepth, nearest Interpolate) as DDR -> DDR
  copies (``lower_dma.py``).

A linear Interpolate is first rewritten into row Gathers, an elementwise blend
and a MatMul by its column interpolation matrix (``lower_resize.py``).

**Values between segments go through DDR**: a value one segment produces and
another reads is a ``ddr`` buffer (or the graph's ``output``), stored whole by
its producer and loaded block by block by its readers.  The simplest correct
order: each segment's first loads wait on a barrier its predecessor's last
store updates (all stores are on one DMA channel, which runs them in order, so
that store ends after every task of the segment); segments never overlap.

Softmax, LogSoftmax, MVN and ReduceMean/Sum/Max, which the tokenizer leaves
out, run as library kernels (``lower_library.py``): over the last logical dim
as a stage of the block pipeline (the blocks are then never cut along that
dim), over other axes as a segment of their own on re-typed buffers.
Data-movement ops are DMA segments (``lower_dma.py``).  Other ops left out (a
layer the DPU cannot run, a data-movement op DMA cannot do) stop the pass with
an error at the op.  Ops nothing reaches a Result from are dropped.  Graphs with run-time dims
run as one block (no slicing of a dynamic dim).  ``ctx.artifacts["fusion-print"]``,
when set by the command line, is called with (stage, text) after every
generator stage (``--print-lir``, ``--print-after-all``); the pass never prints.

Several graph blocks, or graph blocks beside task lists, are lowered one block at a
time and stitched into the module's task lists by ``lower_blocks.py``.

Expects: a verified module whose graph blocks are typed.
Guarantees: no graph block is left; every subgraph has a kernel declaration,
its generated object in ``ctx.artifacts["generated-kernels"]``, buffers,
views, barriers and tasks; every left-out layer DPU tasks; the module verifies.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

from vpuc import const_files
from vpuc.abi.dtypes import MAX_DIMS
from vpuc.diagnostics import DiagnosticBag, VpucError
from vpuc.fusion.blocked_program import (ProgramText, Stage, Value, block_type, emit_blocks,
                                         label, sanitize, spans)
from vpuc.fusion.act_split import choose_cut
from vpuc.fusion.fold_views import Alias, fold_views, folded_value
from vpuc.fusion.fuse_epilogue import EltwiseEpilogue, Epilogue, emit_fused, fusable
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_graph import body_key
from vpuc.fusion.lower_blocks import lower_blocks
from vpuc.fusion.lower_dma import DMA_OPS, dma_ops, emit_dma
from vpuc.fusion.lower_dpu import DpuLayer, dpu_layer, emit_layer
from vpuc.fusion.lower_dpu_channels import reads_weights
from vpuc.fusion.lower_dpu_support import DPU_LAYERS, dpu_problem, eltwise_anchor
from vpuc.fusion.lower_dpu_nn_plan import GLOBAL_POOLS
from vpuc.fusion.lower_provenance import LayerTable, segment_ops
from vpuc.fusion.lower_resize import expand_linear_resizes
from vpuc.fusion.lower_library import (LibraryCall, LibrarySegment, emit_library_segment,
                                       library_problem, library_segment, pipeline_call)
from vpuc.reference.graph import const_base
from vpuc.fusion.schedule import (DEFAULT_SCHEDULE, EARLY_CMX_BYTES, SegmentValues, ddr_layouts, early_bytes,
                                  nhwc_ports, overlap)
from vpuc.fusion.schedule_deps import relax_gates
from vpuc.fusion.subgraph import Tokenization, tokenize
from vpuc.fusion.targets import get_target
from vpuc.fusion.tokenizer import Reason
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, Graph, GraphOp
from vpuc.ir.graph_ops import InferError, broadcast_shapes
from vpuc.ir.module import ConstInit, Module
from vpuc.ir.types import NAMED_ORDERS, Dynamic, DimsOrder, TensorType
from vpuc.passes.allocate_cmx import PLACEMENT
from vpuc.passes.base import ModulePass, PassContext
from vpuc.verifier.limits import INT32
from vpuc.verifier.graph import infer_graph
from vpuc.vir.parser import parse_text

# Blocks of one segment (each ~4 tasks; lowering and the later passes take ~1 ms a task).
# A dim with no divisor near its size / budget (a large prime) would need one block a row.
MAX_BLOCKS = 4096


class LowerGraphPass(ModulePass):
    name = "lower-graph"

    def run(self, module: Module, ctx: PassContext) -> None:
        if not module.graphs:
            return
        if len(module.graphs) > 1 or has_program(module):
            lower_blocks(module, ctx, lower_block)         # several blocks, or beside tasks
            return
        graph = module.graphs[0]
        lowered = lower_block(graph, module, ctx)
        module.kernels += lowered.kernels
        module.runtime = lowered.runtime
        module.buffers += lowered.buffers
        module.views += lowered.views
        module.barriers += lowered.barriers
        module.task_lists += lowered.task_lists
        module.layers += lowered.layers
        module.graphs = []
        module.attributes["graph"] = "lowered"


def has_program(module: Module) -> bool:
    """Whether the module has task-level content beside its graph blocks."""
    return bool(module.task_lists or module.buffers or module.barriers)


def lower_block(graph: Graph, module: Module, ctx: PassContext, rename=None) -> Module:
    """The task-level program of one graph block, parsed (with ``--schedule default``'s
    overlap applied); ``rename`` (``block_names.Namespace``) renames the program's names
    before it is parsed."""
    check_sizes(graph, ctx.arch.max_tensor_bytes)
    generated = ctx.artifacts.setdefault("generated-kernels", {})
    timings = ctx.artifacts.setdefault("fusion-timings", [])
    hook = ctx.artifacts.get("fusion-print")
    plan = ctx.artifacts.get("schedule", DEFAULT_SCHEDULE)
    gates: set[str] = set()
    order: list[tuple[str, str | None]] = []
    text = lower(graph, module, generated, timings, hook, ctx.arch.tiles, timing=ctx.timing,
                 dma_channels=ctx.arch.dma_channels, schedule=plan, gates=gates,
                 cmx_budget=ctx.cmx_budget, cmx_bytes=ctx.arch.cmx_bytes, order=order)
    if rename is not None:
        text, gates = rename.text(text), {rename.name(g) for g in gates}
    lowered = parse_text(text, f"<lower-graph @{graph.name}>", machine_written=True)
    if plan != "naive":
        overlap(lowered, gates, ctx.arch.dma_channels, ctx.arch.cmx_bytes)
        # A block among others keeps its order against theirs: no trial, no placement.
        keys = [k if rename is None else rename.key(k) for k, _ in order]
        finishes = [f if rename is None or f is None else rename.name(f) for _, f in order]
        placement = relax_gates(lowered, keys, finishes, ctx.arch, EARLY_CMX_BYTES,
                                trial=rename is None)
        if placement is not None:
            ctx.artifacts[PLACEMENT] = placement
    return lowered


def check_sizes(graph: Graph, limit: int) -> None:
    """Every tensor fits the target's address space (checked before any work that grows
    with the tensors)."""
    bag = DiagnosticBag()
    oversized: set[str] = set()
    for op in graph.ops:
        if op.kind == RESULT or op.type is None:
            continue
        problem = _size_problem(op.type, limit)
        if problem is None:
            continue
        oversized.add(op.result)
        if not oversized.intersection(op.operands):      # the first one on its path
            bag.error(op.loc, f"%{op.result} ({op.type}) {problem}")
    bag.raise_if_errors()


def _size_problem(tensor, limit: int) -> str | None:
    """Why a tensor of this type cannot exist on the target (the bounds of
    ``vpuc/verifier/limits.py``), or None."""
    if len(tensor.dims) > MAX_DIMS:
        return f"has rank {len(tensor.dims)}; a tensor has at most {MAX_DIMS} dims"
    if any(d > INT32[1] for d in tensor.bound_shape):
        return f"has a dim beyond int32 ({INT32[1]:,}); a dim is an int32 on this target"
    if tensor.nbytes > limit:
        return (f"has {tensor.nbytes:,} bytes; a tensor on this target holds at most "
                f"{limit:,} bytes (its address space)")
    return None


@dataclass
class Segment:
    units: list[tuple[str, int]] = field(default_factory=list)   # ACT stages, condensed units
    layer: DpuLayer | None = None                                # or one DPU layer
    master: tuple = ()
    dma: GraphOp | None = None                                   # or one data-movement op
    library: LibrarySegment | None = None                        # or one library kernel op
    aliases: dict[str, Alias] = field(default_factory=dict)      # a MatMul's folded values
    folded: list[GraphOp] = field(default_factory=list)          # and the ops folded away

    def reads(self, tok: Tokenization) -> list[str]:
        if self.dma is not None:
            return list(self.dma.operands)
        if self.library is not None:
            return [self.library.op.operands[0]]
        if self.layer is not None:       # weights the lowering re-declares are not read
            op = self.layer.op
            return [self.aliases[v].base if v in self.aliases else v
                    for i, v in enumerate(op.operands)
                    if i != 1 or reads_weights(op, tok.graph.index())]
        return [v for u in self.units for v in _stage_io(tok, u)[0]]

    def writes(self, tok: Tokenization) -> list[str]:
        if self.dma is not None:
            return [self.dma.result]
        if self.library is not None:
            return [self.library.op.result]
        if self.layer is not None:
            out = self.layer.output
            return [self.aliases[out].base if out in self.aliases else out]
        return [v for u in self.units for v in _stage_io(tok, u)[1]]


def lower(graph: Graph, module: Module, generated: dict, timings: list, hook, tiles: int,
          blocks: int | None = None, config=None, timing=None, dma_channels: int = 2,
          schedule: str = "naive", gates: set[str] | None = None,
          cmx_budget: int = 1 << 20, cmx_bytes: int | None = None,
          order: list | None = None) -> str:
    """The VIR text of the program for ``graph`` (see the module docstring); ``blocks``
    overrides the number of blocks of ACT segments (it must divide the chosen axis);
    ``schedule`` other than naive lays out values as ``schedule.ddr_layouts`` says; the
    segment gate barriers are added to ``gates``; ``cmx_budget`` is the bytes of a tile's
    CMX a layer's or segment's blocks may use (the compile option,
    ``PassContext.cmx_budget``; this default is NPU37XX's); ``cmx_bytes``, a tile's CMX,
    tells the DPU layers how much of their weights the schedule prefetches; ``order``
    receives each segment's task-label prefix and gate barrier (None for the last)."""
    clock = time.perf_counter()
    expand_linear_resizes(graph)
    tok = tokenize(graph, get_target("shave"))
    timings.append(("tokenize", time.perf_counter() - clock))
    library, layers, own = _left_out(graph, tok)
    segments = _segments(graph, tok, library, layers, dma_ops(graph, tok), own)
    if schedule != "naive":
        segments = fold_views(graph, segments)
    values, names = _values(graph, tok, segments)
    nhwc_acts: set[int] = set()
    if schedule != "naive":
        values, nhwc_acts = ddr_layouts(values, _segment_values(tok, segments, names))
    # the cost model's numbers (vpuc.cost.Timing) and the DMA channels the target has
    prog = ProgramText(timing=timing, dma_channels=dma_channels, cmx_budget=cmx_budget,
                       prefetch_bytes=0 if schedule == "naive" or cmx_bytes is None
                       else early_bytes(cmx_bytes, cmx_budget))
    if schedule != "naive":
        prog.balance_channels = True
    prog.declare(values)
    by_name = {v.name: v for v in values}
    single = len(segments) == 1
    made: dict[tuple, str] = {}         # generated kernel by body_key
    gate: tuple[str, ...] = ()
    layers = LayerTable()
    fused = {} if schedule == "naive" else fusable(
        tok, segments, lambda seg: seg.reads(tok), lambda seg: seg.writes(tok),
        {op.operands[0] for op in graph.results})
    skipped: set[int] = set()
    for s, seg in enumerate(segments):
        if s in skipped:
            continue
        prefix = "" if single and seg.units else _prefix(tok, seg)
        layers.add(prefix, segment_ops(graph, tok, seg))
        sub = fused.get(s)
        finish = (None if s + (sub is not None) == len(segments) - 1
                  else f"{prefix}finished")
        if order is not None:
            order.append((label(prefix).removesuffix("."), finish))
        if finish:
            prog.barriers.append(f"barrier %{finish}")
            if gates is not None:
                gates.add(finish)
        if seg.layer is not None:
            clock = time.perf_counter()
            renamed = {g: by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)}
            renamed.update({g: folded_value(a, by_name[names[a.base]], graph.index().producer(g).type)
                            for g, a in seg.aliases.items()})
            if sub is not None:
                if sub[0] == "sg":
                    y = tok.subgraphs[sub[1]].outputs[0]
                    epilogue = Epilogue(graph.name, tok.subgraphs[sub[1]], made, generated,
                                        prog.kernels, config, timings)
                else:
                    y = sub[1].output
                    ops = list(sub[1].op.operands)
                    other = ops[1 - ops.index(seg.layer.output)]
                    epilogue = EltwiseEpilogue(sub[1], by_name[names[other]],
                                               ops[0] == seg.layer.output, timing)
                if emit_fused(prog, seg.layer, {**renamed, seg.layer.output: by_name[names[y]]},
                              graph.index(), tiles, prefix, gate, finish, epilogue,
                              names[seg.layer.output], names[y]):
                    skipped.add(s + 1)
                    layers.add(prefix, segment_ops(graph, tok, segments[s + 1]))
                    timings.append((f"dpu {seg.layer.op.label}", time.perf_counter() - clock))
                    gate = (finish,) if finish else ()
                    continue
                if finish is None:            # the layer after it is a segment after all
                    finish = f"{prefix}finished"
                    prog.barriers.append(f"barrier %{finish}")
                    if order is not None:
                        order[-1] = (order[-1][0], finish)
                    if gates is not None:
                        gates.add(finish)
            emit_layer(prog, seg.layer, renamed, graph.index(), tiles, prefix, gate, finish)
            timings.append((f"dpu {seg.layer.op.label}", time.perf_counter() - clock))
        elif seg.dma is not None:
            renamed = {g: by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)}
            emit_dma(prog, seg.dma, renamed, prefix, gate, finish)
        elif seg.library is not None:
            op = seg.library.op
            emit_library_segment(prog, seg.library, by_name[names[op.operands[0]]],
                                 by_name[names[op.result]], tiles=tiles, budget=prog.cmx_budget,
                                 prefix=prefix, gate=gate, finish=finish)
        else:
            _emit_act(prog, graph, tok, seg, values, names, generated, timings, hook, tiles,
                      blocks, config, prefix, gate, finish, library, made,
                      nhwc=s in nhwc_acts, pipelined=schedule != "naive")
        gate = (finish,) if finish else ()
    prog.drop_unused(prog.redeclared)
    prog.layers = layers.lines()
    return prog.render(sanitize(module.name), module.arch, tiles)


def _segment_values(tok: Tokenization, segments: list[Segment], names: dict[str, str]
                    ) -> list[SegmentValues]:
    """Each segment's kind and the program names of the values it reads and writes, for
    ``schedule.ddr_layouts``; an ACT segment of fused subgraphs only (no library kernel,
    which has an axis) is layout-free."""
    def kind(seg: Segment) -> str:
        if seg.layer is not None:
            return "matmul" if seg.layer.op.kind == "MatMul" else "dpu"
        return "dma" if seg.dma is not None else "library" if seg.library is not None else "act"
    return [SegmentValues(kind(seg), [names[v] for v in seg.reads(tok)],
                          [names[v] for v in seg.writes(tok)],
                          layout_free=bool(seg.units) and all(k == "sg" for k, _ in seg.units))
            for seg in segments]


def _emit_act(prog, graph, tok, seg, values, names, generated, timings, hook, tiles, blocks,
              config, prefix, gate, finish, library: dict[int, LibraryCall],
              made: dict[tuple, str], nhwc: bool = False, pipelined: bool = False) -> None:
    """``nhwc``: the segment's values are NHWC (``schedule.ddr_layouts``), and so are the
    ports of its kernels; ``pipelined``: segments overlap (``schedule_deps``), which the cut
    weighs (``act_split.choose_cut``)."""
    master = seg.master
    rank = len(master)
    used = {names[v] for v in seg.reads(tok) + seg.writes(tok)}
    seg_values = [v for v in values if v.name in used]
    softmax = any(kind == "op" for kind, _ in seg.units)
    axis, chosen = _split(seg_values, master, {rank - 1} if softmax else set(),
                          prog.cmx_budget)
    if blocks is None or axis is None:
        blocks = chosen
    if blocks > MAX_BLOCKS:
        first = seg.units[0]
        op = graph.ops[first[1] if first[0] == "op" else tok.subgraphs[first[1]].ops[0]]
        raise VpucError(f"lowering {op.label} ({op.type}) needs {blocks:,} blocks along dim "
                        f"{axis} (extent {master[axis]:,}): blocks divide the dim evenly and "
                        f"two slots of a block fit {prog.cmx_budget:,} bytes of CMX; more than "
                        f"{MAX_BLOCKS:,} blocks is not supported yet", op.loc)
    runs = [(blocks, master[axis] // blocks if axis is not None else None, 0)]
    outermost = True
    if axis is not None and blocks == chosen:
        total = sum(v.type.nbytes for v in seg_values)
        cuts = [(a, master[a], n, outermost) for a, n, outermost in _even_cuts(
            seg_values, master, {rank - 1} if softmax else set(), prog.cmx_budget)]
        axis, main, size = choose_cut(cuts, total, prog.cmx_budget, tiles, pipelined)
        outermost = next(c[3] for c in cuts if c[0] == axis)
        runs = [(main, size, 0)]
        if main * size < master[axis]:      # a main run of equal blocks, then a tail block
            runs.append((1, master[axis] - main * size, main * size))
    for i, (count, chunk, offset) in enumerate(runs):
        stages = _act_stages(prog, graph, tok, seg, names, generated, timings, hook, config,
                             library, made, nhwc, seg_values, axis, chunk, outermost)
        last = i == len(runs) - 1
        emit_blocks(prog, seg_values, stages, axis=axis if axis is not None else 0, rank=rank,
                    extent=count * chunk if axis is not None else 1, blocks=count, tiles=tiles,
                    prefix=prefix + ("tail." if i else ""), gate=gate,
                    finish=finish if last else None, offset=offset,
                    first_tile=runs[0][0] % tiles if i else 0)


def _act_stages(prog, graph, tok, seg, names, generated, timings, hook, config,
                library: dict[int, LibraryCall], made: dict[tuple, str], nhwc: bool,
                seg_values: list[Value], axis: int | None, chunk: int | None,
                outermost: bool = True) -> list[Stage]:
    """The block pipeline's stages for blocks of ``chunk`` elements along ``axis`` (None:
    whole tensors): library kernels, and one kernel generated per subgraph body at that
    size (an equal body, MobileNet's repeated blocks, shares one).  A block is halved over
    a tile's two ACT SHAVEs only along an ``outermost`` axis (every dim outside it in memory
    1), where its halves are dense, as kernels read them."""
    rank = len(seg.master)
    halves = 2 if chunk is not None and chunk % 2 == 0 and outermost else 1
    type_of = {v.name: v.type for v in seg_values}
    stages = []
    for unit in seg.units:
        ins, outs = _stage_io(tok, unit)
        ins, outs = [names[v] for v in ins], [names[v] for v in outs]
        # An output that does not span the axis (rank 0, or 1 along it) has no halves: such a
        # stage is one invocation on the whole block (and its kernel is generated for it).
        parts = 1 if chunk is None or any(not spans(type_of[v], axis, rank) for v in outs) \
            else halves
        if unit[0] == "op":
            call = library[unit[1]]
            if call.declaration() not in prog.kernels:
                prog.kernels.append(call.declaration())
            stages.append(Stage(call.kernel, ins, outs, scalars=list(call.scalars), parts=parts))
            continue
        sub = tok.subgraphs[unit[1]]
        body = sub.body
        if chunk is not None:
            body = retype(body, axis, rank, chunk // parts)
        if nhwc:
            body = nhwc_ports(body)
        key = body_key(body)
        if key in made:
            stages.append(Stage(made[key], ins, outs, parts=parts))
            continue
        name = base = sanitize(f"{graph.name}.{sub.name}")
        taken, n = set(made.values()), 1
        while name in taken:                    # the same subgraph at a tail's size
            name, n = f"{base}.{n}", n + 1
        made[key] = name
        show = (lambda stage, text, k=name: hook(f"@{k} {stage}", text)) if hook else None
        kernel = generate(body, name, print_after=show, config=config)
        timings += [(f"{name}: {stage}", t) for stage, t in kernel.timings]
        generated[name] = kernel.obj
        params = ", ".join(f"{p.name}: {p.memref}" for p in kernel.decl.params)
        prog.kernels.append(f"kernel @{name}({params}) from generated")
        stages.append(Stage(name, ins, outs, parts=parts))
    return stages


def _left_out(graph: Graph, tok: Tokenization) -> tuple[dict[int, LibraryCall],
                                                       dict[int, DpuLayer],
                                                       dict[int, LibrarySegment]]:
    """Library kernel ops (block-pipeline stages, own segments) and DPU layers among the
    ops left out (data-movement ops are ``lower_dma.dma_ops``'); VpucError for the rest."""
    bag = DiagnosticBag()
    index = graph.index()
    library, layers, own = {}, {}, {}
    for i, decision in tok.left_out.items():
        op = graph.ops[i]
        if decision.reason is Reason.DEAD or (decision.reason is Reason.SKIPPED_BY_PLUGIN
                                              and not eltwise_anchor(op)):
            continue
        in_type = index.producer(op.operands[0]).type if op.operands else None
        # A ReduceMean or ReduceMax over H and W the DPU takes as a pool (as the NPU compiler
        # does); any other reduction or normalization goes to the library kernels.
        dpu_first = op.kind in DPU_LAYERS and dpu_problem(op, index) is None
        call = pipeline_call(op, in_type) if in_type is not None and not dpu_first else None
        segment = (library_segment(op, in_type)
                   if in_type is not None and call is None and not dpu_first else None)
        if call is not None:
            library[i] = call
        elif segment is not None:
            own[i] = segment
        elif op.kind in DMA_OPS:
            continue                              # lower_dma.dma_ops takes them
        elif (op.kind in DPU_LAYERS and (dpu_first or op.kind not in GLOBAL_POOLS)) \
                or eltwise_anchor(op):
            # (a reduction the DPU cannot take as a pool is the library's to explain)
            try:
                layers[i] = dpu_layer(graph, index, op)
            except VpucError as exc:
                bag.items += exc.diagnostics
                bag.error_count += len(exc.errors)
        else:
            why = library_problem(op, in_type) if in_type is not None else None
            bag.error(op.loc, f"{op.kind} {op.label} cannot be fused into an ACT SHAVE kernel "
                      f"({decision.reason}: {decision.detail}) and has no other lowering"
                      + (f" ({why})" if why else "") + "; not supported yet")
    folded = {id(link) for layer in layers.values() for link in layer.chain}
    for i, decision in tok.left_out.items():
        op = graph.ops[i]
        if decision.reason is Reason.SKIPPED_BY_PLUGIN and id(op) not in folded \
                and i not in layers and not bag.has_errors:
            bag.error(op.loc, f"internal: {op.label} ({op.kind}) is marked skipped-by-plugin "
                      "but no DPU layer folds it")
    bag.raise_if_errors()
    return library, layers, own


def _stage_io(tok: Tokenization, unit: tuple[str, int]) -> tuple[list[str], list[str]]:
    kind, n = unit
    if kind == "sg":
        return tok.subgraphs[n].inputs, tok.subgraphs[n].outputs
    op = tok.graph.ops[n]
    return [op.operands[0]], [op.result]


def _segments(graph: Graph, tok: Tokenization, library: dict[int, LibraryCall],
              layers: dict[int, DpuLayer], dma: dict[int, GraphOp],
              own: dict[int, LibrarySegment]) -> list[Segment]:
    index = graph.index()
    segments: list[Segment] = []
    for unit in tok.condensed_order():
        kind, n = unit
        if kind == "op" and n in layers:
            segments.append(Segment(layer=layers[n]))
            continue
        if kind == "op" and n in dma:
            segments.append(Segment(dma=dma[n]))
            continue
        if kind == "op" and n in own:
            segments.append(Segment(library=own[n]))
            continue
        if kind == "op" and n not in library:
            continue
        ops = [graph.ops[n]] if kind == "op" else [graph.ops[i] for i in tok.subgraphs[n].ops]
        shapes = [op.type.dims for op in ops] + [
            index.producer(v).type.dims for v in _stage_io(tok, unit)[0]]
        last = segments[-1] if segments and segments[-1].units else None
        joined = _joined_master(last, shapes)
        if joined is not None:
            last.master = joined
            last.units.append(unit)
        else:               # after a layer, or shapes that do not broadcast together
            segments.append(Segment(units=[unit], master=broadcast_shapes(*shapes)))
    return segments


def _prefix(tok: Tokenization, seg: Segment) -> str:
    if seg.layer is not None:
        return sanitize(seg.layer.op.result) + "."
    if seg.dma is not None:
        return sanitize(seg.dma.result) + "."
    if seg.library is not None:
        return sanitize(seg.library.op.result) + "."
    kind, n = seg.units[0]
    return (tok.subgraphs[n].name if kind == "sg" else sanitize(tok.graph.ops[n].result)) + "."


def _split(values: list[Value], master: tuple, forbidden: set[int],
           budget: int) -> tuple[int | None, int]:
    """The axis to cut along and the number of blocks (None, 1: the whole tensors): the
    first of ``_even_cuts``."""
    cuts = _even_cuts(values, master, forbidden, budget)
    return cuts[0][:2] if cuts else (None, 1)


def _even_cuts(values: list[Value], master: tuple, forbidden: set[int],
               budget: int) -> list[tuple[int, int, bool]]:
    """``(axis, blocks, outermost)`` per axis that may be cut, outermost in memory first:
    the fewest blocks, at least four (or one per element), that divide it and fit
    ``budget`` twice; ``outermost``: every dim outside it in memory is 1."""
    if any(isinstance(d, Dynamic) for d in master):
        return []
    total = sum(v.type.nbytes for v in values)
    ddr = [v for v in values if v.kind == "input"] + [v for v in values if v.kind != "input"]
    first = next((v for v in ddr if v.type.rank == len(master)), None)
    order = first.type.order.perm if first is not None else tuple(range(len(master)))
    cuts = []
    for n, axis in enumerate(order):          # outermost in memory first
        extent = master[axis]
        if extent < 2 or axis in forbidden:
            continue
        for blocks in _divisors(extent):
            if (blocks >= 4 or blocks == extent) and 2 * total // blocks <= budget:
                cuts.append((axis, blocks, all(master[a] == 1 for a in order[:n])))
                break
    return cuts


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (sqrt(n) steps, not n)."""
    small, large, d = [], [], 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _values(graph: Graph, tok: Tokenization,
            segments: list[Segment]) -> tuple[list[Value], dict[str, str]]:
    """Every value a segment reads or writes, named for the program, with where it lives."""
    names: dict[str, str] = {}
    values: list[Value] = []
    outputs = {op.operands[0] for op in graph.results}
    index = graph.index()
    producer: dict[str, int] = {v: s for s, seg in enumerate(segments) for v in seg.writes(tok)}
    readers: dict[str, set[int]] = {}
    for s, seg in enumerate(segments):
        for v in seg.reads(tok):
            readers.setdefault(v, set()).add(s)
    conv_weights, other_reads = set(), set()
    for seg in segments:
        reads = seg.reads(tok)
        if seg.layer is not None and seg.layer.op.kind == "Convolution" and len(reads) > 1:
            conv_weights.add(reads[1])
            reads = reads[:1]
        other_reads.update(reads)
    weights_only = conv_weights - other_reads        # laid out NHWC, as the DPU reads them
    taken: set[str] = set()

    def fresh(base: str) -> str:
        name, n = sanitize(base), 1
        while name in taken:
            name = f"{sanitize(base)}.{n}"
            n += 1
        taken.add(name)
        return name

    for op in graph.ops:
        v = op.result
        if v is None or op.kind == RESULT or (
                op.kind != PARAMETER and v not in producer and v not in readers):
            continue                  # every Parameter is a network input, used or not
        names[v] = fresh(v)
        if op.kind == PARAMETER:
            values.append(Value(names[v], op.type, "input"))
        elif op.kind == CONSTANT:
            init = op.const if op.const.path is None else ConstInit(   # stays a file
                path=const_files.resolve(op.const.path, const_base(op)))
            t = op.type
            if v in weights_only:
                t = TensorType(t.dims, t.elem, DimsOrder(NAMED_ORDERS["NHWC"]))
            values.append(Value(names[v], t, "const", init))
        elif v in outputs:
            values.append(Value(names[v], op.type, "output"))
        elif readers.get(v, set()) - {producer[v]}:
            values.append(Value(names[v], op.type, "ddr"))
        else:
            values.append(Value(names[v], op.type, "temp"))
    for v in outputs:
        if graph.ops[index.position[v]].kind in (PARAMETER, CONSTANT):
            raise VpucError(f"graph @{graph.name}: Result(%{v}) returns an input or a constant "
                            "unchanged; not supported yet", graph.loc)
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


def _joined_master(segment, shapes) -> tuple | None:
    """The broadcast shape of ``segment``'s blocks with ``shapes`` added, or None when
    there is no run to join or the shapes do not broadcast with it."""
    if segment is None:
        return None
    try:
        return broadcast_shapes(segment.master, *shapes)
    except InferError:
        return None
