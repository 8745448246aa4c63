"""ACT segments over an axis of prime extent: a main run of equal blocks and one tail block
(``vpuc/fusion/act_split.py``) instead of one block per row."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc import api
from vpuc.fusion.act_split import BLOCK_COST, choose_cut, makespan, tail_split
from vpuc.ir.tasks import SwKernelTask


def test_prime_axis_takes_a_main_run_and_a_tail():
    # 197 rows (a ViT's tokens): the even cut is 197 blocks of one row, one ACT SHAVE each
    cut = tail_split(197, 197, total_bytes=3 * 197 * 192 * 2, budget=1 << 20, tiles=2)
    assert cut is not None
    blocks, chunk = cut
    assert chunk % 2 == 0 and blocks >= 4 and blocks * chunk < 197
    assert makespan([chunk] * blocks + [197 - blocks * chunk], 2) \
        < makespan([1] * 197, 2)


def test_axis_that_divides_well_keeps_its_even_cut():
    assert tail_split(56, 4, total_bytes=4096, budget=1 << 20, tiles=2) is None
    assert tail_split(64, 4, total_bytes=4096, budget=1 << 20, tiles=2) is None


def test_tail_split_respects_the_budget():
    # each main block must fit twice (two slots) beside the tail within the budget
    total = 197 * 1000
    cut = tail_split(197, 197, total_bytes=total, budget=40 * 1000, tiles=2)
    if cut is not None:
        blocks, chunk = cut
        assert (2 * chunk + 197 - blocks * chunk) * 1000 <= 40 * 1000


def test_makespan_counts_halves_and_block_costs():
    # tile 0: 8/2 + 5 (odd: one ACT SHAVE) of 21; tile 1: 8/2; each block its fixed cost
    assert makespan([8, 8, 5], 2) == pytest.approx((4 + 5) / 21 + 2 * BLOCK_COST)


def test_three_heads_are_cut_along_their_rows():
    """Attention scores 3x197x197: three blocks of one head leave tile 0 with two heads on
    one ACT SHAVE each; the 197 query rows, a main run and a tail, balance all four."""
    axis, blocks, chunk = choose_cut([(1, 3, 3, True), (2, 197, 197, False)], 3 * 197 * 197 * 2 * 2,
                                     1 << 20, 2)
    assert axis == 2 and blocks >= 4


GRAPH = """module @tail arch NPU37XX
graph @main {
  %x = Parameter() : 1x37x24xf16
  %y = Parameter() : 1x37x24xf16
  %s = Add(%x, %y) : 1x37x24xf16
  %m = Softmax{axis = -1}(%s) : 1x37x24xf16
  %r = Multiply(%m, %x) : 1x37x24xf16
  Result(%r)
}
"""


def test_prime_rows_with_a_last_axis_softmax_match_the_reference():
    program = api.compile_text(GRAPH, "<tail>")
    acts = [t for tl in program.module.task_lists for t in tl.tasks
            if isinstance(t, SwKernelTask)]
    assert any("tail." in t.label for t in acts), [t.label for t in acts]
    assert len(acts) < 37 * 3        # not a block (and three invocations) per row
    rng = np.random.default_rng(0)
    feeds = {n: rng.uniform(-2, 2, (1, 37, 24)).astype(np.float16) for n in ("x", "y")}
    sim = api.simulate(program, feeds, reference=True)
    assert not sim.races
    np.testing.assert_allclose(sim.outputs["r"].astype(np.float32),
                               sim.reference["r"].astype(np.float32), rtol=4e-3, atol=1e-3)


def test_shave_makespan_gives_blocks_without_halves_to_both_shaves_of_a_tile():
    from vpuc.fusion.act_split import PIPELINED_BLOCK_COST, shave_makespan
    # tile 0 takes blocks 0 and 2, one per ACT SHAVE; the old estimate stacks them
    assert shave_makespan([5, 5, 5, 5], 2, halves=False) == \
        pytest.approx(5 / 20 + PIPELINED_BLOCK_COST)
    assert makespan([5, 5, 5, 5], 2, halves=False) == pytest.approx(10 / 20 + 2 * BLOCK_COST)
    # halves: both ACT SHAVEs share each block and its cost
    assert shave_makespan([8, 8], 2) == pytest.approx(4 / 16 + PIPELINED_BLOCK_COST / 2)


def test_pipelined_cut_keeps_the_rows_and_a_small_tail():
    """A ViT's GELU over 1x197x768 under --schedule default: along the 197 tokens (rows
    pipeline with the layers around it, ``schedule_deps``) in blocks whose tail is one row,
    not along the 768 columns, which balance as well but wait for the whole input."""
    total = 2 * 197 * 768 * 2
    axis, blocks, chunk = choose_cut([(1, 197, 197, True), (2, 768, 4, False)], total,
                                     1 << 20, 2, pipelined=True)
    assert axis == 1 and 197 - blocks * chunk == 1
    # the layer-by-layer estimate keeps its choice (--schedule naive does not change)
    assert choose_cut([(1, 197, 197, True), (2, 768, 4, False)], total, 1 << 20, 2) == \
        (1, 4, 48)


def test_pipelined_halved_tail_counts_among_the_tiles_blocks():
    """MobileNetV3's squeeze-excite products at 14x14 (an even cut of 7 blocks of 2 rows,
    tile 0 taking 4): under --schedule default three blocks of 4 and a tail of 2 give each
    tile two blocks, each halved over its ACT SHAVEs, and tile 0 four rows per SHAVE in
    two blocks' costs, not four."""
    from vpuc.fusion.act_split import shave_makespan
    total = 3 * 576 * 14 * 14 * 2
    assert tail_split(14, 7, total, 1 << 20, 2, halves=True, pipelined=True) == (3, 4)
    assert shave_makespan([4, 4, 4, 2], 2) < shave_makespan([2] * 7, 2)
    # layer by layer, the main run keeps two blocks a tile (no tail that fits beats 7 x 2)
    assert tail_split(14, 7, total, 1 << 20, 2, halves=True) is None
    # without halves a block is one ACT SHAVE's: the tail does not count (the ViT's 197
    # score rows stay 4 x 49 + 1, not 3 x 50 + 47)
    assert tail_split(197, 197, 3 * 197 * 197 * 2 * 2, 1 << 20, 2, halves=False,
                      pipelined=True) == (4, 49)
