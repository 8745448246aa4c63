"""The NCE permute (``dpu permute``): its values are its input's, bit for bit, in the
output's dims order, its extra channels zero; variants tile it; the simulator runs it
from a hand-written task between NCHW and NHWC buffers in CMX."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.dpu import Variant, permute, split_output
from vpuc import api
from vpuc.diagnostics import VpucError


def _f16(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def test_permute_is_the_input_with_zero_channels():
    x = _f16((2, 3, 5, 7), 0)
    x[0, 1, 2, 3] = -0.0                       # the sign of zero survives (no arithmetic)
    got = permute(x, 4)
    assert got.dtype == np.float16 and got.shape == (2, 4, 5, 7)
    assert np.array_equal(got[:, :3].view(np.uint16), x.view(np.uint16))
    assert not got[:, 3].any()


def test_permute_variants_tile_the_output():
    x = _f16((1, 5, 6, 9), 1)
    whole = permute(x, 16)
    out = np.full((1, 16, 6, 9), np.nan, np.float16)
    for v in split_output(out.shape, parts_x=3, parts_y=2, parts_z=2):
        v.store(out, permute(x, 16, variant=v))
    assert np.array_equal(out.view(np.uint16), whole.view(np.uint16))
    # a variant of the padding channels only writes zeros
    v = Variant(0, 0, 8, 8, 5, 15)
    assert not permute(x, 16, variant=v).any()


def test_permute_never_drops_channels():
    with pytest.raises(VpucError, match="drops channels"):
        permute(_f16((1, 5, 2, 2), 2), 4)


PROGRAM = """module @p arch NPU37XX
input %x : 1x3x6x10xf16 NCHW
output %y : 1x4x6x10xf16 NHWC
cmx %a : 1x3x6x10xf16 NCHW tile 0
cmx %b : 1x4x6x10xf16 NHWC tile 0
barrier %in
barrier %done
tasks DMA {
  dma %x -> %a updates(%in)
  dma %b -> %y waits(%done)
}
tasks DPU {
  dpu permute on tile 0 in(%a) out(%b) waits(%in) updates(%done) {
    variant start(0, 0, 0) end(9, 2, 3)
    variant start(0, 3, 0) end(9, 5, 3)
  }
}
"""


def test_simulated_permute_writes_nhwc_bytes():
    """Two variants write the NHWC buffer whose bytes are x's transposed, channel 3 zero;
    the DPU task costs as the eltwise workload (vpuc/cost/dpu.py, permute_workload)."""
    x = _f16((1, 3, 6, 10), 3)
    program = api.compile_text(PROGRAM, "p.vir")
    run = api.simulate(program, {"x": x})
    y = run.outputs["y"]
    expected = np.concatenate([x, np.zeros((1, 1, 6, 10), np.float16)], axis=1)
    assert np.array_equal(np.asarray(y).view(np.uint16), expected.view(np.uint16))
