"""A global pool's level 1 pipelined behind the row blocks of the layer that writes its
input (``--schedule default``; issue 13, MobileNetV3-Small's squeeze-excite pools).

A squeeze-excite block pools the whole output of its depthwise layer (a reduction over H
and W), so a pool whose level-1 items cover all the rows (``lower_dpu_pool_levels``:
channel chunks of every row, the split its stand-alone estimate found cheapest) starts
only when the depthwise layer's last block is stored, and the whole pool, then the two
small 1x1s and the scale, run after it on the critical path.  Under the default schedule a
load of a computed value waits only on the stores that write its bytes
(``schedule_deps``), so a pool cut into *bands of rows* pools each band as soon as the
depthwise blocks covering it are stored: when the last block is stored, only the last
band's load, its level-1 task, the copy of its partial and level 2 remain.

Which split is the cost model's: the depthwise layer (``lower_dpu_nn.emit_jobs``) records
when its pipeline estimate (``vpuc.cost.blocks.pipeline_stores``, the estimate its block
count was chosen by, ACT SHAVE epilogue included) stores each block (``record_rows``:
``ProgramText.rows_ready``, its last row and cycle from the layer's start);
``lower_dpu_pool_levels.choose_levels`` then prices every split with each item's load
starting no sooner than the estimated store of its last row (``arrival``) and each tile's
DPU tasks behind the layer's last one there (``dpu_free``: a tile's DPU list runs in
order, so the pool's tasks follow the layer's on that tile), and weighs
bands of rows up to one level-1 window's height each (``most_bands``), not only
``MAX_BANDS``.  A pool whose input no recorded layer writes (a network input, a value an
ACT segment computes) keeps the stand-alone estimate.

Measured and not taken (MobileNetV3-Small 224, 554,079 cycles with this module): the
items of several channel chunks band by band, each band's chunks on both tiles (554,315:
21 small loads of 4.5 KB pace the pool on DMA channel 0); the items of a resident input
alternating from its tile, so its last band reads in place (554,873: the in-place bands
queue behind the writer's last DPU task on that tile, later than its estimate).

Numerics: the same exact split as ``lower_dpu_pool_levels`` (equal bands, ``a`` rows
each): each partial is the mean of ``a * b`` cells, rounded to the layer's type once, and
level 2 the mean of equally weighted partials, the tolerance the tests derive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vpuc.cost.blocks import BlockStages, pipeline_stores
from vpuc.fusion.blocked_program import ProgramText, Value


@dataclass(frozen=True)
class RowsReady:
    """The writer's blocks by the cost model: (first row, stop row, store end) each, and
    each tile's last DPU task end, in cycles from the writer's start."""
    blocks: list[tuple[int, int, float]]
    dpu_end: list[float]


def record_rows(prog: ProgramText, value: str, blocks: list[tuple[int, int]],
                stages: Callable[[int], BlockStages], tiles: int,
                resident_cost: tuple[float, float], channels: int) -> None:
    """Note when the blocks ``blocks`` (row ranges, block k on tile ``k % tiles``) of the
    layer writing ``value`` are stored by the cost model's pipeline estimate, for a global
    pool reading ``value`` (``arrival``); only under ``--schedule default``, whose loads
    wait on the stores of their own rows."""
    if not prog.prefetch_bytes or prog.timing is None or not blocks:
        return
    used = min(tiles, len(blocks))
    each = [stages(r1 - r0) for r0, r1 in blocks]
    _, stores = pipeline_stores(each, used, resident_cost[0], channels=channels,
                                store_busy=resident_cost[1])
    # a block's DPU task ends before its epilogue and its store (as pipeline_stores chains
    # them): the pool's DPU tasks queue behind the layer's last one on their tile
    dpu_end = [0.0] * tiles
    for k, (stage, end) in enumerate(zip(each, stores)):
        dpu_end[k % used] = max(dpu_end[k % used], end - stage.store - stage.act)
    prog.rows_ready[value] = RowsReady([(r0, r1, end) for (r0, r1), end in zip(blocks, stores)],
                                       dpu_end)


def arrival(prog: ProgramText, x: Value) -> Callable[[int], float] | None:
    """``stop`` -> the estimated cycle (from its writer's start) by which rows ``[0, stop)``
    of ``x`` are stored: the latest store of a block holding one of them (the tiles store
    out of row order); None when no layer recorded ``x``'s blocks."""
    rows = prog.rows_ready.get(x.name)
    if rows is None:
        return None

    def ready(stop: int) -> float:
        return max((end for r0, _, end in rows.blocks if r0 < stop), default=0.0)
    return ready


def dpu_free(prog: ProgramText, x: Value, tiles: int) -> list[float]:
    """When each tile's DPU queue reaches the pool's tasks: after the last DPU task of the
    layer that wrote ``x`` on that tile (a tile's DPU list runs in order), 0 for a value no
    layer recorded."""
    rows = prog.rows_ready.get(x.name)
    return list(rows.dpu_end) if rows is not None else [0.0] * tiles


def most_bands(h: int, window_rows: int, tiles: int, streamed: bool, usual: int) -> int:
    """The most bands of rows a split of ``h`` rows with level-1 windows of ``window_rows``
    rows is weighed with: one window's height a band when its input streams in (every band
    pooled as soon as its rows are stored), else ``usual`` (at most one band a tile)."""
    return h // window_rows if streamed else min(tiles, usual)
