"""A DPU task writing its output into the CMX of both tiles (``out(%y, %copy)``).

The NPU compiler's DUPLICATED|SEGMENTED output of a SplitOverKernel layer (npu_plugin,
tests/lit/NPU/dialect/VPUIP/passes/unroll_cluster_tiling_sok_37XX.mlir): each tile's DPU
computes its half of the output channels and writes it into both tiles' CMX.  The
simulator writes every destination, and both race analyses (the verifier's static one and
the simulator's online one) count the write into the other tile.
"""

from __future__ import annotations

import numpy as np
import pytest

from vpuc import api
from tests.sim.simlib import NO_VERIFY, REPO, compile_vir, run_cli
from tests.tolerances import assert_within_bound, stored_sum_bound

EXAMPLE = REPO / "examples" / "dpu_broadcast.vir"


def _run(path=EXAMPLE, **kwargs):
    x = np.random.default_rng(3).standard_normal((1, 16, 8, 8)).astype(np.float16)
    return x, api.simulate(api.compile(str(path)), {"in": x}, **kwargs)


def test_both_tiles_hold_the_whole_output_and_it_matches_numpy():
    x, sim = _run()
    w = np.load(REPO / "examples" / "conv_2tiles" / "weights_1x1.npy")[:, :, 0, 0]
    want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w.astype(np.float64))
    magnitude = np.einsum("nchw,oc->nohw", np.abs(x.astype(np.float64)),
                          np.abs(w.astype(np.float64)))
    out0, out1 = sim.outputs["out0"], sim.outputs["out1"]
    # each tile computed one half; the other half of its buffer is the other DPU's copy
    np.testing.assert_array_equal(out0, out1)
    assert_within_bound(out0, want, stored_sum_bound(out0, want, magnitude, 16,
                                                     np.float32, np.float16))
    assert not sim.races


def test_without_the_copy_the_other_half_is_never_written(tmp_path):
    """The copy is what fills tile 1's lower half: without it the run reads unwritten CMX."""
    text = EXAMPLE.read_text().replace("out(%y0_lo, %y1_lo)", "out(%y0_lo)")
    path = tmp_path / "no_copy.vir"
    path.write_text(text.replace('"conv_2tiles/', f'"{REPO}/examples/conv_2tiles/'))
    x, sim = _run(path)
    assert not np.array_equal(sim.outputs["out0"], sim.outputs["out1"])


def _store_waits_only_tile_1(tmp_path):
    """The store of tile 1's buffer waits on tile 1's DPU only: tile 0's copy races it."""
    text = EXAMPLE.read_text().replace('"conv_2tiles/', f'"{REPO}/examples/conv_2tiles/')
    text = text.replace("barrier %computed", "barrier %computed\nbarrier %hi_done")
    text = text.replace("dma %y1 -> %out1 channel 1 waits(%computed)",
                        "dma %y1 -> %out1 channel 1 waits(%hi_done)")
    text = text.replace("waits(%loaded1) updates(%computed)",
                        "waits(%loaded1) updates(%computed, %hi_done)")
    path = tmp_path / "race.vir"
    path.write_text(text)
    return path


def test_the_verifier_sees_the_copy_race_with_a_store(tmp_path, capsys, monkeypatch):
    code, _, err = run_cli(["opt", _store_waits_only_tile_1(tmp_path)], capsys, monkeypatch)
    assert code == 1
    assert "race on cmx %y1" in err and "note: lo.v0 is here" in err


def test_the_simulator_sees_the_copy_race_with_a_store(tmp_path):
    program = compile_vir(_store_waits_only_tile_1(tmp_path),
                          "allocate-cmx,assign-physical-barriers," + NO_VERIFY)
    from runtime_sim.simulator import simulate
    result = simulate(program, races=True)
    messages = [d.message for d in result.races]
    assert any("CMX of tile 1" in m and "lo" in m for m in messages), messages


@pytest.mark.parametrize("timing_only", [False, True])
def test_the_copy_costs_no_cycles(tmp_path, timing_only):
    """The ODU writes both destinations at its normal rate (docs/simulator.md): the
    program's cycles equal those of the same tasks without the copy."""
    plain = tmp_path / "plain.vir"
    plain.write_text(EXAMPLE.read_text().replace("out(%y0_lo, %y1_lo)", "out(%y0_lo)")
                     .replace("out(%y1_hi, %y0_hi)", "out(%y1_hi)")
                     .replace('"conv_2tiles/', f'"{REPO}/examples/conv_2tiles/'))
    with_copy = api.simulate(api.compile(str(EXAMPLE)), timing_only=timing_only)
    without = api.simulate(api.compile(str(plain)), timing_only=timing_only)
    assert with_copy.cycles == without.cycles
