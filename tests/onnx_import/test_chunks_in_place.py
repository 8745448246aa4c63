"""A compute-bound layer cut into output-channel chunks (its weights over the CMX budget,
as ResNet-18's stage-3 3x3 layers) whose input is held whole in one tile's CMX
(``resident.py``): its blocks on that tile read the input in place (``in_place_input``),
as a layer of one chunk's do, instead of copying it CMX -> CMX into a buffer of their
own first.  Those copies (100 KB for each stage-3 layer of ResNet-18) queued on DMA
channel 0 before the other tile's, so each layer's first chunk waited for one and the
second tile for two (schedule_bench cycles: 1,683,130 -> 1,674,273; stage 3 ends at
971,757 instead of 980,614).  A layer streaming its weights (the DMA longer than the DPU:
stage 4) keeps its copies: there the copy is not on the way, and reading in place held
the value and shifted its loads (1,698,044).
"""

from __future__ import annotations

from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from vpuc import api
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder

C, HW = 128, 14            # 295 KB of 3x3 weights, 196 positions: the DPU the longer stage
BUDGET = 144 * 1024
LAYER = "conv_9.convolution."


def _build(m):
    a = m.node("Relu", [m.node("Conv", [_x(m, (1, 16, HW, HW)), m.weight((C, 16, 1, 1)),
                                        m.weight((C,), 0.1)], kernel_shape=[1, 1])])
    y = m.node("Relu", [m.node("Conv", [a, m.weight((C, C, 3, 3)), m.weight((C,), 0.1)],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    return m.node("MaxPool", [y], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])


def _program(tmp_path):
    m = ModelBuilder(seed=0, opset=17)
    m.output(_build(m))
    return api.compile(m.save(tmp_path / "s.onnx", "s"), cmx_budget=BUDGET, schedule="default")


def test_chunks_on_the_inputs_tile_read_it_in_place(tmp_path):
    program = _program(tmp_path)
    symbols = SymbolTable(program.module)
    tasks = [t for tl in program.module.task_lists for t in tl.tasks
             if (t.label or "").startswith(LAYER)]
    chunks = [t for t in tasks if isinstance(t, DpuTask)]
    assert len({t.label.split(".")[-1] for t in chunks}) >= 4        # several chunks
    held = {symbols.region(t.inputs[0]).root.name for t in chunks} - {
        symbols.region(t.dst).root.name for t in tasks if isinstance(t, DmaTask)}
    assert len(held) == 1              # the value kept in CMX, read where it lives
    value = next(iter(held))
    home = next(b.tile for b in program.module.buffers if b.name == value)
    assert next(b.kind for b in program.module.buffers if b.name == value) is BufferKind.CMX
    for t in chunks:
        source = symbols.region(t.inputs[0]).root.name
        assert (source == value) == (t.tile == home), t.label
    # the other tile copies it; the home tile copies nothing
    copies = [t for t in tasks if isinstance(t, DmaTask)
              and symbols.region(t.src).root.name == value]
    assert copies and all(symbols.region(t.dst).root.tile != home for t in copies)


def test_chunks_reading_in_place_match_onnxruntime(tmp_path):
    tasks = compile_and_compare(tmp_path, _build, cmx_budget=BUDGET)
    assert {t.tile for t in tasks} == {0, 1}
