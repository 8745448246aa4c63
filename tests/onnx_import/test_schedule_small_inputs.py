"""Full-width ResNet-18 at inputs other than 96x96 and 224x224 under ``--schedule default``:
it compiles and runs (timing only) without races.

The last stage's 3x3 convolutions are cut into 442 KB weight chunks, and a segment's
weights loaded early while the one before it ran sit around that one's buffers, so its
end leaves holes in each tile's CMX.  ``schedule.overlap`` once sized the next segment's
early loads by the running segment's bytes alone: at 32, 40, 48, 64, 128 and 160 two
chunks went early into a tile that held them by the sum but had no gap for the second
(allocate-cmx: "no 442368-byte gap"): at 40, 128 and 160 whether or not the DPU work
is balanced over the tiles (``LayerEmitter``'s ``balance``), at 32, 48 and 64 with it.
"""

from __future__ import annotations

import pytest

from vpuc import api
from vpuc.onnx_import.zoo import resnet18
from runtime_sim.bound_input import program_bound


@pytest.mark.parametrize("size", [32, 40, 48, 64, 128, 160])
def test_resnet18_compiles_and_runs_without_races(size, tmp_path):
    path = resnet18(size=size, seed=0).save(tmp_path / "r.onnx", "resnet18")
    program = api.compile(path, schedule="default")
    sim = api.simulate(program, timing_only=True)
    assert not sim.races
    bound = program_bound(sim.result.plan, sim.result.timeline)
    assert 0 < bound.cycles <= sim.cycles
