"""A squeeze-excite product folded into the projection after it (``--schedule default``).

A squeeze-excite block ends in ``y = x * e[c]`` (``lower_dpu_scale``: a DPU depthwise 1x1
over all of ``x``) and a 1x1 convolution ``P`` (weights ``W[o, c]``) reading ``y``.  Since
``P(x * e) = conv(x, W')`` with ``W'[o, c] = W[o, c] * e[c]``, the product's pass over
``x`` (its loads, dwconv tasks and stores: ``H * W * C`` multiplies) becomes a scale of the
projection's weights (``O * C`` multiplies), and the projection reads ``x`` directly (often
held in CMX already, ``resident.py``).

Where the bytes are plain: the DPU reads dense weights ``[O, I, KH, KW]`` NHWC (O, KY, KX,
I: the input channel innermost), which for a 1x1 kernel is O runs of I values
(``runtime_sim/dpu/ops.conv2d``; the lowering's constant weights, padded to the DPU's
channel multiples, with the bias in rows after them, ``lower_dpu_table``: the scale reads
the weights' view of that table and leaves the bias rows alone).  As a DPU input those bytes
are ``[O, I, 1, 1]``, a batch of O single pixels of I channels, the NHWC bytes of one row
of O pixels (``runtime_sim/engines/dpu.pixel_batch``, which charges it as that row).  So
the scale is a depthwise 1x1 whose per-channel weights are ``e`` (the trick
``lower_dpu_scale`` uses on ``x``): ``e`` is loaded into a ``[I, 1, 1, 1]`` buffer of every
tile before the blocks' inputs (padded input channels from its first ones: finite, and the
weights there are zeros), and after each weights load one ``dwconv`` task writes ``W'``
into a CMX buffer of its own, which the projection's tasks on that tile read; they follow
it in the tile's DPU queue.  The scale waits on ``e`` and the weights alone, not on the
first block's input.  An ACT SHAVE kernel of the same multiply (two per tile, each on half
of the rows) costs more than the DPU task: MobileNetV3's 240 x 48 weights 6,636 NCE cycles
against 1,925, its 576 x 96 ones 8,556 against 5,955.  ``schedule_prefetch.deepen`` loads
such a projection's weights further back whatever their size (the scale needs them as
soon as ``e`` is there).

``chosen_folds`` (called by ``lower_graph`` where ``lower_dpu_scale.choose_dpu`` decides the
product) keeps the candidates (``fold_candidates``) for which ``choose_fold`` finds, with
the cost model, the scale's DPU cycles per tile below the product segment's block pipeline
(its blocks as ``lower_dpu_scale`` cuts them; either way each tile loads ``e``), and whose
scaled weights take a tile's CMX no more than a deep load of one ACT SHAVE task's share.

Numerics: the fold rounds ``W * e`` to f16 where the product rounded ``x * e``; each is one
rounding of an exact product (11 x 11 significant bits fit f32) of relative size at most
u = 2^-11, so each of the projection's C terms differs from the graph's by at most
2u of its size: the output by at most ``2u * sum_c |W[o, c] x[c] e[c]|`` before the f32
sums' and the output's own roundings, not bit for bit (``tests/fusion/test_scale_weights.py``
derives its bound so; the end-to-end tolerance against onnxruntime is unchanged).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from vpuc.cost import DpuWorkload
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import NHWC, split_rows, split_rows_cost
from vpuc.fusion.lower_dpu_channels import aligned, variant_boxes
from vpuc.fusion.lower_dpu_permute import COMPRESSED_CHANNELS
from vpuc.fusion.lower_dpu_support import window
from vpuc.cost.blocks import pipeline_cycles
from vpuc.fusion.lower_dpu_scale import (ScaleProduct, product_blocks, product_stages,
                                         scale_product)
from vpuc.ir.graph import CONSTANT, GraphIndex
from vpuc.ir.types import ElemType, TensorType


# The label of a scale task after its layer's prefix (``WeightsScale.apply``: ``scale.t<tile>``
# once per tile, ``scale.c<block>`` for a layer loading weights per block), which
# ``schedule_room.EarlyRoom`` finds a folded projection by.
SCALE_LABEL = re.compile(r"scale\.[tc]\d+$")


@dataclass
class ScaleFold:
    """Segment ``product`` (``y = x * e``) folded into the projection segment after it."""
    product: int
    se: ScaleProduct


def fold_candidates(graph, tok, segments, names: dict[str, str], by_name: dict[str, Value],
                    fused: dict) -> dict[int, ScaleFold]:
    """The projection segments a product before them may fold into, by index: an ACT
    segment that is a squeeze-excite product of more than 4 channels (4: a compressed
    convolution, whose weights ``lower_dpu_fold_width`` loads) with ``e`` computed by another
    segment, ``y`` read by nothing but the next segment, a 1x1 Convolution of stride 1
    without padding whose weights are a constant (graph values ``names`` maps to program
    values ``by_name``; ``fused``: the DPU segments with an epilogue, whose epilogue
    stays)."""
    index = graph.index()
    results = {op.operands[0] for op in graph.results}
    out: dict[int, ScaleFold] = {}
    for s, seg in enumerate(segments[:-1]):
        nxt = segments[s + 1]
        if not seg.units or seg.layer is not None or seg.dma is not None \
                or seg.library is not None or nxt.layer is None or (s - 1) in fused:
            continue
        values = {g: by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)}
        se = scale_product(tok, seg, {g: v.type for g, v in values.items()})
        if se is None or se.excite is not None or se.y in results \
                or values[se.x].kind == "temp" or values[se.e].kind == "temp" \
                or values[se.x].type.dims[1] <= COMPRESSED_CHANNELS:
            continue
        if _projection(nxt.layer, se, index) and _pads_from_first(values[se.e]):
            out[s + 1] = ScaleFold(s, se)
    return out


def _projection(layer, se: ScaleProduct, index: GraphIndex) -> bool:
    """Whether ``layer`` is a 1x1 Convolution (stride 1, no padding) of constant weights
    that alone reads ``y`` (its data operand)."""
    op = layer.op
    if op.kind != "Convolution" or op.operands[0] != se.y \
            or list(index.consumers(se.y)) != [op] \
            or index.producer(op.operands[1]).kind != CONSTANT:
        return False
    kernel, strides, begin, end, dilations = window(op, index)
    return kernel == strides == dilations == (1, 1) and not any(begin + end)


def _pads_from_first(e: Value) -> bool:
    """Whether ``e``'s padded channels can be copied from its first ones (or it holds
    its pads already)."""
    c = e.type.dims[1]
    return e.padded is not None or aligned(c) - c <= c


def scale_workload(outs: int, ins: int, elem: ElemType) -> Callable[[int], DpuWorkload]:
    """The scale's workload by rows (always 1): a row of ``outs`` pixels of ``ins``
    channels (``runtime_sim/engines/dpu.pixel_batch``)."""
    def workload_of(rows: int) -> DpuWorkload:
        return DpuWorkload(op="dwconv", elem=elem.value, width=outs, height=rows, channels=ins,
                           in_channels=ins, in_bytes=elem.nbytes, out_bytes=elem.nbytes,
                           weight_bytes=elem.nbytes)
    return workload_of


def choose_fold(prog: ProgramText, x: TensorType, y: TensorType, outs: int, tiles: int,
                op) -> bool:
    """Whether to fold: the cost model finds the scale of the ``outs`` x C weights on each
    tile cheaper than the product's segment, and the scaled copy a tile then holds is at
    most ``schedule_room.DEEP_BYTES_PER_ACT_TASK`` and, with the weights it scales, within
    the layer's CMX budget (a projection whose weights do not fit is cut over its reduction,
    ``lower_dpu_ksplit``, whose chunks have no scale hook: MobileNetV3-Small's 7 x 7 x 288
    block at a budget of 16 KB).

    The product's segment is priced as its block pipeline (``product_stages``: each
    block's load of ``x``, its DPU task, its store of ``y``; ``vpuc.cost.blocks.
    pipeline_cycles`` over the tiles and DMA channels), since the fold saves all of it,
    not only the DPU tasks: priced by its DPU tasks alone (2,241 NCE cycles of scale
    against 961), MobileNetV3-Small's 7 x 7 x 288 block kept a product whose segment
    takes 5,889.  The cap: a fold loads the projection's weights deep, whatever their
    size (``schedule_prefetch.deepen``, the scale waits on them once ``e`` is there), and
    each tile holds the scaled copy beside them; a copy past what the deep loads of one
    ACT SHAVE task may take takes the CMX room the classifier's early weight loads had.
    MobileNetV3-Small (schedule_bench cycles; scaled bytes): its 56 x 56 and 14 x 14
    blocks fold (512 to 23,040 B), 565,060 when they alone did; with the 7 x 7 x 288
    block (55,296 B) 562,751; the two 7 x 7 x 576 ones as well (110,592 B each; scale
    4,271 against a 7,671-cycle segment) 585,990."""
    from vpuc.fusion.schedule_room import DEEP_BYTES_PER_ACT_TASK   # (it imports this module)
    if prog.timing is None:
        return False
    c = x.dims[1]
    scaled = aligned(outs) * aligned(c) * x.elem.nbytes
    if scaled > DEEP_BYTES_PER_ACT_TASK or 2 * scaled > prog.cmx_budget:
        return False     # (a tile holds the weights and their scaled copy within its budget)
    scale = split_rows_cost(1, scale_workload(aligned(outs), aligned(c), x.elem), prog.timing)[1]
    blocks = product_blocks(prog, x, y, tiles, op, 0.0)
    stages = product_stages(prog, x, y)
    product = pipeline_cycles([stages(b - a) for a, b in blocks], min(tiles, len(blocks)),
                              channels=prog.dma_channels)
    return scale < product


def chosen_folds(prog: ProgramText, graph, tok, segments, names: dict[str, str],
                 by_name: dict[str, Value], fused: dict, tiles: int) -> dict[int, ScaleFold]:
    """The candidates (``fold_candidates``) whose fold the cost model prefers
    (``choose_fold``), by projection segment."""
    index = graph.index()
    out = {}
    for s, fold in fold_candidates(graph, tok, segments, names, by_name, fused).items():
        se, layer = fold.se, segments[s].layer
        outs = index.producer(layer.op.operands[1]).type.dims[0]
        if choose_fold(prog, by_name[names[se.x]].type, by_name[names[se.y]].type, outs,
                       tiles, index.producer(se.y)):
            out[s] = fold
    return out


@dataclass
class WeightsScale:
    """The hook a DPU layer's emitter calls after loading a tile's weights
    (``ProgramText.weights_scale``): ``e`` the excitation's program value, ``op`` the
    projection, ``dpu_from`` the first of its DPU task lines in the program."""
    e: Value
    op: object
    dpu_from: int
    scaled: set[str] = field(default_factory=set)      # the scaled weights buffers
    e_of: dict[int, str] = field(default_factory=dict)  # tile -> its CMX copy of e

    def ready(self, em, t: int, tag: str) -> list[str]:
        """The barriers tile ``t``'s weights load (``tag``) updates beside its own, which its
        scale waits on: ``e`` in the tile's CMX (loaded for every tile at the first call, so
        the loads of ``e`` go before the blocks' input loads in the DMA queue) and the
        weights."""
        if not self.e_of:
            for u in range(em.used):
                self.e_of[u] = self._load_e(em, u)
        em.prog.barriers.append(f"barrier %{em.p}sw.{tag}")
        return [f"%{em.p}sw.{tag}", f"%{em.p}se{t}"]

    def _load_e(self, em, t: int) -> str:
        """DMA ``e`` into a ``[I, 1, 1, 1]`` CMX buffer of tile ``t`` (I its aligned
        channels; the pads copied from its first channels, finite: the weights there are
        zeros), updating ``se{t}``; the buffer."""
        e, c = self.e, self.e.type.dims[1]
        i = aligned(c)
        ebuf = em.cmx(f"se.t{t}", TensorType((i, 1, 1, 1), e.type.elem, NHWC), t)
        em.prog.barriers.append(f"barrier %{em.p}se{t}")
        waits, done = em.load_waits(t), [f"%{em.p}se{t}"]
        if e.padded is not None:           # its pads finite (resident.py): loaded with it
            src = em.view(f"se.v{t}", e.name, ["0:1", f"0:{i}", "0:1", "0:1"])
            em.dma(f"load_se.t{t}", src, ebuf, 0, waits, done)
            return ebuf
        real = ebuf if i == c else em.view(f"se.r{t}", ebuf[1:], [f"0:{c}", "0:1", "0:1",
                                                                  "0:1"])
        em.dma(f"load_se.t{t}", f"%{e.name}", real, 0, waits, done)
        if i > c:
            pad = em.view(f"se.pv{t}", e.name, ["0:1", f"0:{i - c}", "0:1", "0:1"])
            em.dma(f"pad_se.t{t}", pad, em.view(f"se.p{t}", ebuf[1:], [
                f"{c}:{i}", "0:1", "0:1", "0:1"]), 0, waits, done)
        return ebuf

    def apply(self, em, t: int, clauses: str, tag: str, ready: list[str]) -> str:
        """One ``dwconv`` on tile ``t`` scaling the weights of ``clauses`` (the projection
        task's operand clauses, loaded by ``tag``'s load) after the ``ready`` barriers;
        the clauses with the scaled weights."""
        m = re.search(r" weights\((%\S+?)\)", clauses)
        if m is None:
            raise VpucError(f"internal: no weights to scale in {clauses!r}", self.op.loc)
        w = m.group(1)
        o, i = _dims(em, w)[:2]
        elem = self.e.type.elem
        out = em.cmx(f"ws.{tag}", TensorType((o, i, 1, 1), elem, NHWC), t)
        self.scaled.add(out)
        lines = [f"  {em.lp}scale.{tag}: dpu dwconv on tile {t} in({w}) "
                 f"weights({self.e_of[t]}) out({out}) kernel(1, 1) stride(1, 1) "
                 f"pad(0, 0, 0, 0) dilation(1, 1) waits({', '.join(ready)}) {{"]
        runs = split_rows(1, scale_workload(o, i, elem), em.timing)
        for a, b, z0, z1, mode in variant_boxes("dwconv", runs, (0, i - 1)):
            lines.append(f"    variant start(0, {a}, {z0}) end(0, {b - 1}, {z1}) mode({mode})")
        em.prog.dpu += lines + ["  }"]
        return clauses[:m.start(1)] + out + clauses[m.end(1):]

    def finish(self, prog: ProgramText) -> None:
        """Check that every ``conv`` task of the projection reads scaled weights (an emitter
        loading weights without this hook would compute ``P(x)``) and unset the hook."""
        for line in prog.dpu[self.dpu_from:]:
            m = re.search(r": dpu conv .* weights\((%\S+?)\)", line)
            if m is not None and m.group(1) not in self.scaled:
                raise VpucError(f"internal: {self.op.label}'s task reads unscaled weights "
                                f"{m.group(1)} with a squeeze-excite product folded in",
                                self.op.loc)
        prog.weights_scale = None


def _dims(em, name: str) -> tuple[int, ...]:
    """The dims of a CMX buffer or view ``em`` declared."""
    if name in em.cmx_of:
        return em.cmx_of[name][0].dims
    _, slices = em.view_of[name]
    dims = []
    for s in slices:
        lo, _, hi = s.partition(":")
        dims.append(int(hi) - int(lo) if _ else 1)
    return tuple(dims)
