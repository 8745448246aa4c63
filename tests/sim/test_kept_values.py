"""``Network.kept`` recorded lazily (``runtime_sim/kept_values.py``) and DPU variants run
together (``engines.dpu.DpuRunner``) leave every kept value, memory byte and output as
recording after every write (DMA, DPU in place, ACT SHAVE) and one variant at a time did,
on a model whose values stay resident in CMX."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim import kept_values
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.network import Network
from runtime_sim.simulator import simulate
from vpuc.api import compile
from vpuc.onnx_import.zoo import mobilenet_v3_small


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("kept") / "m.onnx"
    return compile(mobilenet_v3_small(size=32, classes=10).save(path, "m"))


def _bytes(value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(value).view(np.uint8)


class Eager(kept_values.KeptValues):
    """Every kept buffer recorded as soon as the unit that wrote it is done: before the
    next unit starts (run with ACT SHAVE numerics at their task's start), and at the end."""

    def before_write(self, region) -> None:
        self.finish()

    def before_ranges(self, key, ranges, own) -> None:
        self.finish()


def _run(program, monkeypatch, lazy: bool):
    counts = {"keep": 0, "together": 0}
    real_keep, real_init = Network.keep, dpu_engine.DpuRunner.__init__
    real_variants = dpu_engine.run_variants

    def keep(self, name):
        counts["keep"] += 1
        real_keep(self, name)

    def init(self, plan, memory, together=False, recorded=frozenset()):
        real_init(self, plan, memory, together and lazy, recorded)

    def variants(*args):
        counts["together"] += 1
        real_variants(*args)

    with monkeypatch.context() as patch:
        patch.setattr(Network, "keep", keep)
        patch.setattr(dpu_engine.DpuRunner, "__init__", init)
        patch.setattr(dpu_engine, "run_variants", variants)
        if not lazy:
            patch.setattr(kept_values, "KeptValues", Eager)
            import runtime_sim.simulator as simulator
            patch.setattr(simulator, "KeptValues", Eager)
        result = simulate(program, seed=5, defer_act=lazy)
    return result, counts


def test_lazy_records_and_variants_together_change_no_byte(program, monkeypatch):
    before, eager = _run(program, monkeypatch, lazy=False)
    after, lazy = _run(program, monkeypatch, lazy=True)
    assert eager["together"] == 0 and lazy["together"] > 0
    assert 0 < lazy["keep"] < eager["keep"]          # fewer copies, each still made
    assert after.cycles == before.cycles
    kept_before, kept_after = before.network.kept, after.network.kept
    assert kept_before and set(kept_after) == set(kept_before)
    for name, value in kept_before.items():
        assert kept_after[name].shape == value.shape
        np.testing.assert_array_equal(_bytes(kept_after[name]), _bytes(value), err_msg=name)
    for key, array in before.network.memory.arrays.items():
        np.testing.assert_array_equal(after.network.memory.arrays[key], array, err_msg=str(key))
    for name, value in before.outputs.items():
        np.testing.assert_array_equal(_bytes(after.outputs[name]), _bytes(value))


def test_a_dpu_writing_a_kept_buffer_runs_its_variants_one_at_a_time(program):
    result = simulate(program, seed=5)
    plan, memory = result.plan, result.network.memory
    kept = frozenset(result.network.kept)
    writers = [u for u in range(plan.size) if plan.kind[u] == 1
               and plan.dpu_regions(u)["out"].root.name in kept
               and dpu_engine.channel_groups(plan.task[u], plan.dpu_regions(u), memory)]
    assert writers          # the model has such tasks, whose variants would join otherwise
    for u in writers:
        assert dpu_engine.channel_groups(plan.task[u], plan.dpu_regions(u), memory, kept) == {}


def test_an_act_task_writing_a_kept_buffer_in_place_leaves_it_pending():
    """The rules on their own (no model here has an ACT SHAVE kernel writing a kept value
    in place): an ACT task's own outputs are marked pending, not recorded; one writing
    other bytes over a pending buffer records it first; a DMA or DPU write to the buffer
    itself records nothing."""
    from types import SimpleNamespace

    spans = {"x": (("cmx", 0), 0, 64), "y": (("cmx", 0), 32, 96), "z": (("cmx", 1), 0, 64)}
    regions = {name: SimpleNamespace(root=SimpleNamespace(name=name)) for name in spans}
    recorded = []
    network = SimpleNamespace(keep=recorded.append,
                              symbols=SimpleNamespace(region=regions.__getitem__))
    memory = SimpleNamespace(span=lambda region: spans[region.root.name])
    kept = kept_values.KeptValues(network, memory, {"x", "z"})
    kept.before_ranges(("cmx", 0), [(0, 64)], {"x"})      # x's ACT producer starts
    kept.written(regions["x"])
    kept.before_write(regions["x"])                        # a DMA stores more rows of x
    kept.written(regions["x"])
    kept.before_ranges(("cmx", 0), [(0, 64)], {"x"})      # another ACT writing x
    assert recorded == [] and set(kept.pending) == {"x"}
    kept.written(regions["z"])
    kept.before_ranges(("cmx", 0), [(48, 80)], {"y"})     # y's ACT over x's last bytes
    assert recorded == ["x"] and set(kept.pending) == {"z"}
    kept.before_write(regions["y"])                        # other memory than z's
    kept.finish()
    assert recorded == ["x", "z"] and not kept.pending
