"""A BatchNormalization no Conv precedes (DenseNet-121's pre-activation: a per-channel
``Multiply`` and ``Add`` of constants, then Relu) runs under ``--schedule default`` as a
DPU depthwise 1x1 with the shift as its bias and Relu as its post-op
(``vpuc/fusion/channel_scale_dpu.py``), not as an ACT SHAVE segment; its outputs match the
naive schedule's ACT SHAVE kernel within the roundings the two make."""

from __future__ import annotations

import numpy as np
import pytest

from onnx import numpy_helper

from tests.tolerances import assert_within_bound, conv_magnitude, gamma, unit_roundoff
from fusion_testlib import both_schedules
from vpuc.ir.tasks import DpuOp, DpuTask, SwKernelTask
from vpuc.onnx_import.zoo import ModelBuilder

C, SIZE = 48, 12


def _model(tmp_path):
    """(path, the Conv's weights and bias, the normalization's scale s and shift t)."""
    m = ModelBuilder(seed=3, opset=13)
    x = m.input("x", [1, 16, SIZE, SIZE])
    w, b = m.weight((C, 16, 3, 3)), m.weight((C,), 0.1)
    y = m.node("Relu", [m.node("Conv", [x, w, b], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    rng = np.random.default_rng(4)
    gamma, beta, mean = (rng.standard_normal((3, C)) * 0.5).astype(np.float32)
    var = rng.uniform(0.5, 1.5, C).astype(np.float32)
    norm = m.node("BatchNormalization", [y, *(m.init(v, "bn") for v in (gamma, beta, mean, var))])
    m.output(m.node("Relu", [norm]))
    s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + np.float64(np.float32(1e-5)))
    conv = [numpy_helper.to_array(i).astype(np.float64) for i in m.inits[:2]]
    return m.save(tmp_path / "m.onnx", "m"), conv, s, beta - mean * s


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path, (w, b), s, t = _model(tmp_path_factory.mktemp("bn"))
    x = np.random.default_rng(5).standard_normal((1, 16, SIZE, SIZE)).astype(np.float16)
    out = both_schedules(path, x)
    # the Conv's Relu output in float64, the map both schedules normalize (to f16 round-off)
    x64 = x.astype(np.float64)
    y = np.maximum(_conv(x64, w, b), 0)
    # |y| as stored in f16: the Conv's f32 sum of 16 * 9 + 1 terms within gamma of its
    # magnitude, then one f16 rounding
    y_bound = (np.abs(y) + gamma(16 * 9 + 1, np.float32) * conv_magnitude(
        w, b, [1, 1, 1, 1], [1, 1])(x64)) * (1 + unit_roundoff(np.float16)) + float(
        np.finfo(np.float16).smallest_subnormal)
    return out, y_bound, s, t


def test_the_normalization_is_a_dpu_depthwise_and_no_act_task(runs):
    program, _ = runs[0]["default"]
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    assert not [t for t in tasks if isinstance(t, SwKernelTask)]
    assert [t for t in tasks if isinstance(t, DpuTask) and t.op is DpuOp.DWCONV]
    naive = [t for tl in runs[0]["naive"][0].module.task_lists for t in tl.tasks]
    assert [t for t in naive if isinstance(t, SwKernelTask)]


def test_outputs_match_the_act_kernels_within_their_roundings(runs):
    """Both read the same f16 map y (the Conv's, the same sums on both schedules).  The DPU
    rounds y s + t once to f16 (s and t each rounded to f16 first); the ACT SHAVE kernel
    rounds s, t, the product and the sum.  So each is within u16 (2 |y s| + |t|) +
    u16 |out| + eta of the exact y s + t (s and t rounded, the product rounded, the sum):
    their difference within twice that, Relu 1-Lipschitz."""
    out, y_bound, s, t = runs
    (_, naive), (_, default) = out["naive"], out["default"]
    name = next(iter(default.outputs))
    got = default.outputs[name].astype(np.float64).reshape(1, C, SIZE, SIZE)
    want = naive.outputs[name].astype(np.float64).reshape(1, C, SIZE, SIZE)
    u16 = unit_roundoff(np.float16)
    magnitude = 2 * y_bound * np.abs(s).reshape(1, -1, 1, 1) + np.abs(t).reshape(1, -1, 1, 1)
    eta = float(np.finfo(np.float16).smallest_subnormal)
    bound = 2 * (u16 * magnitude + eta) + u16 * (np.abs(got) + np.abs(want))
    assert_within_bound(got, want, bound)


def _conv(x, w, b):
    """The 3x3 convolution (pads 1) in float64."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None)
                                            for n in ("x", "w", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    return ReferenceEvaluator(helper.make_model(graph)).run(None, {"x": x, "w": w, "b": b})[0]
