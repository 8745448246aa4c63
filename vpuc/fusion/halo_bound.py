"""Whether a 3x3 convolution on its producer's blocks (``fuse_halo_conv``) ends sooner than
the two layers apart, by the busiest engine of each (``--schedule default``).

``fuse_halo_conv.cheaper_in_cmx`` compares DMA cycles alone: the fused stage's copies
(the value CMX -> CMX once, ``kh - 1`` halo rows per block) against the DDR round trip
they replace.  On VGG-19 (the onnx zoo's, ``bench/zoo_schedule_bench.py``) it found both
of its pairs cheaper fused, conv1_1 -> conv1_2 (64 channels at 224 x 224) and pool1 ->
conv2_1 (64 -> 128 channels at 112 x 112), and the network ran 120K cycles slower:
23,109,722 cycles with neither fused, 23,230,243 with both.  Per layer (``vpuc run
--timing-only --report-dir``):

- the fused 3x3 runs at its producer's block height with all its output channels: a
  block holds the producer's output rows, the 3x3's input rows with the halo and its
  output rows (conv1_1 -> conv1_2: 4 rows of 64 channels), where the layer apart cuts
  taller blocks over half its channels (8 rows of 32).  A DPU task re-reads its weights
  once per spatial block of its mode (``vpuc.cost.dpu``'s weight fetch), so a short
  block pays them over fewer rows: conv1_2's DPU work 1,840,552 -> 2,075,677 cycles
  (+12.8%), conv2_1's (6 rows of 128 against 12 of 64) 906,276 -> 968,660 (+6.9%);
- conv1_1 and conv1_2 apart are DPU-bound (their DPU work 1,171K cycles a DPU, the load
  channel 1,032K): the DMA the fusion saves shortens nothing there, and its DPU work
  made the pair 169K cycles longer (1,450K cycles against 1,281K).  pool1 (6.4 MB
  loaded) and conv2_1 apart are bound by DMA (the load channel 647K cycles, the DPUs
  514K): fused, the pair took 647K cycles against 810K.

So the decision takes each option's busiest engine over the two layers, the pair's
``vpuc.cost.bound`` (the busiest resource, which no overlap shortens: under ``--schedule
default`` the two segments pipeline block by block, so the pair apart is as long as its
busiest engine, not as the sum of its layers'):

    fused = max((P + D_fused) / tiles, L, copy(x) + copy(halo) + store(y), (S + Y) / B)
    apart = max((P + D_apart) / tiles, L + load(x + halo'), store(x) + store(y),
                (S + Y + 2 X + halo') / B)

``P``: the producer's DPU cycles (a convolution's or a max pool's, in tall blocks);
``L``: its input ``S`` (bytes) loaded from DDR; ``x``: the value between the two
(``X`` bytes), ``y``: the 3x3's output (``Y`` bytes); ``B``: the DDR's bytes per cycle,
which loads and stores share; ``halo``, ``halo'``: ``kh - 1`` rows of ``x`` per fused or
apart block; each DMA term the cost model's cycles (``copies``).  ``D_fused``: the 3x3
in blocks of the fused height, ``D_apart``: of the height a block of the layer alone
holds, over all its output channels or half, whichever the DPU finishes sooner; both at
the cost model's cycles (``dpu_cost`` per variant, dispatch included); the heights are
the rows double-buffered blocks fit in the CMX budget (``block_rows``: VGG-19's 4 and 6
rows fused, as the lowering cuts them).  Estimated, conv1_1 -> conv1_2 takes 1,276K
cycles fused against 1,162K apart (simulated: 1,450K against 1,281K), pool1 -> conv2_1
552K against 722K (647K against 810K): VGG-19 keeps the second fused and the first
apart, 23,230,243 -> 23,012,479 cycles.
"""

from __future__ import annotations

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import SLOTS
from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.fusion.lower_dpu_support import window
from vpuc.ir.types import TensorType


def copies(nbytes: int, elem_bytes: int, src_ddr: bool, dst_ddr: bool, count: int,
           timing) -> float:
    """The cost model's cycles (``vpuc.cost.dma``) of ``nbytes`` moved in ``count`` DMAs."""
    per = -(-nbytes // count)
    transfer = transfer_cost(False, per, elem_bytes, src_ddr, per, not dst_ddr, timing.dma)
    return count * dma_task_cycles(transfer, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)


def row_bytes(t: TensorType, channels: int | None = None) -> int:
    """Bytes of one row of the 4-D value ``t`` (of ``channels`` of its channels)."""
    n, c, _, w = t.dims
    return n * (c if channels is None else channels) * w * t.elem.nbytes


def block_rows(per_row: int, held: int, budget: int) -> int:
    """Rows of a block when ``SLOTS`` blocks of ``per_row`` bytes a row, each beside
    ``held`` bytes more (its halo rows, a fused stage's weights), fit a tile's CMX
    ``budget``; one at least."""
    return max(1, (budget // SLOTS - held) // max(per_row, 1))


def window_dpu_cycles(op: str, x: TensorType, y: TensorType, kernel: tuple[int, int],
                      stride: tuple[int, int], rows: int, channels: int, timing) -> float:
    """The cost model's DPU cycles of the window op ``op`` (conv, maxpool) ``x`` -> ``y`` in
    blocks of ``rows`` output rows and ``channels`` output channels (the last of each as
    many as are left), each block one task split into variants
    (``lower_dpu.split_rows_cost``)."""
    from vpuc.fusion.lower_dpu import split_rows_cost
    n, c, _, _ = x.dims
    _, o, oh, ow = y.dims
    rows = min(rows, oh)

    def block(r: int, chunk: int) -> float:
        return split_rows_cost(r, lambda h: DpuWorkload(
            op=op, elem=x.elem.value, width=ow, height=h, channels=chunk,
            in_channels=c if op == "conv" else chunk, kernel=kernel, stride=stride, batch=n,
            in_bytes=x.elem.nbytes, out_bytes=y.elem.nbytes, weight_bytes=x.elem.nbytes),
            timing)[1]
    full, rest = divmod(oh, rows)
    total = 0.0
    for c0 in range(0, o, channels):
        chunk = min(channels, o - c0)
        total += full * block(rows, chunk) + (block(rest, chunk) if rest else 0.0)
    return total


def producer_dpu_cycles(op, index, budget: int, timing) -> float:
    """The producer's DPU cycles (``P``): a convolution's or a max pool's, in blocks of the
    rows its input and output rows fit; 0 for other layers, whose DPU work is the same
    fused or apart and small beside a convolution's."""
    kind = {"Convolution": "conv", "MaxPool": "maxpool"}.get(op.kind)
    x = index.producer(op.operands[0]).type
    y = op.type
    if kind is None or x is None or y is None or x.rank != 4 or y.rank != 4 \
            or not x.is_static or not y.is_static:
        return 0.0
    kernel, strides, *_ = window(op, index)
    rows = block_rows(row_bytes(x) * strides[0] + row_bytes(y), 0, budget)
    return window_dpu_cycles(kind, x, y, tuple(kernel), tuple(strides), rows, y.dims[1],
                             timing)


def engine_bounds(first, layer, index, budget: int, timing, tiles: int
                  ) -> tuple[float, float]:
    """(fused, apart): the busiest engine's cycles of the DPU layer ``first`` and the 3x3
    ``layer`` on its blocks, and of the two apart (module docstring)."""
    x = index.producer(layer.op.operands[0]).type
    y = layer.op.type
    source = index.producer(first.op.operands[0]).type
    kh = index.producer(layer.op.operands[1]).type.dims[2]
    h, o, nb = x.dims[2], y.dims[1], x.elem.nbytes
    halo_rows = (kh - 1) * row_bytes(x)
    weights = o * x.dims[1] * kh * kh * nb + 4 * o
    # fused, a block holds x's rows twice (the producer's output, the 3x3's input) and
    # the 3x3's output rows, every channel, and as the lowering sizes it the 3x3's weights
    # (``HaloConvEpilogue.block_bytes``); apart, its input and output rows, of the channel
    # chunk (all, or half) the DPU finishes sooner
    fused_rows = block_rows(2 * row_bytes(x) + row_bytes(y), halo_rows + weights, budget)
    fused_blocks = -(-h // fused_rows)
    fused_dpu = window_dpu_cycles("conv", x, y, (kh, kh), (1, 1), fused_rows, o, timing)
    chunks = [o] + ([o // 2] if (o // 2) % 16 == 0 else [])
    apart_dpu = min(window_dpu_cycles("conv", x, y, (kh, kh), (1, 1), block_rows(
        row_bytes(x) + row_bytes(y, chunk), halo_rows, budget), chunk, timing)
        for chunk in chunks)
    apart_blocks = -(-h // block_rows(row_bytes(x) + row_bytes(y), halo_rows, budget))
    producer = producer_dpu_cycles(first.op, index, budget, timing)
    halo, halo_apart = halo_rows * fused_blocks, halo_rows * apart_blocks
    load = 0.0 if source is None else copies(source.nbytes, source.elem.nbytes, True, False,
                                             fused_blocks, timing)
    store = copies(y.nbytes, nb, False, True, fused_blocks, timing)
    ddr = (0 if source is None else source.nbytes) + y.nbytes
    fused = max((producer + fused_dpu) / tiles, load,
                copies(x.nbytes, nb, False, False, fused_blocks, timing)
                + copies(halo, nb, False, False, fused_blocks, timing) + store,
                ddr / timing.ddr_bytes_per_cycle)
    apart = max((producer + apart_dpu) / tiles,
                load + copies(x.nbytes + halo_apart, nb, True, False, apart_blocks, timing),
                copies(x.nbytes, nb, False, True, apart_blocks, timing) + store,
                (ddr + 2 * x.nbytes + halo_apart) / timing.ddr_bytes_per_cycle)
    return fused, apart
