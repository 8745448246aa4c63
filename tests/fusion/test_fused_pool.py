"""``fuse_pool``: a convolution's MaxPool successor runs on the convolution's output blocks
in CMX (ResNet's stem and its 3x3 stride-2 pool), the convolution's output never in DDR."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaTask, DpuOp, DpuTask
from vpuc.ir.symbols import SymbolTable
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn

# (input channels, size, stem channels): 3 channels fold the stem's width
# (``lower_dpu_fold_width``), 8 run it as a window convolution on the permuted input, as
# does a width of 70 (not a multiple of the fold's 4), whose 35 stem rows end in a block
# the pool pads below
CASES = [(3, 64, 16), (8, 40, 32), (3, 70, 16)]


def _stem_model(tmp_path, channels: int, size: int, width: int) -> tuple[str, dict]:
    m = ModelBuilder(3)
    x = m.input("input", [1, channels, size, size])
    y = _conv_bn(m, x, channels, width, 7, stride=2)
    y = m.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    m.output(_conv_bn(m, y, width, width, 3))
    path = m.save(tmp_path / "stem.onnx", "stem")
    rng = np.random.default_rng(11)
    return path, {"input": rng.standard_normal((1, channels, size, size)).astype(np.float32)}


# a budget for the layers' blocks that leaves values kept in CMX no room
# (``resident.resident_room``): the stem's output would go through DDR, as at 224 x 224
NO_ROOM = (2 << 20) - (64 << 10)


def _run(path, feeds, cmx_budget=NO_ROOM):
    program = api.compile(path, schedule="default", cmx_budget=cmx_budget)
    inputs = {b.name: feeds[b.name].astype(np.float16) for b in program.module.buffers
              if b.kind is BufferKind.INPUT}
    return program, next(iter(api.simulate(program, inputs).outputs.values()))


def _ddr_bytes(program) -> int:
    """Bytes the program's DMAs move to or from DDR."""
    symbols = SymbolTable(program.module)
    total = 0
    for tl in program.module.task_lists:
        for t in tl.tasks:
            if isinstance(t, DmaTask):
                regions = [symbols.region(t.src), symbols.region(t.dst)]
                total += sum(r.type.nbytes for r in regions if r.kind is not BufferKind.CMX)
    return total


@pytest.mark.parametrize("channels,size,width", CASES)
def test_the_stem_is_pooled_in_cmx_and_computes_the_same(tmp_path, monkeypatch, channels, size,
                                                         width):
    path, feeds = _stem_model(tmp_path, channels, size, width)
    fused, got = _run(path, feeds)
    labels = [t.label or "" for tl in fused.module.task_lists for t in tl.tasks]
    pools = [t for tl in fused.module.task_lists for t in tl.tasks
             if isinstance(t, DpuTask) and t.op is DpuOp.MAXPOOL]
    assert pools and all(".convolution.pool" in (t.label or "") for t in pools)
    assert not any(x.startswith("maxpool") for x in labels)       # no segment of its own
    # the stem's output (1 x width x size/2 x size/2) is no DDR buffer
    stem = (1, width, size // 2, size // 2)
    assert not [b for b in fused.module.buffers
                if b.kind is BufferKind.DDR and tuple(b.type.dims) == stem]

    import vpuc.fusion.fuse_epilogue as fuse_epilogue
    monkeypatch.setattr(fuse_epilogue, "pool_fusable", lambda *_: False)
    apart, want = _run(path, feeds)
    # the pool is a selection of the f16 values the convolution wrote: bit for bit the
    # same as pooling them after a trip through DDR (both lowerings fold the stem alike)
    assert any(".fold" in x for x in labels) == any(
        ".fold" in (t.label or "") for tl in apart.module.task_lists for t in tl.tasks)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    # the stem's output no longer goes to DDR and back
    saved = _ddr_bytes(apart) - _ddr_bytes(fused)
    assert saved >= 2 * np.prod(stem) * 2 * 0.9

    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    out = got.astype(np.float32).reshape(ref.shape)
    # f16 inputs and weights, two layers each rounding its output to f16 (2^-11 relative)
    # and the next summing 9 * width such values: within 16 f16 steps of the output's peak
    assert np.max(np.abs(out - ref)) <= 16 * 2.0 ** -10 * np.max(np.abs(ref))


def test_a_stem_output_that_fits_cmx_is_kept_there_not_pooled_on_its_blocks(tmp_path):
    """``fuse_pool.worth_fusing``: a value ``resident.py`` may keep in CMX is written and read
    there in place, which costs no copy: the pool stays a segment of its own."""
    path, feeds = _stem_model(tmp_path, *CASES[0])
    program, _ = _run(path, feeds, cmx_budget=None)
    labels = [t.label or "" for tl in program.module.task_lists for t in tl.tasks]
    assert not any(".convolution.pool" in x for x in labels)
    assert any(x.startswith("maxpool") for x in labels)
