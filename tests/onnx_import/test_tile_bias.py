"""A layer of several output-channel chunks, each loading its own weights, loads its bias
once per tile (``lower_dpu_bias``): one small DMA per tile instead of one per chunk, each
of which held its DMA channel for a DDR read latency (ResNet-18's stage 3 and 4 layers:
8 to 11 each; schedule_bench cycles 1,687,984 -> 1,683,130).  The chunks' tasks read
their rows of the tile's copy, so the layer still matches onnxruntime.
"""

from __future__ import annotations

from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from tests.onnx_import.test_weight_streaming import HW
from vpuc import api
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder

WIDE, NARROW = 256, 128
BUDGET = 256 * 1024        # under the layer's 590 KB of weights: chunks of output channels
LAYER = "conv_9.convolution."    # the 256 -> 128 3x3 layer, cut into chunks of output channels


def _build(m):
    """test_weight_streaming's heavy layer with its channels swapped, 256 -> 128 (the same
    590 KB of weights in chunks): a bias row after the weights would take more bytes than
    the f32 bias (``lower_dpu_table.packs_cheaply``), as in ResNet-18's 3x3 layers, so the
    bias loads on its own."""
    a = m.node("Relu", [m.node("Conv", [_x(m, (1, 16, HW, HW)), m.weight((WIDE, 16, 1, 1)),
                                        m.weight((WIDE,), 0.1)], kernel_shape=[1, 1])])
    y = m.node("Relu", [m.node("Conv", [a, m.weight((NARROW, WIDE, 3, 3)),
                                        m.weight((NARROW,), 0.1)],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    return m.node("MaxPool", [y], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])


def _program(tmp_path):
    m = ModelBuilder(seed=0, opset=17)
    m.output(_build(m))
    return api.compile(m.save(tmp_path / "s.onnx", "s"), cmx_budget=BUDGET, schedule="default")


def _layer_tasks(program, kind):
    return [t for tl in program.module.task_lists for t in tl.tasks
            if isinstance(t, kind) and (t.label or "").startswith(LAYER)]


def test_bias_loads_once_per_tile(tmp_path):
    program = _program(tmp_path)
    chunks = [t for t in _layer_tasks(program, DpuTask) if t.bias is not None]
    assert len(chunks) >= 8
    loads = sorted(t.label for t in _layer_tasks(program, DmaTask) if ".load_bias." in t.label)
    assert loads == [f"{LAYER}load_bias.t0", f"{LAYER}load_bias.t1"]
    symbols = SymbolTable(program.module)
    for t in chunks:     # each chunk reads its own rows of its tile's copy
        region = symbols.region(t.bias)
        assert region.root.name == f"{LAYER}bias.t{t.tile}"
        channels = max(v.end[2] for v in t.variants) - min(v.start[2] for v in t.variants) + 1
        assert region.type.dims == (channels,)


def test_chunks_reading_a_shared_bias_match_onnxruntime(tmp_path):
    tasks = compile_and_compare(tmp_path, _build, cmx_budget=BUDGET)
    assert {t.tile for t in tasks} == {0, 1}
