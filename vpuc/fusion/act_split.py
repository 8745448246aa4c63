"""An ACT segment's blocks when its axis does not divide well: a main run and one tail.

``lower-graph`` cuts an ACT segment's tensors into blocks of equal size along one
axis (``lower_act._even_cuts``: the fewest blocks, at least four, that divide the
axis and fit the CMX budget double-buffered).  An axis of prime extent (a ViT's
197 tokens) divides only into single rows: 197 blocks of one row, each paying
its DMA latencies and dispatches, one ACT SHAVE per tile idle (a row has no
halves).  ``tail_split`` offers instead a *main* run of equal blocks of an even
size (both ACT SHAVEs of a tile take half a block) followed by one *tail* block
of the rest, a pipeline of its own (``blocked_program.emit_blocks`` with an
offset; its kernels generated for its size), when that balances the tiles
better.

The estimate counts work as a share of the segment's per ACT SHAVE (every row of
a block costs its kernels the same) plus a fixed cost per block; block *k* of
the main run runs on tile ``k % tiles``, the tail on the tile after the main
run's last.  ``choose_cut`` weighs the axes too (``lower_act`` offers each
axis that may be cut, with its even cut).

Under ``--schedule default`` a segment of generated kernels cut along its outermost
axis shares every block over both ACT SHAVEs of its tile, odd ones too
(``shave_boxes``: row runs and the middle row's halves along the next axis), and
``box_runs`` may then replace the cut by runs of unequal blocks that give the
tiles equal rows.
"""

from __future__ import annotations

# A block's fixed cost (its loads' and store's DMA latency, the dispatches) as a share of
# the segment's kernel work: an assumption that only ranks cuts (two rows of 197).
BLOCK_COST = 0.01
# Under ``--schedule default`` (segments pipelined, ``schedule_deps``): a block's fixed cost is
# its dispatches (its loads and store overlap the other slot's kernels), so smaller; a
# smaller tail then wins over fewer blocks (a tail runs on one ACT SHAVE while the others
# idle), and smaller blocks let the next segment start sooner.
PIPELINED_BLOCK_COST = 0.002
# ... and a cut along an inner axis (not outermost in memory) needs a slab of every row in
# each block: its first block waits for the whole previous segment and the next segment
# for its last block, where rows pipeline; charged as this share of the work.
INNER_AXIS_COST = 0.05
# The main run gives each tile two blocks at least (its two CMX slots: load, compute
# and store of consecutive blocks overlap); under ``--schedule default`` with the tail.
MIN_BLOCKS_PER_TILE = 2


def makespan(sizes: list[int], tiles: int, halves: bool = True) -> float:
    """The estimated share of the segment's work on the busiest tile when block ``k`` of
    ``sizes`` (elements along the cut axis) runs on tile ``k % tiles``: an even block is
    halved over the tile's two ACT SHAVEs (with ``halves``: the halves of a block are
    contiguous, the axis outermost in memory); each block adds ``BLOCK_COST``."""
    extent = sum(sizes)
    load = [0.0] * tiles
    for k, size in enumerate(sizes):
        share = size / 2 if halves and size % 2 == 0 else size
        load[k % tiles] += share / extent + BLOCK_COST
    return max(load)


def shave_makespan(sizes: list[int], tiles: int, halves: bool = True, shaves: int = 2) -> float:
    """``makespan`` per ACT SHAVE (``--schedule default``'s estimate): an even block is halved
    over the tile's ``shaves`` ACT SHAVEs (with ``halves``), a block that is not goes whole
    to the one free first (the runtime gives a tile's task to either, so two blocks of a
    tile run side by side); each block adds ``PIPELINED_BLOCK_COST``, shared by its parts."""
    extent = sum(sizes)
    free = [[0.0] * shaves for _ in range(tiles)]
    for k, size in enumerate(sizes):
        load = free[k % tiles]
        parts = [size / 2] * 2 if halves and size % 2 == 0 else [size]
        for part in parts:
            first = min(range(shaves), key=load.__getitem__)
            load[first] += part / extent + PIPELINED_BLOCK_COST / len(parts)
    return max(max(load) for load in free)


def tail_split(extent: int, even_blocks: int, total_bytes: int, budget: int,
               tiles: int, halves: bool = True, pipelined: bool = False) -> tuple[int, int] | None:
    """``(blocks, chunk)``: a main run of ``blocks`` blocks of ``chunk`` elements (the tail
    is the rest of ``extent``), or None to keep the even cut into ``even_blocks`` blocks.
    ``total_bytes`` are the bytes of every value of the segment across the whole axis; a
    tile holds two main blocks (its slots) and the tail block within ``budget``."""
    cost_of = shave_makespan if pipelined else makespan
    even = extent // even_blocks
    best, best_cost = None, cost_of([even] * even_blocks, tiles, halves)
    # pipelined with halves, the tail counts among the tiles' blocks: 14 rows as 4, 4, 4
    # and 2 (two blocks a tile, each halved) over 7 blocks of 2 (MobileNetV3's
    # squeeze-excite products: each block also recomputes the excitation on one ACT
    # SHAVE), 851,299 -> 843,987 cycles.  Without halves a block is one SHAVE's: the ViT's
    # 197 score rows as 3 x 50 + 47 over its 4 x 49 + 1 took 1,737 cycles more.
    least = MIN_BLOCKS_PER_TILE * tiles - (1 if pipelined and halves else 0)
    largest = extent // max(1, least)
    # ties: the fewest blocks; pipelined, a block without halves may be odd (one ACT SHAVE)
    chunks = range(largest, 1, -1) if pipelined and not halves \
        else range(largest - largest % 2, 1, -2)
    for chunk in chunks:
        blocks = extent // chunk
        tail = extent - blocks * chunk
        if tail == 0 or (2 * chunk + tail) * total_bytes > budget * extent:
            continue
        cost = cost_of([chunk] * blocks + [tail], tiles, halves)
        if cost < best_cost - 1e-9:
            best, best_cost = (blocks, chunk), cost
    return best


def choose_cut(cuts: list[tuple[int, int, int, bool]], total_bytes: int, budget: int,
               tiles: int, pipelined: bool = False) -> tuple[int, int, int]:
    """``(axis, blocks, chunk)`` among ``cuts`` (``(axis, extent, even_blocks, halves)`` per
    axis that may be cut, the preferred first: outermost in memory; ``halves``: a block's
    halves along it are contiguous, so both ACT SHAVEs of a tile can share it): ``blocks`` blocks of
    ``chunk`` along ``axis``, then a tail block of the rest when ``blocks * chunk`` falls
    short of the extent.  Attention scores of three heads cut along the heads leave one
    ACT SHAVE of each tile idle and one tile with two of them; along the 197 query rows
    (each block on one ACT SHAVE: its halves would not be contiguous), a main run and a
    tail balance the tiles.  ``pipelined`` (``--schedule default``): by ``shave_makespan``,
    an inner axis charged ``INNER_AXIS_COST``."""
    best = None
    cost_of = shave_makespan if pipelined else makespan
    for axis, extent, even, halves in cuts:
        options = [(even, extent // even)]
        cut = tail_split(extent, even, total_bytes, budget, tiles, halves, pipelined)
        if cut is not None:
            options.append(cut)
        for blocks, chunk in options:
            tail = extent - blocks * chunk
            cost = cost_of([chunk] * blocks + ([tail] if tail else []), tiles, halves)
            if pipelined and not halves:
                cost += INNER_AXIS_COST
            if best is None or cost < best[0] - 1e-9:
                best = (cost, axis, blocks, chunk)
    return best[1:]


def shave_boxes(rows: int, width: int) -> list[tuple[int, int, int, int]]:
    """A block of ``rows`` x ``width`` elements (the cut axis, then the next one in memory:
    every box below is dense) cut into ``(row0, row1, col0, col1)`` boxes that a tile's two
    ACT SHAVEs share evenly.  A tile's ACT SHAVEs take its tasks in list order, each the
    next one when it is free, so equal halves keep both busy to the block's end.  An even
    row count: two halves of rows.  An odd one: the two equal row runs around the middle
    row first, then the middle row's two halves along the width; halving rows alone left
    one SHAVE a whole row more per block (MobileNetV3's first HardSwish: blocks of 11 rows,
    one SHAVE of each tile idle for the last 12% of the layer).  A single row of width 1
    stays whole."""
    if rows % 2 == 0:
        half = rows // 2
        return [(0, half, 0, width), (half, rows, 0, width)]
    mid = rows // 2
    runs = [(0, mid, 0, width), (mid + 1, rows, 0, width)] if mid else []
    if width < 2:
        return runs + [(mid, mid + 1, 0, width)]
    return runs + [(mid, mid + 1, 0, width // 2), (mid, mid + 1, width // 2, width)]


def box_makespan(sizes: list[int], tiles: int) -> float:
    """``shave_makespan`` when every block is shared evenly by its tile's two ACT SHAVEs
    (``shave_boxes``, the axis outermost in memory and the next axis at least 2 wide): an
    odd block too, as four tasks (two row runs, the middle row's halves), each task paying
    half of ``PIPELINED_BLOCK_COST``."""
    extent = sum(sizes)
    free = [[0.0, 0.0] for _ in range(tiles)]
    for k, size in enumerate(sizes):
        tasks = 4 if size % 2 and size > 1 else 2
        load = free[k % tiles]
        for _ in range(2):
            first = min(range(2), key=load.__getitem__)
            load[first] += size / 2 / extent + PIPELINED_BLOCK_COST * tasks / 4
    return max(max(load) for load in free)


def box_runs(extent: int, chosen: list[tuple[int, int]], total_bytes: int, budget: int,
             tiles: int) -> list[tuple[int, int]]:
    """``[(blocks, size), ...]``: runs of equal blocks covering ``extent`` (a main run, then
    at most one run of smaller blocks, the first of it on the tile after the main run's
    last), each block shared by its tile's ACT SHAVEs (``box_makespan``): ``chosen`` (the
    cut ``choose_cut`` found, as runs) unless a cut of as many blocks or more is cheaper,
    ties to fewer blocks.  Odd blocks let the tiles' shares differ by less than two rows:
    MobileNetV3's 14x14 squeeze-excite products as 4, 4, 3, 3 rows (7 a tile) over
    4, 4, 4, 2 (8 and 6).  Fewer blocks than ``chosen`` are not tried: smaller blocks let
    the next segment start sooner, which the estimate does not see (the ViT's GELU as
    4 blocks of about 49 rows over 14 of 14 and one: 914,537 -> 952,055 cycles).  At most
    twice ``chosen``'s blocks or ``4 * tiles``; a tile holds two blocks of each run within
    ``budget`` (``total_bytes``: every value of the segment across the whole axis)."""
    fewest = sum(n for n, _ in chosen)
    most = max(2 * fewest, 4 * tiles)
    best = chosen
    best_key = (box_makespan([size for n, size in chosen for _ in range(n)], tiles), fewest)
    for size in range(max(1, extent // most), -(-extent // fewest) + 1):
        for blocks in range(max(1, extent // size - 2 * tiles), extent // size + 1):
            rest = extent - blocks * size
            tails = [(0, 0)] if rest == 0 else [
                (n, rest // n) for n in range(1, min(rest, 2 * tiles) + 1)
                if rest % n == 0 and rest // n <= size]
            for n, tail in tails:
                if not fewest <= blocks + n <= most \
                        or (2 * size + 2 * tail) * total_bytes > budget * extent:
                    continue
                key = (box_makespan([size] * blocks + [tail] * n, tiles), blocks + n)
                if key[0] < best_key[0] - 1e-9 or (key[0] < best_key[0] + 1e-9
                                                   and key[1] < best_key[1]):
                    best, best_key = [(blocks, size)] + ([(n, tail)] if n else []), key
    return best
