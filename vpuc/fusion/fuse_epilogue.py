"""A DPU layer's elementwise successor run on its output blocks in CMX (``--schedule default``).

``lower-graph`` gives a fused elementwise subgraph an ACT segment of its own: the
DPU layer before it stores its output to DDR and the subgraph loads it back block
by block (MobileNetV3's HardSwish after most of its convolutions: two DDR
transfers and a segment's fill and drain per layer, for a few cycles of ACT SHAVE
work a block).  When the subgraph is the only reader of the layer's output and
maps one value to one value of the same shape element by element, the layer's
output blocks stay in CMX instead: after each block's DPU task an ACT SHAVE task
runs the subgraph's kernel on the block (``%KEY.act.cK``, all its aligned
channels: the padded ones hold the DPU's zeros, never stored) and the block's
store takes the kernel's output to the subgraph's output value.  The value between
them never reaches DDR.

A DPU eltwise Add or Multiply of the layer's output and another value (ResNet-18's
residual Adds) is fused the same way (``EltwiseEpilogue``): the block's rows of the
other operand are loaded beside the block and one DPU eltwise task per block adds them
in CMX.

``fusable`` picks the pairs; ``Epilogue`` and ``EltwiseEpilogue`` are what
``LayerEmitter.store`` calls per block (``ProgramText.epilogue``).  A layer whose emitter never stores through
``LayerEmitter.store`` (a K-split layer: ``lower_dpu_ksplit``) leaves it unused,
and ``lower-graph`` then emits the two segments as before.

Expects: segments as ``lower_segments.graph_segments`` makes them.  Guarantees: the kernel
is generated from the subgraph's own body with its ports typed as the block (NHWC,
the DPU's order), so each element is computed by the same ops as in the ACT segment.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import numpy as np

from vpuc.cost.blocks import BlockStages
from vpuc.cost.shave import act_invocation_cycles
from vpuc.fusion.act_split import shave_boxes
from vpuc.fusion.blocked_program import sanitize
from vpuc.fusion.fuse_conv import ConvEpilogue, conv_fusable, epilogue_dpu_cycles
from vpuc.fusion.fuse_eltwise import ELTWISE_OPS, EltwiseEpilogue
from vpuc.fusion.fuse_halo_conv import ChainEpilogue, HaloConvEpilogue, halo_fusable
from vpuc.fusion.fuse_pool import PoolEpilogue, pool_fusable
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_graph import body_key
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, Graph
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType
from vpuc.reference.graph import storage_dtype
from vpuc.verifier.graph import infer_graph

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])
# Epilogue.row_cycles by (body, config): the oldest dropped past this many.
_ROW_CYCLES: dict[tuple, int] = {}
_ROW_CYCLES_KEPT = 256


def fusable(tok, segments: list, reads, writes, outputs: set[str]) -> dict[int, tuple]:
    """DPU segment index -> what of the segment right after it runs on its output blocks:
    ``("sg", n)``, the subgraph ``tok.subgraphs[n]`` of an ACT segment of that one subgraph,
    whose one input is the layer's output and one output has its type but the order, its
    body elementwise (every op of the block's shape or a scalar constant); or ``("dpu",
    layer)``, an eltwise Add or Multiply DPU layer (no bias) of the layer's output and
    another value of its type; or ``("pool", layer)``, a MaxPool DPU layer of the layer's
    output alone (``fuse_pool.pool_fusable``); or ``("conv", layer)``, a 1x1 Convolution
    of a depthwise 1x1's output alone (``fuse_conv.conv_fusable``); or ``("halo", layer)``,
    a 3x3 (odd, same-size) Convolution of the layer's output alone
    (``fuse_halo_conv.halo_fusable``).  The layer is a window or CNN layer (not a
    MatMul) and its output has no other reader (nor is it a network output).
    ``reads(seg)`` / ``writes(seg)``: a segment's graph values."""
    readers: dict[str, set[int]] = {}
    for s, seg in enumerate(segments):
        for v in reads(seg):
            readers.setdefault(v, set()).add(s)
    out: dict[int, tuple] = {}
    index = tok.graph.index()
    for s in range(len(segments) - 1):
        seg, nxt = segments[s], segments[s + 1]
        if seg.layer is None or seg.layer.op.kind == "MatMul":
            continue
        x = seg.layer.output
        if readers.get(x) != {s + 1} or x in outputs or writes(seg) != [x]:
            continue
        if len(nxt.units) == 1 and nxt.units[0][0] == "sg":
            sub = tok.subgraphs[nxt.units[0][1]]
            if sub.inputs == [x] and len(sub.outputs) == 1 and _elementwise(sub.body):
                out[s] = ("sg", nxt.units[0][1])
        elif nxt.layer is not None and nxt.layer.op.kind in ELTWISE_OPS \
                and nxt.layer.bias is None and list(nxt.layer.op.operands).count(x) == 1 \
                and len(nxt.layer.op.operands) == 2 and _same_types(tok, nxt.layer):
            out[s] = ("dpu", nxt.layer)
        elif nxt.layer is not None and pool_fusable(seg.layer, nxt.layer, index):
            out[s] = ("pool", nxt.layer)
        elif nxt.layer is not None and conv_fusable(seg.layer, nxt.layer, index):
            out[s] = ("conv", nxt.layer)
        elif nxt.layer is not None and halo_fusable(seg.layer, nxt.layer, index):
            out[s] = ("halo", nxt.layer)
    return out


def _same_types(tok, layer) -> bool:
    index = tok.graph.index()
    types = [index.producer(v).type for v in list(layer.op.operands) + [layer.output]]
    return all(t is not None and t.rank == 4 and t.is_static and t.dims == types[0].dims
               and t.elem == types[0].elem for t in types)


def _elementwise(body: Graph) -> bool:
    params = [op for op in body.ops if op.kind == PARAMETER]
    results = [op for op in body.ops if op.kind == RESULT]
    if len(params) != 1 or len(results) != 1 or params[0].type is None:
        return False
    shape = params[0].type
    if shape.rank != 4 or not shape.is_static or results[0].type is None \
            or results[0].type.dims != shape.dims or results[0].type.elem != shape.elem:
        return False
    for op in body.ops:
        if op.type is None:
            return False
        if op.kind == CONSTANT:
            if any(d != 1 for d in op.type.dims):
                return False
        elif op.kind == "Broadcast" or op.type.dims != shape.dims:
            return False
    return True


def block_body(body: Graph, block: TensorType) -> Graph:
    """A copy of an elementwise body whose Parameter and Result are ``block`` (its dims,
    the body's element type, NHWC)."""
    out = copy.deepcopy(body)
    for op in out.ops:
        if op.kind in (PARAMETER, RESULT):
            op.type = TensorType(block.dims, op.type.elem, NHWC)
    infer_graph(out)
    return out


@dataclass
class Epilogue:
    """The subgraph ``sub`` as a per-block stage of one DPU layer; ``made``, ``generated``,
    ``kernels``: ``lower_graph_segments.lower``'s kernel cache by body, generated objects and the
    program's kernel declarations."""
    graph_name: str
    sub: object
    made: dict
    generated: dict
    kernels: list[str]
    config: object = None
    timings: list = field(default_factory=list)
    calls: int = 0
    outputs: set = field(default_factory=set)      # the CMX buffers it wrote, by name

    def block_cycles(self, rows: int, timing) -> float:
        """NCE cycles until the later of a tile's two ACT SHAVEs finishes the epilogue of a
        block of ``rows`` output rows (all the layer's aligned channels, its whole width), its
        ``shave_boxes`` taken in order by the SHAVE free first, each task paying its
        dispatch: what the DPU layer's block-count estimate adds to a block's compute
        (``with_epilogue``).  The kernel is far costlier than the DPU task on MobileNetV3
        (a 5-row block of 288 channels: 13,700 cycles per SHAVE against 1,800 of DPU), so a
        count that gives one tile a block more (3 blocks on 2 tiles) leaves that tile's
        SHAVEs a third of the layer's work behind the other's.  A box costs its share of
        one row's cycles (``row_cycles``)."""
        n, c, _, w = self._parameter().type.dims
        per_row = self.row_cycles(n, aligned(c), w)
        free = [0.0, 0.0]
        for r0, r1, x0, x1 in shave_boxes(rows, w):
            first = min(range(2), key=free.__getitem__)
            free[first] += act_invocation_cycles((r1 - r0) * per_row * (x1 - x0) / w,
                                                 timing.shave_cycle,
                                                 timing.dispatch["ACT_SHAVE"])
        return max(free)

    def row_cycles(self, n: int, c: int, w: int) -> int:
        """SHAVE cycles of the kernel on one row of ``c`` channels and width ``w``, run once
        on zeros (an elementwise body has no data-dependent control flow).  Cycles are
        linear in rows but for a fixed part (HardSwish on 288 channels, 14 wide: 3,873 for
        one row, 7,653 for two), which ``block_cycles`` counts once per row: it ranks block
        counts.  The kernel's generation is most of the cost, so results are kept by body
        and size (MobileNetV3 repeats its blocks)."""
        elem = self._parameter().type.elem
        body = block_body(self.sub.body, TensorType((n, c, 1, w), elem, NHWC))
        key = (body_key(body), repr(self.config))
        if key not in _ROW_CYCLES:
            from vpuc.fusion.generator.run import run_kernel
            kernel = generate(body, "probe", config=self.config)
            zeros = np.zeros((n, c, 1, w), dtype=storage_dtype(elem))
            if len(_ROW_CYCLES) >= _ROW_CYCLES_KEPT:
                _ROW_CYCLES.pop(next(iter(_ROW_CYCLES)))
            _ROW_CYCLES[key] = run_kernel(kernel, [zeros], [(n, c, 1, w)]).cycles
        return _ROW_CYCLES[key]

    def _parameter(self):
        return next(op for op in self.sub.body.ops if op.kind == PARAMETER)

    def kernel(self, block: TensorType) -> str:
        body = block_body(self.sub.body, block)
        key = body_key(body)
        if key in self.made:
            return self.made[key]
        name = base = sanitize(f"{self.graph_name}.{self.sub.name}")
        taken, n = set(self.made.values()), 1
        while name in taken:
            name, n = f"{base}.{n}", n + 1
        self.made[key] = name
        kernel = generate(body, name, config=self.config)
        self.timings += [(f"{name}: {stage}", t) for stage, t in kernel.timings]
        self.generated[name] = kernel.obj
        params = ", ".join(f"{p.name}: {p.memref}" for p in kernel.decl.params)
        self.kernels.append(f"kernel @{name}({params}) from generated")
        return name

    def emit(self, e, k: int, block: str, block_type: TensorType, tile: int, dst: str) -> str:
        """After block ``k``'s DPU task on ``tile``: ACT SHAVE tasks that run the kernel on the
        CMX buffer ``block`` into a buffer of its own, split evenly over the tile's two ACT
        SHAVEs (``shave_boxes``); that buffer's name (the block's store waits on
        ``%KEY.actedK``)."""
        self.calls += 1
        n, c, rows, w = block_type.dims
        out = e.cmx(f"act.c{k}", TensorType(block_type.dims, block_type.elem, NHWC), tile)
        e.prog.barriers.append(f"barrier %{e.p}acted{k}")
        boxes = shave_boxes(rows, w)
        for j, (r0, r1, x0, x1) in enumerate(boxes):
            part = TensorType((n, c, r1 - r0, x1 - x0), block_type.elem, NHWC)
            src, dst = block, out
            if len(boxes) > 1:
                box = [f"0:{n}", f"0:{c}", f"{r0}:{r1}", f"{x0}:{x1}"]
                src = e.view(f"act.in{k}p{j}", block[1:], box)
                dst = e.view(f"act.out{k}p{j}", out[1:], box)
            e.prog.act += [f"  {e.lp}act{k}.{j}: sw @{self.kernel(part)} on tile {tile} "
                           f"inputs({src} as %a0) outputs({dst} as %r0) "
                           f"waits(%{e.p}done{k}) updates(%{e.p}acted{k}) {{",
                           "    run(%a0, %r0)", "  }"]
        self.outputs.add(out)
        return out


def with_epilogue(prog, cost):
    """A DPU layer's block cost ``cost`` (rows -> ``BlockStages``) with the ACT SHAVE time of
    the epilogue being emitted on its blocks (``prog.epilogue``, an ``Epilogue``) as each
    block's ``act`` stage (``vpuc.cost.blocks``), so the block count balances the tiles'
    ACT SHAVEs too; a fused convolution stage's (``fuse_conv``, ``fuse_halo_conv``) DPU
    cycles in its ``compute`` (the block heights then fill the stage's mode grid too);
    ``cost`` as it is without such an epilogue or a timing model."""
    epilogue, timing = getattr(prog, "epilogue", None), getattr(prog, "timing", None)
    if cost is None or timing is None:
        return cost
    if hasattr(epilogue, "dpu_cycles") or isinstance(epilogue, ConvEpilogue):
        def with_dpu(rows: int) -> BlockStages:    # a convolution stage's task, on the DPU
            s = cost(rows)
            return BlockStages(s.load, s.compute + epilogue_dpu_cycles(epilogue, rows, timing),
                               s.store, s.ddr, s.act)
        return with_dpu
    if not isinstance(epilogue, Epilogue):
        return cost

    def with_act(rows: int) -> BlockStages:
        s = cost(rows)
        return BlockStages(s.load, s.compute, s.store, s.ddr,
                           s.act + epilogue.block_cycles(rows, timing))
    return with_act


_SECTIONS = ("kernels", "buffers", "cmx", "views", "barriers", "dma", "dpu", "act")
_DMA = re.compile(r": dma (?:\w+ )?(%\S+) -> (%\S+) ")


def emit_fused(prog, layer, values: dict, index, tiles: int, prefix: str, gate, finish,
               epilogue, x_name: str, y_name: str) -> bool:
    """Emit DPU ``layer`` with ``epilogue`` on its blocks, its output going to the subgraph's
    output ``y_name`` (``values`` maps the layer's graph values to program values, its
    output already to ``y_name``'s); False, with ``prog`` as it was, when some store of the
    layer's output did not go through the epilogue (an emitter of its own stores).  The
    layer's output ``x_name``, now never in DDR, loses its declaration."""
    from vpuc.fusion.lower_dpu import emit_layer
    mark = {s: len(getattr(prog, s)) for s in _SECTIONS}
    prog.epilogue = epilogue
    try:
        emit_layer(prog, layer, values, index, tiles, prefix, gate, finish)
        if hasattr(epilogue, "flush"):      # tasks it held back (``fuse_pool``)
            epilogue.flush(prog)
    finally:
        prog.epilogue = None
    into = {f"%{y_name}"} | {m.group(1) for line in prog.views[mark["views"]:]
                            if (m := re.match(rf"view (%\S+) = %{re.escape(y_name)}\[", line))}
    acted = set(epilogue.outputs)
    acted |= {m.group(1) for line in prog.views[mark["views"]:]
              if (m := re.match(r"view (%\S+) = (%\S+)\[", line)) and m.group(2) in acted}
    stores = [m for line in prog.dma[mark["dma"]:] if (m := _DMA.search(line))
              and m.group(2) in into]
    if not epilogue.calls or getattr(epilogue, "refused", False) \
            or any(m.group(1) not in acted for m in stores):
        for s, n in mark.items():
            del getattr(prog, s)[n:]
        return False
    prog.buffers = [b for b in prog.buffers if not b.startswith(f"ddr %{x_name} :")]
    return True


def epilogue_for(sub: tuple, halo, seg, graph, tok, by_name: dict, names: dict, made: dict,
                 generated: dict, prog, config, timings: list, timing) -> tuple:
    """(the graph value its stores write, the epilogue) of the fused segment ``sub`` after
    ``seg``; with ``halo``, the 3x3 DPU layer after a fused 1x1 (``sub``), both on the
    blocks (``fuse_halo_conv.ChainEpilogue``)."""
    index = graph.index()
    if halo is not None:
        y = halo.output
        return y, ChainEpilogue(ConvEpilogue(sub[1], None, index, timing),
                                HaloConvEpilogue(halo, by_name[names[y]], index, timing))
    if sub[0] == "sg":
        return tok.subgraphs[sub[1]].outputs[0], Epilogue(
            graph.name, tok.subgraphs[sub[1]], made, generated, prog.kernels, config, timings)
    y = sub[1].output
    if sub[0] == "pool":
        return y, PoolEpilogue(sub[1], by_name[names[y]], index, timing)
    if sub[0] == "halo":
        return y, HaloConvEpilogue(sub[1], by_name[names[y]], index, timing)
    if sub[0] == "conv":
        return y, ConvEpilogue(sub[1], by_name[names[y]], index, timing)
    ops = list(sub[1].op.operands)
    other = ops[1 - ops.index(seg.layer.output)]
    return y, EltwiseEpilogue(sub[1], by_name[names[other]], ops[0] == seg.layer.output,
                              timing)
