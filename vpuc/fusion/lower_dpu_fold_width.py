"""A convolution of few input channels on the model's NCHW input, with its width folded into
channels: the DPU at its 16-channel width instead of a compressed convolution's 4.

``lower_dpu_permute`` lays the NCHW input out NHWC with ``C' = 4`` channels (the real ones,
zeros after) and runs a compressed convolution, which the cost model (fitted to VPUNN:
``vpuc/cost/dpu.py``, ``modes.py``) still charges as 16 input channels a cycle: 4 of every
16 MACs do work.  The NPU compiler's ``AdjustConvolutionInputShape`` /
``AdjustConvolutionShape`` (openvinotoolkit/npu_plugin) reshape such a convolution so its
channels fill the MPE; this module is that idea for the permuted input.

The index algebra of the fold, its geometry and its weights: ``fold_width_geometry``.

Movement: the permute's output buffer cannot be retyped in place (a VIR view only slices),
so each block's permuted rows are copied CMX -> CMX into a ``[R, W/k, 16]`` buffer by a
plain DMA (bytes in memory order); the NPU compiler's ``ShapeCast`` costs nothing there.
The layer's chain per block: DMA of the NCHW rows (``raw``) -> ``dpu permute`` (``perm``) ->
the copy (``loaded``: a tile's first on the store channel, idle until the first
convolution ends; a later one on the load channel right after the load of its tile's next
block, which waits for the slot the permute's convolution frees, so the loads behind it
do not wait for the permute and the store channel holds only stores; a tile's last, with
no later load, on the store channel right after the store of the block two back on its
tile, which the permute runs beside) -> the folded convolution -> the store, a byte copy
of the folded block into the output's rows.  A tile's DPU queue runs in order, so each
block's permute (but the tile's second) is listed before the convolution of the tile's
previous block, in three CMX slots a tile:
the convolutions then run back to back (ResNet-18's stem in two slots, the permute after
the previous convolution: the copy waited ~10,000 cycles a block and the stem took
204,210 cycles against 184,755).

ResNet-18 at 224x224 (``--schedule default``, timing-only): the stem 7x7/2, 3 -> 64
channels, becomes a 7x3 stride (2, 1) convolution of 16 -> 128 channels on [224, 56, 16]:
332,417 -> 184,755 cycles, DPU busy over both tiles 636,775 -> 298,367, the network
2,047,305 -> 1,914,273.  MobileNetV3-Small's stem (3x3/2 -> 16, HardSwish) keeps the
compressed convolution: its HardSwish epilogue on the ACT SHAVEs bounds it, and the fold's
DPU saving is less than its copies (``fold``).

Taken (``fold``, called first by ``lower_dpu_window.emit_window``: a layer ``lower_dpu_nn``
lowers is never folded) under these conditions, else ``lower_dpu_window`` lowers the layer
as before: a Convolution with constant weights, dilation 1, on an NCHW input of at most 4
channels (the permuted, compressed case) whose width is a multiple of ``k``; ``k % sx == 0``,
``OW % P == 0``, the folded pads non-negative and under ``K'``; an NHWC output in DDR or a
CMX-resident value of exactly ``OC`` channels (``OC % 16 == 0``), a fused epilogue only
when it computes each element from that element alone (``position_free``)
(``--schedule naive`` keeps values between layers NCHW, so it never folds); and the cost
model's flow-shop estimate of the layer (``vpuc.cost.blocks.pipeline_cycles``, each
lowering with its own block count, the epilogue's ACT time included) lower folded, plus
the copies' cycles, than compressed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vpuc.cost import DpuWorkload, choose_mode, dma_task_cycles, transfer_cost
from vpuc.cost.blocks import (SLOTS, BlockStages, Move, act_on_dpu, block_stages,
                              pipeline_cycles)
from vpuc.cost.dpu import permute_workload
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (NHWC, DpuLayer, LayerEmitter, choose_blocks, resident_cycles,
                                   split_rows_cost)
from vpuc.fusion.fuse_epilogue import Epilogue, with_epilogue
from vpuc.fusion.fold_width_geometry import Fold, fold_geometry, folded_weights
from vpuc.fusion.fuse_pool import PoolEpilogue, block_footprint
from vpuc.fusion.lower_dpu_channels import padded_vector
from vpuc.fusion.lower_dpu_permute import COMPRESSED_CHANNELS, permute_cycles
from vpuc.fusion.lower_dpu_support import const_text, window
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, GraphIndex
from vpuc.ir.types import ElemType, TensorType
from vpuc.reference.graph import constant_value

MPE_CHANNELS = 16       # input channels the MPE multiplies a cycle (vpuc/cost/dpu.py)
# CMX slots per tile a folded layer's blocks take in turn: a tile's next block loads and
# permutes while the one before it still waits for its convolution (``emit_folded``)
FOLD_SLOTS = 3


@dataclass(frozen=True)
class _Layer:
    """What the lowering and its estimates read of the layer."""
    n: int
    c: int
    h: int
    w: int
    oc: int
    oh: int
    ow: int
    kh: int
    sh: int
    pt: int
    fold: Fold
    elem: ElemType


def _candidate(prog: ProgramText, layer: DpuLayer, values: dict[str, Value],
               index: GraphIndex) -> _Layer | None:
    """The layer's fold when its shape, operands and placement allow one (no cost yet)."""
    op = layer.op
    if op.kind != "Convolution" or prog.timing is None:
        return None
    if prog.epilogue is not None and not (position_free(prog.epilogue)
                                          or isinstance(prog.epilogue, PoolEpilogue)):
        return None         # a fused pool reads the folded block as its NHWC rows' bytes
    if index.producer(op.operands[1]).kind != CONSTANT:
        return None
    x, out = values[op.operands[0]], values[layer.output]
    if x.type.rank != 4 or x.type.order == NHWC:
        return None
    n, c, h, w = x.type.dims
    _, oc, oh, ow = out.type.dims
    if c > COMPRESSED_CHANNELS:
        return None
    if out.type.order != NHWC or out.padded is not None or oc % MPE_CHANNELS:
        return None
    (kh, kw), (sh, sw), (pt, pl), _, (dh, dw) = window(op, index)
    if dh != 1:
        return None
    fold = fold_geometry(w, ow, kw, sw, pl, dw, MPE_CHANNELS // COMPRESSED_CHANNELS)
    if isinstance(fold, str):
        return None
    return _Layer(n, c, h, w, oc, oh, ow, kh, sh, pt, fold, x.type.elem)


def position_free(epilogue) -> bool:
    """Whether a fused epilogue (``fuse_epilogue``) computes each element of the block from
    that element alone: one input, every value the input's shape, constants scalars.  It
    then runs on a folded block, whose channels are (column phase, channel), as on the
    block it stands for; a per-channel constant or a second input would not line up."""
    if not isinstance(epilogue, Epilogue):      # a DPU eltwise join loads the other operand
        return False
    body = epilogue.sub.body
    params = [o for o in body.ops if o.kind == PARAMETER]
    if len(params) != 1:
        return False
    dims = params[0].type.dims
    return all(math.prod(o.type.dims) == 1 if o.kind == CONSTANT else o.type.dims == dims
               for o in body.ops if o.kind != RESULT)


def _loaded(g: _Layer, rows: int) -> int:
    return min((rows - 1) * g.sh + g.kh, g.h)


def _folded_workload(g: _Layer, rows: int) -> DpuWorkload:
    nb = g.elem.nbytes
    return DpuWorkload(op="conv", elem=g.elem.value, width=g.fold.out_width, height=rows,
                       channels=g.fold.per * g.oc, in_channels=MPE_CHANNELS,
                       kernel=(g.kh, g.fold.kernel), stride=(g.sh, 1), batch=g.n,
                       in_bytes=nb, out_bytes=nb, weight_bytes=nb)


def _compressed_workload(g: _Layer, kw: int, sw: int, rows: int) -> DpuWorkload:
    nb = g.elem.nbytes
    return DpuWorkload(op="conv", elem=g.elem.value, width=g.ow, height=rows, channels=g.oc,
                       in_channels=COMPRESSED_CHANNELS, kernel=(g.kh, kw), stride=(g.sh, sw),
                       batch=g.n, in_bytes=nb, out_bytes=nb, weight_bytes=nb)


def _copy_cycles(nbytes: int, timing) -> float:
    """A CMX -> CMX copy's DMA task cycles (the fold's reshape of a permuted block)."""
    transfer = transfer_cost(False, nbytes, 1, False, nbytes, False, timing.dma)
    return dma_task_cycles(transfer, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)


def _stages(prog: ProgramText, g: _Layer, folded: bool, kw: int, sw: int):
    """rows -> a block's stages under either lowering; both load the same NCHW rows, permute
    them and store the same bytes; the fold adds its copy (on the store channel) and runs
    its own convolution."""
    timing, nb = prog.timing, g.elem.nbytes

    def stages(rows: int) -> BlockStages:
        loaded = _loaded(g, rows)
        loads = [Move(g.n * g.c * loaded * g.w * nb, nb)]
        if folded:
            compute = split_rows_cost(rows, lambda r: _folded_workload(g, r), timing)[1]
        else:
            compute = split_rows_cost(rows, lambda r: _compressed_workload(g, kw, sw, r),
                                      timing)[1]
        compute += permute_cycles(g.n * loaded * g.w, COMPRESSED_CHANNELS, g.elem, timing)
        s = block_stages(loads, compute, [Move(g.n * g.oc * rows * g.ow * nb, nb)], timing)
        if folded:
            copy = _copy_cycles(g.n * COMPRESSED_CHANNELS * loaded * g.w * nb, timing)
            s = BlockStages(s.load, s.compute, s.store + copy, s.ddr)
        return s
    return stages


def _footprint(g: _Layer, rows: int, folded: bool, epilogue=None) -> int:
    """A block's CMX bytes: the NCHW rows, the permuted rows (twice when folded: the copy),
    the output rows; with a fused pool (``fuse_pool``), whose copy of the block waits for
    its convolution, when the input rows are dead, the output rows and the pool's buffers
    if more."""
    loaded = _loaded(g, rows)
    permuted = g.n * COMPRESSED_CHANNELS * loaded * g.w
    output = g.n * g.oc * rows * g.ow * g.elem.nbytes
    own = (g.n * g.c * loaded * g.w + permuted * (2 if folded else 1)) * g.elem.nbytes + output
    return block_footprint(epilogue, own, output, rows)


def _resident_bytes(g: _Layer, folded: bool, kw: int, bias: bool) -> tuple[int, int]:
    """(weights bytes, bias bytes) each tile holds."""
    channels = g.fold.per * g.oc if folded else g.oc
    width = g.fold.kernel if folded else kw
    in_channels = MPE_CHANNELS if folded else COMPRESSED_CHANNELS
    return (channels * in_channels * g.kh * width * g.elem.nbytes,
            4 * channels if bias else 0)


def _estimate(prog: ProgramText, layer: DpuLayer, g: _Layer, folded: bool, kw: int, sw: int,
              tiles: int, gate: tuple[str, ...]) -> tuple[float, list[tuple[int, int]]]:
    """(the flow-shop estimate of the layer, its row blocks) under one lowering."""
    weights, bias = _resident_bytes(g, folded, kw, layer.bias is not None)
    loads = [Move(weights, g.elem.nbytes)] + ([Move(bias, 4)] if bias else [])
    resident = resident_cycles(prog, loads, gate)
    cost = with_epilogue(prog, _stages(prog, g, folded, kw, sw))
    blocks = choose_blocks(g.oh, tiles, weights + bias,
                           lambda r: _footprint(g, r, folded, prog.epilogue), "output row",
                           layer.op, prog.cmx_budget, cost=cost,
                           live=FOLD_SLOTS if folded else None,
                           resident_cost=resident, channels=prog.dma_channels)
    cycles = pipeline_cycles([act_on_dpu(cost(b - a)) for a, b in blocks],
                             min(tiles, len(blocks)),
                             resident[0], slots=FOLD_SLOTS if folded else SLOTS,
                             channels=prog.dma_channels, store_busy=resident[1])
    return cycles, blocks


def fold(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
         tiles: int, gate: tuple[str, ...]) -> tuple[_Layer, list[tuple[int, int]]] | None:
    """The layer's fold and row blocks when it applies and the cost model finds it faster
    than the compressed convolution; None otherwise."""
    g = _candidate(prog, layer, values, index)
    if g is None:
        return None
    (_, kw), (_, sw), *_ = window(layer.op, index)
    try:
        folded, blocks = _estimate(prog, layer, g, True, kw, sw, tiles, gate)
    except VpucError:           # the fold's extra copy does not fit: the compressed way
        return None
    try:
        compressed, _ = _estimate(prog, layer, g, False, kw, sw, tiles, gate)
    except VpucError:
        compressed = math.inf
    # The flow-shop estimate hides the copies behind the stores, but each sits on its
    # block's path from permute to convolution: the fold must save more than they take
    # (MobileNetV3's stem, bound by its HardSwish epilogue: estimated 99,067 against
    # 100,104 cycles, simulated 81,375 against 74,471).
    copies = sum(_copy_cycles(g.n * COMPRESSED_CHANNELS * _loaded(g, b - a) * g.w
                              * g.elem.nbytes, prog.timing) for a, b in blocks)
    return (g, blocks) if cheaper(folded + copies, compressed) else None


def cheaper(folded: float, compressed: float) -> bool:
    """Whether the fold's estimate wins (the tests force the fold through it)."""
    return folded < compressed


def emit_folded(prog: ProgramText, layer: DpuLayer, values: dict[str, Value],
                index: GraphIndex, tiles: int, prefix: str, gate: tuple[str, ...],
                finish: str | None) -> bool:
    """The layer as a folded convolution (module docstring) when ``fold`` takes it; whether
    it did."""
    chosen = fold(prog, layer, values, index, tiles, gate)
    if chosen is None:
        return False
    g, blocks = chosen
    op, f = layer.op, g.fold
    x, out = values[op.operands[0]], values[layer.output]
    (kh, _), (sh, sw), (pt, pl), _, _ = window(op, index)
    n, elem, cp = g.n, g.elem, COMPRESSED_CHANNELS
    foc = f.per * g.oc
    weights = folded_weights(constant_value(index.producer(op.operands[1])).astype(np.float32),
                             f, sw, pl, cp)
    bias = None if layer.bias is None else padded_vector(np.tile(layer.bias, f.per), foc)
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(blocks), slots=FOLD_SLOTS)
    p = e.p
    wname = f"%{p}wfold"
    prog.buffers.append(f"const {wname} : {foc}x{MPE_CHANNELS}x{kh}x{f.kernel}x{elem} NHWC = "
                        f"{const_text(weights, p + 'wfold')}")
    operands_of: dict[int, str] = {}
    inputs: dict[int, tuple[str, int, int]] = {}
    copies: dict[int, tuple[str, str]] = {}     # block -> (permuted rows, folded rows)

    def load(k: int) -> None:
        """Block ``k``'s weights (a tile's first), NCHW rows, permute and copy."""
        t, (r0, r1) = e.tile(k), blocks[k]
        first, last = r0 * sh - pt, (r1 - 1) * sh - pt + kh - 1
        lo, hi = max(first, 0), min(last, g.h - 1)
        rows = hi - lo + 1
        e.barriers(k)
        prog.barriers.extend([f"barrier %{p}raw{k}", f"barrier %{p}perm{k}"])
        raw = e.cmx(f"in.n{k}", TensorType((n, g.c, rows, g.w), elem, x.type.order), t)
        src = e.view(f"in.v{k}", x.name, [f"0:{n}", f"0:{g.c}", f"{lo}:{lo + rows}",
                                          f"0:{g.w}"])
        # the rows first: the DPU permutes them while the weights load
        e.dma(f"load{k}", src, raw, 0, e.load_waits(k), [f"%{p}raw{k}"])
        if k < e.used:              # weights and bias: once per tile, with its first block
            wt = e.cmx(f"w.t{t}", TensorType((foc, MPE_CHANNELS, kh, f.kernel), elem, NHWC), t)
            e.dma(f"load_w.t{t}", wname, wt, 0, e.load_waits(t), [f"%{p}loaded{t}"])
            operands_of[t] = f" weights({wt})" + e.load_bias(t, bias)
        xin = e.cmx(f"in.c{k}", TensorType((n, cp, rows, g.w), elem, NHWC), t)
        pw = permute_workload(n * rows * g.w, cp, elem.value, elem.nbytes, elem.nbytes)
        prog.dpu.append(f"  {e.lp}p{k}: dpu permute on tile {t} in({raw}) out({xin}) "
                        f"mode({choose_mode(pw, prog.timing.dpu)}) waits(%{p}raw{k}) "
                        f"updates(%{p}perm{k}) {{")
        prog.dpu.append(f"    variant start(0, 0, 0) end({g.w - 1}, {rows - 1}, {cp - 1})")
        prog.dpu.append("  }")
        # the permuted rows as [rows, W/k, 16]: the same bytes, a plain copy
        xf = e.cmx(f"in.f{k}", TensorType((n, MPE_CHANNELS, rows, f.width), elem, NHWC), t)
        copies[k] = (xin, xf)
        inputs[k] = (xf, lo - first, last - hi)

    def copy(k: int, channel: int, after_store: int | None = None) -> None:
        """Block ``k``'s copy of its permuted rows (``loaded``) on DMA ``channel``, listed
        last or right after the store of block ``after_store``."""
        xin, xf = copies.pop(k)
        e.dma(f"fold{k}", xin, xf, channel, f" waits(%{p}perm{k})", [f"%{p}loaded{k}"])
        if after_store is not None:
            at = e.store_at[after_store] + 1
            prog.dma.insert(at, prog.dma.pop())
            e.store_at = {j: i + (i >= at) for j, i in e.store_at.items()}

    def convolve(k: int) -> None:
        """Block ``k``'s folded convolution and store."""
        t, (r0, r1) = e.tile(k), blocks[k]
        xf, top, bottom = inputs[k]
        y = e.cmx(f"out.c{k}", TensorType((n, foc, r1 - r0, f.out_width), elem, NHWC), t)
        head = (f"dpu conv on tile {t} in({xf}){operands_of[t]} out({y}) "
                f"kernel({kh}, {f.kernel}) stride({sh}, 1) "
                f"pad({top}, {bottom}, {f.pads[0]}, {f.pads[1]}) dilation(1, 1)" + layer.post)
        e.task(k, head, ((0, f.out_width - 1), r1 - r0, (0, foc - 1)),
               lambda r: _folded_workload(g, r))
        # the folded block is the output's rows byte for byte: a plain copy stores it
        dst = e.view(f"out.v{k}", out.name, [f"0:{n}", f"0:{g.oc}", f"{r0}:{r1}",
                                             f"0:{g.ow}"])
        e.store(k, y, dst)

    # A tile's DPU queue runs in order: block k's permute goes before the convolution of
    # the tile's previous block, so its copy does not wait for that convolution
    # (ResNet-18's stem: ~10,000 cycles a block), except for the tile's first convolution,
    # which would wait for the next block's load and permute: ResNet-18's first started
    # at 18,958 cycles, then 11,973 (the network 1,747,051 -> 1,742,567), 7,735 with each
    # block's rows loaded before the tile's weights (1,738,080).  Where each copy goes (module
    # docstring): ResNet-18's stem with every copy on the store channel, tile 1's
    # convolutions waited ~20,000 cycles for copies queued behind stores and the last one
    # ended at 177,314 cycles; with the copies moved 161,627 (its last store 188,485 ->
    # 186,277: the stores share the DDR with the MaxPool's loads), the network 1,749,259
    # -> 1,747,051.  The last two at the end of the load channel instead held the
    # MaxPool's loads back: 1,761,697.
    for k in range(len(blocks)):
        if e.used <= k < 2 * e.used:        # a tile's first convolution: right after its permute
            convolve(k - e.used)
        load(k)
        if k < e.used:
            copy(k, prog.store_channel)
        elif k >= 2 * e.used:
            copy(k - e.used, 0)
        if k >= 2 * e.used:
            convolve(k - e.used)
    # With a fused pool (``fuse_pool``) a store waits for its block's pool, which runs
    # after the tile's next convolution: a copy behind it held the tile's last
    # convolutions back (ResNet-18's stem ended at 198,334 cycles, 196,232 with these
    # copies on the load channel, idle by then; the network 1,713,130 -> 1,711,028).
    pooled = isinstance(prog.epilogue, PoolEpilogue)
    for k in sorted(copies):
        if pooled:
            copy(k, 0)
        else:
            copy(k, prog.store_channel, k - 2 * e.used if k >= 2 * e.used else None)
    for k in range(max(len(blocks) - e.used, 0), len(blocks)):
        convolve(k)
    return True
