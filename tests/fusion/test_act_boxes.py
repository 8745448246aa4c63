"""ACT segments whose blocks are shared by both ACT SHAVEs of a tile however many rows they
have (``act_split.box_runs``, ``shave_boxes``; ``--schedule default``): an odd block as two
row runs and its middle row's halves, so runs of blocks of unequal size give the tiles
equal rows.  A squeeze-excite product over 14 rows (MobileNetV3 at 14x14): 4, 4, 3, 3 rows,
7 a tile, where whole halves gave one tile 8 rows and the other 6."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tolerances import unit_roundoff
from vpuc import api
from vpuc.fusion import lower_act
from vpuc.fusion.act_split import box_makespan, box_runs, shave_boxes, shave_makespan
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import SwKernelTask


def test_box_runs_give_the_tiles_equal_rows():
    # 14 rows: the chosen 4, 4, 4 and 2 (tile 0: 8 rows) against 4, 4, 3, 3 (7 a tile)
    assert box_runs(14, [(3, 4), (1, 2)], 1000, 1 << 20, 2) == [(2, 4), (2, 3)]
    assert box_makespan([4, 4, 3, 3], 2) < box_makespan([4, 4, 4, 2], 2)
    # an odd block pays four dispatches where an even one pays two
    assert box_makespan([3, 2], 1) > box_makespan([2, 3], 2) > box_makespan([2, 2], 2)
    assert box_makespan([2, 2], 2) == pytest.approx(shave_makespan([2, 2], 2))


def test_box_runs_keep_a_cut_that_balances_and_never_take_fewer_blocks():
    # 56 rows in 4 blocks of 14 already balance: nothing to gain
    assert box_runs(56, [(4, 14)], 1000, 1 << 20, 2) == [(4, 14)]
    # the ViT's GELU rows, 14 blocks of 14 and one: fewer, larger blocks would balance
    # as well by the estimate but pipeline worse with the segments around them
    runs = box_runs(197, [(14, 14), (1, 1)], 1000, 1 << 20, 2)
    assert sum(n for n, _ in runs) >= 15 and sum(n * s for n, s in runs) == 197


@pytest.mark.parametrize("extent", range(1, 40))
def test_box_runs_cover_the_extent_within_the_budget(extent):
    even = next(d for d in range(1, extent + 1) if extent % d == 0 and (d >= 4 or d == extent))
    total, budget = extent * 1000, 12_000
    runs = box_runs(extent, [(even, extent // even)], total, budget, 2)
    assert sum(n * s for n, s in runs) == extent and len(runs) <= 2
    if runs != [(even, extent // even)]:
        assert 2 * sum(s for _, s in runs) * total <= budget * extent
        assert sum(n for n, _ in runs) >= even


GRAPH = """module @se arch NPU37XX
graph @main {
  %x = Parameter() : 1x14x96xf16
  %s = Parameter() : 1x1x96xf16
  %e = HSwish(%s) : 1x1x96xf16
  %r = Multiply(%x, %e) : 1x14x96xf16
  Result(%r)
}
"""


def test_squeeze_excite_rows_split_evenly_and_compute_the_same(monkeypatch):
    program = api.compile_text(GRAPH, "<se>", schedule="default")
    symbols = SymbolTable(program.module)
    per_tile, per_shave_task = {0: 0, 1: 0}, []
    for tl in program.module.task_lists:
        for t in tl.tasks:
            if isinstance(t, SwKernelTask):      # HSwish and the product: one kernel
                n = int(np.prod(symbols.region(t.outputs[0].buffer).type.dims))
                per_tile[t.tile] += n
                per_shave_task.append(n)
    assert per_tile == {0: 7 * 96, 1: 7 * 96}
    assert 48 in per_shave_task          # a middle row's half: an odd block's boxes
    rng = np.random.default_rng(0)
    feeds = {"x": rng.uniform(-4, 4, (1, 14, 96)).astype(np.float16),
             "s": rng.uniform(-4, 4, (1, 1, 96)).astype(np.float16)}
    sim = api.simulate(program, feeds, reference=True)
    assert not sim.races
    # the same elementwise ops per element whatever the box: bit for bit the halves' result
    monkeypatch.setattr(lower_act, "_box_inner", lambda *a: None)
    plain = api.compile_text(GRAPH, "<se>", schedule="default")
    np.testing.assert_array_equal(sim.outputs["r"], api.simulate(plain, feeds).outputs["r"])
    # against the f16 reference: HSwish (x + 3, clamp, x *, / 6) and the product, each
    # rounding once on either side: within 2 x 5 roundings of the value
    u = unit_roundoff(np.float16)
    want = sim.reference["r"].astype(np.float64)
    got = sim.outputs["r"].astype(np.float64)
    assert np.all(np.abs(got - want) <= 10 * u * np.abs(want) + 2 ** -24)


def test_excitation_runs_once_per_tile_and_computes_the_same(tmp_path, monkeypatch):
    """MobileNetV3's squeeze-excite products: the excitation (a hardsigmoid of the pooled
    channels, a stage whose values do not span the cut axis) runs in each tile's first block
    only, the main run's result shared with the tail run; the outputs are bit for bit those
    of recomputing it before every block (the same kernel on the same values), and the
    simulation finds no race on the shared buffers.  The products kept on ACT SHAVE, as the
    cost model keeps them when the DPU is slower (``lower_dpu_scale.choose_dpu``), and the
    HardSigmoids not folded into the 1x1s before them (``onnx_import.fold``), as the import
    leaves an excitation whose input another op computes."""
    import collections
    import re

    import vpuc.onnx_import
    from vpuc.fusion import blocked_program, lower_graph_segments
    from vpuc.ir.module import BufferKind
    from vpuc.onnx_import.zoo import mobilenet_v3_small

    path = mobilenet_v3_small(size=64, classes=10).save(tmp_path / "m.onnx", "m")
    monkeypatch.setattr(lower_graph_segments, "choose_dpu", lambda *a, **k: None)
    monkeypatch.setattr(vpuc.onnx_import, "fold_hard_sigmoids", lambda nodes, *a, **k: nodes)

    def excitations(program) -> collections.Counter:
        """(segment, tile) -> tasks of the first of two stages (the product the second)."""
        count: collections.Counter = collections.Counter()
        second = set()
        for tl in program.module.task_lists:
            for t in tl.tasks:
                m = re.match(r"(sg\d+)\.(?:tail\.)?s\d+\.(\d+)\.", t.label or "")
                if isinstance(t, SwKernelTask) and m:
                    if m.group(2) == "0":
                        count[(m.group(1), t.tile)] += 1
                    else:
                        second.add(m.group(1))
        return collections.Counter({k: n for k, n in count.items() if k[0] in second})

    program = api.compile(path, schedule="default")
    once = excitations(program)
    rng = np.random.default_rng(3)
    feeds = {b.name: rng.standard_normal(b.type.dims).astype(np.float16)
             for b in program.module.buffers if b.kind is BufferKind.INPUT}
    got = api.simulate(program, feeds)
    assert not got.races
    monkeypatch.setattr(blocked_program, "_per_tile", lambda *a: (0, set()))
    every = api.compile(path, schedule="default")
    # cut along the rows, an excitation is the same for every block: once a tile; cut
    # along the channels (the 2x2 layers), each block's is its own channels': every block
    reduced = {k for k, n in excitations(every).items() if once[k] < n}
    assert len(reduced) >= 8 and all(once[k] == 1 for k in reduced)
    assert excitations(every).keys() == once.keys()
    want = api.simulate(every, feeds)
    for name in want.outputs:
        np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
