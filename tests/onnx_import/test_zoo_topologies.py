"""Layer shapes of the ONNX model zoo's topologies that once stopped the compiler with an
internal error, at the smallest sizes that did: compiled, simulated with numerics (race
free, against the task-level reference) and compared with onnxruntime within a bound
derived from the arithmetic (``tests/tolerances.py``).

- ShuffleNet (v1, 4 groups of 34 channels of 136): a grouped convolution whose groups
  start off the DPU's channel multiple, reading (or writing) a value held in CMX with its
  channels padded to the multiple (``resident.padded_channels``, 136 held as 144): a
  group's aligned channels ran past the padded buffer (``view ... slice 102:150 of dim 1
  is out of range``).  Two groups of 20 of 40 (held as 48) do the same: 20:52.  Three
  groups of 12 of 36 (held as 48) writing a padded output left its pads 40:48 unwritten
  (NaN through the next layer's zero weights).
- VGG-19 (a 3x3 convolution over 56x56x256 with 256 outputs, after another layer): its
  weights cut into chunks of output channels, each tile keeping its row blocks' inputs
  for the later chunks (``lower_dpu_split.InputReuse``) though they did not fit beside
  the chunks' weights (``CMX of tile 0 overflows while placing ...in.c10``).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.onnx_import.onnx_testlib import rounded_to_f16, simulated_against_reference
from tests.tolerances import (assert_within_bound, conv_magnitude, stored_sum_bound, sum_bound,
                              unit_roundoff)
from vpuc import api
from vpuc.onnx_import.zoo import ModelBuilder


def _chain(tmp_path, size: int, layers: list[tuple[int, int, int, int]], seed: int = 0):
    """A chain of bias-free convolutions over x [1, C0, size, size]: ``layers`` as
    (in channels, out channels, kernel side, groups); the model's path and output."""
    m = ModelBuilder(seed=seed, opset=17)
    y = m.input("x", [1, layers[0][0], size, size])
    for cin, cout, k, groups in layers:
        w = m.weight((cout, cin // groups, k, k), np.sqrt(2.0 / (cin // groups * k * k)))
        y = m.node("Conv", [y, w], kernel_shape=[k, k], pads=[k // 2] * 4, group=groups)
    m.output(y)
    return m.save(tmp_path / "chain.onnx", "chain"), y


def _chain_bound(path, x, got, want):
    """|got - want| allowed for a chain of convolutions computed in f32 and stored as f16
    at every layer (vpuc) against one computed in f32 throughout (onnxruntime), both on
    the same f16 weights: each layer's sums within 2 gamma_K M of each other (M: the sum
    of |terms|), vpuc's f16 store of a layer's output adds u16 of it, and a layer carries
    the error of its input through |w|."""
    import onnx
    from onnx import numpy_helper
    model = rounded_to_f16(path)
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    u16, eta16 = unit_roundoff(np.float16), float(np.finfo(np.float16).smallest_subnormal)
    magnitude = np.abs(x.astype(np.float64))
    error = np.zeros_like(magnitude)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    for i, node in enumerate(convs):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        w = inits[node.input[1]]
        mag = conv_magnitude(w, np.zeros(w.shape[0]), list(attrs["pads"]), [1, 1],
                             attrs.get("group", 1))
        carried = mag(error)
        magnitude = mag(magnitude) * (1 + 2 * u16)
        if i < len(convs) - 1:        # stored as f16 by vpuc before the next layer reads it
            error = carried + sum_bound(magnitude, w[0].size, np.float32) + 2 * u16 * magnitude \
                + eta16
    shape = magnitude.shape
    return (stored_sum_bound(got.reshape(shape), want.reshape(shape), magnitude, w[0].size,
                             np.float32, np.float16) + carried).reshape(got.shape)


def _compile_and_compare(tmp_path, size, layers):
    path, out = _chain(tmp_path, size, layers)
    program = api.compile(path)
    x = np.random.default_rng(1).standard_normal((1, layers[0][0], size, size)).astype(np.float16)
    got = simulated_against_reference(program, {"x": x}, out).astype(np.float32)
    want = ort.InferenceSession(rounded_to_f16(path, tmp_path / "rounded.onnx"),
                                providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    assert got.shape == want.shape
    assert np.isfinite(got).all()
    assert_within_bound(got, want, _chain_bound(path, x, got, want))
    return program


@pytest.mark.parametrize("channels,groups,after", [
    (40, 2, False),      # groups of 20 of 40 held as 48: group 1 read 20:52
    (40, 2, True),       # ...and its output held padded too (a 1x1 reads it): stored 20:52
    (136, 4, False),     # ShuffleNet's stage 2: 4 groups of 34 of 136 held as 144
    (36, 3, True),       # groups of 12 of 36 held as 48: the last computes 24:40, pads
                         # 40:48 zeroed apart (they were NaN: the fuzz's cnn:90, seed 1)
])
def test_groups_off_the_channel_multiple_on_padded_values(tmp_path, channels, groups, after):
    layers = [(16, channels, 1, 1), (channels, channels, 3, groups)]
    if after:
        layers.append((channels, 16, 1, 1))
    program = _compile_and_compare(tmp_path, 4, layers)
    padded = [b for b in program.module.buffers if b.kind.name == "CMX" and "." not in b.name]
    assert padded and all(b.type.dims[1] == -(-channels // 16) * 16 for b in padded), \
        "the value between the layers is held in CMX with padded channels"


def test_vgg_sized_channel_chunks_fit_cmx(tmp_path):
    """VGG-19's conv3_2: 3x3, 256 -> 256 over 56x56, after a layer whose output it reads
    from DDR (the smallest VGG-like shape that overflowed: 48x48 or 192 channels fit)."""
    _compile_and_compare(tmp_path, 56, [(16, 256, 1, 1), (256, 256, 3, 1)])
