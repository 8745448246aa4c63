"""The CNN layers of imported models compiled to DPU tasks, simulated, and compared with
onnxruntime (``vpuc/fusion/lower_dpu_nn.py``).

Each case is a one-layer ONNX model with f16-representable inputs and weights (the
model given to onnxruntime has its initializers rounded to f16, as in
``test_import_ops.py``).  The DPU accumulates in f32, adds the bias in f32 and rounds
once to f16 (relative error u = 2**-11 of the result); a bias Add the marking pass
leaves to an ACT SHAVE kernel rounds once more, and the include-pad average pool's
weight 1/(KH*KW) is itself rounded to f16 (relative u of every term).  So every value
is within 3u (|want| + max|want|) of onnxruntime's f32 result.  Against vpuc's own f16
graph reference (which rounds after every graph op) the blob agrees within a few f16
ulps (``assert_close``), and the task-level numpy reference of ``vpuc run --reference``
agrees with the simulator to its default tolerance.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.fusion.dpu_testlib import assert_close
from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.fusion import lower_dpu_nn
from vpuc.fusion.blocked_program import sanitize
from vpuc.ir.tasks import DpuOp
from vpuc.onnx_import import import_onnx, write_import
from onnx_testlib import rounded_to_f16, simulated_against_reference
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn, _squeeze_excite
from vpuc.reference.graph import run_graph

U = 2.0 ** -11


def _x(m, shape=(1, 32, 9, 9)):
    return m.input("x", list(shape))


CASES = {
    # GroupConvolution, depthwise: one dwconv; bias folded in as the task's bias
    "depthwise": (lambda m: m.node("Conv", [_x(m), m.weight((32, 1, 3, 3)), m.weight((32,), 0.1)],
                                   kernel_shape=[3, 3], group=32, pads=[1, 1, 1, 1]),
                  {DpuOp.DWCONV}),
    "depthwise_stride2_asymmetric": (
        lambda m: m.node("Conv", [_x(m, (1, 20, 11, 10)), m.weight((20, 1, 5, 3))],
                         kernel_shape=[5, 3], group=20, strides=[2, 2], pads=[2, 0, 1, 1]),
        {DpuOp.DWCONV}),
    "depthwise_dilated_relu": (
        lambda m: m.node("Relu", [m.node("Conv", [_x(m), m.weight((32, 1, 3, 3)), m.weight((32,), 0.1)],
                                         kernel_shape=[3, 3], group=32, dilations=[2, 2],
                                         pads=[2, 2, 2, 2])]), {DpuOp.DWCONV}),
    # general grouping: one conv per group
    "grouped": (lambda m: m.node("Conv", [_x(m, (1, 8, 7, 7)), m.weight((12, 2, 3, 3)), m.weight((12,), 0.1)],
                                 kernel_shape=[3, 3], group=4, pads=[1, 0, 0, 1]), {DpuOp.CONV}),
    "channel_multiplier": (lambda m: m.node("Conv", [_x(m, (1, 4, 6, 6)), m.weight((8, 1, 3, 3))],
                                            kernel_shape=[3, 3], group=4), {DpuOp.CONV}),
    # AveragePool: exclude-pad is the DPU's avgpool; include-pad a dwconv of 1/9
    "avgpool_exclude": (lambda m: m.node("AveragePool", [_x(m)], kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1]), {DpuOp.AVGPOOL}),
    "avgpool_include": (lambda m: m.node("AveragePool", [_x(m)], kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1], count_include_pad=1), {DpuOp.DWCONV}),
    "avgpool_include_no_pad": (lambda m: m.node("AveragePool", [_x(m)], kernel_shape=[2, 2], strides=[2, 2],
                                                count_include_pad=1), {DpuOp.AVGPOOL}),
    "avgpool_asymmetric": (lambda m: m.node("AveragePool", [_x(m, (1, 16, 8, 7))], kernel_shape=[3, 2],
                                            pads=[0, 1, 2, 0]), {DpuOp.AVGPOOL}),
    "global_avgpool": (lambda m: m.node("GlobalAveragePool", [_x(m)]), {DpuOp.AVGPOOL}),
    "reduce_mean_hw": (lambda m: m.node("ReduceMean", [_x(m)], axes=[2, 3], keepdims=1),
                       {DpuOp.AVGPOOL}),
}


def compile_and_compare(tmp_path, build, seed=0, cmx_budget=None):
    """Compile the one-layer model (with the compile option ``cmx_budget``), simulate it; check it against onnxruntime and vpuc's
    graph reference; return the program's DPU tasks."""
    m = ModelBuilder(seed=seed, opset=17)
    out = build(m)
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, cmx_budget=cmx_budget)
    shape = [d.dim_value for d in m.inputs[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float16)
    got = simulated_against_reference(program, {"x": x}, out)
    want = ort.InferenceSession(rounded_to_f16(path, tmp_path / "r.onnx"),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x.astype(np.float32)})[0]
    got32 = got.astype(np.float32)
    assert got32.shape == want.shape
    bound = 3 * U * (np.abs(want) + np.max(np.abs(want)))
    assert np.all(np.abs(got32 - want) <= bound), np.max(np.abs(got32 - want) - bound)
    imported = import_onnx(path)
    write_import(imported, tmp_path / "m.vir")
    graph_out = run_graph(imported.module.graphs[0], {"x": x}, tmp_path)[0]
    assert_close(got, graph_out, ulps=3)
    return [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_matches_onnxruntime(case, tmp_path):
    build, ops = CASES[case]
    tasks = compile_and_compare(tmp_path, build, seed=sorted(CASES).index(case))
    assert tasks and {t.op for t in tasks} == ops
    assert {t.tile for t in tasks} == {0, 1}, "both tiles are used"


def test_grouped_conv_is_one_conv_per_group(tmp_path):
    tasks = compile_and_compare(tmp_path, CASES["grouped"][0])
    weights = sorted({(t.tile, t.weights) for t in tasks})
    assert len(tasks) == 4 and len(weights) == 4       # one task, with its own weights, per group


def test_depthwise_bias_is_a_dpu_post_op(tmp_path):
    tasks = compile_and_compare(tmp_path, CASES["depthwise_dilated_relu"][0])
    assert all(t.bias is not None and str(t.post.kind) == "relu" for t in tasks)


def test_weights_too_big_for_cmx_split_output_channels(tmp_path):
    """A 3x3 convolution with 96 output channels whose weights (96*64*9*2 = 110592 bytes)
    exceed a 96 KiB budget: its output channels are cut into chunks of 32 (multiples of
    16; two chunks' weights, 2 * 36992 bytes with the bias, fit double-buffered, two of
    48 would not), each with its own weights and bias slice, and the result matches."""
    build = lambda m: m.node("Relu", [m.node("Conv", [_x(m, (1, 64, 6, 6)), m.weight((96, 64, 3, 3)),
                                                      m.weight((96,), 0.1)], kernel_shape=[3, 3],
                                             pads=[1, 1, 1, 1])])
    tasks = compile_and_compare(tmp_path, build, cmx_budget=96 * 1024)
    chunks = sorted({t.variants[0].end[2] + 1 for t in tasks})
    assert chunks == [32] and len(tasks) >= 3
    assert all(t.op is DpuOp.CONV and t.bias is not None for t in tasks)


def test_pool_too_big_for_cmx_splits_channels(tmp_path):
    tasks = compile_and_compare(tmp_path, CASES["global_avgpool"][0], cmx_budget=6000)
    assert len(tasks) == 2 and [t.variants[0].end[2] + 1 for t in tasks] == [16, 16]


def test_layer_that_cannot_split_further_is_an_error(tmp_path):
    """Under 200 bytes not even a window of two cells of 16 channels fits (2 x 2 x 16 x 3 =
    192 bytes of input and output, plus its weights as a depthwise first level), so the
    global pool cannot be reduced in levels (``lower_dpu_global_pool``)."""
    m = ModelBuilder(seed=0, opset=17)
    m.output(m.node("GlobalAveragePool", [_x(m)]))
    path = m.save(tmp_path / "m.onnx", "m")
    with pytest.raises(VpucError, match="does not fit a tile's CMX: .* the avgpool works within each channel"):
        api.compile(path, cmx_budget=200)


def _residual(m, op="Add"):
    """conv + bias, then ``op`` with the block input, then Relu: ResNet's residual join."""
    x = _x(m, (1, 16, 8, 8))
    y = m.node("Conv", [x, m.weight((16, 16, 3, 3)), m.weight((16,), 0.1)], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1])
    return m.node("Relu", [m.node(op, [y, x])])


@pytest.mark.parametrize("op, dpu_op", [("Add", DpuOp.ADD), ("Mul", DpuOp.MUL)])
def test_residual_join_is_a_dpu_eltwise_with_its_activation(op, dpu_op, tmp_path):
    tasks = compile_and_compare(tmp_path, lambda m: _residual(m, op))
    eltwise = [t for t in tasks if t.op is dpu_op]
    assert len(eltwise) == 2 and {t.tile for t in eltwise} == {0, 1}
    assert all(str(t.post.kind) == "relu" and len(t.inputs) == 2 for t in eltwise)
    conv = [t for t in tasks if t.op is DpuOp.CONV]
    assert conv and all(t.bias is not None and t.post is None for t in conv)


def test_add_of_two_inputs_stays_on_act_shave(tmp_path):
    """Neither operand comes from the DPU: the Add is an ACT SHAVE kernel as before."""
    m = ModelBuilder(seed=0, opset=17)
    m.output(m.node("Add", [_x(m, (1, 16, 4, 4)), m.input("z", [1, 16, 4, 4])]))
    program = api.compile(m.save(tmp_path / "m.onnx", "m"))
    assert not any(tl.tasks for tl in program.module.task_lists if tl.executor.name == "DPU")


def test_conv_with_fewer_rows_than_tiles_splits_channels_over_the_tiles(tmp_path):
    build = lambda m: m.node("Conv", [_x(m, (1, 16, 3, 3)), m.weight((48, 16, 3, 3)), m.weight((48,), 0.1)],
                             kernel_shape=[3, 3])
    tasks = compile_and_compare(tmp_path, build)
    assert [t.tile for t in tasks] == [0, 1] and [t.variants[0].end[2] + 1 for t in tasks] == [32, 16]


def test_weight_heavy_conv_on_a_small_map_splits_channels_over_the_tiles(tmp_path, monkeypatch):
    """A 7x7 1x1 expansion (96 -> 576 channels: 111 KB of weights, a 9 KB input) after a DPU
    layer (its input NHWC in DDR): the cost model finds one chunk of output channels per
    tile cheaper than rows (each tile would hold all the weights), so every one of its
    tasks computes all 7 rows for part of the channels, the chunks over both tiles; so
    does the 5x5 depthwise layer after it, whose HardSwish runs on its output blocks on the
    ACT SHAVEs (7 rows would be 4 + 3: chunks balance both).  The projection back
    (576 -> 96: an input half its weights' size) keeps the row cut.  Each output element
    is the same f32 sum over the same input channels rounded once either way (the
    HardSwish the same function of it), so the result is the row cut's up to the
    order of that sum."""
    m = ModelBuilder(seed=5, opset=17)
    y = m.node("Relu", [m.node("Conv", [_x(m, (1, 96, 7, 7)), m.weight((96, 96, 1, 1)),
                                        m.weight((96,), 0.1)], kernel_shape=[1, 1])])
    y = m.node("Relu", [m.node("Conv", [y, m.weight((576, 96, 1, 1)), m.weight((576,), 0.1)],
                               kernel_shape=[1, 1])])
    y = m.node("HardSwish", [m.node("Conv", [y, m.weight((576, 1, 5, 5)), m.weight((576,), 0.1)],
                                    kernel_shape=[5, 5], group=576, pads=[2, 2, 2, 2])])
    out = m.node("Conv", [y, m.weight((96, 576, 1, 1)), m.weight((96,), 0.1)], kernel_shape=[1, 1])
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    x = np.random.default_rng(5).standard_normal((1, 96, 7, 7)).astype(np.float16)

    def run():
        program = api.compile(path)
        return program, simulated_against_reference(program, {"x": x}, out)

    program, got = run()
    layers = {}
    for t in (t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks):
        layers.setdefault(t.label.split(".")[0], []).append(t)
    assert len(layers) == 4, list(layers)
    _, expand, depthwise, project = layers.values()
    for chunks in (expand, depthwise):
        assert {t.tile for t in chunks} == {0, 1} and len(chunks) >= 2
        assert all(min(v.start[1] for v in t.variants) == 0
                   and max(v.end[1] for v in t.variants) == 6
                   for t in chunks), "every chunk computes all 7 rows"
        assert sum(max(v.end[2] for v in t.variants) + 1 for t in chunks) == 576
    assert {t.tile for t in project} == {0, 1}
    assert all(t.variants[0].end[2] + 1 == 96 for t in project)
    assert sum(max(v.end[1] for v in t.variants) + 1 for t in project) == 7, "rows cut"
    monkeypatch.setattr(lower_dpu_nn, "cuts_channels", lambda *args: False)
    rows_program, rows_got = run()
    for chunks in (expand, depthwise):
        rows_cut = [t for tl in rows_program.module.task_lists if tl.executor.name == "DPU"
                    for t in tl.tasks if t.label.startswith(chunks[0].label.split(".")[0] + ".")]
        assert {max(v.end[2] for v in t.variants) + 1 for t in rows_cut} == {576}
    # Both builds sum the same f32 products; only the order may differ (numpy's BLAS
    # picks its kernels by the blocks' matrix shapes), so an f16 result can land one
    # ulp apart where an f32 sum straddles a rounding boundary, and that difference
    # carries through the later layers: one f16 ulp of the output's range per layer.
    ulp = 2.0 ** -10 * float(np.abs(rows_got.astype(np.float32)).max())
    np.testing.assert_allclose(got.astype(np.float32), rows_got.astype(np.float32),
                               rtol=0, atol=len(layers) * ulp)


DECONVS = {
    "stride2_pads_output_padding": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                        output_padding=[1, 1]),
    "k2_s2_unet_upsample": dict(kernel_shape=[2, 2], strides=[2, 2]),
    "k4_s2_p1_asymmetric_stride": dict(kernel_shape=[4, 3], strides=[2, 1], pads=[1, 0, 1, 1]),
    "dilated": dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 2, 0, 1]),
}


@pytest.mark.parametrize("case", sorted(DECONVS))
def test_conv_transpose_is_a_conv_over_the_upsampled_input(case, tmp_path):
    attrs = DECONVS[case]
    kernel = tuple(attrs["kernel_shape"])
    build = lambda m: m.node("Relu", [m.node("ConvTranspose", [_x(m, (1, 16, 5, 6)), m.weight((16, 24) + kernel),
                                                               m.weight((24,), 0.1)], **attrs)])
    tasks = compile_and_compare(tmp_path, build)
    assert {t.op for t in tasks} == {DpuOp.CONV} and {t.tile for t in tasks} == {0, 1}
    assert all(t.bias is not None and str(t.post.kind) == "relu" for t in tasks)


# ------------------------------------------------------------------ model bodies end to end

def _resnet_body(m):
    """ResNet-18's stem and two BasicBlocks (the second downsampling with a 1x1/2
    projection), then GlobalAveragePool: every layer kind of ResNet but its Flatten+Gemm."""
    y = _conv_bn(m, m.input("x", [1, 3, 32, 32]), 3, 16, 7, stride=2)
    y = m.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for cin, cout, stride in ((16, 16, 1), (16, 32, 2)):
        h = _conv_bn(m, _conv_bn(m, y, cin, cout, 3, stride), cout, cout, 3, act=None)
        skip = _conv_bn(m, y, cin, cout, 1, stride, act=None) if stride != 1 else y
        y = m.node("Relu", [m.node("Add", [h, skip])])
    return m.node("GlobalAveragePool", [y])


def _mobilenet_body(m):
    """MobileNetV3-Small's stem and two inverted residuals (depthwise 3x3/2 and 5x5 with
    squeeze-excite, HardSwish, a residual Add), then GlobalAveragePool."""
    y = _conv_bn(m, m.input("x", [1, 3, 32, 32]), 3, 16, 3, stride=2, act="HardSwish")
    y = _squeeze_excite(m, _conv_bn(m, y, 16, 16, 3, 2, group=16), 16)
    y = _conv_bn(m, y, 16, 24, 1, act=None)
    h = _conv_bn(m, y, 24, 96, 1, act="HardSwish")
    h = _squeeze_excite(m, _conv_bn(m, h, 96, 96, 5, 1, group=96, act="HardSwish"), 96)
    y = m.node("Add", [_conv_bn(m, h, 96, 24, 1, act=None), y])
    return m.node("GlobalAveragePool", [y])


@pytest.mark.parametrize("body", [_resnet_body, _mobilenet_body])
def test_model_bodies_match_onnxruntime(body, tmp_path):
    """f32 model and inputs for onnxruntime, f16 in vpuc: the whole-model tolerance of
    ``test_import_models.py`` (cosine >= 0.999, max |diff| <= 1% of the output's range)."""
    m = ModelBuilder(seed=3, opset=17)
    out = body(m)
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = api.simulate(program, {"x": x.astype(np.float16)}).outputs[sanitize(out)].astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))
    tasks = {tl.executor.name: len(tl.tasks) for tl in program.module.task_lists}
    if body is _resnet_body:
        assert tasks.get("ACT_SHAVE", 0) == 0, "every ResNet layer runs on the DPU"
