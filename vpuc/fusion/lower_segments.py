"""The segments of a graph block and the values between them (the ``lower-graph`` pass,
``lower_graph.py``): which ops the tokenizer left out become library stages, library
segments or DPU layers (``left_out``); the condensed order cut into ACT, DPU, DMA and
library segments (``graph_segments``); each value a segment reads or writes named for the
program, with where it lives (``graph_values``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc import const_files
from vpuc.diagnostics import DiagnosticBag, VpucError
from vpuc.fusion.blocked_program import Value, sanitize
from vpuc.fusion.fold_views import Alias
from vpuc.fusion.lower_dma import DMA_OPS
from vpuc.fusion.lower_gather import GATHER_OP
from vpuc.fusion.lower_topk import TOPK_OP
from vpuc.fusion.lower_dpu import DpuLayer, dpu_layer
from vpuc.fusion.lower_dpu_channels import reads_weights
from vpuc.fusion.lower_dpu_support import DPU_LAYERS, dpu_problem, eltwise_anchor
from vpuc.fusion.lower_dpu_nn_plan import GLOBAL_POOLS
from vpuc.fusion.lower_library import (LibraryCall, LibrarySegment, library_problem,
                                       library_segment, pipeline_call)
from vpuc.fusion.schedule_layouts import SegmentValues
from vpuc.fusion.subgraph import Tokenization
from vpuc.fusion.tokenizer import Reason
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, Graph, GraphOp
from vpuc.ir.graph_ops import InferError, broadcast_shapes
from vpuc.ir.module import ConstInit
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType
from vpuc.reference.graph import const_base


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
                    if i != 1 or reads_weights(op, tok.graph_index(), self.layer.bias)]
        return [v for u in self.units for v in stage_io(tok, u)[0]]

    def writes(self, tok: Tokenization) -> list[str]:
        if self.dma is not None:
            return [self.dma.result]
        if self.library is not None:
            return [self.library.op.result]
        if self.layer is not None:
            out = self.layer.output
            return [self.aliases[out].base if out in self.aliases else out]
        return [v for u in self.units for v in stage_io(tok, u)[1]]



def left_out(graph: Graph, tok: Tokenization) -> tuple[dict[int, LibraryCall],
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
        elif op.kind in DMA_OPS or op.kind in (GATHER_OP, TOPK_OP):
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



def stage_io(tok: Tokenization, unit: tuple[str, int]) -> tuple[list[str], list[str]]:
    kind, n = unit
    if kind == "sg":
        return tok.subgraphs[n].inputs, tok.subgraphs[n].outputs
    op = tok.graph.ops[n]
    return [op.operands[0]], [op.result]



def graph_segments(graph: Graph, tok: Tokenization, library: dict[int, LibraryCall],
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
            index.producer(v).type.dims for v in stage_io(tok, unit)[0]]
        last = segments[-1] if segments and segments[-1].units else None
        joined = joined_master(last, shapes)
        if joined is not None:
            last.master = joined
            last.units.append(unit)
        else:               # after a layer, or shapes that do not broadcast together
            segments.append(Segment(units=[unit], master=broadcast_shapes(*shapes)))
    return segments



def segment_prefix(tok: Tokenization, seg: Segment) -> str:
    if seg.layer is not None:
        return sanitize(seg.layer.op.result) + "."
    if seg.dma is not None:
        return sanitize(seg.dma.result) + "."
    if seg.library is not None:
        return sanitize(seg.library.op.result) + "."
    kind, n = seg.units[0]
    return (tok.subgraphs[n].name if kind == "sg" else sanitize(tok.graph.ops[n].result)) + "."



def joined_master(segment, shapes) -> tuple | None:
    """The broadcast shape of ``segment``'s blocks with ``shapes`` added, or None when
    there is no run to join or the shapes do not broadcast with it."""
    if segment is None:
        return None
    try:
        return broadcast_shapes(segment.master, *shapes)
    except InferError:
        return None


def graph_values(graph: Graph, tok: Tokenization,
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



def segment_values(tok: Tokenization, segments: list[Segment], names: dict[str, str]
                   ) -> list[SegmentValues]:
    """Each segment's kind and the program names of the values it reads and writes, for
    ``schedule_layouts.ddr_layouts``; an ACT segment of fused subgraphs only (no library kernel,
    which has an axis) is layout-free."""
    def kind(seg: Segment) -> str:
        if seg.layer is not None:
            return "matmul" if seg.layer.op.kind == "MatMul" else "dpu"
        return "dma" if seg.dma is not None else "library" if seg.library is not None else "act"
    return [SegmentValues(kind(seg), [names[v] for v in seg.reads(tok)],
                          [names[v] for v in seg.writes(tok)],
                          layout_free=bool(seg.units) and all(k == "sg" for k, _ in seg.units),
                          op=seg.layer.op.kind if seg.layer is not None
                          else seg.dma.kind if seg.dma is not None else "")
            for seg in segments]

