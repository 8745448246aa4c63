"""A global pool after a DDR-bound layer loads its input on the store channel
(``schedule_value_loads.behind_stores``): on channel 0 its loads queued behind the
classifier's weight chunks the prefetch lists there (ResNet-18: 17K cycles after the last
3x3 layer's last store; schedule_bench cycles 1,671,781 -> 1,667,511).  The smallest
shape with the problem: a 128 -> 256 3x3 layer on a 4x4 map (590 KB of weights beside
4 KB of input: heavy) before a pool and a 256 -> 1000 classifier.
"""

from __future__ import annotations

import vpuc.fusion.lower_graph as lower_graph
from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from vpuc import api
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import ModelBuilder, _classifier_head

POOL = "globalaveragepool_"
ROOMY = 256 * 1024     # the classifier's chunks on channel 0 ahead of the pool's loads
TIGHT = 128 * 1024     # a chunk listed among the pool's loads on the store channel too


def _build(m):
    a = m.node("Relu", [m.node("Conv", [_x(m, (1, 16, 4, 4)), m.weight((128, 16, 1, 1)),
                                        m.weight((128,), 0.1)], kernel_shape=[1, 1])])
    y = m.node("Relu", [m.node("Conv", [a, m.weight((256, 128, 3, 3)), m.weight((256,), 0.1)],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    return _classifier_head(m, y, 256, 1000)


def _program(tmp_path, budget):
    m = ModelBuilder(seed=0, opset=17)
    m.output(_build(m))
    return api.compile(m.save(tmp_path / "p.onnx", "p"), cmx_budget=budget, schedule="default")


def _pool_load_channels(program) -> set[int]:
    return {t.channel for tl in program.module.task_lists for t in tl.tasks
            if isinstance(t, DmaTask) and (t.label or "").startswith(POOL)
            and ".load" in t.label}


def test_pool_loads_on_the_store_channel(tmp_path):
    assert _pool_load_channels(_program(tmp_path, ROOMY)) == {1}


def test_pool_reading_behind_the_stores_ends_sooner(tmp_path, monkeypatch):
    moved = api.simulate(_program(tmp_path, ROOMY), timing_only=True).cycles
    monkeypatch.setattr(lower_graph, "behind_stores",
                        lambda module, keys, finishes, arch, placement: placement)
    kept = _program(tmp_path, ROOMY)
    assert _pool_load_channels(kept) == {0}
    assert moved < api.simulate(kept, timing_only=True).cycles


def test_pool_loads_stay_when_a_chunk_is_listed_among_them(tmp_path):
    assert _pool_load_channels(_program(tmp_path, TIGHT)) == {0}


def test_pool_on_the_store_channel_matches_onnxruntime(tmp_path):
    tasks = compile_and_compare(tmp_path, _build, cmx_budget=ROOMY)
    assert {t.tile for t in tasks} == {0, 1}
