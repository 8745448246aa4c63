"""Global pools whose window exceeds the NCE's 11 x 11 kernel limit, in levels in CMX over the
tiles (``vpuc/fusion/lower_dpu_pool_levels.py``): no DPU task pools a window beyond the
limit, no partial result crosses DDR, the numerics match the mean (or max) of the pool's
input within the bound the two roundings derive, and the split the cost model's estimate
picks is the one the simulator runs fastest among the close candidates.

The pool reads a DPU layer's output (NHWC, as in MobileNetV3's squeeze-excite blocks): a 1x1
convolution by the identity with a ReLU, exact in f16 (one product by 1 per output), so the
pool's input is ``relu(x)`` bit for bit and the bound covers the pool's own roundings only.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.report import summary_data
from vpuc import api
from vpuc.fusion import lower_dpu_global_pool, lower_dpu_pool_levels
from vpuc.fusion.blocked_program import sanitize
from vpuc.ir.module import BufferKind
from vpuc.onnx_import.zoo import ModelBuilder

U = 2.0 ** -11          # f16 unit roundoff
F32 = 2.0 ** -24        # f32 unit roundoff (the DPU accumulates in f32)

CASES = {               # (channels, H, W, kind)
    "gap_56": (16, 56, 56, "GlobalAveragePool"),      # one chunk: bands over both tiles
    "gap_14_96": (96, 14, 14, "GlobalAveragePool"),   # channel chunks over the tiles
    "gmp_14": (48, 14, 14, "GlobalMaxPool"),
    "gap_ragged_channels": (40, 16, 24, "GlobalAveragePool"),   # 40 = 16 + 16 + 8
}


def _model(tmp_path, c, h, w, kind):
    m = ModelBuilder(seed=3, opset=17)
    x = m.input("x", [1, c, h, w])
    eye = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
    y = m.node("Relu", [m.node("Conv", [x, m.init(eye)], kernel_shape=[1, 1])])
    out = m.node(kind, [y])
    m.output(out)
    return m.save(tmp_path / "m.onnx", "m"), out


def _dpu_tasks(program):
    return [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]


@pytest.mark.parametrize("case", sorted(CASES))
def test_large_global_pool_runs_in_levels_in_cmx(case, tmp_path):
    c, h, w, kind = CASES[case]
    path, out = _model(tmp_path, c, h, w, kind)
    program = api.compile(path)
    pools = [t for t in _dpu_tasks(program) if t.op.value in ("avgpool", "maxpool")]
    assert pools and all(max(t.kernel) <= lower_dpu_pool_levels.MAX_KERNEL for t in pools)
    assert any(".l1." in t.label for t in pools), "level 1"
    assert any(".l1." not in t.label for t in pools), "level 2"
    lv = _chosen(path)
    if len(lv.chunks) * lv.bands > 1:          # the items alternate over the tiles
        assert {t.tile for t in pools} == {0, 1}
    loads = [t for tl in program.module.task_lists if tl.executor.name == "DMA"
             for t in tl.tasks if ".l1.load" in (t.label or "")]
    # an item on the tile of a resident input of aligned channels reads it in place
    assert len(loads) < len(lv.chunks) * lv.bands or c % 16
    # no partial result in DDR: the only DDR tensors are the model's and the weights
    ddr = {b.name for b in program.module.buffers if b.kind is BufferKind.DDR}
    assert not [name for name in ddr if "part" in name]

    x = np.random.default_rng(5).standard_normal((1, c, h, w)).astype(np.float16)
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    summary = summary_data(sim.result.plan, sim.result.timeline, exact=True)
    assert 0 < summary["bound"]["cycles"] <= summary["cycles"]
    src = np.maximum(x.astype(np.float32), 0)
    got = sim.outputs[sanitize(out)].astype(np.float32)
    if kind == "GlobalMaxPool":          # a max of maxes of f16 values: exact
        np.testing.assert_array_equal(got, src.max(axis=(2, 3), keepdims=True))
        return
    want = src.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    # level 1: each partial mean of a x b cells summed in f32 (a b terms of at most max|x|)
    # then rounded to f16 (u |partial|); level 2: nh nw partials summed in f32, the result
    # rounded to f16 (u |want|)
    (a, b), nh, nw = lv.window, h // lv.window[0], w // lv.window[1]
    big = np.max(np.abs(src))
    partial = np.max(np.abs(src.reshape(1, c, nh, a, nw, b).mean(axis=(3, 5))))
    bound = U * np.abs(want) + U * partial + F32 * (a * b * big + nh * nw * partial)
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)


def _chosen(path):
    """The split the lowering picks for the model's pool."""
    seen = []
    real = lower_dpu_global_pool.choose_levels

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]
    lower_dpu_global_pool.choose_levels = spy
    try:
        api.compile(path)
    finally:
        lower_dpu_global_pool.choose_levels = real
    assert len(seen) == 1 and seen[0] is not None
    return seen[0]


def test_the_estimate_picks_the_split_the_simulator_runs_fastest(tmp_path, monkeypatch):
    """Among the estimate's three best splits of the 56 x 56 pool (and its best of another
    band count: here one band read in place on the tile holding the input against bands
    over both tiles), the chosen one simulates fastest."""
    path, _ = _model(tmp_path, 16, 56, 56, "GlobalAveragePool")
    real = lower_dpu_global_pool.choose_levels
    ranked = []

    def rank(plan, x, out, tiles, prog):
        ranked.extend(sorted(
            (lower_dpu_pool_levels.estimate(lv, plan.dpu_op, x, out, tiles, prog.timing,
                                            prog.dma_channels), i, lv)
            for i, lv in enumerate(lower_dpu_pool_levels.candidates(16, 56, 56, tiles))
            if lower_dpu_pool_levels.footprint(lv, x, tiles) <= prog.cmx_budget))
        return real(plan, x, out, tiles, prog)
    monkeypatch.setattr(lower_dpu_global_pool, "choose_levels", rank)
    chosen = api.simulate(api.compile(path), timing_only=True).cycles
    best = ranked[0][2]
    others = [lv for _, _, lv in ranked[1:3]] \
        + [next(lv for _, _, lv in ranked if lv.bands != best.bands)]
    for lv in others:
        monkeypatch.setattr(lower_dpu_global_pool, "choose_levels", lambda *a, lv=lv: lv)
        assert chosen <= api.simulate(api.compile(path), timing_only=True).cycles, lv


# Windows beyond the NCE's limit that are not global pools and have no exact cascade (a
# MaxPool always has one, an AveragePool when its large sides factor: test_large_kernels.py):
# a located error.
LARGE = {
    "avgpool_12": lambda m, x: m.node("AveragePool", [x], kernel_shape=[12, 12]),
    "conv_1x12": lambda m, x: m.node("Conv", [x, m.weight((16, 16, 1, 12))],
                                     kernel_shape=[1, 12]),
    "conv_whole": lambda m, x: m.node("Conv", [x, m.weight((16, 16, 19, 19))],
                                      kernel_shape=[19, 19]),
    "depthwise_12x1": lambda m, x: m.node("Conv", [x, m.weight((16, 1, 12, 1))],
                                          kernel_shape=[12, 1], group=16),
}


@pytest.mark.parametrize("case", sorted(LARGE))
def test_a_window_beyond_the_kernel_limit_is_an_error_at_its_node(case, tmp_path):
    from vpuc.diagnostics import VpucError
    m = ModelBuilder(seed=0, opset=17)
    m.output(LARGE[case](m, m.input("x", [1, 16, 19, 19])))
    path = m.save(tmp_path / "m.onnx", "m")
    with pytest.raises(VpucError) as err:
        api.compile(path)
    text = str(err.value)
    assert "m.onnx (imported):" in text and "beyond the NCE's 11 x 11 window" in text
    assert "<lower-graph" not in text, "reported at the graph op, not the lowered tasks"
