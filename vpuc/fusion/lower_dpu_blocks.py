"""How many blocks of output rows a DPU layer takes (``lower_dpu``'s guarantees): the fewest
that fit the CMX budget, or the count the cost model's flow-shop estimate of the block
pipeline (``vpuc.cost.blocks``) finds fastest among those that fit, and what the estimate
charges for a tile's resident loads (weights, bias) before its first block.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from vpuc.cost.blocks import (BlockStages, Move, act_on_dpu, loads_cycles, lower_bound,
                              pipeline_cycles, reader_cycles)
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText
from vpuc.ir.graph import GraphOp


def choose_blocks(extent: int, tiles: int, resident: int, footprint, what: str, op: GraphOp,
                  budget: int,
                  live: int | None = None, cost: Callable[[int], BlockStages] | None = None,
                  resident_cost: tuple[float, float] = (0.0, 0.0), channels: int = 2):
    """Row ranges [start, stop) cutting ``extent`` rows into blocks that fit ``budget``
    bytes of a tile's CMX: ``resident`` bytes plus ``live`` blocks' ``footprint`` (default: one when every block
    has a tile of its own, else two, double-buffered).  With ``cost`` (a block of ``rows``
    rows -> its stages' cycles) the count is the one the cost model's flow-shop estimate
    (``vpuc.cost.blocks.pipeline_cycles``, each tile's resident loads taking
    ``resident_cost[0]`` cycles, the store channel busy for ``resident_cost[1]`` first
    (``resident_cycles``), over the target's DMA ``channels``) finds cheapest among the
    counts that fit, ties to fewer blocks; without it, the fewest blocks that fit."""
    used = min(tiles, extent)
    count = used
    fixed_live = live
    while True:
        rows = math.ceil(extent / count)
        live = fixed_live or (1 if count <= used else 2)
        need = resident + live * footprint(rows)
        if need <= budget:
            break
        if rows == 1:
            from vpuc.fusion.lower_dpu import describe     # (lower_dpu imports this module)
            raise VpucError(f"{describe(op)} does not fit a tile's CMX: {need} bytes with one "
                            f"{what} per block ({resident} of them weights and bias) over a budget "
                            f"of {budget}; splitting the output channels is not supported yet",
                            op.loc)
        count = min(count + used, extent)
    if cost is None:
        return _edges(extent, count)
    return _cheapest_cut(extent, count, used, cost, resident_cost, channels,
                         lambda c, rows: resident + (fixed_live or (1 if c <= used else 2))
                         * footprint(rows) <= budget)


def _edges(extent: int, count: int) -> list[tuple[int, int]]:
    """The larger blocks first: block k runs on tile ``k % tiles``, so the tiles' rows differ
    by one at most (``extent * i // count`` interleaved them: 14 rows in 4 blocks as
    3, 4, 3, 4 gave one tile 8 rows to the other's 6, and its fused epilogue's ACT SHAVEs a
    third more work), and the pipeline drains on the smaller ones."""
    size, extra = divmod(extent, count)
    edges = [i * size + min(i, extra) for i in range(count + 1)]
    return [(edges[i], edges[i + 1]) for i in range(count)]


# Block heights in multiples of these many rows are tried beside the even cut: the H sides
# of the DPU's mode grids (CUBOID_8x16: 2, CUBOID_16x16: 4; ``vpuc/cost/modes.py``) and
# their blocks (8, 16 rows), so a block's rows fill the grid its workload runs on.
ROW_GRANULES = (2, 4, 8, 16)


def granule_edges(extent: int, count: int, tiles: int, granule: int
                  ) -> list[tuple[int, int]] | None:
    """``extent`` rows in ``count`` blocks (block k on tile ``k % tiles``) whose heights are
    multiples of ``granule`` but each tile's last block, which takes its share's remainder:
    the tiles' shares as even as ``_edges`` makes them, each cut largest block first, the
    tiles' blocks interleaved.  None when ``count`` is not a multiple of the tiles or a
    share has fewer granules than blocks.  56 rows in 10 blocks on 2 tiles: 6, 6, 6, 6,
    6, 6, 6, 6, 4, 4 (every block fills CUBOID_8x16's 2-row grid; the even cut's 5-row
    blocks cost a DPU as much as 6-row ones: ResNet-18's 56x56 3x3 convolutions)."""
    if count % tiles:
        return None
    per_tile = count // tiles
    heights: list[list[int]] = []
    for a, b in _edges(extent, tiles):
        units, rest = divmod(b - a, granule)
        if units < per_tile - (1 if rest else 0) or units == 0:
            return None
        cut = [granule * (y - x) for x, y in _edges(units, per_tile)] if units >= per_tile \
            else [granule] * units + [0]
        cut[-1] += rest
        if min(cut) <= 0:
            return None
        heights.append(cut)
    order = [heights[t][i] for i in range(per_tile) for t in range(tiles)]
    edges = [0]
    for size in order:
        edges.append(edges[-1] + size)
    return list(zip(edges, edges[1:]))


def row_cuts(extent: int, count: int, tiles: int) -> list[list[tuple[int, int]]]:
    """The cuts of ``extent`` rows into ``count`` blocks the estimate weighs: the even one
    (``_edges``), then each distinct ``granule_edges``."""
    cuts = [_edges(extent, count)]
    for granule in ROW_GRANULES:
        cut = granule_edges(extent, count, tiles, granule)
        if cut is not None and cut not in cuts:
            cuts.append(cut)
    return cuts


def _cheapest_cut(extent: int, first: int, tiles: int, cost: Callable[[int], BlockStages],
                  resident_cost: tuple[float, float], channels: int,
                  fits: Callable[[int, int], bool]) -> list[tuple[int, int]]:
    """The cut of ``extent`` rows, from ``first`` blocks up, whose pipeline the cost model
    finds fastest (ties to fewer blocks, then to the even cut; ``fits(blocks, rows)``
    says whether ``blocks`` blocks of at most ``rows`` rows fit CMX); every count is tried
    (14 rows in 8 blocks are as high as in 7, 2 rows, but give each of two tiles 7 rows
    where 7 blocks give one tile 8: MobileNetV3's 14x14 epilogues), each as the even cut
    and in heights that fill the mode grid (``granule_edges``), and the search stops where
    even the transfers of one-row blocks would take longer than the best so far.  A layer
    with an ACT SHAVE epilogue (a block's ``act``) then takes the cut of that count with
    short first blocks (``ramp_cuts``) that its pipelined reader's estimate
    (``vpuc.cost.blocks.reader_cycles``) finds sooner done, if one is."""
    stages: dict[int, BlockStages] = {}

    def of(rows: int) -> BlockStages:
        if rows not in stages:
            stages[rows] = cost(rows)
        return stages[rows]

    def estimate(cut: list[tuple[int, int]]) -> float:       # the count's: ``act_on_dpu``
        return pipeline_cycles([act_on_dpu(of(b - a)) for a, b in cut], min(tiles, len(cut)),
                               resident_cost[0], channels=channels,
                               store_busy=resident_cost[1])

    best, best_cycles = _edges(extent, first), math.inf
    floor = act_on_dpu(of(1))
    count = first
    while count <= extent and lower_bound(floor, count) < best_cycles:
        for cut in row_cuts(extent, count, min(tiles, count)):
            if not fits(count, max(b - a for a, b in cut)):
                continue
            cycles = estimate(cut)
            if cycles < best_cycles - 1e-9:
                best, best_cycles = cut, cycles
        count += 1
    if not of(1).act:
        return best
    # the count chosen, its rows dealt again with short first blocks (``ramp_cuts``) when
    # the estimate with the epilogue as a stage of its own finds the layer's readers
    # (``reader_cycles``) end sooner
    chosen, chosen_cycles = best, math.inf
    for cut in [best] + ramp_cuts(extent, len(best), min(tiles, len(best))):
        if fits(len(cut), max(b - a for a, b in cut)):
            cycles = reader_cycles([of(b - a) for a, b in cut], [b - a for a, b in cut],
                                   min(tiles, len(cut)), resident_cost[0], channels=channels,
                                   store_busy=resident_cost[1])
            if cycles < chosen_cycles - 1e-9:
                chosen, chosen_cycles = cut, cycles
    return chosen


def ramp_cuts(extent: int, count: int, tiles: int) -> list[list[tuple[int, int]]]:
    """``extent`` rows in ``count`` blocks whose first block on each tile (blocks
    ``0 .. tiles-1``) has ``h`` rows, each ``h`` below the even cut's smallest block,
    the other rows cut evenly over the other blocks (``_edges``, larger first): a block
    pipeline whose ACT SHAVE epilogue is its longest stage starts the SHAVEs once the
    first block is loaded and computed, so a short first block shortens its fill
    (MobileNetV3-Small's stem: 12-row blocks kept the SHAVEs idle for the first 8,579
    cycles).  None when there are no blocks after the first ones."""
    if count <= tiles:
        return []
    cuts = []
    for h in range(1, extent // count):
        ramp = h * tiles
        edges = [h * i for i in range(tiles + 1)]
        edges += [ramp + b for _, b in _edges(extent - ramp, count - tiles)]
        cuts.append(list(zip(edges, edges[1:])))
    return cuts


def resident_cycles(prog: ProgramText, loads: list[Move], gate: tuple[str, ...],
                    constant: bool = True) -> tuple[float, float]:
    """(cycles each tile's resident ``loads``, weights then bias, take on the load channel
    before its first block; cycles the store channel is busy before the first store), as
    the block-count estimate should see them.  ``--schedule default`` (``schedule.overlap``)
    prefetches a segment's constants, up to ``prog.prefetch_bytes`` per tile, on the
    store channel at the start of the previous segment: they are off this layer's loads,
    and the next layer's, whose size this layer's weights stand for, hold up its first
    stores (and so the reuse of its CMX slots).  Counting prefetched weights as loads, once
    per tile, made ResNet-18's 7-row 1x1 downsample convolution, whose DPU time is its
    weight fetch, pick 3 blocks on 2 tiles over 2 (one DPU ran two tasks, each re-reading
    all the weights)."""
    if not (prog.prefetch_bytes and constant and gate and prog.dma_channels > 1):
        return loads_cycles(loads, prog.timing), 0.0
    early, late = 0, []
    for move in loads:
        if early + move.nbytes <= prog.prefetch_bytes:
            early += move.nbytes
        else:
            late.append(move)
    return loads_cycles(late, prog.timing), loads_cycles(loads, prog.timing)
