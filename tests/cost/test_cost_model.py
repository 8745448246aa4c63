"""The cost model's mechanisms worked out by hand, and execution modes end to end
(VIR -> compile -> both blob formats -> simulator)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from runtime_sim.simarch import load_sim_arch
from runtime_sim.simulator import simulate
from vpuc.arch import load_arch
from vpuc.blob import read_blob, write_blob
from vpuc.cost import (MODE_NAMES, DpuWorkload, choose_mode, dpu_cost, load_timing,
                       transfer_cost, transfer_cycles)
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text

REPO = Path(__file__).resolve().parents[2]
MODES_VIR = REPO / "tests" / "golden" / "roundtrip" / "dpu_modes.vir"


@pytest.fixture(scope="module")
def timing():
    return load_timing("NPU37XX")


def test_every_mode_pads_to_its_grid_and_cuts_into_its_blocks(timing):
    modes = timing.dpu.modes
    assert set(modes) == set(MODE_NAMES)
    assert modes["CUBOID_16x16"].padded(1, 1, 1) == 4 * 4 * 16
    assert modes["CUBOID_8x16"].padded(5, 3, 33) == 8 * 4 * 64
    assert modes["CUBOID_4x16"].padded(3, 3, 65) == 4 * 4 * 128
    assert modes["CUBOID_16x16"].blocks(17, 16, 65) == (2, 2)
    for m in modes.values():                # every block is 16384 outputs
        assert math.prod(m.block) == 16384


def test_dense_terms_follow_their_formulas(timing):
    d = timing.dpu
    w = DpuWorkload(op="conv", elem="f16", width=14, height=1, channels=40, in_channels=32,
                    kernel=(3, 3), mode="CUBOID_16x16")
    cost = dpu_cost(w, d)
    padded = 16 * 4 * 48                     # W 14 -> 16, H 1 -> 4, C 40 -> 48
    assert cost.compute == pytest.approx(padded * 32 * 9 / (1024 * d.dense_efficiency))
    assert cost.activation == pytest.approx(16 * 3 * 32 * 2 / d.activation_bytes_per_cycle)
    assert cost.weights == pytest.approx((40 * 32 * 9 * 2 + 16 * 40) / d.weight_bytes_per_cycle)
    assert cost.output == pytest.approx(14 * 40 * 2 / d.output_bytes_per_cycle)
    p = d.overlap
    streaming = sum(t ** p for t in (cost.compute, cost.activation, cost.weights,
                                     cost.output)) ** (1 / p)
    assert cost.cycles == pytest.approx(d.setup["dense"] + streaming)
    # the p-norm lies between the roofline max and the plain sum
    assert max(cost.compute, cost.weights) < streaming < (cost.compute + cost.activation
                                                           + cost.weights + cost.output)


def test_eltwise_reads_two_inputs_and_int8_doubles_the_window_rates(timing):
    d = timing.dpu
    f16 = DpuWorkload(op="add", elem="f16", width=16, height=16, channels=64, in_channels=64)
    u8 = replace(f16, elem="u8", in_bytes=1, out_bytes=1)
    assert dpu_cost(f16, d).compute == pytest.approx(16 * 16 * 64 / d.rates["eltwise"])
    assert dpu_cost(u8, d).compute == pytest.approx(dpu_cost(f16, d).compute / 2)
    assert dpu_cost(f16, d).activation == pytest.approx(2 * 16 * 16 * 64 * 2
                                                        / d.activation_bytes_per_cycle)


def test_the_chosen_mode_is_the_cheapest_and_a_pin_wins(timing):
    d = timing.dpu
    w = DpuWorkload(op="conv", elem="f16", width=2, height=2, channels=256, in_channels=64)
    best = choose_mode(w, d)
    assert dpu_cost(w, d, best).cycles == min(dpu_cost(w, d, m).cycles for m in MODE_NAMES)
    assert best != "CUBOID_16x16"           # 2x2 outputs waste 3/4 of a 4x4 grid
    assert choose_mode(replace(w, mode="CUBOID_16x16"), d) == "CUBOID_16x16"


def test_dma_latency_depends_on_direction(timing):
    m = timing.dma
    read = transfer_cost(False, 4096, 2, True, 4096, False, m)     # DDR -> CMX
    write = transfer_cost(False, 4096, 2, False, 4096, True, m)    # CMX -> DDR
    assert read.setup == m.ddr_read_latency and write.setup == m.ddr_write_latency
    assert transfer_cycles(read, timing.ddr_bytes_per_cycle) == pytest.approx(
        m.ddr_read_latency + 4096 / m.engine_bytes_per_cycle)
    permute = transfer_cost(True, 4096, 2, False, 4096, False, m)
    assert permute.cap == pytest.approx(2 * m.permute_elements_per_cycle)
    strided = transfer_cost(False, 4096, 2, False, 4096, False, m, run_bytes=8)
    assert strided.nbytes == 4096 // 8 * m.burst_bytes


def _compiled(text: str):
    module = parse_text(text, "<modes>")
    ctx = PassContext(load_arch(module.arch))
    PassManager(parse_pipeline("compile")).run(module, ctx)
    return ctx.artifacts["program"]


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_modes_survive_both_blob_formats(fmt):
    program = _compiled(MODES_VIR.read_text())
    again = read_blob(write_blob(program, fmt, {"pipeline": "compile", "arch": "NPU37XX"}),
                      f"modes.{fmt}").module
    tasks = [t for tl in again.task_lists for t in tl.tasks]
    assert [t.mode for t in tasks] == ["CUBOID_8x16", None]
    assert [[v.mode for v in t.variants] for t in tasks] == [["CUBOID_4x16", None],
                                                             ["CUBOID_16x16"]]


def test_the_simulator_charges_the_pinned_mode():
    base = MODES_VIR.read_text()
    arch = load_sim_arch("NPU37XX")
    cycles = {}
    for mode in MODE_NAMES:
        text = base.replace("mode(CUBOID_4x16)", f"mode({mode})")
        result = simulate(_compiled(text), arch, timing_only=True, races=False)
        top = result.plan.names.index("c.top")
        cycles[mode] = result.timeline.end[top] - result.timeline.start[top]
    # conv 8x4 outputs x 32 channels, 16 in x 3x3: each mode pads it differently
    w = DpuWorkload(op="conv", elem="f16", width=8, height=4, channels=32, in_channels=16,
                    kernel=(3, 3))
    for mode, value in cycles.items():
        expected = math.ceil(dpu_cost(w, arch.dpu, mode).cycles) + arch.dispatch["DPU"]
        assert value == pytest.approx(expected)
    assert len(set(cycles.values())) > 1
