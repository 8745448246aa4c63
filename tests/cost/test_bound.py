"""The schedule-free lower bound (``vpuc/cost/bound.py``, ``runtime_sim/bound_input.py``):
its arithmetic, and on every example that no run ends under it."""

from __future__ import annotations

import json

import pytest

from tests.sim.simlib import REPO, run_cli
from vpuc.cost import DpuWorkload, dpu_cost, load_timing
from vpuc.cost.bound import LayerWork, ideal_dpu_cycles, network_bound
from vpuc.arch import DEFAULT_ARCH

EXAMPLES = sorted(p.name for p in (REPO / "examples").glob("*.vir"))
TIMING = load_timing(DEFAULT_ARCH)


@pytest.mark.parametrize("w", [
    DpuWorkload(op="conv", elem="f16", width=14, height=14, channels=64, in_channels=32,
                kernel=(3, 3)),
    DpuWorkload(op="conv", elem="u8", width=7, height=3, channels=17, in_channels=5),
    DpuWorkload(op="dwconv", elem="f16", width=9, height=9, channels=48, in_channels=48,
                kernel=(5, 5), stride=(2, 2)),
    DpuWorkload(op="maxpool", elem="f16", width=8, height=8, channels=16, in_channels=16,
                kernel=(2, 2), stride=(2, 2)),
    DpuWorkload(op="add", elem="f16", width=20, height=1, channels=33, in_channels=33),
])
def test_ideal_compute_is_the_unpadded_compute_term(w):
    """Never more than the cost model's compute term (which pads to the mode grid), and
    exactly MACs (input channels at least 16) over the rate for a dense op."""
    params = TIMING.dpu
    ideal = ideal_dpu_cycles(w, params)
    for mode in params.modes:
        assert ideal <= dpu_cost(w, params, mode).compute * (1 + 1e-12)
    if w.op == "conv":      # fewer than 16 input channels take 16 lanes (VPUNN, NPU2.7)
        lanes = max(w.in_channels, 16)
        macs = w.width * w.height * w.channels * lanes * w.kernel[0] * w.kernel[1]
        rate = params.dense_macs_per_cycle[w.elem] * params.dense_efficiency
        assert ideal == pytest.approx(macs / rate, rel=1e-12)


def test_network_bound_is_the_busiest_resource():
    layers = [LayerWork("a", dpu_cycles=800.0, ddr_bytes=100),       # compute: 800/2 = 400
              LayerWork("b", act_cycles=400.0, ddr_bytes=3000),      # DDR: 3000/10 = 300
              LayerWork("c", dpu_cycles=200.0, ddr_bytes=2000)]      # DDR: 200 > 100
    bound = network_bound(layers, dpus=2, shaves=4, ddr_bytes_per_cycle=10.0)
    assert [round(l.cycles, 9) for l in bound.layers] == [400.0, 300.0, 200.0]
    assert [l.limit for l in bound.layers] == ["compute", "ddr", "ddr"]
    assert bound.per_layer == pytest.approx(900.0)
    assert bound.engine_totals == pytest.approx({"DPU": 500.0, "ACT_SHAVE": 100.0, "DDR": 510.0})
    assert bound.busiest_engine == ("DDR", pytest.approx(510.0))
    assert bound.cycles == pytest.approx(510.0)


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_example_ends_under_its_bound(example, capsys, monkeypatch):
    code, stdout, err = run_cli(["run", f"examples/{example}", "--timing-only", "--json"],
                                capsys, monkeypatch)
    assert code == 0, err
    summary = json.loads(stdout)
    bound = summary["bound"]
    assert 0 < bound["cycles"] <= summary["cycles"]
    assert bound["cycles"] == max(bound["engine_totals"].values())
    assert bound["busiest_engine"]["cycles"] == bound["cycles"]
    assert bound["per_layer_cycles"] >= bound["cycles"] * (1 - 1e-9)
    assert bound["achieved_over_bound"] == pytest.approx(summary["cycles"] / bound["cycles"],
                                                         abs=1e-4)
