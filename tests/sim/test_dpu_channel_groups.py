"""A DPU task's variants that differ only in their channels, computed in one call
(``engines.dpu.channel_groups`` / ``DpuRunner``): bit-identical to each variant alone,
and kept apart wherever running a variant early or together could differ."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.simulator import simulate
from tests.sim.simlib import DATA, compile_vir


@pytest.fixture(scope="module")
def program():
    return compile_vir(DATA / "channel_groups.vir")


def _groups(program) -> dict[str, dict[int, tuple[int, ...]]]:
    """Each DPU task's groups, as the simulator forms them."""
    result = simulate(program, seed=3)
    plan, memory = result.plan, result.network.memory
    found = {}
    for u in range(plan.size):
        task = plan.task[u]
        if plan.kind[u] == 1 and task.label not in found:
            found[task.label] = dpu_engine.channel_groups(task, plan.dpu_regions(u), memory)
    return found


def _run(program, monkeypatch, wanted: bool):
    calls = []
    real_init, real_variants = dpu_engine.DpuRunner.__init__, dpu_engine.run_variants

    def init(self, plan, memory, together=None, recorded=frozenset()):
        assert together              # races proven, no max_cycles: the run asks for it
        real_init(self, plan, memory, wanted, recorded)

    def variants(task, group, regions, memory):
        calls.append((task.label, group))
        real_variants(task, group, regions, memory)

    with monkeypatch.context() as patch:
        patch.setattr(dpu_engine.DpuRunner, "__init__", init)
        patch.setattr(dpu_engine, "run_variants", variants)
        result = simulate(program, seed=3)
    return result, calls


def test_variants_together_are_bit_identical_to_each_alone(program, monkeypatch):
    alone, none = _run(program, monkeypatch, wanted=False)
    together, calls = _run(program, monkeypatch, wanted=True)
    assert none == []
    # dwconv: a+c (rows 0-5) and b+d (rows 6-11); mul, avgpool and maxpool: both variants
    assert sorted(calls) == [("avgpool", (0, 1)), ("dwconv", (0, 2)), ("dwconv", (1, 3)),
                             ("maxpool", (0, 1)), ("mul", (0, 1))]
    assert together.cycles == alone.cycles
    assert not together.races
    for name, value in alone.outputs.items():
        assert together.outputs[name].dtype == value.dtype
        np.testing.assert_array_equal(together.outputs[name].view(np.uint16),
                                      value.view(np.uint16), err_msg=name)
    for key, array in alone.network.memory.arrays.items():
        np.testing.assert_array_equal(together.network.memory.arrays[key], array,
                                      err_msg=str(key))


def test_what_is_kept_apart(program):
    groups = _groups(program)
    assert groups["dwconv"] == {0: (0, 2), 2: (0, 2), 1: (1, 3), 3: (1, 3)}
    assert groups["gap"] == {}          # a global pool: one numpy reduce, its own order
    assert groups["twice"] == {}        # its output is its input


def test_a_variant_with_waits_of_its_own_or_a_gap_between_channels(program):
    result = simulate(program, seed=3)
    plan, memory = result.plan, result.network.memory
    u = next(u for u in range(plan.size) if plan.kind[u] == 1 and plan.task[u].label == "mul")
    task, regions = plan.task[u], plan.dpu_regions(u)
    assert dpu_engine.channel_groups(task, regions, memory) == {0: (0, 1), 1: (0, 1)}
    import copy
    waiting = copy.deepcopy(task)
    waiting.variants[1].waits = ("in0",)
    assert dpu_engine.channel_groups(waiting, regions, memory) == {}
    gap = copy.deepcopy(task)
    gap.variants[1].start = (0, 0, 17)
    assert dpu_engine.channel_groups(gap, regions, memory) == {}


def test_not_together_when_races_are_not_proven_or_the_run_may_stop(program, monkeypatch):
    asked = []
    real_init = dpu_engine.DpuRunner.__init__

    def init(self, plan, memory, together=None, recorded=frozenset()):
        asked.append(together)
        real_init(self, plan, memory, together, recorded)

    monkeypatch.setattr(dpu_engine.DpuRunner, "__init__", init)
    simulate(program, seed=3, races=False)
    simulate(program, seed=3, max_cycles=1e9)
    simulate(program, seed=3)
    assert asked == [False, False, True]
