"""Edge cases of ONNX's rules that an import got wrong, each against onnxruntime.

Found by a differential fuzz of single-node models (import + reference executor
against onnxruntime):
- MaxPool with ceil_mode: "sliding windows that would start in the right padded
  region are ignored" (the spec; onnxruntime and PyTorch agree), which ONNX's own
  shape inference does not apply: a 9-row input with pads 2/2, kernel 3, stride 3
  has 4 output rows, not 5;
- Slice with a negative step clamps its start to [0, dim - 1] and its end to
  [-1, dim - 1]: start -5 of 3 is 0, not -1 (which took the last element); one
  that runs through index 0 (a flip, ``x[::-1]``) was refused and now imports.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import run_graph
from vpuc.vir.parser import parse_file


def _model(tmp_path, build, shape, name):
    m = ModelBuilder(seed=0, opset=17)
    m.output(build(m, m.input("x", list(shape))))
    return m.save(tmp_path / f"{name}.onnx", name)


def _onnxruntime(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _imported(tmp_path, path, x):
    imported = import_onnx(path, precision="f32")
    write_import(imported, tmp_path / "m.vir")
    return run_graph(parse_file(tmp_path / "m.vir").graphs[0], {"x": x}, tmp_path)[0]


def _max_pool(m, x):
    return m.node("MaxPool", [x], kernel_shape=[3, 3], strides=[3, 3], pads=[2, 0, 2, 2], ceil_mode=1)


def test_ceil_mode_drops_a_window_that_starts_in_the_right_padding(tmp_path):
    path = _model(tmp_path, _max_pool, (1, 3, 9, 3), "pool")
    x = np.random.default_rng(0).standard_normal((1, 3, 9, 3)).astype(np.float32)
    want = _onnxruntime(path, x)
    assert want.shape == (1, 3, 4, 1)
    np.testing.assert_array_equal(_imported(tmp_path, path, x), want)     # a max: exact


def test_ceil_mode_pool_then_a_conv_compiles_and_matches(tmp_path):
    """The shape check against ONNX's inference skips the pool's output and all after it."""
    def build(m, x):
        return m.node("Relu", [m.node("Conv", [_max_pool(m, x), m.weight((16, 3, 1, 1))], kernel_shape=[1, 1])])
    path = _model(tmp_path, build, (1, 3, 9, 3), "pool_conv")
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 3)).astype(np.float16)
    want = _onnxruntime(path, x.astype(np.float32))
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values())).astype(np.float32)
    assert got.shape == want.shape == (1, 16, 4, 1)
    # f16 weights (rounded on the NPU side only: <= u relative each) and one f16 rounding of
    # a 3-term sum: 3 * 2u of the largest product sum bounds it
    u = 2.0 ** -11
    bound = 6 * u * (np.abs(want) + np.abs(want).max())
    assert np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize("start, end, step", [(-5, 0, -2), (7, -9, -1), (-1, -2 ** 63, -1), (-9, 2, 2),
                                              (1, 99, -1), (3, -99, -2)])
def test_slice_clamps_start_and_end_as_the_spec_says(tmp_path, start, end, step):
    def build(m, x):
        ints = lambda v: m.init(np.asarray([v], np.int64))
        return m.node("Slice", [x, ints(start), ints(end), ints(-1), ints(step)])
    path = _model(tmp_path, build, (2, 5), "slice")
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    want = _onnxruntime(path, x)
    if want.size == 0:      # the old clamp made -5:0:-2 of 5 one element; empty, it is an
        imported = import_onnx(path, precision="f32")        # output the graph does not compute
        assert not imported.module.graphs
        assert [t.dims for t in imported.empty_outputs.values()] == [want.shape]
    else:
        np.testing.assert_array_equal(_imported(tmp_path, path, x), want)


def test_a_flip_compiles_and_runs(tmp_path):
    def build(m, x):
        ints = lambda v: m.init(np.asarray(v, np.int64))
        return m.node("Slice", [x, ints([-1, -1]), ints([-2 ** 63, -2 ** 63]), ints([2, 3]), ints([-1, -2])])
    path = _model(tmp_path, build, (1, 3, 4, 6), "flip")
    x = np.random.default_rng(2).standard_normal((1, 3, 4, 6)).astype(np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values()))
    np.testing.assert_array_equal(got, x[:, :, ::-1, ::-2])       # copies: exact


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("size, kernel, stride, pad", [(9, 3, 2, 1), (10, 2, 3, 0), (8, 3, 3, 1), (7, 2, 2, 0)])
def test_average_pool_ceil_mode_divides_as_onnxruntime(tmp_path, size, kernel, stride, pad, include_pad):
    """AveragePool with ceil_mode was refused.  Its extra window is padding at the end, as
    for MaxPool; with count_include_pad=0 (ONNX's default) the divisor counts the input
    elements only, which excluding that padding gives.  With count_include_pad=1 it was
    refused where ceil_mode adds a window: onnxruntime's divisor counts the declared pads
    but not the extension (a window's end clipped to the input plus the end pads), which
    the pads made zeros the window reads, and only the extension excluded, gives."""
    def build(m, x):
        return m.node("AveragePool", [x], kernel_shape=[kernel, kernel], strides=[stride, stride],
                      pads=[pad] * 4, ceil_mode=1, count_include_pad=include_pad)
    path = _model(tmp_path, build, (1, 3, size, size + 1), "avg")
    x = np.random.default_rng(3).standard_normal((1, 3, size, size + 1)).astype(np.float16)
    want = _onnxruntime(path, x.astype(np.float32))
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values())).astype(np.float32)
    assert got.shape == want.shape
    # a mean of at most 9 f16 values: an f32 sum (9 roundings of at most 2^-24 of a partial
    # sum, each at most 9 max|x|), an f32 divide, then one rounding to f16 (u of the value)
    u, eps32 = 2.0 ** -11, 2.0 ** -24
    bound = (u + eps32) * np.abs(want) + 9 * eps32 * 9 * float(np.abs(x).max()) + eps32
    assert np.all(np.abs(got - want) <= bound)


def test_average_pool_ceil_mode_counting_the_pads_pads_first(tmp_path):
    """count_include_pad=1 where ceil_mode adds a window: the declared pads as a Pad of
    zeros, the pool excluding only the padding ceil_mode adds; without declared pads the
    pool alone, excluding the extension."""
    def build(pads):
        return lambda m, x: m.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                                   count_include_pad=1, pads=pads)
    ops = import_onnx(_model(tmp_path, build([1, 0, 1, 0]), (1, 3, 8, 9), "padded")).module.graphs[0].ops
    pool = next(op for op in ops if op.kind == "AvgPool")
    assert [op.kind for op in ops if op.kind not in ("Parameter", "Result")] == ["Pad", "AvgPool"]
    assert (pool.attrs["pads_begin"], pool.attrs["pads_end"], pool.attrs["exclude_pad"]) == ((0, 0), (0, 1), True)
    ops = import_onnx(_model(tmp_path, build([0, 0, 0, 0]), (1, 3, 9, 9), "bare")).module.graphs[0].ops
    pool = next(op for op in ops if op.kind == "AvgPool")
    assert [op.kind for op in ops if op.kind not in ("Parameter", "Result")] == ["AvgPool"]
    assert (pool.attrs["pads_end"], pool.attrs["exclude_pad"]) == ((1, 1), True)
