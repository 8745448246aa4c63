"""Cycle counts worked out by hand, on tests/sim/data/round.toml.

The round model: every clock 1000 MHz; DDR 16 B/cycle with 100 cycles of latency
(read and write);
CMX 10 cycles of latency; the DMA engine moves 32 B/cycle, a permute one element
per cycle; dispatch costs 4 (DMA), 8 (DPU variant) and 20 (ACT SHAVE) cycles; the
DPU does 1024 f16 MACs/cycle on a 4x4x16 grid (CUBOID_16x16), plus 32 cycles of setup per
variant; its fetch and write bandwidths are too large to count.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.simarch import load_sim_arch
from runtime_sim.simulator import simulate
from tests.sim.simlib import DATA, NO_VERIFY, ROUND, compile_vir, run_round, times


def test_one_dma_costs_dispatch_setup_and_bytes_over_ddr_bandwidth():
    # 8192 bytes from DDR: 4 dispatch + 100 DDR latency + 8192 / 16.
    assert times(run_round("one_dma")) == {"load": (0, 4 + 100 + 8192 / 16)}


def test_two_concurrent_dmas_share_ddr_and_are_retimed_when_one_ends():
    # Both move data from cycle 104 at 8 B/cycle each; load_a's 1600 bytes end at
    # 104 + 200 = 304; load_b then has 1600 bytes left at the full 16 B/cycle: 404.
    assert times(run_round("two_dmas")) == {"load_a": (0, 304), "load_b": (0, 404)}


def test_cmx_copy_runs_at_the_engine_rate_and_a_permute_one_element_per_cycle():
    result = times(run_round("cmx_dmas"))
    assert result["copy"] == (0, 4 + 10 + 4096 / 32)
    assert result["permute"] == (142, 142 + 4 + 10 + 4096 / 2)   # 2 bytes per f16 element


def test_dpu_conv_cycles_are_macs_over_rate_over_grid_efficiency_plus_overhead():
    result = run_round("one_conv")
    # top: 10 rows x 16 cols x 32 channels, 144 MACs each = 737280 MACs = 720 cycles at
    # 1024/cycle.  Unpinned, each variant runs in its cheapest mode: CUBOID_16x16 pads the
    # 10 rows to 12 (864 cycles), CUBOID_8x16's 4x2x32 grid fits 10 rows and 32 channels
    # exactly: 720.  bottom: 6 rows, 432 cycles, exact in CUBOID_8x16 too.
    assert times(result) == {"conv.top": (0, 8 + 720 + 32),
                             "conv.bottom": (760, 760 + 8 + 432 + 32)}
    assert result.plan.macs == [737280, 442368]


def test_a_pinned_mode_pads_to_its_grid(tmp_path):
    path = tmp_path / "one_conv_16x16.vir"
    path.write_text((DATA / "one_conv.vir").read_text().replace(") {", ") mode(CUBOID_16x16) {", 1))
    result = simulate(compile_vir(path), load_sim_arch(str(ROUND)))
    # the 4x4x16 grid pads top's 10 rows to 12 (864) and bottom's 6 to 8 (576)
    assert times(result) == {"conv.top": (0, 8 + 864 + 32),
                             "conv.bottom": (904, 904 + 8 + 576 + 32)}


def test_shave_kernel_cycles_come_from_the_interpreter():
    # docs/shave-isa.md works this kernel out at 5 cycles; plus 20 for dispatch.
    assert times(run_round("one_kernel")) == {"five": (0, 25)}


def test_two_stage_pipeline_overlaps_the_add_of_block_0_with_the_load_of_block_1():
    result = times(run_round("pipeline"))
    load = 4 + 100 + 2048 / 16              # 232
    add = 8 + 1024 / 64 + 32                # 56: eltwise runs 64 elements per cycle
    assert result == {"load0": (0, load), "load1": (load, 2 * load),
                      "add0.v0": (load, load + add), "add1.v0": (2 * load, 2 * load + add)}


def test_a_physical_barrier_is_reprogrammed_only_when_its_consumers_are_done():
    result = times(run_round("physical_reuse", NO_VERIFY))
    # use_second could start at 0; %second shares physical barrier 0 with %first, whose
    # consumer ends at 112 + 18 (a 128-byte CMX -> CMX copy: 4 + 10 + 128 / 32).
    assert result["consume_first"] == (112, 130)
    assert result["use_second"][0] == 130


def test_the_default_model_converts_every_clock_to_nce_cycles():
    arch = load_sim_arch("NPU37XX")
    assert arch.nce_mhz == 1300
    assert arch.ddr_bytes_per_cycle == 31200 / 1300           # 31.2 GB/s at 1.3 GHz
    assert arch.dma.engine_bytes_per_cycle == 32 * 975 / 1300  # 32 B per DMA (975 MHz) cycle
    assert arch.shave_cycle == 1300 / 975
    read = arch.dma.ddr_read_latency                          # fitted, in NCE cycles
    result = run_round("one_dma")  # and the same program on it:
    real = compile_vir(DATA / "one_dma.vir")
    from runtime_sim.simulator import simulate
    end = simulate(real, arch).timeline.end[0]
    assert abs(end - (16 * 1300 / 975 + read + 8192 / (32 * 975 / 1300))) < 1e-6
    assert result.timeline.end[0] == 616


def test_runs_are_deterministic():
    first, second = run_round("pipeline", seed=3), run_round("pipeline", seed=3)
    assert first.timeline.start == second.timeline.start
    assert first.timeline.end == second.timeline.end
    for name in first.outputs:
        assert np.array_equal(first.outputs[name], second.outputs[name])


def test_plan_units_are_numbered_as_the_schedule_numbers_them():
    # The race detector asks the schedule's happens-before about plan units by index.
    plan = run_round("dpu_ops", timing_only=True).plan
    units = plan.schedule.units
    assert [u.name for u in units] == plan.names
    assert [plan.queue_keys[plan.queue_of[u.index]] for u in units] == \
        [plan.schedule.queues[u.queue].key for u in units]
