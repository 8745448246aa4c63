"""A classifier's constant weights that fit a tile's CMX whole still stream under
``--schedule default`` (``lower_dpu_matmul.streams``): cut into column chunks of at most
one deep load (``schedule_prefetch.DEEP_LOAD_BYTES``), spread over the tiles, each block
computing beside the next chunk's load.  Whole, one tile's DPU fetched all of them after
the one load ended (ResNet-18's 512 x 1000 Gemm: 25,030 DPU cycles after a 44,537-cycle
load)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.fusion import lower_dpu_matmul
from vpuc.fusion.lower_dpu_matmul import streams
from vpuc.fusion.schedule_prefetch import DEEP_LOAD_BYTES
from vpuc.fusion.schedule_room import STREAMING_RATIO
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder, _classifier_head, _conv_bn


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A 1x1 convolution, then ResNet-18's classifier head: pool, flatten, Gemm 512 -> 1000
    (1 MB of f16 weights against a 1 KB row; the CMX budget holds them whole)."""
    m = ModelBuilder(seed=3)
    x = m.input("x", [1, 256, 4, 4])
    m.output(_classifier_head(m, _conv_bn(m, x, 256, 512, 1), 512, 1000))
    return m.save(tmp_path_factory.mktemp("head") / "head.onnx", "head")


def _weight_loads(program) -> list[tuple[int, int]]:
    """(tile, bytes) of each DMA from DDR constants into the Gemm's CMX buffers."""
    symbols = SymbolTable(program.module)
    out = []
    for tl in program.module.task_lists:
        for t in tl.tasks:
            if isinstance(t, DmaTask) and (t.label or "").startswith("gemm"):
                src, dst = symbols.region(t.src), symbols.region(t.dst)
                if src.kind is BufferKind.CONST and dst.type.nbytes > 64 << 10:
                    out.append((dst.root.tile, dst.type.nbytes))
    return out


def test_streams_needs_the_ratio_and_more_than_one_deep_load():
    row = 1024
    assert streams(STREAMING_RATIO * row * 32, row * 32)
    assert not streams(STREAMING_RATIO * row * 32 - 1, row * 32)       # a convolution's reuse
    assert not streams(DEEP_LOAD_BYTES, 1)                          # one deep load already


def test_classifier_weights_load_in_chunks_on_both_tiles(head):
    program = api.compile(head, schedule="default")
    loads = _weight_loads(program)
    assert len(loads) >= 2 and {tile for tile, _ in loads} == {0, 1}
    # each chunk's weights one deep load at most, its bias in one row of K after them
    # (lower_dpu_table: 128 columns' f16 bias fits one row of 512)
    assert all(nbytes <= DEEP_LOAD_BYTES + 512 * 2 for _, nbytes in loads)
    assert sum(nbytes for _, nbytes in loads) >= 1000 * 512 * 2
    gemm_tiles = {t.tile for tl in program.module.task_lists for t in tl.tasks
                  if isinstance(t, DpuTask) and (t.label or "").startswith("gemm")}
    assert gemm_tiles == {0, 1}
    # the one row of K: loaded once per tile, not with every chunk's block
    symbols = SymbolTable(program.module)
    rows = [symbols.region(t.dst).root.tile for tl in program.module.task_lists
            for t in tl.tasks if isinstance(t, DmaTask) and (t.label or "").startswith("gemm")
            and symbols.region(t.dst).type.dims == (1, 512)]
    assert sorted(rows) == [0, 1]


def test_chunked_classifier_is_faster_and_computes_the_same(head, monkeypatch):
    x = np.random.default_rng(5).standard_normal((1, 256, 4, 4)).astype(np.float32)
    chunked = api.simulate(api.compile(head, schedule="default"), {"x": x.astype(np.float16)})
    monkeypatch.setattr(lower_dpu_matmul, "streams", lambda *_: False)
    program = api.compile(head, schedule="default")
    assert len(_weight_loads(program)) == 1          # whole: the layout this change replaced
    whole = api.simulate(program, {"x": x.astype(np.float16)})
    assert chunked.cycles < whole.cycles
    want = ort.InferenceSession(head, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for sim in (chunked, whole):
        got = next(iter(sim.outputs.values())).astype(np.float32).reshape(want.shape)
        # f16 operands and products summed in f32 over K = 512 (the Gemm) and 256 (the
        # convolution): the whole-model tolerance of test_schedules.py
        assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))
