"""LRN (``vpuc/onnx_import/convert_lrn.py``): import, shape inference, lowering, numerics.

LRN is ``x * (bias + alpha / size * conv1x1(x * x, band))^-beta`` with a 0/1 band over
the channel window; the convolution runs on the DPU and the rest in generated ACT SHAVE
kernels.  The numerics are checked compiled and simulated against onnxruntime within a
bound derived from each rounding (``_lrn_bound``); an even size, which onnxruntime
refuses, against ONNX's definition in float64."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.tolerances import unit_roundoff
from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.kernel_graph import APPROXIMATE_TOLERANCE
from vpuc.ir.tasks import DpuTask, SwKernelTask
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.convert_lrn import channel_window
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16, U32 = unit_roundoff(np.float16), unit_roundoff(np.float32)


def _lrn_model(path, shape, opset=13, **attrs) -> str:
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", **attrs)
    graph = helper.make_graph([node], "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.save(model, str(path))
    return str(path)


def _window_sum(x: np.ndarray, size: int) -> np.ndarray:
    """ONNX's square_sum, straight from its definition, in float64."""
    channels = x.shape[1]
    square = x.astype(np.float64) ** 2
    out = np.zeros_like(square)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + int(np.ceil((size - 1) / 2)))
        out[:, c] = square[:, lo:hi + 1].sum(axis=1)
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 9])
def test_the_band_sums_onnx_s_channel_window(size):
    x = np.random.default_rng(size).standard_normal((1, 7, 2, 3))
    band = channel_window(7, size)[:, :, 0, 0]
    np.testing.assert_allclose(np.einsum("oi,nihw->nohw", band, x ** 2), _window_sum(x, size),
                               rtol=1e-12)


def test_import_text_and_inferred_shapes(tmp_path):
    """The golden text: the square, the banded 1x1 Convolution, the elementwise tail; each
    value's type is the graph dialect's shape inference, checked against ONNX's at import."""
    path = _lrn_model(tmp_path / "lrn.onnx", [1, 5, 3, 4], size=3, alpha=2e-4, beta=0.6, bias=1.5)
    text = print_module(import_onnx(path, precision="f32").module)
    golden = GOLDEN / "lrn.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def test_other_ranks_are_refused_at_the_node(tmp_path):
    path = _lrn_model(tmp_path / "lrn3.onnx", [1, 5, 7], size=3)
    with pytest.raises(VpucError, match=r"node 'lrn' \(LRN.*rank-3 input"):
        import_onnx(path)


def _lrn_bound(x: np.ndarray, want: np.ndarray, size, alpha, beta, bias) -> np.ndarray:
    """|vpuc - onnxruntime| allowed per element, first order in each rounding.

    With t = bias + c s (c = alpha / size, s the window's sum of squares), y = x t^-beta:
    x * x rounds to f16 (u each square) and the DPU's f32 sum of them rounds once to f16
    (u), so s is within 2u + gamma_size(f32) of exact; c, bias and -beta are f16
    constants (their own rounding, measured).  The tail computes in the graph's f16: each
    op rounds its result to f16 once (docs/generator.md: an f16 op computed in f32 and
    rounded, as the reference does), so c s, t and t^-beta each add u (c s's scaled by its
    share of t), and the product with x another u; an FMA contraction of c s + bias
    rounds once instead of twice (2 u32 either way); Power is the generator's documented
    approximation (APPROXIMATE_TOLERANCE's rtol).  A relative error e of t is a relative
    error beta * e of t^-beta, and an absolute error d of -beta is a relative error
    |ln t| d.  onnxruntime's own f32 evaluation is within a few u32."""
    c = alpha / size
    t = bias + c * _window_sum(x, size)
    share = c * _window_sum(x, size) / t                        # of t that is c * s
    delta_c = abs(float(np.float16(c)) - c) / c
    delta_bias = abs(float(np.float16(bias)) - bias) / bias
    delta_beta = abs(float(np.float16(beta)) - beta)
    relative_t = (share * (3 * U16 + size * U32 + delta_c) + (1 - share) * delta_bias
                  + U16 + 2 * U32)
    relative = (2 * U16 + beta * relative_t + np.abs(np.log(t)) * delta_beta
                + APPROXIMATE_TOLERANCE[0] + 8 * U32)
    return relative * np.abs(want) + 2.0 ** -25                # + half f16's smallest subnormal


CASES = {   # name: (shape, opset (LRN-1 up to 12, LRN-13 after), attributes, input scale)
    "alexnet": ((1, 96, 13, 13), 9, dict(size=5, alpha=1e-4, beta=0.75, bias=1.0), 20.0),
    "even_size": ((1, 24, 6, 5), 13, dict(size=4, alpha=0.5, beta=0.6, bias=2.0), 1.5),
    "size_one": ((1, 16, 4, 4), 7, dict(size=1, alpha=1.0, beta=1.0, bias=1.0), 1.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_against_onnxruntime(case, tmp_path):
    shape, opset, attrs, scale = CASES[case]
    path = _lrn_model(tmp_path / f"{case}.onnx", list(shape), opset=opset, **attrs)
    x = (np.random.default_rng(5).standard_normal(shape) * scale).astype(np.float16).astype(np.float32)
    program = api.compile(path)
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    assert any(isinstance(t, DpuTask) for t in tasks)          # the channel window: a convolution
    assert any(isinstance(t, SwKernelTask) for t in tasks)     # the rest: generated ACT kernels
    sim = api.simulate(program, {"x": x}, reference=True)
    assert not sim.races
    assert sim.kernel_check is None or not sim.kernel_check.mismatches
    got = next(iter(sim.outputs.values())).astype(np.float64)
    if attrs["size"] % 2:
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    else:      # onnxruntime refuses even sizes (lrn.h: size_ % 2 == 1), and onnx.reference's
        # LRN sums its window only for channels below the batch size (op_lrn.py loops over
        # x.shape[0]): ONNX's definition, in float64
        c = attrs["alpha"] / attrs["size"]
        want = x * (attrs["bias"] + c * _window_sum(x, attrs["size"])) ** -attrs["beta"]
    excess = np.abs(got - want) - _lrn_bound(x, want.astype(np.float64), **attrs)
    assert np.all(excess <= 0), float(excess.max())
