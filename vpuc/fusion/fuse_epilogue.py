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

``fusable`` picks the pairs; ``Epilogue`` is what ``LayerEmitter.store`` calls per
block (``ProgramText.epilogue``).  A layer whose emitter never stores through
``LayerEmitter.store`` (a K-split layer: ``lower_dpu_ksplit``) leaves it unused,
and ``lower-graph`` then emits the two segments as before.

Expects: segments as ``lower_graph._segments`` makes them.  Guarantees: the kernel
is generated from the subgraph's own body with its ports typed as the block (NHWC,
the DPU's order), so each element is computed by the same ops as in the ACT segment.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from vpuc.fusion.blocked_program import sanitize
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_graph import body_key
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, Graph
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType
from vpuc.verifier.graph import infer_graph

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def fusable(tok, segments: list, reads, writes, outputs: set[str]) -> dict[int, int]:
    """DPU segment index -> the subgraph (index in ``tok.subgraphs``) of the segment right
    after it that can run on its output blocks: a window or CNN layer (not a MatMul),
    followed by an ACT segment of that one subgraph, whose one input is the layer's output
    and nothing else reads it (nor is it a network output), whose one output has its type
    but the order, and whose body is elementwise (every op of the block's shape or a
    scalar constant).  ``reads(seg)`` / ``writes(seg)``: a segment's graph values."""
    readers: dict[str, set[int]] = {}
    for s, seg in enumerate(segments):
        for v in reads(seg):
            readers.setdefault(v, set()).add(s)
    out: dict[int, int] = {}
    for s in range(len(segments) - 1):
        seg, nxt = segments[s], segments[s + 1]
        if seg.layer is None or seg.layer.op.kind == "MatMul" or len(nxt.units) != 1 \
                or nxt.units[0][0] != "sg":
            continue
        sub = tok.subgraphs[nxt.units[0][1]]
        x = seg.layer.output
        if sub.inputs != [x] or len(sub.outputs) != 1 or readers.get(x) != {s + 1} \
                or x in outputs or writes(seg) != [x]:
            continue
        if _elementwise(sub.body):
            out[s] = nxt.units[0][1]
    return out


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
    ``kernels``: ``lower_graph.lower``'s kernel cache by body, generated objects and the
    program's kernel declarations."""
    graph_name: str
    sub: object
    made: dict
    generated: dict
    kernels: list[str]
    config: object = None
    timings: list = field(default_factory=list)
    calls: int = 0

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

    def emit(self, e, k: int, block: str, block_type: TensorType, tile: int) -> str:
        """After block ``k``'s DPU task on ``tile``: ACT SHAVE tasks that run the kernel on the
        CMX buffer ``block`` into a buffer of its own, its rows halved over the tile's two
        ACT SHAVEs (rows are outermost in NHWC, so each half is dense); that buffer's name
        (the block's store waits on ``%KEY.actedK``)."""
        self.calls += 1
        n, c, rows, w = block_type.dims
        out = e.cmx(f"act.c{k}", TensorType(block_type.dims, block_type.elem, NHWC), tile)
        e.prog.barriers.append(f"barrier %{e.p}acted{k}")
        cuts = [(0, rows)] if rows < 2 else [(0, rows // 2), (rows // 2, rows)]
        for j, (a, b) in enumerate(cuts):
            part = TensorType((n, c, b - a, w), block_type.elem, NHWC)
            src, dst = block, out
            if len(cuts) > 1:
                box = [f"0:{n}", f"0:{c}", f"{a}:{b}", f"0:{w}"]
                src = e.view(f"act.in{k}p{j}", block[1:], box)
                dst = e.view(f"act.out{k}p{j}", out[1:], box)
            e.prog.act += [f"  {e.lp}act{k}.{j}: sw @{self.kernel(part)} on tile {tile} "
                           f"inputs({src} as %a0) outputs({dst} as %r0) "
                           f"waits(%{e.p}done{k}) updates(%{e.p}acted{k}) {{",
                           "    run(%a0, %r0)", "  }"]
        return out

_SECTIONS = ("kernels", "buffers", "cmx", "views", "barriers", "dma", "dpu", "act")
_DMA = re.compile(r": dma (?:\w+ )?(%\S+) -> (%\S+) ")


def emit_fused(prog, layer, values: dict, index, tiles: int, prefix: str, gate, finish,
               epilogue: Epilogue, x_name: str, y_name: str) -> bool:
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
    finally:
        prog.epilogue = None
    into = {f"%{y_name}"} | {m.group(1) for line in prog.views[mark["views"]:]
                            if (m := re.match(rf"view (%\S+) = %{re.escape(y_name)}\[", line))}
    acted = {f"%{prefix}act.c{k}" for k in range(epilogue.calls)}
    acted |= {m.group(1) for line in prog.views[mark["views"]:]
              if (m := re.match(r"view (%\S+) = (%\S+)\[", line)) and m.group(2) in acted}
    stores = [m for line in prog.dma[mark["dma"]:] if (m := _DMA.search(line))
              and m.group(2) in into]
    if not epilogue.calls or any(m.group(1) not in acted for m in stores):
        for s, n in mark.items():
            del getattr(prog, s)[n:]
        return False
    prog.buffers = [b for b in prog.buffers if not b.startswith(f"ddr %{x_name} :")]
    return True
