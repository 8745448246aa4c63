"""DPU blocks that write a resident value on the other tile as an output copy.

``resident.in_place_blocks`` lets the blocks of a DPU layer on the tile that holds its
output value (a value kept whole in one tile's CMX, ``resident.py``) write their rows
straight into it.  Before this, the blocks on the *other* tile wrote a CMX slot of their
own and a DMA copied it CMX -> CMX into the value: MobileNetV3-Small's default schedule
copied megabytes so.  NPU37XX's output stage writes a second tile's CMX in the same
workload: the NPU compiler's DUPLICATED|SEGMENTED outputs of SplitOverKernel layers
(npu_plugin, tests/lit/NPU/dialect/VPUIP/passes/unroll_cluster_tiling_sok_37XX.mlir,
``@UnrollNCE``), through the invariant's ``odu_cast`` registers.  VIR writes it
``out(%slot, %rows_of_value)`` (``DpuTask.broadcast_outputs``): such a block's task writes
its slot and the value's rows, and the store is gone.

The slot stays (a DPU task's first output is on its own tile): its bytes are written and
not read, live for the task alone.

Used by ``lower_dpu_nn``'s layers (convolutions, pools).  Measured with
bench/schedule_bench.py (simulated cycles, default schedule): MobileNetV3-Small 556,461 ->
556,168, ResNet-18 and the encoder layer unchanged (1,674,273 and 662,600: none of their
values is resident on one tile and written by layers on both).  The window layers
(``lower_dpu_window``: MobileNetV3's depthwise ones) gain early but lose more late
(570,648 in all), and the squeeze-excite products (``lower_dpu_scale``) 558,290, so they
keep their stores.  The blocks behave as in-place ones for the emitter's
barriers (no store: the task updates what the store would have), so
``LayerEmitter.in_place`` holds them too and ``LayerEmitter.cast`` says which of them
write a slot first.
"""

from __future__ import annotations

from vpuc.fusion.resident import in_place_blocks


def cast_blocks(e, out, channels: int, tiles_of: list[int], whole: bool = True) -> set[int]:
    """The blocks (``tiles_of[k]``: block k's tile) of a DPU layer not on the resident
    value ``out``'s tile whose task writes ``out``'s rows as an output copy: the layer's
    blocks qualify for ``in_place_blocks`` but for their tile (``channels``, ``whole``:
    as there).  ``e``: the layer's ``lower_dpu.LayerEmitter``."""
    if out.tile is None:
        return set()
    home = in_place_blocks(e, out, channels, [out.tile] * len(tiles_of), whole)
    return {k for k in home if tiles_of[k] != out.tile}


def no_store_blocks(e, out, channels: int, tiles_of: list[int], whole: bool = True) -> set[int]:
    """The blocks of a DPU layer with no store: written in place on ``out``'s tile, or as
    an output copy from the other (``e.cast``, set here)."""
    e.cast = cast_blocks(e, out, channels, tiles_of, whole)
    return in_place_blocks(e, out, channels, tiles_of, whole) | e.cast



def written(e, k: int, slot, rows: str) -> tuple[str, str]:
    """(block ``k``'s output buffer, its task's ``out(...)`` operands): the value's
    ``rows`` in place, the slot with ``rows`` as its copy, or the slot (``slot()`` declares
    it, so a block written in place declares none)."""
    if k in e.in_place and k not in e.cast:
        return rows, rows
    y = slot()
    return y, (f"{y}, {rows}" if k in e.cast else y)
