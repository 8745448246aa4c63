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
