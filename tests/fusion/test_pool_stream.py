"""``pool_stream``: a squeeze-excite pool's level 1 pooled band by band as the depthwise
layer before it stores its row blocks (``--schedule default``), not after its last one;
every layer within the bound ``runtime_sim/layer_check`` derives from the arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fusion.fusion_testlib import both_schedules, layers_within_bounds
from vpuc import api
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn, _squeeze_excite

SIZE, CHANNELS = 28, 96          # a 14 x 14 depthwise output: its pool exceeds the NCE's 11 x 11


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    """MobileNetV3-Small's fifth block: 1x1 expansion, 5x5/2 depthwise (HardSwish),
    squeeze-excite, 1x1 projection."""
    m = ModelBuilder(5)
    x = m.input("input", [1, 24, SIZE, SIZE])
    h = _conv_bn(m, x, 24, CHANNELS, 1, act="HardSwish")
    h = _conv_bn(m, h, CHANNELS, CHANNELS, 5, 2, group=CHANNELS, act="HardSwish")
    m.output(_conv_bn(m, _squeeze_excite(m, h, CHANNELS), CHANNELS, 40, 1, act=None))
    return m.save(tmp_path_factory.mktemp("se") / "block.onnx", "block")


def _pool_and_writer(program):
    """The pool's level-1 DPU tasks and the depthwise layer's stores, by label."""
    pool_key = next(layer.key for layer in program.module.layers
                    if layer.key.startswith("globalaveragepool"))
    dw_key = next(layer.key for layer in program.module.layers
                  if layer.key.endswith("groupconvolution"))
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    level1 = {t.label for t in tasks if isinstance(t, DpuTask)
              and t.label.startswith(f"{pool_key}.l1.")}
    stores = {t.label for t in tasks if isinstance(t, DmaTask)
              and t.label.startswith(f"{dw_key}.store")}
    return level1, stores


def test_level_one_starts_before_the_depthwise_layer_ends(block):
    """Without streaming the pool's items read every row (channel chunks, or bands that
    wait on the layer's gate), so none starts before the last store ends."""
    program = api.compile(block)
    level1, stores = _pool_and_writer(program)
    assert len(level1) > 1 and stores
    sim = api.simulate(program, timing_only=True)
    plan, timeline = sim.result.plan, sim.result.timeline
    start = {plan.task[u].label: timeline.start[u] for u in range(plan.size)}
    end = {plan.task[u].label: timeline.end[u] for u in range(plan.size)}
    last_store = max(end[s] for s in stores)
    early = [t for t in level1 if start[t] < last_store]
    assert early, (sorted((start[t], t) for t in level1), last_store)


def test_every_layer_within_its_derived_bound(block):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 24, SIZE, SIZE)).astype(np.float16)
    layers_within_bounds(both_schedules(block, x, reference=True))
