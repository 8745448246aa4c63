"""Rows or output channels over the tiles: how a Convolution that fits a tile's CMX whole
(``lower_dpu_nn.takes``), or a depthwise GroupConvolution (``lower_dpu_nn.emit_nn``), is
cut.

A layer cut by rows (``lower_dpu_window``, or ``lower_dpu_nn.emit_jobs`` with one job)
gives every tile a share of the output rows, so every tile holds all the weights: each
tile loads them (``--schedule naive``), or the first reads DDR and the others copy its
CMX buffer (``--schedule default``, ``schedule.overlap``); and 7 rows on 2 tiles are 4
and 3.  A layer cut by output channels (``emit_jobs``, one chunk of multiples of 16
channels per tile, the mechanism of layers whose weights do not fit) gives every tile
all the rows of the input channels its chunk reads (a convolution's: all of them; a
depthwise one's: its own) and its chunk's weights only: the weights cross a DMA channel
once, a convolution's input once per tile, and the tiles' work is even.

``cuts_channels`` asks the cost model's flow-shop estimate (``vpuc.cost.blocks``, the
one ``lower_dpu.choose_blocks`` uses) for both and takes the channel cut only when it is
cheaper: the weight-heavy layers on small maps (MobileNetV3-Small's 7x7 1x1 expansions,
96 -> 576 channels: 111 KB of weights against a 9 KB input) and its 7x7 depthwise
layers (576 channels, no input read twice, 4 + 3 rows balanced).  A projection
(576 -> 96) reads an input half its weights' size: each tile loading it costs more than
the copy saves, and the row cut stays; so do its 14x14 depthwise layers, whose row
blocks pipeline.  The estimate counts the weights' transfers where the schedule runs
them: with prefetch, DDR reads them once ahead of the layer, and the copies to the
other tiles (which wait on that read) hold the store channel before the layer's first
store; without, each tile loads them on the load channel before its first block.  An
elementwise epilogue on the output blocks (``fuse_epilogue.with_epilogue``) counts in
both; a chunk's share of it is in proportion to its channels.
"""

from __future__ import annotations

import math

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages, move_cycles, pipeline_cycles
from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.fusion.fuse_epilogue import with_epilogue
from vpuc.fusion.lower_dpu import NHWC, DpuLayer, split_rows_cost
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.fusion.lower_dpu_nn_load import rows_in
from vpuc.fusion.lower_dpu_nn_plan import CHANNEL_GRANULE, nn_window, plan_layer, split_job
from vpuc.ir.graph import CONSTANT, GraphIndex


def cuts_channels(prog, layer: DpuLayer, values: dict, index: GraphIndex, tiles: int,
                  gate: tuple[str, ...]) -> bool:
    """Whether ``layer`` (a Convolution that fits a tile's CMX with its weights whole, or a
    depthwise GroupConvolution) runs cheaper cut over its output channels, one chunk per
    tile, than over its output rows (module docstring).  Only plain cases are weighed
    (constant weights, an NHWC input, no 1x1 strided load): the others keep the row cut."""
    op, timing = layer.op, prog.timing
    if op.kind not in ("Convolution", "GroupConvolution") or tiles < 2 or timing is None:
        return False
    x, out = values[op.operands[0]].type, values[layer.output].type
    n, c, h, w = x.dims
    _, oc, oh, ow = out.dims
    (kh, kw), (sh, sw), (pt, _), _, (dh, _) = nn_window(op, index)
    if index.producer(op.operands[1]).kind != CONSTANT or x.order != NHWC \
            or oc < tiles * CHANNEL_GRANULE or oh < tiles \
            or ((kh, kw) == (1, 1) and (sh, sw) != (1, 1)):
        return False
    plan = plan_layer(layer, index, c, oc)
    if len(plan.jobs) != 1 or plan.dpu_op not in ("conv", "dwconv"):
        return False                        # a grouped convolution: a job per group
    jobs = split_job(plan, plan.jobs[0], tiles)
    if len(jobs) != tiles:
        return False
    depthwise = plan.dpu_op == "dwconv"     # a chunk reads its own channels only
    elem = x.elem
    prefetch = bool(prog.prefetch_bytes and gate and prog.dma_channels > 1)
    epilogue = with_epilogue(prog, lambda rows: BlockStages(0.0, 0.0, 0.0, 0.0))

    def ins(outs: int) -> int:                    # input channels a chunk of ``outs`` reads
        return outs if depthwise else c

    def weights(outs: int) -> list[Move]:         # a tile's weights, then its f32 bias
        per_out = 1 if depthwise else aligned(c)
        moves = [Move(aligned(outs) * per_out * kh * kw * elem.nbytes, elem.nbytes)]
        return moves + ([Move(4 * aligned(outs), 4)] if layer.bias is not None else [])

    def block(rows: int, outs: int, in_rows: int) -> BlockStages:
        def workload(r: int) -> DpuWorkload:
            return DpuWorkload(op=plan.dpu_op, elem=elem.value, width=ow, height=r,
                               channels=aligned(outs), in_channels=aligned(ins(outs)),
                               kernel=(kh, kw), stride=(sh, sw), batch=n,
                               in_bytes=elem.nbytes, out_bytes=elem.nbytes,
                               weight_bytes=elem.nbytes)
        compute = split_rows_cost(rows, workload, timing)[1] \
            + epilogue(rows).compute * outs / oc
        return block_stages([Move(n * ins(outs) * in_rows * w * elem.nbytes, elem.nbytes)],
                            compute, [Move(n * outs * rows * ow * elem.nbytes, elem.nbytes)],
                            timing)

    def copy_cycles(moves: list[Move]) -> float:        # CMX -> CMX, one after another
        return sum(dma_task_cycles(transfer_cost(False, m.nbytes, m.elem_bytes, False, m.nbytes,
                                                 False, timing.dma),
                                   timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)
                   for m in moves)

    def estimate(stages: list[BlockStages], per_tile: list[list[Move]], copies: int) -> float:
        """The pipeline of ``stages`` with each used tile's resident ``per_tile`` weights,
        ``copies`` of them copied CMX -> CMX under prefetch (the row cut's)."""
        ddr = [sum(move_cycles(m, timing, True)[1] for m in moves) for moves in per_tile]
        if prefetch and max(sum(m.nbytes for m in moves) for moves in per_tile) \
                <= prog.prefetch_bytes:
            # DDR reads them once, ahead of the layer; the copies wait on the first read
            total = pipeline_cycles(stages, len(per_tile), channels=prog.dma_channels,
                                    store_busy=copies * copy_cycles(per_tile[0]))
            return max(total, sum(s.ddr for s in stages) + max(ddr))
        cycles = max(sum(move_cycles(m, timing, True)[0] for m in moves) for moves in per_tile)
        total = pipeline_cycles(stages, len(per_tile), cycles, channels=prog.dma_channels)
        return max(total, sum(s.ddr for s in stages) + sum(ddr))

    # the row cut: every block count from one per tile, the whole weights on each tile
    whole = weights(oc)
    resident = sum(m.nbytes for m in whole)
    rows_cut = math.inf
    for count in range(tiles, oh + 1):
        size, extra = divmod(oh, count)
        edges = [i * size + min(i, extra) for i in range(count + 1)]
        spans = [(a, b, rows_in(a, b, sh, pt, dh, kh, h)[1]) for a, b in zip(edges, edges[1:])]
        live = 1 if count <= tiles else 2
        footprint = max(n * elem.nbytes * (aligned(ins(oc)) * loaded * w
                                           + aligned(oc) * (b - a) * ow)
                        for a, b, loaded in spans)
        if resident + live * footprint > prog.cmx_budget:
            continue
        rows_cut = min(rows_cut, estimate([block(b - a, oc, loaded) for a, b, loaded in spans],
                                          [whole] * tiles, tiles - 1))
    # the channel cut: each tile its chunk, all rows of the input channels it reads
    chunks = [j.outs[1] - j.outs[0] for j in jobs]
    need = max(sum(m.nbytes for m in weights(o))
               + n * elem.nbytes * (aligned(ins(o)) * h * w + aligned(o) * oh * ow)
               for o in chunks)
    if need > prog.cmx_budget:
        return False
    channels_cut = estimate([block(oh, o, h) for o in chunks], [weights(o) for o in chunks], 0)
    return channels_cut < rows_cut - 1e-9
