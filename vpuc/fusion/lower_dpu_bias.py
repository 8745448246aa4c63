"""A layer of several channel chunks (``lower_dpu_nn.emit_jobs``: each block loads its own
chunk's weights) loads its whole f32 bias once per tile, with the tile's first block, and
each chunk's task reads its rows of it, instead of one small DMA per chunk.

Why: a bias slice is 64 to 192 bytes, but each DMA of it holds its channel for the DDR's
read latency (870 cycles, ``[dma]`` in the timing TOML), and the slices of later chunks
wait on a slot's reuse, so they queue in the channel's FIFO behind the next layer's
prefetched weights: ResNet-18's stage-3 and stage-4 layers load 8 to 11 of them each,
and a chunk's DPU task waited up to 21K cycles behind one (``bench/critical_waits.py``).
The whole bias of a layer is at most a few KB of CMX per tile (512 channels: 2 KB).

Expects: the layer's bias declared as ``const %<prefix>bias`` of its output channels in
f32 (every chunk's channels aligned, none packed into a weights table).
Guarantees: every chunk's task reads the same bias values as a per-chunk load gave it.
"""

from __future__ import annotations

from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.ir.types import DimsOrder, ElemType, TensorType


def shares_bias(chunked: bool, bias, packed: bool, outs: list[tuple[int, int]]) -> bool:
    """Whether a layer loads its bias once per tile: several chunks loading their own
    weights, a bias not packed into a weights table, and every chunk's channels aligned
    (``lower_dpu_channels.aligned``: then its slice is a view of the layer's bias)."""
    return chunked and bias is not None and not packed \
        and all(aligned(b - a) == b - a for a, b in outs)


class TileBias:
    """The layer's bias in each tile's CMX, loaded with the tile's first block."""

    def __init__(self, channels: int) -> None:
        self.channels = channels
        self.on_tile: dict[int, str] = {}        # tile -> its CMX buffer
        self.loaded: set[int] = set()            # tiles whose copy is loaded

    def clause(self, e, t: int, outs: tuple[int, int], tag: str) -> str:
        """The ``bias(...)`` clause of a chunk's task on tile ``t`` (``e``: the layer's
        ``lower_dpu.LayerEmitter``): its rows of the tile's copy (``load`` brings it)."""
        if t not in self.on_tile:
            self.on_tile[t] = e.cmx(f"bias.t{t}", TensorType(
                (self.channels,), ElemType.F32, DimsOrder.identity(1)), t)
        o0, o1 = outs
        cmx = self.on_tile[t]
        if (o0, o1) == (0, self.channels):
            return f" bias({cmx})"
        return f" bias({e.view(f'bias.s{tag}', cmx[1:], [f'{o0}:{o1}'])})"

    def load(self, e, t: int, waits: str, loaded: list[str]) -> None:
        """The tile's copy loaded by its first chunk, after that chunk's weights (on
        channel 0, waiting on ``waits``, updating ``loaded``): listed after them, the
        weights keep their place among the early loads (``schedule_prefetch``)."""
        if t not in self.loaded:
            e.dma(f"load_bias.t{t}", f"%{e.p}bias", self.on_tile[t], 0, waits, loaded)
            self.loaded.add(t)
