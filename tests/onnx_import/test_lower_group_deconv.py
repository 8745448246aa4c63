"""Grouped ConvTranspose (graph ``GroupConvolutionBackpropData``) compiled to DPU tasks,
simulated, and compared with onnxruntime (``vpuc/fusion/lower_dpu_deconv.py``).

Each group is a convolution over the shared zero-upsampled input with its own flipped,
transposed weights; one input and one output channel per group is a single ``dwconv``.
The tolerance is ``test_lower_dpu_nn.compile_and_compare``'s: the DPU accumulates in f32
and rounds once (3u (|want| + max|want|) against onnxruntime with f16-rounded weights,
a few f16 ulps against vpuc's own f16 graph reference).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from vpuc.ir.tasks import DpuOp
from vpuc.reference.graph_nn import deconv, group_deconv

GROUPED = {
    # (input channels, weights [C, O/G, KH, KW], group, attributes, DPU op, tasks per block)
    "groups4_stride2": (16, (16, 6, 3, 3), 4, dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
                        DpuOp.CONV),
    "groups2_k2_s2": (8, (8, 4, 2, 2), 2, dict(strides=[2, 2]), DpuOp.CONV),
    "depthwise_k4_s2_p1": (16, (16, 1, 4, 4), 16, dict(strides=[2, 2], pads=[1, 1, 1, 1]), DpuOp.DWCONV),
}


@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_conv_transpose_matches_onnxruntime(case, tmp_path):
    c, wshape, groups, attrs, dpu_op = GROUPED[case]
    build = lambda m: m.node("ConvTranspose", [_x(m, (1, c, 5, 6)), m.weight(wshape),
                                               m.weight((wshape[1] * groups,), 0.1)],
                             kernel_shape=list(wshape[2:]), group=groups, **attrs)
    tasks = compile_and_compare(tmp_path, build, seed=sorted(GROUPED).index(case))
    assert {t.op for t in tasks} == {dpu_op} and {t.tile for t in tasks} == {0, 1}
    if dpu_op is DpuOp.CONV:      # one task series per group, each with its own weights
        assert len({t.weights for t in tasks}) >= groups


def test_group_reference_is_deconv_per_group():
    """The reference's grouped form against the ungrouped one with block-diagonal weights."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 4, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 4, 3, 3)).astype(np.float32)       # G, I/G, O/G, KH, KW
    attrs = {"strides": (2, 2), "pads_begin": (1, 0), "pads_end": (0, 1), "dilations": (1, 1),
             "output_padding": (1, 0)}
    dense = np.zeros((6, 12, 3, 3), np.float32)
    for g in range(3):
        dense[2 * g:2 * g + 2, 4 * g:4 * g + 4] = w[g]
    np.testing.assert_allclose(group_deconv(x, w, attrs), deconv(x, dense, attrs), rtol=1e-5, atol=1e-5)
