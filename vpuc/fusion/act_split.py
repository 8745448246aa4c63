"""An ACT segment's blocks when its axis does not divide well: a main run and one tail.

``lower-graph`` cuts an ACT segment's tensors into blocks of equal size along one
axis (``lower_graph._split``: the fewest blocks, at least four, that divide the
axis and fit the CMX budget double-buffered).  An axis of prime extent (a ViT's
197 tokens) divides only into single rows: 197 blocks of one row, each paying
its DMA latencies and dispatches, one ACT SHAVE per tile idle (a row has no
halves).  ``tail_split`` offers instead a *main* run of equal blocks of an even
size (both ACT SHAVEs of a tile take half a block) followed by one *tail* block
of the rest, a pipeline of its own (``blocked_program.emit_blocks`` with an
offset; its kernels generated for its size), when that balances the tiles
better.

The estimate counts work in rows of the axis per ACT SHAVE (every row of a block
costs its kernels the same) plus a fixed cost per block; block *k* of the main
run runs on tile ``k % tiles``, the tail on the tile after the main run's last.
"""

from __future__ import annotations

# A block's fixed cost (its loads' and store's DMA latency, the dispatches) in rows'
# worth of a row's kernel work: an assumption that only ranks cuts.
BLOCK_COST_ROWS = 2.0
# The main run gives each tile two blocks at least (its two CMX slots: load, compute
# and store of consecutive blocks overlap).
MIN_BLOCKS_PER_TILE = 2


def makespan(sizes: list[int], tiles: int) -> float:
    """The estimated rows of work of the busiest tile when block ``k`` of ``sizes`` runs on
    tile ``k % tiles``: an even block is halved over the tile's two ACT SHAVEs."""
    load = [0.0] * tiles
    for k, size in enumerate(sizes):
        load[k % tiles] += (size / 2 if size % 2 == 0 else size) + BLOCK_COST_ROWS
    return max(load)


def tail_split(extent: int, even_blocks: int, total_bytes: int, budget: int,
               tiles: int) -> tuple[int, int] | None:
    """``(blocks, chunk)``: a main run of ``blocks`` blocks of ``chunk`` elements (the tail
    is the rest of ``extent``), or None to keep the even cut into ``even_blocks`` blocks.
    ``total_bytes`` are the bytes of every value of the segment across the whole axis; a
    tile holds two main blocks (its slots) and the tail block within ``budget``."""
    even = extent // even_blocks
    best, best_cost = None, makespan([even] * even_blocks, tiles)
    largest = extent // (MIN_BLOCKS_PER_TILE * tiles)
    for chunk in range(largest - largest % 2, 1, -2):       # ties: the fewest blocks
        blocks = extent // chunk
        tail = extent - blocks * chunk
        if tail == 0 or (2 * chunk + tail) * total_bytes > budget * extent:
            continue
        cost = makespan([chunk] * blocks + [tail], tiles)
        if cost < best_cost - 1e-9:
            best, best_cost = (blocks, chunk), cost
    return best
