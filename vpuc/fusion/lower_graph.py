"""lower-graph: a graph-level module to a task-level program (ACT SHAVE kernels and DPU tasks).

For each graph block: tokenize it for ACT SHAVE (``vpuc.fusion.subgraph``),
generate one kernel per subgraph (``vpuc.fusion.generator``), lower the layers
the tokenizer leaves out to DPU tasks (``lower_dpu``), and replace the graph
with a program: the network's Parameters become ``input`` buffers, its Results
``output`` buffers, tensor Constants read by a subgraph or a layer ``const``
buffers.

The condensed graph's order (subgraphs and left-out ops, topologically sorted)
is cut into **segments** (``lower_segments.py``), run one after another:

- an *ACT segment* is a run of consecutive subgraphs (and library softmaxes)
  whose shapes broadcast together: a block pipeline (``blocked_program.py``):
  the tensors are cut into blocks along one axis (double-buffered CMX slots,
  alternating over the tiles, the two ACT SHAVEs of a tile each taking half of
  a block; cut and staged by ``lower_act.py``), and every block is DMA in -> one ACT SHAVE task per stage, values
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
A MaxPool or AveragePool beyond the NCE's 11 x 11 window is first rewritten into
smaller pools (``large_kernels.py``).

**Values between segments go through DDR**: a value one segment produces and
another reads is a ``ddr`` buffer (or the graph's ``output``), stored whole by
its producer and loaded block by block by its readers.  The simplest correct
order: each segment's first loads wait on a barrier its predecessor's last
store updates (all stores are on one DMA channel, which runs them in order, so
that store ends after every task of the segment); segments never overlap.
``--schedule default`` changes that order (``schedule.py``) and keeps the values
between DPU, MatMul and ACT segments that fit in CMX instead (``resident.py``:
the same stores and loads, CMX -> CMX).

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

from vpuc.abi.dtypes import MAX_DIMS
from vpuc.diagnostics import LOWERED_SOURCE, DiagnosticBag
from vpuc.fusion.lower_blocks import lower_blocks
from vpuc.fusion.lower_graph_segments import lower
from vpuc.fusion.lower_provenance import locate_layers
from vpuc.fusion.resident import cmx_fits
from vpuc.fusion.resident_measure import Lowering, measured_program, pin_low
from vpuc.fusion.schedule import DEFAULT_SCHEDULE, EARLY_CMX_BYTES, overlap
from vpuc.fusion.schedule_anchors import drop_queue_implied_waits
from vpuc.fusion.schedule_deps import relax_gates
from vpuc.fusion.schedule_value_loads import behind_stores
from vpuc.ir.graph import RESULT, Graph
from vpuc.ir.module import Module, copy_program
from vpuc.passes.allocate_cmx import CMX_ALIGNMENT, PLACEMENT
from vpuc.passes.base import ModulePass, PassContext
from vpuc.verifier.limits import INT32
from vpuc.vir.parser import parse_text


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
    before it is parsed.  When the values kept in CMX between segments (``resident.py``)
    leave allocate-cmx no room, the block is lowered again without the DPU layers' output
    copies of them on other tiles (``resident.cast_blocks``: writes no FIFO orders behind
    the earlier readers of their bytes, ResNet-50's stage 1), then with every value in DDR
    (a block among others keeps every value in DDR); when they fit, it is lowered again
    with the room measured on that program (``resident_measure.measured_program``)."""
    check_sizes(graph, ctx.arch.max_tensor_bytes)
    plan = ctx.artifacts.get("schedule", DEFAULT_SCHEDULE)
    # a block among others shares CMX with their buffers, which its trial cannot see
    first = _lower_scheduled(graph, module, ctx, rename, plan, resident=rename is None)
    # a placement from schedule_deps' trial is an allocation that fits: no second trial
    fits = not first.kept or first.placement is not None or cmx_fits(first.module, ctx.arch)
    copies = True
    if not fits:
        plain = _lower_scheduled(graph, module, ctx, rename, plan, resident=True,
                                 output_copies=False)
        fits = plain.placement is not None or cmx_fits(plain.module, ctx.arch)
        if fits:
            first, copies = plain, False
    lowered, placement = first.module, first.placement
    if not fits:
        again = _lower_scheduled(graph, module, ctx, rename, plan, resident=False)
        lowered, placement = again.module, again.placement
    elif rename is None and plan != "naive" and ctx.arch.cmx_bytes \
            and placement is not None:
        found = measured_program(first, ctx.arch, lambda peaks, exclude: _lower_scheduled(
            graph, module, ctx, None, plan, resident=True, peaks=peaks,
            baseline=set(first.kept), exclude=exclude, output_copies=copies))
        if found is not None:
            lowered, placement = found.module, found.placement
    if placement is not None:
        ctx.artifacts[PLACEMENT] = placement
    drop_queue_implied_waits(lowered, ctx.arch.max_consumers)
    locate_layers(lowered.layers, graph)
    return lowered


def _lower_scheduled(graph: Graph, module: Module, ctx: PassContext, rename, plan: str,
                     resident: bool, peaks: dict | None = None,
                     baseline: set[str] | None = None,
                     exclude: set[str] = frozenset(),
                     output_copies: bool = True) -> Lowering | None:
    """``lower_block``'s lowering; None when ``peaks`` (``lower``'s) keep no value beyond
    ``baseline`` in CMX."""
    generated = ctx.artifacts.setdefault("generated-kernels", {})
    timings = ctx.artifacts.setdefault("fusion-timings", [])
    hook = ctx.artifacts.get("fusion-print")
    gates: set[str] = set()
    order: list[tuple[str, str | None]] = []
    kept: list[str] = []
    spans: dict[str, list[str]] = {}
    reads: dict[str, int] = {}
    text = lower(graph, module, generated, timings, hook, ctx.arch.tiles, timing=ctx.timing,
                 dma_channels=ctx.arch.dma_channels, schedule=plan, gates=gates,
                 cmx_budget=ctx.cmx_budget, cmx_bytes=ctx.arch.cmx_bytes, order=order,
                 resident=kept if resident else None, barriers=ctx.arch.barriers,
                 peaks=peaks, baseline=baseline, exclude=exclude, spans=spans,
                 reads=reads, output_copies=output_copies)
    if text is None:
        return None
    if rename is not None:
        text, gates = rename.text(text), {rename.name(g) for g in gates}
    lowered = parse_text(text, f"{LOWERED_SOURCE} @{graph.name}>", machine_written=True)
    if baseline is not None:      # the values the measured room adds, below the blocks
        pin_low(lowered, [v for v in kept if v not in baseline], spans, CMX_ALIGNMENT)
    placement = None
    outcome: dict = {"failed": []}
    if plan != "naive":
        # the program as parsed, for the fallback below to schedule again
        pristine = copy_program(lowered) if rename is None else None
        moved = overlap(lowered, gates, ctx.arch.dma_channels, ctx.arch.cmx_bytes, ctx.arch,
                        ctx.timing)
        # A block among others keeps its order against theirs: no trial, no placement.
        keys = [k if rename is None else rename.key(k) for k, _ in order]
        finishes = [f if rename is None or f is None else rename.name(f) for _, f in order]
        placement = relax_gates(lowered, keys, finishes, ctx.arch, EARLY_CMX_BYTES,
                                trial=rename is None, outcome=outcome)
        if placement is None and moved and rename is None:
            # weight copies on channel 0 (``schedule_channels``) live beside buffers the
            # other channel's order freed before: when no trial of relaxed gates then finds
            # room, the block is scheduled again with them on channel 1 (MobileNetV3-Small's
            # classifier chunks: 623,564 cycles otherwise, 554,079 so)
            lowered = pristine
            overlap(lowered, gates, ctx.arch.dma_channels, ctx.arch.cmx_bytes, ctx.arch,
                    ctx.timing, copy_channels=False)
            outcome = {"failed": []}
            placement = relax_gates(lowered, keys, finishes, ctx.arch, EARLY_CMX_BYTES,
                                    outcome=outcome)
        if rename is None:
            placement = behind_stores(lowered, keys, finishes, ctx.arch, placement)
    return Lowering(lowered, kept, placement, order, outcome, spans, reads)


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
