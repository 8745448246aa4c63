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

A dense convolution without an epilogue may run its chunk's rows in blocks
(``resident_chunk_cut``, ``kept_chunks``): each tile keeps its chunk's weights and
pipelines its row blocks, in heights that fill the mode grid (``lower_dpu_blocks``).
The DPU re-reads a workload's weights once per spatial block of its mode, so a row cut
of a weight-heavy layer on a small map pays them per half-empty block: ResNet-18's 14x14
3x3 s2 layer (128 -> 256) took 42,150 DPU cycles a tile over rows, 33,394 over channels.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages, move_cycles, pipeline_cycles
from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.fusion.fuse_conv import ConvEpilogue
from vpuc.fusion.fuse_halo_conv import ChainEpilogue, HaloConvEpilogue
from vpuc.fusion.fuse_epilogue import Epilogue, with_epilogue
from vpuc.fusion.lower_dpu import NHWC, DpuLayer, resident_cycles, split_rows_cost
from vpuc.fusion.lower_dpu_blocks import row_cuts
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
    if op.kind not in ("Convolution", "GroupConvolution") or tiles < 2 or timing is None \
            or isinstance(getattr(prog, "epilogue", None), (ConvEpilogue, ChainEpilogue,
                                                             HaloConvEpilogue)):
        return False           # a conv on the blocks (fuse_conv, fuse_halo_conv) reads
        #                        every channel of a row
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

    @functools.cache         # the row-block search asks each shape many times
    def block(rows: int, outs: int, in_rows: int) -> BlockStages:
        def workload(r: int) -> DpuWorkload:
            return DpuWorkload(op=plan.dpu_op, elem=elem.value, width=ow, height=r,
                               channels=aligned(outs), in_channels=aligned(ins(outs)),
                               kernel=(kh, kw), stride=(sh, sw), batch=n,
                               in_bytes=elem.nbytes, out_bytes=elem.nbytes,
                               weight_bytes=elem.nbytes)
        compute = split_rows_cost(rows, workload, timing)[1] \
            + epilogue(rows).act * outs / oc
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
    # the channel cut: each tile its chunk and its chunk's weights, all rows of the input
    # channels it reads, in row blocks (``resident_chunk_cut``)
    chunks = [j.outs[1] - j.outs[0] for j in jobs]

    def chunk_fits(count: int, rows: int) -> bool:
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        return max(sum(m.nbytes for m in weights(o)) + (1 if count == 1 else 2) * n
                   * elem.nbytes * (aligned(ins(o)) * loaded * w + aligned(o) * rows * ow)
                   for o in chunks) <= prog.cmx_budget

    def chunk_estimate(blocks: list[tuple[int, int, int]]) -> float:
        return estimate([block(b - a, chunks[j], rows_in(a, b, sh, pt, dh, kh, h)[1])
                         for j, a, b in blocks], [weights(o) for o in chunks], 0)

    if not kept_rows(prog, plan.dpu_op):
        channels_cut = chunk_estimate([(j, 0, oh) for j in range(len(chunks))]) \
            if chunk_fits(1, oh) else math.inf
    else:
        channels_cut, _ = resident_chunk_cut(len(chunks), oh, chunk_fits, chunk_estimate)
    return channels_cut < rows_cut - 1e-9


def kept_rows(prog, dpu_op: str) -> bool:
    """Whether a channel cut of one chunk per tile may run its rows in blocks
    (``resident_chunk_cut``): a dense convolution's, without an ACT SHAVE epilogue on its
    blocks (a DPU eltwise one, ResNet's residual Add, runs on the DPU beside it).  The
    estimate sees neither an ACT SHAVE epilogue's share of chunked row blocks nor how a
    depthwise layer's blocks pipeline with its neighbours: MobileNetV3-Small's HardSwish and
    depthwise layers in such blocks simulated 631,848 and 602,692 cycles against 594,893."""
    return dpu_op == "conv" and not isinstance(getattr(prog, "epilogue", None), Epilogue)


def resident_chunk_cut(chunks: int, extent: int, fits: Callable[[int, int], bool],
                       estimate: Callable[[list[tuple[int, int, int]]], float]
                       ) -> tuple[float, list[tuple[int, int]]]:
    """(estimate, row blocks) of the fastest channel cut of one chunk per tile whose tiles
    keep their chunk's weights: each chunk's ``extent`` rows in the same blocks, the
    chunks' blocks interleaved (block k is chunk ``k % chunks`` on tile ``k % chunks``),
    every block count tried as the even cut and in heights that fill the mode grid
    (``lower_dpu_blocks``); ``fits(count, rows)``: ``count`` blocks of at most ``rows``
    rows fit CMX; ``estimate([(chunk, first row, end row)])``: the cost model's.  One block
    per chunk left ResNet-18's 14x14 3x3 s2 layer (128 -> 256) cut over rows, 4 blocks of
    4 and 3 rows, each re-reading all 590 KB of weights for a half-empty 16 x 8 grid
    block: 42,150 DPU cycles a tile; over channels in blocks of 8 and 6 rows, 33,141."""
    best: tuple[float, list[tuple[int, int]]] = (math.inf, [(0, extent)])
    for count in range(1, extent + 1):
        for cut in row_cuts(extent, count, 1):
            if not fits(count, max(b - a for a, b in cut)):
                continue
            cycles = estimate([(j, a, b) for a, b in cut for j in range(chunks)])
            if cycles < best[0] - 1e-9:
                best = (cycles, cut)
    return best


def kept_chunks(prog, jobs: list, extent: int, tiles: int, gate: tuple[str, ...],
                constant: bool, stages, resident_moves, fits,
                rival: float) -> list[tuple[int, int]] | None:
    """The row blocks of ``jobs`` (one chunk of output channels per tile; ``stages(job,
    rows)`` and ``resident_moves(job)`` those of ``lower_dpu_nn_sizing.LayerSizing``,
    ``fits(count, rows)`` that of ``choose_chunks``) when each
    tile keeping its chunk's weights, loaded once before its first block (as a layer of
    one job keeps them: ``resident_cycles``), over rows in blocks (``resident_chunk_cut``)
    is cheaper under the flow-shop estimate than ``rival`` (``cheapest_split``'s pick,
    every block loading its chunk's weights); else None."""
    first, store_busy = max((resident_cycles(prog, resident_moves(job), gate, constant)
                             for job in jobs), key=lambda c: c[0])
    weights_ddr = sum(block_stages(resident_moves(job), 0.0, [], prog.timing).ddr
                      for job in jobs)

    @functools.cache
    def stages_of(j: int, rows: int) -> BlockStages:
        return stages(jobs[j], rows)

    def estimate(blocks: list[tuple[int, int, int]]) -> float:
        stage_list = [stages_of(j, b - a) for j, a, b in blocks]
        total = pipeline_cycles(stage_list, tiles, first, channels=prog.dma_channels,
                                store_busy=store_busy)
        return max(total, sum(s.ddr for s in stage_list) + weights_ddr)

    cycles, cut = resident_chunk_cut(len(jobs), extent, fits, estimate)
    return cut if cycles < rival - 1e-9 else None
