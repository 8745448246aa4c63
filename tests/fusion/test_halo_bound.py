"""A 3x3 on its producer's blocks only where the pair's busiest engine ends sooner fused
(``vpuc/fusion/halo_bound.py``, ``--schedule default``): VGG-19's first layers at 224 x
224, conv1_1 -> conv1_2 (64 channels), pool1 -> conv2_1 (64 -> 128 channels at 112 x
112).  conv1_2 fused runs short blocks whose DPU work the DMA it saves does not repay
(the pair is DPU-bound apart); conv2_1 fused spares a DMA-bound pair its DDR round trip.
The decisions are checked against the simulator: the program the rule makes ends sooner
than with both fused (the rule before ``halo_bound``) and than with neither."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.fusion import fuse_halo_conv, lower_graph_segments
from vpuc.fusion.halo_bound import block_rows, row_bytes, window_dpu_cycles
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.onnx_import.zoo import ModelBuilder

SIZE = 224


def _model(tmp_path):
    """conv1_1, conv1_2, pool1, conv2_1, conv2_2 of VGG-19 (3x3 convolutions with Relu, a
    2x2 max pool), seeded weights."""
    m = ModelBuilder(seed=3, opset=13)
    rng = np.random.default_rng(4)
    x = m.input("x", [1, 3, SIZE, SIZE])

    def conv(v: str, c: int, o: int) -> str:
        w = (rng.standard_normal((o, c, 3, 3)) * np.sqrt(2.0 / (9 * c))).astype(np.float32)
        b = (rng.standard_normal(o) * 0.1).astype(np.float32)
        return m.node("Relu", [m.node("Conv", [v, m.init(w, "w"), m.init(b, "b")],
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    y = conv(conv(x, 3, 64), 64, 64)
    y = m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    m.output(conv(conv(y, 64, 128), 128, 128))
    return m.save(tmp_path / "vgg.onnx", "vgg")


def _run(path, monkeypatch, decide):
    """The model compiled with ``decide(rule's answer)`` for each 3x3 the rule is asked
    about, simulated timing-only: (cycles, the program, [(producer kind, rule's answer)])."""
    from vpuc import api
    asked = []
    rule = fuse_halo_conv.halo_cheaper

    def recorded(first, layer, index, budget, timing, tiles):
        answer = rule(first, layer, index, budget, timing, tiles)
        asked.append((first.op.kind, answer))
        return decide(answer)
    with monkeypatch.context() as patch:
        patch.setattr(lower_graph_segments, "halo_cheaper", recorded)
        program = api.compile(path, schedule="default")
    return api.simulate(program, timing_only=True).cycles, program, asked


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = _model(tmp_path_factory.mktemp("vgg"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        return {name: _run(path, monkeypatch, decide) for name, decide in (
            ("rule", lambda answer: answer), ("fused", lambda answer: True),
            ("apart", lambda answer: False))}


def _ddr_written(program) -> list[tuple]:
    """The dims of the DDR buffers the program's DMAs write."""
    symbols = SymbolTable(program.module)
    return [tuple(region.root.type.dims) for task_list in program.module.task_lists
            for task in task_list.tasks if isinstance(task, DmaTask)
            and (region := symbols.region(task.dst)) is not None
            and region.kind is BufferKind.DDR]


def test_conv1_2_apart_conv2_1_fused(runs):
    """The rule keeps the 224 x 224 pair apart (conv1_1's output goes to DDR) and fuses
    pool1's 3x3 (the pooled value never does)."""
    _, program, asked = runs["rule"]
    assert sorted(set(asked)) == [("Convolution", False), ("MaxPool", True)]
    written = _ddr_written(program)
    assert (1, 64, SIZE, SIZE) in written
    assert (1, 64, SIZE // 2, SIZE // 2) not in written


def test_the_rule_ends_sooner_than_both_fused_or_neither(runs):
    """Simulated cycles (deterministic): the rule's program against the two others."""
    cycles = {name: run[0] for name, run in runs.items()}
    assert cycles["rule"] < cycles["fused"]
    assert cycles["rule"] < cycles["apart"]


def test_short_fused_blocks_cost_the_dpu_more():
    """The mechanism: at 224 x 224 x 64 the fused 3x3's blocks (the producer's output, the
    3x3's input and output rows per block) are shorter than the layer's own over half its
    channels, and the cost model's DPU cycles of the same MACs are more."""
    from vpuc.cost.timing import load_timing
    timing = load_timing()
    nhwc = DimsOrder.identity(4)
    x = TensorType((1, 64, SIZE, SIZE), ElemType.F16, nhwc)
    halo = 2 * row_bytes(x)
    fused_rows = block_rows(3 * row_bytes(x), halo, 1 << 20)
    apart_rows = block_rows(row_bytes(x) + row_bytes(x, 32), halo, 1 << 20)
    assert fused_rows < apart_rows
    fused = window_dpu_cycles("conv", x, x, (3, 3), (1, 1), fused_rows, 64, timing)
    apart = window_dpu_cycles("conv", x, x, (3, 3), (1, 1), apart_rows, 32, timing)
    assert fused > apart
