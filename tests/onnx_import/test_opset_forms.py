"""Op forms of older opsets (11 to 13, what most exported models are at) and what the
differential fuzz of them found (``tests/fuzz/onnx_forms.py``): each model is compiled,
simulated and compared with onnxruntime by the fuzz's own check (whole-model tolerance,
docs/onnx-import.md), and must come out ``ok``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.fuzz.onnx_check import check


def _model(nodes, shape, opset: int, **inits):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, list(shape))],
                              [helper.make_tensor_value_info(nodes[-1].output[0], 1, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    return model


def _ok(model, tmp_path):
    outcome = check(model, tmp_path)
    assert outcome.kind == "ok", f"{outcome.kind}: {outcome.detail}"


def _weights(rng, *shape):
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset, axis", [(11, None), (12, 0), (11, -2), (12, 2)])
def test_softmax_before_opset_13_normalizes_every_dim_from_axis(op, opset, axis, tmp_path):
    """Before opset 13 (Log)Softmax coerces its input to 2-D at ``axis`` (default 1): one
    distribution over all the dims from it on (was refused unless axis was the last)."""
    attrs = {} if axis is None else {"axis": axis}
    _ok(_model([helper.make_node(op, ["x"], ["y"], **attrs)], (2, 3, 5), opset), tmp_path)


def test_reduce_sum_with_axes_and_noop_with_empty_axes(tmp_path):
    """noop_with_empty_axes changes nothing when axes are given (was refused as unread)."""
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0, noop_with_empty_axes=1)
    _ok(_model([node], (2, 3, 4), 13, axes=np.asarray([1], np.int64)), tmp_path)


def test_reduce_mean_over_an_empty_axes_input_reduces_every_axis(tmp_path):
    """An empty axes input without noop_with_empty_axes means every axis (was taken as the
    identity, refused by the shape check)."""
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)
    _ok(_model([node], (2, 3, 4), 18, axes=np.zeros(0, np.int64)), tmp_path)


def _constant(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, np.float32)))


def _decomposed_layer_norm(style: str):
    """A layer norm over the last axis of 1x5x16 as exporters write it before opset 17."""
    axes = [2] if style == "axes_from_front" else [-1]
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=axes),
             helper.make_node("Sub", ["x", "mean"], ["d"])]
    if style == "mul_square":
        nodes.append(helper.make_node("Mul", ["d", "d"], ["sq"]))
    else:
        nodes += [_constant("two", 2.0), helper.make_node("Pow", ["d", "two"], ["sq"])]
    nodes += [helper.make_node("ReduceMean", ["sq"], ["var"], axes=axes), _constant("eps", 1e-5),
              helper.make_node("Add", ["eps", "var"] if style == "eps_first" else ["var", "eps"], ["ve"]),
              helper.make_node("Sqrt", ["ve"], ["std"])]
    if style == "reciprocal":
        nodes += [helper.make_node("Reciprocal", ["std"], ["inv"]),
                  helper.make_node("Mul", ["inv", "d"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["d", "std"], ["n"]))
    nodes += [helper.make_node("Mul", ["n", "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"])]
    rng = np.random.default_rng(1)
    return _model(nodes, (1, 5, 16), 13, gamma=rng.uniform(0.5, 1.5, 16).astype(np.float32),
                  beta=(rng.standard_normal(16) / 10).astype(np.float32))


@pytest.mark.parametrize("style", ["constant_nodes", "reciprocal", "mul_square", "axes_from_front",
                                   "eps_first"])
def test_decomposed_layer_norm_forms_become_one_normalization(style, tmp_path):
    """PyTorch writes the exponent and epsilon as Constant nodes, TensorFlow's rsqrt is a
    Reciprocal then Mul; each form is recognized (was: only initializers and Div)."""
    from onnx import save, shape_inference

    from vpuc.onnx_import import import_onnx
    model = _decomposed_layer_norm(style)
    save(shape_inference.infer_shapes(model), tmp_path / "ln.onnx")
    kinds = [op.kind for op in import_onnx(tmp_path / "ln.onnx").module.graphs[0].ops]
    assert "MVN" in kinds and "Sqrt" not in kinds, kinds
    _ok(model, tmp_path)


def test_per_row_statistic_of_a_block_cut_over_both_shaves(tmp_path):
    """A per-row value ([6, 1, 1, 1]: a variance's square root) of a segment whose blocks of
    one row are cut along the next axis for the two ACT SHAVEs: computed once per block,
    not by both SHAVEs into the same bytes (was: a race in the lowered program)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1, 2, 3]),
             helper.make_node("Sub", ["x", "m"], ["d"]), helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["v"], axes=[1, 2, 3]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["y"])]
    _ok(_model(nodes, (6, 2, 1, 6), 11, two=np.float32(2.0), eps=np.full((6, 1, 1, 1), 1e-5, np.float32)),
        tmp_path)


def test_conv_loading_its_own_zeros_beside_an_epilogue_taking_the_shared_ones(tmp_path):
    """An 8-channel convolution (padded to 16 in CMX) whose input's padding channels need
    more zeros than the program's shared vector holds, with an Add epilogue whose side input
    takes the shared one first on the same tile: two zero loads in one layer (was: a
    duplicate task label)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["u"], mode="nearest"),
             helper.make_node("Conv", ["u", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node("BatchNormalization", ["c1", "g", "bt", "mu", "var"], ["bn"], epsilon=1e-3),
             helper.make_node("LeakyRelu", ["bn"], ["l"]),
             helper.make_node("Resize", ["l", "", "s"], ["u2"], mode="linear"),
             helper.make_node("MaxPool", ["u2"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Add", ["p", "r"], ["y"])]
    ones = np.ones(8, np.float32)
    _ok(_model(nodes, (1, 3, 15, 18), 14, s=np.asarray([1, 1, 2, 2], np.float32),
               w1=_weights(rng, 8, 3, 1, 1), b1=ones / 10, g=ones, bt=ones / 10, mu=ones / 10,
               var=ones, w=_weights(rng, 8, 8, 3, 3), b=ones / 10), tmp_path)


def _written_out_hard_swish(style: str):
    """x * relu6(x + 3) / 6 over a 1x8x6x7 convolution's output, at opset 13 (before the
    HardSwish op), as PyTorch (HardSigmoid) or TensorFlow (Clip to [0, 6]) writes it."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1])]
    if style in ("hardsigmoid", "hardsigmoid_0.2"):
        alpha = 1 / 6 if style == "hardsigmoid" else 0.2
        nodes += [helper.make_node("HardSigmoid", ["c"], ["h"], alpha=alpha, beta=0.5),
                  helper.make_node("Mul", ["h", "c"], ["y"])]
    else:
        nodes += [_constant("three", 3.0), helper.make_node("Add", ["three", "c"], ["a"]),
                  helper.make_node("Clip", ["a", "zero", "six"], ["r"])]
        if style == "relu6_div":
            nodes += [helper.make_node("Mul", ["c", "r"], ["p"]), helper.make_node("Div", ["p", "six"], ["y"])]
        elif style == "relu6_scaled_gate":
            nodes += [helper.make_node("Mul", ["r", "sixth"], ["q"]), helper.make_node("Mul", ["c", "q"], ["y"])]
        else:                           # the sum read again: no longer the pattern's alone
            nodes += [helper.make_node("Mul", ["c", "r"], ["p"]), helper.make_node("Div", ["p", "six"], ["d"]),
                      helper.make_node("Add", ["d", "a"], ["y"])]
    return _model(nodes, (1, 8, 6, 7), 13, w=_weights(rng, 8, 8, 1, 1), zero=np.float32(0),
                  six=np.float32(6), sixth=np.float32(1 / 6))


@pytest.mark.parametrize("style, fused", [("hardsigmoid", True), ("relu6_div", True),
                                          ("relu6_scaled_gate", True), ("hardsigmoid_0.2", False),
                                          ("relu6_shared_sum", False)])
def test_written_out_hard_swish_becomes_one_hswish(style, fused, tmp_path):
    """Before opset 14 HardSwish is written out; each exporter's form is one HSwish again
    (MobileNetV3-Small at opset 13: 859,333 simulated cycles written out, 580,790 as
    HSwish), and what only looks like one (another alpha, an intermediate read elsewhere)
    is left as it is."""
    from onnx import save, shape_inference

    from vpuc.onnx_import import import_onnx
    model = _written_out_hard_swish(style)
    save(shape_inference.infer_shapes(model), tmp_path / "hs.onnx")
    kinds = [op.kind for op in import_onnx(tmp_path / "hs.onnx").module.graphs[0].ops]
    assert ("HSwish" in kinds and "Clamp" not in kinds) == fused, kinds
    _ok(model, tmp_path)


def test_channel_scale_of_fewer_channels_than_half_the_dpu_multiple(tmp_path):
    """x * s[c] over 3 channels: the DPU's depthwise product pads its weights to 16 channels
    with one copy of the first ones, which 3 channels cannot fill (was: a view of channels
    0:13 of 3 in the lowered program); the product stays on ACT SHAVE."""
    scale = np.asarray([0.69, 1.06, 1.08], np.float32).reshape(1, 3, 1, 1)
    _ok(_model([helper.make_node("Mul", ["x", "s"], ["y"])], (1, 3, 2, 5), 11, s=scale), tmp_path)


def test_dropout_ratio_attribute_before_opset_12(tmp_path):
    """Dropout's ratio is an attribute before opset 12 (an input from it); inference is the
    identity whatever it is (was refused as an unread attribute)."""
    nodes = [helper.make_node("Dropout", ["x"], ["d"], ratio=0.1), helper.make_node("Relu", ["d"], ["y"])]
    _ok(_model(nodes, (2, 3, 4), 11), tmp_path)


def test_reduce_without_axes_under_noop_with_empty_axes_is_the_identity(tmp_path):
    """No axes and noop_with_empty_axes: the identity, whatever keepdims says (keepdims=0
    was refused as an attribute the identity never read)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0, noop_with_empty_axes=1),
             helper.make_node("Relu", ["m"], ["y"])]
    _ok(_model(nodes, (2, 3, 4), 18), tmp_path)


@pytest.mark.parametrize("ctm, nearest_mode", [("tf_half_pixel_for_nn", "round_prefer_ceil"),
                                               ("half_pixel", "round_prefer_floor"),
                                               ("asymmetric", "round_prefer_ceil")])
def test_nearest_resize_at_a_tie_of_real_arithmetic(ctm, nearest_mode, tmp_path):
    """Sizes 7 -> 9: under tf_half_pixel_for_nn output row 4 samples (4 + 0.5) * 7 / 9 = 3.5
    exactly, which round_prefer_ceil takes to row 4; dividing by the rounded scale 9/7 gave
    3.4999... and row 3 (was: wrong).  The other modes at the same sizes, with the
    coordinates now computed the same way, stay right."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode=ctm, nearest_mode=nearest_mode)
    _ok(_model([node], (1, 2, 7, 6), 13, sizes=np.asarray([1, 2, 9, 11], np.int64)), tmp_path)
