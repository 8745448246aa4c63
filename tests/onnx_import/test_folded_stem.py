"""A convolution of few channels on the model's NCHW input with its width folded into 16
channels (``vpuc/fusion/lower_dpu_fold_width.py``), compiled, simulated and compared with
onnxruntime to ``test_lower_dpu_nn.compile_and_compare``'s derived f16 bound: the folded
convolution sums the same f32 products as the compressed one, plus exact zeros, in
another order, and rounds once to f16.

The fold is the cost model's choice; the numerics tests force it (``cheaper``) on shapes
small enough to simulate, and a 1x1 MaxPool (an exact copy on the DPU) after the
convolution makes its output a value between layers (NHWC under ``--schedule default``),
as a stem's is.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.fusion.dpu_testlib import assert_close
from tests.onnx_import.test_lower_dpu_nn import compile_and_compare
from vpuc import api
from vpuc.fusion import lower_dpu_fold_width
from vpuc.fusion.fold_width_geometry import fold_geometry
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DpuOp
from vpuc.onnx_import.zoo import ModelBuilder, resnet18


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(lower_dpu_fold_width, "cheaper", lambda folded, compressed: True)


def stem(shape, oc, k, s, pads, relu=True, bias=True, follow=True):
    """A model of one convolution (+ bias, ReLU) on input ``shape``, then a 1x1 MaxPool."""
    def build(m):
        operands = [m.input("x", list(shape)), m.weight((oc, shape[1], k, k))]
        if bias:
            operands.append(m.weight((oc,), 0.1))
        y = m.node("Conv", operands, kernel_shape=[k, k], strides=[s, s], pads=list(pads))
        if relu:
            y = m.node("Relu", [y])
        return m.node("MaxPool", [y], kernel_shape=[1, 1]) if follow else y
    return build


def convs(tasks):
    return [t for t in tasks if t.op is DpuOp.CONV]


CASES = {
    # (input NCHW, out channels, kernel, stride, ONNX pads (top, left, bottom, right))
    "resnet_stem_40x32": ((1, 3, 40, 32), 16, 7, 2, (3, 3, 3, 3)),
    "mnv3_stem_24x24": ((1, 3, 24, 24), 16, 3, 2, (1, 1, 1, 1)),
    "stride1_k5_pads_uneven": ((1, 3, 9, 20), 32, 5, 1, (2, 1, 2, 3)),
    "odd_height_k3_s1": ((1, 1, 13, 16), 16, 3, 1, (1, 1, 1, 1)),
    "k5_s2_4_channels": ((1, 4, 15, 28), 16, 5, 2, (2, 2, 1, 1)),
    "k7_s2_bottom_right_pads": ((1, 2, 17, 24), 32, 7, 2, (2, 3, 3, 2)),
    "batch2_k3_s2": ((2, 3, 10, 16), 16, 3, 2, (1, 1, 1, 1)),
    # AlexNet's 11x11 stride 4: one output column per folded column, a 4-column kernel
    "k11_s4": ((1, 1, 9, 64), 16, 11, 4, (5, 5, 5, 5)),
    "k2_s2_no_pads_one_row_block": ((1, 3, 3, 8), 16, 2, 2, (0, 0, 0, 0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_folded_stem_matches_onnxruntime(case, tmp_path, forced):
    shape, oc, k, s, pads = CASES[case]
    tasks = compile_and_compare(tmp_path, stem(shape, oc, k, s, pads),
                                seed=sorted(CASES).index(case))
    ow = (shape[3] + pads[1] + pads[3] - k) // s + 1
    fold = fold_geometry(shape[3], ow, k, s, pads[1], 1, 4)
    folded = convs(tasks)
    assert folded and all(t.stride == (s, 1) and t.kernel == (k, fold.kernel)
                          and t.pad[2:] == fold.pads for t in folded)
    assert all(t.variants[-1].end[2] == fold.per * oc - 1 for t in folded)


def test_the_folded_blocks_queue_so_nothing_waits_behind_a_later_block(tmp_path, forced):
    """A tile's first block copies its permuted rows on the store channel (idle then), a
    later one on the load channel right after the load of its tile's next block, so the
    store channel, which stores every block, holds no copy a convolution waits for; the
    last block of each tile (no later load on its tile) copies on the store channel.  A
    tile's first convolution runs right after its own permute, not behind the next
    block's, and its rows load before the tile's weights.  Ten blocks of a 40x32 stem at a
    48 KB budget, compared with onnxruntime."""
    build = stem((1, 3, 40, 32), 16, 7, 2, (3, 3, 3, 3))
    assert len(convs(compile_and_compare(tmp_path, build, cmx_budget=49152))) == 10
    m = ModelBuilder(seed=0, opset=17)
    m.output(build(m))
    program = api.compile(m.save(tmp_path / "c.onnx", "c"), cmx_budget=49152)
    dma = [t for tl in program.module.task_lists if tl.executor.name == "DMA" for t in tl.tasks]
    at = {str(t.label).split(".convolution.")[1]: i for i, t in enumerate(dma)
          if ".convolution." in str(t.label)}
    channel = {k: dma[at[f"fold{k}"]].channel for k in range(10)}
    assert channel == {k: 1 if k < 2 or k >= 8 else 0 for k in range(10)}
    assert all(at[f"load{k + 2}"] < at[f"fold{k}"] for k in range(2, 8))
    assert at["load0"] < at["load_w.t0"] and at["load1"] < at["load_w.t1"]
    tile0 = [str(t.label).split(".convolution.")[1] for tl in program.module.task_lists
             if tl.executor.name == "DPU" for t in tl.tasks
             if t.tile == 0 and ".convolution." in str(t.label)]
    assert tile0[:4] == ["p0", "c0", "p2", "p4"]


def test_a_fused_elementwise_epilogue_runs_on_the_folded_blocks(tmp_path, forced):
    """HardSwish after the stem (MobileNetV3's) runs as ACT SHAVE tasks on each folded
    output block in CMX (``fuse_epilogue``): element by element, the same bytes."""
    def build(m):
        y = m.node("Conv", [m.input("x", (1, 3, 16, 24)), m.weight((16, 3, 3, 3)),
                            m.weight((16,), 0.1)], kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1])
        return m.node("MaxPool", [m.node("HardSwish", [y])], kernel_shape=[1, 1])
    m = ModelBuilder(seed=5, opset=17)
    m.output(build(m))
    program = api.compile(m.save(tmp_path / "e.onnx", "e"))
    acts = [t for tl in program.module.task_lists if tl.executor.name == "ACT_SHAVE"
            for t in tl.tasks if ".act" in str(t.label)]
    assert acts and all(t.kernel == (3, 2) for t in convs(_dpu_tasks(program)))
    compile_and_compare(tmp_path, build, seed=5)


def test_without_bias_or_relu(tmp_path, forced):
    tasks = compile_and_compare(tmp_path, stem((1, 3, 12, 16), 16, 3, 2, (1, 1, 1, 1),
                                               relu=False, bias=False))
    assert all(t.stride == (2, 1) and t.bias is None and t.post is None for t in convs(tasks))


@pytest.mark.parametrize("shape, k, s, pads", [
    ((1, 3, 20, 30), 7, 2, (3, 3, 3, 3)),        # width 30: not a multiple of 4 columns
    ((1, 3, 12, 16), 3, 2, (1, 0, 0, 0)),        # 7 output columns: not pairs of columns
    ((1, 8, 12, 16), 3, 2, (1, 1, 1, 1)),        # 8 channels: not compressed, 16 already
])
def test_shapes_the_fold_cannot_take_keep_the_window_lowering(shape, k, s, pads, tmp_path,
                                                              forced):
    tasks = compile_and_compare(tmp_path, stem(shape, 16, k, s, pads))
    assert all(t.kernel == (k, k) and t.stride == (s, s) for t in convs(tasks))


def test_a_model_output_is_not_folded(tmp_path, forced):
    """The model's result is NCHW: its store permutes logical elements, which a folded block
    does not hold in order."""
    tasks = compile_and_compare(tmp_path, stem((1, 3, 16, 16), 16, 3, 2, (1, 1, 1, 1),
                                               follow=False))
    assert all(t.kernel == (3, 3) for t in convs(tasks))


def _stem_program(tmp_path, size, oc, schedule="default"):
    m = ModelBuilder(seed=0, opset=17)
    m.output(stem((1, 3, size, size), oc, 7, 2, (3, 3, 3, 3))(m))
    return api.compile(m.save(tmp_path / "m.onnx", "m"), schedule=schedule)


def _dpu_tasks(program):
    return [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]


def test_the_cost_model_folds_resnets_stem_and_not_a_small_one(tmp_path):
    """ResNet-18's stem (224x224, 64 channels): the folded convolution's 128 output channels
    of 16 input channels are far cheaper than 64 of 4 compressed.  A 40x32 stem of 16
    channels keeps the compressed convolution: its folded version's copy and 32-channel
    output do not pay off there."""
    big = convs(_dpu_tasks(_stem_program(tmp_path, 224, 64)))
    assert big and all(t.kernel == (7, 3) and t.stride == (2, 1) for t in big)
    small = convs(_dpu_tasks(_stem_program(tmp_path, 40, 16)))
    assert small and all(t.kernel == (7, 7) for t in small)


def test_naive_schedule_never_folds(tmp_path, forced):
    tasks = convs(_dpu_tasks(_stem_program(tmp_path, 40, 16, schedule="naive")))
    assert tasks and all(t.kernel == (7, 7) for t in tasks)


def test_resnet18_with_a_folded_stem_matches_naive_and_onnxruntime(tmp_path, forced):
    """ResNet-18 at 32x32 with a 16-channel stem: folded under ``default`` (forced: at this
    size the cost model keeps the compressed one), layer by layer under ``naive``."""
    builder = resnet18(size=32, width=16, classes=10)
    path = builder.save(tmp_path / "r.onnx", "r")
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    outs, programs = {}, {}
    for schedule in ("naive", "default"):
        programs[schedule] = api.compile(path, schedule=schedule)
        name = next(b.name for b in programs[schedule].module.buffers
                    if b.kind is BufferKind.INPUT)
        outs[schedule] = next(iter(api.simulate(programs[schedule],
                                                {name: x.astype(np.float16)}).outputs.values()))
    first = convs(_dpu_tasks(programs["default"]))[0]
    assert first.kernel == (7, 3) and first.stride == (2, 1)
    assert all(t.kernel != (7, 3) for t in convs(_dpu_tasks(programs["naive"])))
    # other blocks, another sum order: at most one f16 rounding apart per layer
    assert_close(outs["default"], outs["naive"], ulps=len(programs["default"].module.layers))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {builder.inputs[0].name: x})[0]
    got = outs["default"].astype(np.float32).reshape(want.shape)
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))
