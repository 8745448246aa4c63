"""The cost of a block pipeline: a layer cut into blocks, each loaded, computed and stored.

The compiler's tiling (``vpuc/fusion/lower_dpu.py``, ``choose_blocks``) cuts a
layer's output rows into blocks and emits, per block *k*, on tile ``k % tiles``
in CMX slot ``(k // tiles) % slots``:

    DMA in (channel 0) -> DPU (the tile's) -> DMA out (channel 1)

so a candidate block count is a three-stage *flow shop*: each stage runs its
blocks in order, DMA in and DMA out are one channel each (FIFO, every block
behind the one before), the DPU stage has one machine per tile.  Double
buffering bounds how far ahead a stage may run: the load of block *k* reuses
the slot of block ``k - slots * tiles`` and waits for its compute, whose own
start waits for that block's store (the barriers ``LayerEmitter`` emits).  A
tile's resident operands (weights, bias) are loaded on channel 0 before its
first block.  ``pipeline_cycles`` is that schedule's makespan, by the
recurrence (a permutation flow shop with blocking buffers, in emission order):

    load_end[k]  = max(load_end[k-1], compute_end[k - R]) + load[k]    (R = slots * tiles)
    compute_end[k] = max(load_end[k], compute_end[k - tiles], store_end[k - R]) + compute[k]
    store_end[k] = max(store_end[k-1], compute_end[k]) + store[k]

A block whose output an ACT SHAVE epilogue reads before its store (``fuse_epilogue``:
MobileNetV3's HardSwish after a convolution) has a fourth stage between the DPU and the
store, one machine per tile (its two ACT SHAVEs, ``act`` being when the later ends):

    act_end[k]   = max(compute_end[k], act_end[k - tiles]) + act[k]
    store_end[k] = max(store_end[k-1], act_end[k]) + store[k]

so the tile's DPU runs its next blocks while the SHAVEs work on this one (the DPU of
block k still waits for the store of the block whose output slot it takes).  Counting
the epilogue as DPU time instead charged an ACT-bound layer its DPU time once more and
could not see that a short first block starts the SHAVEs sooner (``lower_dpu_blocks``'s
ramp cuts).

On a target with one DMA channel, loads and stores share its FIFO in the
order the lowering lists them (block k's loads, then its store), so a store
holds up the next block's load.  Both channels move their data through one DDR, so the makespan is at least
the blocks' DDR bytes over its bandwidth (``ddr``, a floor; the simulator
shares the DDR exactly, ``runtime_sim/engines/dma.py``).  Each stage's cycles
come from the one cost model: ``dma_task_cycles`` for a transfer (dispatch,
latency by direction, rate, permute); the DPU stage is the block's DPU task as
the compiler splits it into variants and modes (``dpu_cost`` per variant plus
its dispatch, ``lower_dpu.split_rows``).  More blocks overlap better
but pay each stage's fixed costs once more, so the cheapest count is in
between; ``choose_blocks`` asks for it among the counts that fit CMX.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.cost.timing import Timing

SLOTS = 2          # double buffering: two blocks per tile in CMX at once


@dataclass(frozen=True)
class Move:
    """One DMA between DDR and CMX: its bytes, element size, and whether it permutes."""
    nbytes: int
    elem_bytes: int
    permute: bool = False


@dataclass(frozen=True)
class BlockStages:
    """One block's cycles per stage (NCE cycles, dispatch included) and the cycles its
    transfers keep the DDR busy."""
    load: float
    compute: float
    store: float
    ddr: float
    act: float = 0.0        # the ACT SHAVE epilogue's cycles on the block, if it has one


def move_cycles(move: Move, timing: Timing, to_cmx: bool) -> tuple[float, float]:
    """(task cycles, DDR-busy cycles) of one DMA into CMX (``to_cmx``) or out of it."""
    transfer = transfer_cost(move.permute, move.nbytes, move.elem_bytes, not to_cmx,
                             move.nbytes, to_cmx, timing.dma)
    cycles = dma_task_cycles(transfer, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)
    return cycles, transfer.ddr_bytes / timing.ddr_bytes_per_cycle


def loads_cycles(moves: list[Move], timing: Timing) -> float:
    """Cycles of DMAs into CMX run one after another on one channel (a tile's resident
    weights and bias, say)."""
    return sum(move_cycles(m, timing, True)[0] for m in moves)


def block_stages(loads: list[Move], compute: float, stores: list[Move],
                 timing: Timing) -> BlockStages:
    """A block's stages: its loads in order on channel 0, its DPU task's ``compute``
    cycles, its stores."""
    ins = [move_cycles(m, timing, True) for m in loads]
    outs = [move_cycles(m, timing, False) for m in stores]
    return BlockStages(load=sum(c for c, _ in ins), compute=compute,
                       store=sum(c for c, _ in outs),
                       ddr=sum(d for _, d in ins) + sum(d for _, d in outs))


def pipeline_cycles(stages: list[BlockStages], tiles: int, resident_cycles: float = 0.0,
                    slots: int = SLOTS, channels: int = 2, store_busy: float = 0.0) -> float:
    """The makespan of ``pipeline_stores``' schedule (its docstring)."""
    return pipeline_stores(stages, tiles, resident_cycles, slots, channels, store_busy)[0]


def pipeline_stores(stages: list[BlockStages], tiles: int, resident_cycles: float = 0.0,
                    slots: int = SLOTS, channels: int = 2, store_busy: float = 0.0
                    ) -> tuple[float, list[float]]:
    """The makespan of ``stages`` (block k on tile ``k % tiles``) as the module docstring
    derives it; ``resident_cycles`` are each tile's loads before its first block;
    ``store_busy`` the cycles the store channel runs other transfers before the first
    store (a schedule that prefetches the next layer's weights there).  On a
    target with one DMA channel (``channels == 1``) loads and stores share its FIFO, in
    the order the lowering lists them (block k's loads, then its store)."""
    reuse = slots * tiles
    load_end = [0.0] * len(stages)
    compute_end = [0.0] * len(stages)
    store_end = [0.0] * len(stages)
    dpu_free = [0.0] * tiles
    act_free = [0.0] * tiles
    channel_in, channel_out = 0.0, store_busy
    for k, s in enumerate(stages):
        start = channel_in
        if k < tiles:
            start += resident_cycles
        if k >= reuse:
            start = max(start, compute_end[k - reuse])
        load_end[k] = channel_in = start + s.load
        if channels == 1:
            channel_out = channel_in
        begin = max(load_end[k], dpu_free[k % tiles])
        if k >= reuse:
            begin = max(begin, store_end[k - reuse])
        compute_end[k] = dpu_free[k % tiles] = begin + s.compute
        ready = compute_end[k]
        if s.act:
            ready = act_free[k % tiles] = max(ready, act_free[k % tiles]) + s.act
        store_end[k] = channel_out = max(channel_out, ready) + s.store
        if channels == 1:
            channel_in = channel_out
    return max(channel_out, sum(s.ddr for s in stages)), store_end


def reader_cycles(stages: list[BlockStages], heights: list[int], tiles: int,
                  resident_cycles: float = 0.0, slots: int = SLOTS, channels: int = 2,
                  store_busy: float = 0.0) -> float:
    """When a reader of the layer's output that pipelines on its rows ends, the layer's
    blocks (``heights`` rows each, in row order) run as ``pipeline_stores`` schedules
    them.  ``--schedule default`` loads a computed value's rows once the stores that
    write them are done (``schedule_deps``), so the next layer starts on the first blocks;
    the reader is taken to be as slow as this layer's ACT SHAVE epilogue, ``T = sum(act)
    / tiles``, its share of the rows after block ``k`` taking it ``T * after_k / rows``:

        end = max(makespan, max_k store_end[k] + T * after_k / rows)

    A cut that stores its first rows sooner is then worth its later ones only when the
    reader would otherwise wait: MobileNetV3-Small's HardSwish expansions feed depthwise
    convolutions whose DPU time exceeds the expansions' SHAVE time."""
    makespan, stores = pipeline_stores(stages, tiles, resident_cycles, slots, channels,
                                       store_busy)
    rows = sum(heights)
    reader = sum(s.act for s in stages) / tiles
    end, after = makespan, rows
    for stored, height in zip(stores, heights):
        after -= height
        end = max(end, stored + reader * after / rows)
    return end


def act_on_dpu(stage: BlockStages) -> BlockStages:
    """``stage`` with its ACT SHAVE epilogue charged to the DPU stage: the estimate a block
    count is chosen by (``lower_dpu_blocks``).  The layer's own makespan gains little
    from many small blocks of an ACT-bound layer, while every block pays the DPU's and
    the SHAVEs' fixed costs on engines the overlapping segments share: choosing the
    count with a separate ACT stage cut MobileNetV3-Small's stem into 28 blocks over 10
    and cost the whole network 617,940 cycles against 592,971."""
    if not stage.act:
        return stage
    return BlockStages(stage.load, stage.compute + stage.act, stage.store, stage.ddr)


def lower_bound(stages_per_block: BlockStages, count: int) -> float:
    """No pipeline of ``count`` blocks, each at least ``stages_per_block``, ends sooner:
    each channel runs every block's transfer one after another."""
    return count * max(stages_per_block.load, stages_per_block.store)
