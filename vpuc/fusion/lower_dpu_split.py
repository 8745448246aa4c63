"""How to split a layer of several jobs (channel chunks, groups) over the tiles: the
split the cost model's flow-shop estimate finds fastest among those that fit CMX.

A layer cut over its output channels (``lower_dpu_nn.emit_jobs`` with several
jobs, a MatMul's column chunks in ``lower_dpu_matmul``) runs every job as a
series of row blocks, each block loading its job's weights with its rows, and
all blocks of all jobs alternate over the tiles in one double-buffered
pipeline (block *k* on tile ``k % tiles``).  Two numbers shape it: how many
channel chunks (``parts``) and how many row blocks per job (``count``).  More
chunks mean smaller weights per block and more blocks to overlap, but every
block loads its rows again; more row blocks load the job's weights again.  So
``cheapest_split`` asks ``vpuc.cost.blocks.pipeline_cycles`` for each candidate
that fits, in the order given, and keeps the first cheapest (ties to fewer
chunks, then fewer blocks), as ``lower_dpu.choose_blocks`` does for one job.

Chunks of output channels of a convolution read the same input: a tile that holds a
block's input rows from an earlier chunk reads that buffer again (``lower_dpu_nn``'s
``inputs``), so with ``input_load`` (a block's input transfers alone) the estimate leaves
out the loads a tile does not make.  Without it, a layer of one row block per chunk was
estimated as loading its whole input once per chunk, which made the first chunks that fit
look as cheap as balanced ones: ResNet-18's 14x14 3x3 layers took six chunks of 48
channels (three on one tile, two and a remainder on the other) over four of 64.

Candidates: the chunk counts from the fewest that fit up to ``MAX_PARTS_FACTOR``
times as many (each distinct chunk size once), and for each every row-block
count from the fewest that fits up to one row per block (each distinct block
height once); the block counts of one chunking stop where even the transfers of
one-row blocks take longer than the best so far (``lower_bound``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from vpuc.cost.blocks import BlockStages, lower_bound, pipeline_cycles

MAX_PARTS_FACTOR = 4      # chunk counts tried: the fewest that fit up to this many times it

Job = TypeVar("Job")


@dataclass(frozen=True)
class InputReuse(Generic[Job]):
    """How blocks share their input on a tile: ``key(job)`` names the input a job reads
    (its input channels), ``load(job, rows)`` is a block's input transfers alone.

    A held input stays in CMX from its load to its last reader, a later chunk's block: the
    blocks of one chunk no longer take turns in two slots, every input a later chunk reads
    on the tile is live meanwhile (VGG-19's 56x56 3x3 layers: 7 row blocks of 280 KB held
    on a tile beside 8 weight chunks, 2.2 MB on a 2 MB CMX).  With ``nbytes(job, rows)``
    (a block's input buffer) and ``room(jobs, rows)`` (a tile's CMX for inputs beside the
    other double-buffered operands of blocks of ``rows`` rows), a split shares its inputs
    only where they fit that room (``holds_inputs``); else every block loads its own."""
    key: Callable[[Job], Hashable]
    load: Callable[[Job, int], BlockStages]
    nbytes: Callable[[Job, int], int] | None = None
    room: Callable[[Sequence[Job], int], int] | None = None


def holds_inputs(jobs: Sequence[Job], extent: int, count: int, tiles: int,
                 reuse: InputReuse | None) -> bool:
    """Whether the blocks of ``jobs``, each cut into ``count`` row blocks alternating over
    the tiles as ``split_cycles`` places them, can share their inputs (``InputReuse``): on
    every tile, the inputs live at any block (held from their load to their last reader,
    with the next block's, which loads meanwhile) fit ``reuse.room``."""
    if reuse is None:
        return False
    if reuse.nbytes is None or reuse.room is None:
        return True
    edges = row_edges(extent, count)
    used = min(tiles, len(jobs) * len(edges))
    spans: dict[tuple, list[int]] = {}       # (tile, input key, rows) -> [first, last] turn
    sizes: dict[tuple, int] = {}
    turns = [0] * used                       # blocks placed on each tile so far
    for k, (job, (a, b)) in enumerate((job, edge) for job in jobs for edge in edges):
        t = k % used
        key = (t, reuse.key(job), a, b)
        spans.setdefault(key, [turns[t], turns[t]])[1] = turns[t]
        sizes[key] = reuse.nbytes(job, b - a)
        turns[t] += 1
    room = reuse.room(jobs, max(b - a for a, b in edges))
    for t in range(used):
        mine = [(span, sizes[key]) for key, span in spans.items() if key[0] == t]
        for turn in range(turns[t]):      # this block's input and the next one's
            live = sum(n for (first, last), n in mine if first <= turn + 1 and last >= turn)
            if live > room:
                return False
    return True


def row_edges(extent: int, count: int) -> list[tuple[int, int]]:
    """``extent`` rows cut into ``count`` blocks as ``lower_dpu.choose_blocks`` cuts them."""
    edges = [extent * i // count for i in range(count + 1)]
    return [(edges[i], edges[i + 1]) for i in range(count)]


def split_cycles(jobs: Sequence[Job], extent: int, count: int, tiles: int,
                 stages: Callable[[Job, int], BlockStages], channels: int,
                 resident_cycles: float = 0.0,
                 input_load: InputReuse | None = None) -> float:
    """The estimate of ``jobs`` each cut into ``count`` row blocks, all alternating over
    ``tiles`` (``min(tiles, blocks)`` used, as ``LayerEmitter`` uses them), each tile
    first loading ``resident_cycles`` of operands it keeps; with ``input_load``, a block
    whose tile already loaded the same input rows of the same input channels for an
    earlier block leaves its input transfers out, where the tiles hold them
    (``holds_inputs``)."""
    edges = row_edges(extent, count)
    used = min(tiles, len(jobs) * len(edges))
    held: set[tuple] = set()
    blocks = []
    shares = holds_inputs(jobs, extent, count, tiles, input_load)
    for job, (a, b) in ((job, edge) for job in jobs for edge in edges):
        block = stages(job, b - a)
        if shares:
            key = (len(blocks) % used, input_load.key(job), a, b)
            if key in held:
                block = _without(block, input_load.load(job, b - a))
            held.add(key)
        blocks.append(block)
    return pipeline_cycles(blocks, used, resident_cycles, channels=channels)


def _without(block: BlockStages, inputs: BlockStages) -> BlockStages:
    """``block`` with the transfers of ``inputs`` (a subset of its loads) left out."""
    return BlockStages(block.load - inputs.load, block.compute, block.store,
                       block.ddr - inputs.ddr)


def cheapest_split(chunkings: Sequence[Sequence[Job]], extent: int, first_count: int,
                   tiles: int, fits: Callable[[Job, int, int], bool],
                   stages: Callable[[Job, int], BlockStages], channels: int,
                   resident_cycles: float = 0.0,
                   input_load: InputReuse | None = None
                   ) -> tuple[Sequence[Job], int]:
    """(jobs, row blocks per job) of the cheapest estimate: ``chunkings`` are the candidate
    job lists (fewest chunks first), ``fits(job, rows, blocks)`` whether a block of ``rows``
    rows of ``job`` fits CMX in a layer of ``blocks`` blocks, ``stages(job, rows)`` its cost
    (``input_load``: which inputs blocks share, ``split_cycles``); block counts start
    at ``first_count``.
    None fitting: the first chunking with ``first_count`` blocks (the caller checked it)."""
    best, best_cycles = (chunkings[0], first_count), math.inf
    for jobs in chunkings:
        cache: dict[tuple[int, int], BlockStages] = {}
        position = {id(job): i for i, job in enumerate(jobs)}

        def cost(job: Job, rows: int) -> BlockStages:
            key = (position[id(job)], rows)
            if key not in cache:
                cache[key] = stages(job, rows)
            return cache[key]

        # every block moves at least the smallest one-row block's transfers (its input
        # perhaps held from an earlier block)
        floor = min((cost(job, 1) if input_load is None
                     else _without(cost(job, 1), input_load.load(job, 1)) for job in jobs),
                    key=lambda s: max(s.load, s.store))
        last_rows = None
        for count in range(first_count, extent + 1):
            if lower_bound(floor, count * len(jobs)) >= best_cycles:
                break
            rows = math.ceil(extent / count)
            if rows == last_rows or not all(fits(job, rows, count * len(jobs)) for job in jobs):
                continue
            last_rows = rows
            cycles = split_cycles(jobs, extent, count, tiles, cost, channels,
                                  resident_cycles, input_load)
            if cycles < best_cycles - 1e-9:
                best, best_cycles = (jobs, count), cycles
    return best
