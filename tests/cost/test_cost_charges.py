"""The simulator's charges are the cost model's named functions: each worked out by
hand, and a run's DMA and ACT SHAVE task times equal what those functions give."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from runtime_sim.plan import ACT, DMA, DPU
from runtime_sim.simarch import load_sim_arch
from runtime_sim.simulator import simulate
from vpuc.api import compile as compile_program
from vpuc.cost import (DpuWorkload, act_invocation_end, act_shave_budget, choose_mode,
                       dma_data_start, dma_task_cycles, dpu_cost, dpu_variant_cycles,
                       load_timing, transfer_cost, transfer_cycles)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def timing():
    return load_timing("NPU37XX")


def test_dma_charges_add_dispatch_and_setup(timing):
    t = transfer_cost(False, 4096, 2, True, 4096, False, timing.dma)
    dispatch = timing.dispatch["DMA"]
    assert dma_data_start(100.0, t, dispatch) == 100.0 + dispatch + t.setup
    assert dma_task_cycles(t, dispatch, timing.ddr_bytes_per_cycle) == pytest.approx(
        dispatch + t.setup + 4096 / min(t.cap, timing.ddr_bytes_per_cycle), rel=1e-12)
    assert dma_task_cycles(t, dispatch, timing.ddr_bytes_per_cycle) == \
        dispatch + transfer_cycles(t, timing.ddr_bytes_per_cycle)


def test_act_budget_is_the_inverse_of_the_invocation_end(timing):
    ratio, dispatch = timing.shave_cycle, timing.dispatch["ACT_SHAVE"]
    assert act_invocation_end(50.0, 1000, ratio, dispatch) == 50.0 + dispatch + 1000 * ratio
    budget = act_shave_budget(50.0, 10_000.0, ratio, dispatch)
    assert act_invocation_end(50.0, budget, ratio, dispatch) == pytest.approx(10_000.0)
    assert act_shave_budget(50.0, None, ratio, dispatch) is None


def test_a_variant_occupies_its_dpu_for_dispatch_plus_its_rounded_cost(timing):
    w = DpuWorkload("conv", "f16", 14, 7, 64, 32, kernel=(3, 3))
    cost = dpu_cost(w, timing.dpu, choose_mode(w, timing.dpu))
    dispatch = timing.dispatch["DPU"]
    assert dpu_variant_cycles(w, timing.dpu, dispatch) == dispatch + math.ceil(cost.cycles)


def test_a_run_charges_what_the_cost_functions_say():
    """conv_2tiles has DMAs, DPU variants; the ACT example has SHAVE tasks.  A unit's
    time on its engine is the cost functions' answer (a DMA alone on DDR at its start)."""
    arch = load_sim_arch("NPU37XX")
    for example in ("conv_2tiles.vir", "double_buffer.vir"):
        program = compile_program(REPO / "examples" / example)
        result = simulate(program, arch, timing_only=True)
        plan, tl = result.plan, result.timeline
        kinds = set()
        for u in range(plan.size):
            kinds.add(plan.kind[u])
            took = tl.end[u] - tl.start[u]
            if plan.kind[u] == DPU:
                assert took == plan.work[u][0]
            elif plan.kind[u] == ACT:    # dispatch plus whole interpreter cycles, converted
                shave_cycles = (took - arch.dispatch["ACT_SHAVE"]) / arch.shave_cycle
                assert shave_cycles > 0 and abs(shave_cycles - round(shave_cycles)) < 1e-6
            else:
                assert took >= dma_task_cycles(plan.work[u], arch.dispatch["DMA"],
                                               arch.ddr_bytes_per_cycle) - 1e-6
        assert DMA in kinds and (DPU in kinds or ACT in kinds)
