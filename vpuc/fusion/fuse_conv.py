"""A 1x1 convolution run on the output blocks of the depthwise 1x1 before it (``--schedule
default``).

DenseNet-121's dense layers are BatchNorm, Relu, then a 1x1 Convolution on the Concat of
every earlier layer's output.  ``channel_scale_dpu`` makes the BatchNorm and Relu a DPU
depthwise 1x1; its output, as wide as the Concat, is kept in CMX between the two layers
when it fits the room resident values have (``resident.py``), else it is stored to DDR
whole and loaded back by the convolution's blocks: on the first dense block's 56 x 56
maps, 0.8 to 1.6 MB each way per layer.  Here the convolution runs on the depthwise
layer's output blocks instead, as ``fuse_epilogue`` runs an elementwise successor:
after each block's depthwise task a DPU ``conv`` task reads the block in CMX (every
input channel of its rows: a 1x1 window needs no halo) with the convolution's weights
and bias, loaded once per tile, and the block's store writes the convolution's rows.
The normalized value never exists whole.

Weights: the graph's constant, declared ``[O, C, 1, 1]`` NHWC (1x1: the same bytes as
OIHW); the bias f32, as ``LayerEmitter.load_bias`` loads a layer's.  Only aligned
channel counts (a multiple of 16 on both sides, ``lower_dpu_channels.aligned``), so no
block has pad channels to zero or to drop.

Expects: segments as ``lower_segments.graph_segments`` makes them.  Guarantees: the DPU
computes each output element from the same f16 inputs (the depthwise's rounded outputs)
as the two layers apart did, its f32 accumulation and one rounding per layer alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vpuc.cost import DpuWorkload
from vpuc.fusion.lower_dpu_channels import aligned, variant_boxes
from vpuc.fusion.lower_dpu_support import const_text
from vpuc.ir.graph import CONSTANT
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.reference.graph import constant_value

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def _one_by_one(op, index) -> bool:
    """Whether ``op`` is a 1x1 window of stride 1, no padding, no dilation."""
    w = index.producer(op.operands[1])
    return (w.kind == CONSTANT and w.type is not None and tuple(w.type.dims[-2:]) == (1, 1)
            and tuple(op.attrs.get("strides", (1, 1))) == (1, 1)
            and not any(op.attrs.get("pads_begin", (0, 0)))
            and not any(op.attrs.get("pads_end", (0, 0)))
            and tuple(op.attrs.get("dilations", (1, 1))) == (1, 1))


def conv_fusable(first, second, index) -> bool:
    """Whether DPU layer ``second`` can run on ``first``'s output blocks: ``first`` a
    depthwise 1x1 ``GroupConvolution`` (``channel_scale_dpu``'s), ``second`` a 1x1
    ``Convolution`` of its output alone, both of aligned channels, the maps of one size
    and element type."""
    a, b = first.op, second.op
    if a.kind != "GroupConvolution" or b.kind != "Convolution" or a.type is None \
            or b.type is None or b.operands[0] != first.output or a.type.rank != 4 \
            or b.type.rank != 4 or not (_one_by_one(a, index) and _one_by_one(b, index)):
        return False
    groups = index.producer(a.operands[1]).type.dims
    n, c, h, w = a.type.dims
    o = b.type.dims[1]
    return (tuple(groups[:3]) == (c, 1, 1) and tuple(b.type.dims) == (n, o, h, w)
            and b.type.elem == a.type.elem and aligned(c) == c and aligned(o) == o
            and index.producer(first.output).type.dims == a.type.dims)


def weights_fit(layer, index, budget: int) -> bool:
    """Whether the 1x1 ``layer``'s weights take at most a quarter of a layer's CMX
    ``budget`` on each tile, beside the depthwise's double-buffered blocks (DenseNet-121:
    64 KiB in its first block, 256 KiB in its second transition, of 1 MiB; its third
    transition's 1 MiB would leave no room for one row)."""
    return index.producer(layer.op.operands[1]).type.nbytes <= budget // 4


def epilogue_bytes(epilogue, n: int, rows: int, width: int) -> int:
    """CMX bytes a ``ConvEpilogue`` adds to a block of ``rows`` rows of ``width`` columns,
    counted with the block's own (double-buffered with them): its output rows; a stage
    that counts its own (``fuse_halo_conv``: ``cmx_bytes``) its count; 0 for any other
    epilogue.  Their weights, once per tile, are ``epilogue_weight_bytes``."""
    if hasattr(epilogue, "cmx_bytes"):
        return epilogue.cmx_bytes(n, rows, width)
    if not isinstance(epilogue, ConvEpilogue):
        return 0
    return n * epilogue.layer.op.type.dims[1] * rows * width \
        * epilogue.layer.op.type.elem.nbytes


def epilogue_weight_bytes(epilogue) -> int:
    """The CMX bytes a tile holds once for a fused convolution stage's weights and bias
    (loaded with its first block, read by all: not double-buffered with the blocks); 0
    for an epilogue without weights."""
    if hasattr(epilogue, "weight_bytes"):
        return epilogue.weight_bytes()
    if not isinstance(epilogue, ConvEpilogue):
        return 0
    o, c = epilogue.layer.op.type.dims[1], epilogue.input_channels()
    return o * c * epilogue.layer.op.type.elem.nbytes + 4 * o


def epilogue_dpu_cycles(epilogue, rows: int, timing) -> float:
    """The cost model's DPU cycles of a fused convolution stage (``ConvEpilogue``, or one
    with ``dpu_cycles``) on a block of ``rows`` rows; 0 for any other epilogue."""
    if hasattr(epilogue, "dpu_cycles"):
        return epilogue.dpu_cycles(rows, timing)
    if not isinstance(epilogue, ConvEpilogue):
        return 0.0
    from vpuc.fusion.lower_dpu import split_rows_cost
    n, c, _, w = epilogue.index.producer(epilogue.layer.op.operands[0]).type.dims
    o, elem = epilogue.layer.op.type.dims[1], epilogue.layer.op.type.elem
    return split_rows_cost(rows, lambda r: DpuWorkload(
        op="conv", elem=elem.value, width=w, height=r, channels=o, in_channels=c, batch=n,
        in_bytes=elem.nbytes, out_bytes=elem.nbytes, weight_bytes=elem.nbytes), timing)[1]


@dataclass
class ConvEpilogue:
    """The 1x1 Convolution DPU ``layer`` as a per-block stage of the depthwise layer before
    it (module docstring); ``target``: the convolution's output program value (the stores'
    target), ``index``: the graph's."""
    layer: object
    target: object
    index: object
    timing: object
    calls: int = 0
    refused: bool = False
    outputs: set = field(default_factory=set)
    weights: dict = field(default_factory=dict)     # tile -> the task's operand clauses
    targets: dict = field(default_factory=dict)     # k -> the store's view of the target
    # the barrier its task updates: the store's ``acted``, or what a later stage waits on
    # (``fuse_halo_conv.ChainEpilogue``, whose stores write that stage's output: no target)
    ready: str = "acted"

    def input_channels(self) -> int:
        """The 1x1's input channels: the depthwise layer's output's."""
        return self.index.producer(self.layer.op.operands[0]).type.dims[1]

    def emit(self, e, k: int, block: str, block_type: TensorType, tile: int, dst: str,
             into: str | None = None) -> str:
        """After block ``k``'s depthwise task on ``tile``: the convolution's task on it; its
        output buffer's name (the block's store waits on ``%KEY.actedK``).  ``into``: a
        view of a later stage's buffer to write instead (``fuse_halo_conv``)."""
        self.calls += 1
        n, c, rows, w = block_type.dims
        o = self.layer.op.type.dims[1]
        _, slices = e.view_of.get(dst, (dst, None))
        spans = None if slices is None or len(slices) != 4 else \
            [tuple(int(v) for v in s.split(":")[:2]) for s in slices]
        # whole rows of every channel (a depthwise layer cut into channel chunks refuses),
        # NHWC on both sides: the store writes them as they are
        x = self.index.producer(self.layer.op.operands[0]).type
        if spans is None or spans[1] != (0, c) or c != x.dims[1] or spans[3] != (0, w) \
                or spans[2][1] - spans[2][0] != rows or (self.target is not None and (
                    self.target.type.order != NHWC or self.target.padded)):
            self.refused = True
            return block
        p, elem = e.p, block_type.elem
        operands = self.weights.get(tile)
        if operands is None:
            operands = load_stage_weights(self, e, k, tile, "conv", (o, c, 1, 1), elem)
        e.prog.barriers.append(f"barrier %{p}{self.ready}{k}")
        out = into or e.cmx(f"conv.c{k}", TensorType((n, o, rows, w), elem, NHWC), tile)

        def workload_of(r: int) -> DpuWorkload:
            return DpuWorkload(op="conv", elem=elem.value, width=w, height=r, channels=o,
                               in_channels=c, batch=n, in_bytes=elem.nbytes,
                               out_bytes=elem.nbytes, weight_bytes=elem.nbytes)
        from vpuc.fusion.lower_dpu import split_rows
        e.prog.dpu.append(f"  {e.lp}conv{k}: dpu conv on tile {tile} in({block}){operands} "
                          f"out({out}) kernel(1, 1) stride(1, 1) pad(0, 0, 0, 0) "
                          f"dilation(1, 1){self.layer.post} waits(%{p}done{k}, "
                          f"%{p}conv.loaded.t{tile}) updates(%{p}{self.ready}{k}) {{")
        for a, b, z0, z1, mode in variant_boxes("conv", split_rows(rows, workload_of,
                                                                   self.timing), (0, o - 1)):
            e.prog.dpu.append(f"    variant start(0, {a}, {z0}) end({w - 1}, {b - 1}, {z1}) "
                              f"mode({mode})")
        e.prog.dpu.append("  }")
        self.outputs.add(out)
        if self.target is None:
            return out
        self.targets[k] = e.view(f"conv.v{k}", self.target.name,
                                 [f"0:{n}", f"0:{o}", f"{spans[2][0]}:{spans[2][1]}", f"0:{w}"])
        return out

    def store_target(self, e, k: int, dst: str) -> str:
        """Block ``k``'s store goes to the convolution's rows, not the depthwise layer's
        (whose view, now unused, is dropped: that value is never declared)."""
        if k not in self.targets:
            return dst
        if dst in e.view_of:
            base, slices = e.view_of.pop(dst)
            e.prog.views.remove(f"view {dst} = {base}[{', '.join(slices)}]")
        return self.targets[k]


def load_stage_weights(stage, e, k: int, tile: int, stem: str, dims: tuple, elem) -> str:
    """A fused convolution stage's weights (``dims``, NHWC) and bias into ``tile``'s CMX,
    with the tile's first block's loads (``stage``: a ``ConvEpilogue`` or
    ``fuse_halo_conv.HaloConvEpilogue``; its ``layer``, ``index`` and per-tile
    ``weights``); the constants are declared with the first tile's load, named
    ``<prefix><stem>.w`` and ``.bias``.  The task's operand clauses."""
    p, o = e.p, dims[0]
    if not stage.weights:
        values = np.asarray(constant_value(stage.index.producer(stage.layer.op.operands[1])))
        e.prog.buffers.append(f"const %{p}{stem}.w : {'x'.join(map(str, dims))}x{elem} NHWC "
                              f"= {const_text(values.reshape(dims), p + stem + '.w')}")
        if stage.layer.bias is not None:
            bias = np.asarray(stage.layer.bias, np.float32)
            e.prog.buffers.append(f"const %{p}{stem}.bias : {o}xf32 = "
                                  f"{const_text(bias, p + stem + '.bias')}")
    e.prog.barriers.append(f"barrier %{p}{stem}.loaded.t{tile}")
    loaded = [f"%{p}{stem}.loaded.t{tile}"]
    wt = e.cmx(f"{stem}.w.t{tile}", TensorType(dims, elem, NHWC), tile)
    e.dma(f"{stem}.load_w.t{tile}", f"%{p}{stem}.w", wt, 0, e.load_waits(k), loaded)
    clauses = f" weights({wt})"
    if stage.layer.bias is not None:
        b = e.cmx(f"{stem}.bias.t{tile}", TensorType((o,), ElemType.F32, DimsOrder.identity(1)),
                  tile)
        e.dma(f"{stem}.load_bias.t{tile}", f"%{p}{stem}.bias", b, 0, e.load_waits(k), loaded)
        clauses += f" bias({b})"
    stage.weights[tile] = clauses
    return clauses
