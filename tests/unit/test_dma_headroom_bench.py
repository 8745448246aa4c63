"""bench/dma_headroom.py: what-if timing models that each lift one DMA mechanism, and the
channels' use by kind of transfer, on the small MobileNetV3-Small of the schedule tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import dma_headroom as dh  # noqa: E402
from runtime_sim.report import track_stats  # noqa: E402
from runtime_sim.simarch import load_sim_arch  # noqa: E402
from vpuc import api  # noqa: E402


def test_each_variant_lifts_its_mechanism_only() -> None:
    arch = load_sim_arch("NPU37XX")
    same = dh.variant(arch, "shipped")
    assert same == arch
    lat = dh.variant(arch, "no DDR latency")
    assert lat.dma.ddr_read_latency == lat.dma.ddr_write_latency == arch.dma.cmx_latency
    assert lat.dma.engine_bytes_per_cycle == arch.dma.engine_bytes_per_cycle
    assert lat.ddr_bytes_per_cycle == arch.ddr_bytes_per_cycle
    shared = dh.variant(arch, "DDR not shared")
    assert shared.ddr_bytes_per_cycle == arch.ddr_bytes_per_cycle * arch.structure.dma_channels
    assert shared.dma == arch.dma
    rate = dh.variant(arch, "no rate limit")
    assert rate.dma.ddr_read_latency == arch.dma.ddr_read_latency
    assert rate.dma.cmx_bytes_per_cycle == arch.dma.cmx_bytes_per_cycle * dh.UNLIMITED
    ideal = dh.variant(arch, "ideal DMA")
    assert ideal.dma.ddr_read_latency == arch.dma.cmx_latency
    assert ideal.ddr_bytes_per_cycle == rate.ddr_bytes_per_cycle
    with pytest.raises(ValueError):
        dh.variant(arch, "no DMA")


@pytest.fixture(scope="module")
def small_mobilenet(tmp_path_factory):
    path = dh.SMALL["mobilenet_v3_small"]().save(
        tmp_path_factory.mktemp("m") / "m.onnx", "m")
    return api.compile(path, schedule="default")


def test_channel_use_matches_the_simulated_channels(small_mobilenet) -> None:
    """Per channel, as many transfers as the simulator ran on it, and the cost model's
    cycles alone on the DDR no more than its busy cycles (sharing the DDR, strided runs
    and permutes only slow a transfer down)."""
    arch = load_sim_arch("NPU37XX")
    use = dh.channel_use(small_mobilenet, arch)
    sim = api.simulate(small_mobilenet, timing_only=True)
    busy = {s.name: s for s in track_stats(sim.result.plan, sim.result.timeline)
            if s.name.startswith("DMA")}
    assert set(busy) == {f"DMA{c}" for c, _ in use}
    for name, stats in busy.items():
        mine = [u for (c, _), u in use.items() if f"DMA{c}" == name]
        assert sum(u["transfers"] for u in mine) == stats.units
        assert sum(u["cycles"] for u in mine) <= stats.busy * (1 + 1e-9)
    kinds = {k for _, k in use}
    assert {"DDR -> CMX", "CMX -> CMX"} <= kinds


def test_lifting_the_dma_costs_never_adds_cycles_here(small_mobilenet) -> None:
    """On this program each lifted mechanism saves cycles, and the ideal DMA saves at
    least what any one of the others does (the run is DMA-heavy: a variant that did not
    reach the simulator would leave its row equal to the shipped one)."""
    row = dh.measure("m", None, program=small_mobilenet)
    cycles = row["cycles"]
    for v in dh.VARIANTS[1:]:
        assert cycles[v] < cycles["shipped"], v
    assert cycles["ideal DMA"] <= min(cycles[v] for v in dh.VARIANTS[1:])
