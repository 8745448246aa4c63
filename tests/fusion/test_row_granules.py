"""A DPU layer's row blocks in heights that fill the mode grid (``lower_dpu_blocks``'s
``granule_edges``): the cost model pads a workload's rows up to its mode's grid
(CUBOID_8x16: 2 rows, CUBOID_16x16: 4) and re-reads its weights once per block of 8 or 16
rows, so an even cut into odd heights (56 rows in 10 blocks of 6 and 5) pays for rows it
does not compute.  ResNet-18's 56x56 3x3 layers: 65,169 -> 59,873 DPU cycles per tile."""

from __future__ import annotations

from tests.fusion.dpu_testlib import constant, module
from vpuc import api
from vpuc.fusion import lower_dpu_blocks, lower_dpu_nn_sizing
from vpuc.fusion.lower_dpu_blocks import ROW_GRANULES, granule_edges
from vpuc.ir.tasks import DpuOp, DpuTask


def test_granule_cuts_cover_the_rows_in_whole_granules_tiles_balanced():
    """Every extent up to 60 rows, 1 to 12 blocks, 1 to 3 tiles, every granule (one test,
    not 8,640: each case takes microseconds)."""
    for extent in range(1, 61):
        for count in range(1, 13):
            for tiles in (1, 2, 3):
                for granule in ROW_GRANULES:
                    _check_cut(extent, count, tiles, granule)


def _check_cut(extent: int, count: int, tiles: int, granule: int) -> None:
    case = (extent, count, tiles, granule)
    edges = granule_edges(extent, count, tiles, granule)
    if edges is None:
        return
    assert len(edges) == count and edges[0][0] == 0 and edges[-1][1] == extent, case
    assert all(a[1] == b[0] for a, b in zip(edges, edges[1:])), case
    sizes = [b - a for a, b in edges]
    assert min(sizes) > 0, case
    per_tile = [sizes[t::tiles] for t in range(tiles)]
    # every block but each tile's last is whole granules; the tiles' shares differ by a row
    assert all(s % granule == 0 for share in per_tile for s in share[:-1]), case
    totals = [sum(share) for share in per_tile]
    assert max(totals) - min(totals) <= 1, case


def test_56_rows_in_10_blocks_fill_the_2_row_grid():
    sizes = [b - a for a, b in granule_edges(56, 10, 2, 2)]
    assert sizes == [6] * 8 + [4, 4]


def _conv(ic: int, oc: int, h: int, w: int) -> str:
    body = f"  %x = Parameter() : 1x{ic}x{h}x{w}xf16 NHWC\n"
    body += constant("w", (oc, ic, 3, 3), 1) + constant("bias", (1, oc, 1, 1), 2)
    body += ("  %conv = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%x, %w)\n"
             "  %b = Add(%conv, %bias)\n  %p = Relu(%b)\n  Result(%p)\n")
    return module(body)


def _blocks_and_cycles(text: str) -> tuple[list[tuple[int, int, int]], float]:
    """(tile, rows, channels) of each conv task, and the simulated cycles."""
    program = api.compile_text(text, "t.vir", schedule="default")
    blocks = [(t.tile, max(v.end[1] for v in t.variants) - min(v.start[1] for v in t.variants) + 1,
               max(v.end[2] for v in t.variants) - min(v.start[2] for v in t.variants) + 1)
              for tl in program.module.task_lists for t in tl.tasks
              if isinstance(t, DpuTask) and t.op is DpuOp.CONV]
    return blocks, api.simulate(program, timing_only=True).cycles


def test_grid_filling_blocks_make_a_56_wide_3x3_layer_faster(monkeypatch):
    """ResNet-18's stage-1 shape on 28 rows, one 32-channel chunk per tile: the even cut's
    best is 10 blocks of 6, 6, 6, 5, 5 rows a tile, whose 5-row workloads pad to 6 rows;
    6, 6, 6, 6, 4 fill CUBOID_8x16's 2-row grid (46,173 against 47,721 cycles when
    measured)."""
    text = _conv(64, 64, 28, 56)
    blocks, cycles = _blocks_and_cycles(text)
    assert all(rows % 2 == 0 for _, rows, _ in blocks)
    assert sum(rows for t, rows, _ in blocks if t == 0) \
        == sum(rows for t, rows, _ in blocks if t == 1)
    monkeypatch.setattr(lower_dpu_blocks, "ROW_GRANULES", ())
    even_blocks, even_cycles = _blocks_and_cycles(text)
    assert even_blocks != blocks
    assert cycles < even_cycles


def test_channel_chunks_keep_their_weights_over_row_blocks(monkeypatch):
    """The same layer cut over its output channels, one chunk per tile, each tile loading its
    chunk's weights once and running its rows in blocks (``lower_dpu_nn_cut.kept_chunks``):
    faster than the split whose every block loads its chunk's weights again (46,173
    against 46,853 cycles when measured)."""
    text = _conv(64, 64, 28, 56)
    blocks, cycles = _blocks_and_cycles(text)
    assert {t for t, _, _ in blocks} == {0, 1} and all(c == 32 for _, _, c in blocks)
    assert len(blocks) > 2            # rows in blocks, not one block per chunk
    monkeypatch.setattr(lower_dpu_nn_sizing, "kept_chunks", lambda *args: None)
    _, reloading = _blocks_and_cycles(text)
    assert cycles < reloading


def test_kept_rows_only_for_dense_layers_without_an_act_epilogue():
    """Row blocks of kept chunks for a dense convolution alone or with a DPU eltwise epilogue
    (ResNet-18's residual Adds: 1,752,683 -> 1,749,259 cycles when measured), not under an
    ACT SHAVE epilogue or for a depthwise layer (MobileNetV3-Small's: slower)."""
    from types import SimpleNamespace

    from tests.fusion.test_epilogue_tiles import _epilogue
    from vpuc.fusion.fuse_eltwise import EltwiseEpilogue
    from vpuc.fusion.lower_dpu_nn_cut import kept_rows
    assert kept_rows(SimpleNamespace(epilogue=None), "conv")
    assert not kept_rows(SimpleNamespace(epilogue=None), "dwconv")
    assert kept_rows(SimpleNamespace(epilogue=EltwiseEpilogue(None, None, True, None)), "conv")
    assert not kept_rows(SimpleNamespace(epilogue=_epilogue(16, 4)), "conv")
