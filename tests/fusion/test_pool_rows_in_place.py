"""``fuse_pool`` after a window convolution (``lower_dpu_window``): each block of the
convolution writes its rows straight into the pool's input buffer, after the halo rows the
previous block leaves there (``PoolEpilogue.input_buffer``), so no block is copied CMX ->
CMX beside its halo (SqueezeNet's stem: 14 ``pool.cp`` copies of 1.58 MB, 66,309 cycles
on the store channel, gone; the stem's span 119,391 -> 102,387 cycles)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from tests.fusion.test_fused_pool import _run, _stem_model
from vpuc.fusion.fuse_pool import PoolEpilogue
from vpuc.ir.tasks import DmaTask, DpuOp, DpuTask

# 8 input channels: the stem runs as a window convolution on the permuted input
STEM = (8, 40, 32)


def _labels(program, kind) -> list[str]:
    return [t.label or "" for tl in program.module.task_lists for t in tl.tasks
            if isinstance(t, kind)]


def test_window_stem_writes_its_rows_into_the_pool_input(tmp_path, monkeypatch):
    path, feeds = _stem_model(tmp_path, *STEM)
    program, got = _run(path, feeds)
    dmas = _labels(program, DmaTask)
    pools = [t for tl in program.module.task_lists for t in tl.tasks
             if isinstance(t, DpuTask) and t.op is DpuOp.MAXPOOL]
    assert pools and all(".convolution.pool" in (t.label or "") for t in pools)
    assert not any(".pool.cp" in x for x in dmas)          # no block copied
    assert any(".pool.halo" in x for x in dmas)            # only the halo rows are
    assert not any(".fold" in x for x in dmas + _labels(program, DpuTask))

    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    out = got.astype(np.float32).reshape(ref.shape)
    # as test_fused_pool: two layers each rounding to f16, the next summing 9 * width of
    # them: within 16 f16 steps of the output's peak
    assert np.max(np.abs(out - ref)) <= 16 * 2.0 ** -10 * np.max(np.abs(ref))

    # with the copies back (the same blocks): one more DMA a block, on the store channel
    monkeypatch.setattr(PoolEpilogue, "rows_in_place", False)
    copied, again = _run(path, feeds)
    copies = [x for x in _labels(copied, DmaTask) if ".pool.cp" in x]
    stem = pools[0].label.split(".pool")[0] + ".c"      # the stem's convolution blocks
    blocks = [x for x in _labels(program, DpuTask) if x.startswith(stem)]
    assert len(copies) == len(blocks) == len(
        [x for x in _labels(copied, DpuTask) if x.startswith(stem)])
    assert len(_labels(copied, DmaTask)) == len(dmas) + len(copies)
    np.testing.assert_array_equal(got, again)       # the same sums, pooled alike
