"""``fuse_epilogue.shave_boxes``: a DPU output block's elementwise epilogue cut so that a
tile's two ACT SHAVEs, taking the tile's tasks in list order (``runtime_sim/runtime.py``),
end within one pixel of each other; the boxes cover the block once."""

from __future__ import annotations

import itertools

import pytest

from vpuc.fusion.fuse_epilogue import shave_boxes


def _in_order_loads(boxes, shaves: int = 2) -> list[int]:
    """Pixels per ACT SHAVE when each takes the next box as it becomes free (equal work
    per pixel, as for an elementwise kernel)."""
    loads = [0] * shaves
    for r0, r1, x0, x1 in boxes:
        first = min(range(shaves), key=loads.__getitem__)
        loads[first] += (r1 - r0) * (x1 - x0)
    return loads


@pytest.mark.parametrize("rows,width", list(itertools.product(range(1, 14), range(1, 10))))
def test_boxes_cover_the_block_once(rows, width):
    covered = [[0] * width for _ in range(rows)]
    for r0, r1, x0, x1 in shave_boxes(rows, width):
        assert 0 <= r0 < r1 <= rows and 0 <= x0 < x1 <= width
        # NHWC: a box is dense when it spans whole rows or lies in one row
        assert (x0, x1) == (0, width) or r1 - r0 == 1
        for r in range(r0, r1):
            for x in range(x0, x1):
                covered[r][x] += 1
    assert all(c == 1 for row in covered for c in row)


@pytest.mark.parametrize("rows,width", list(itertools.product(range(1, 14), range(1, 10))))
def test_both_shaves_of_a_tile_end_within_a_pixel(rows, width):
    loads = _in_order_loads(shave_boxes(rows, width))
    assert max(loads) - min(loads) <= 1
    # halving rows alone leaves one SHAVE a whole row more on odd row counts
    if rows % 2 and width > 1:
        assert max(loads) - min(loads) < width


def test_at_most_two_extra_dispatches_per_block():
    for rows, width in itertools.product(range(1, 30), range(1, 30)):
        assert len(shave_boxes(rows, width)) <= 4


def test_mobilenet_epilogues_split_evenly_over_the_shaves_of_a_tile(tmp_path):
    """In the compiled MobileNetV3 (96x96, where some blocks have odd row counts; ``--schedule default``) every fused epilogue
    block's ACT SHAVE tasks, taken in list order by the first free SHAVE, leave the two
    SHAVEs of its tile within one pixel (its channels) of each other."""
    import math
    import re

    from vpuc import api
    from vpuc.ir.symbols import SymbolTable
    from vpuc.ir.tasks import SwKernelTask
    from vpuc.onnx_import.zoo import mobilenet_v3_small

    path = mobilenet_v3_small(size=96, classes=10).save(tmp_path / "m.onnx", "m")
    module = api.compile(path, schedule="default").module
    symbols = SymbolTable(module)
    blocks: dict[tuple[str, str], list] = {}
    for tl in module.task_lists:
        for t in tl.tasks:
            m = re.match(r"(.*)\.act(\d+)\.\d+$", t.label or "")
            if isinstance(t, SwKernelTask) and m:
                blocks.setdefault(m.groups(), []).append(symbols.region(t.outputs[0].buffer).type)
    assert blocks
    odd = 0
    for types in blocks.values():
        loads = [0, 0]
        for t in types:
            loads[loads.index(min(loads))] += math.prod(t.dims)
        channels = types[0].dims[1]
        assert max(loads) - min(loads) <= channels
        odd += len(types) > 2
    assert odd      # some blocks have an odd row count: their middle row is halved
