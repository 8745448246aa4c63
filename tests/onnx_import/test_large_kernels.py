"""Pools beyond the NCE's 11 x 11 kernel as cascades of smaller pools
(``vpuc/fusion/large_kernels.py``, the NPU compiler's HandleLargeKernels).

MaxPool: the levels compose to the original window exactly (max picks one input), so the
simulated program equals onnxruntime bit for bit, and the levels equal the numpy reference
over sizes, kernels, pads and strides (hypothesis).  AvgPool: a side k = a * b as a mean of
a then a mean of b; the levels equal the reference up to float64 roundings, the simulated
program onnxruntime within the bound of the partial means' f16 rounding.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import event as note, given, settings, strategies as st

from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import sanitize
from vpuc.fusion.large_kernels import avg_pool_levels, max_pool_levels, split_side
from vpuc.ir.tasks import DpuOp
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import _max_pool
from vpuc.reference.graph_nn import avg_pool
from vpuc.verifier.dpu import MAX_KERNEL

U = 2.0 ** -11          # f16 unit roundoff
F32 = 2.0 ** -24        # f32 unit roundoff (the DPU accumulates in f32)


def _run(tmp_path, shape, kind, **attrs):
    """(simulated output, onnxruntime's, the program's DPU tasks) of one pool."""
    m = ModelBuilder(seed=0, opset=17)
    out = m.node(kind, [m.input("x", list(shape))], **attrs)
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float16)
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    tasks = [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]
    return x, sim.outputs[sanitize(out)].astype(np.float32), want, tasks


def _kernels(tasks):
    return {tuple(t.kernel) for t in tasks if t.op in (DpuOp.MAXPOOL, DpuOp.AVGPOOL,
                                                         DpuOp.DWCONV)}


MAX_CASES = {    # (input shape, ONNX attrs)
    "spp_13": ((1, 32, 19, 19), dict(kernel_shape=[13, 13], pads=[6, 6, 6, 6])),
    "odd_15_s2": ((1, 16, 23, 17), dict(kernel_shape=[15, 13], strides=[2, 3],
                                        pads=[7, 2, 3, 6])),
    "ceil_mode": ((1, 16, 20, 20), dict(kernel_shape=[12, 12], strides=[3, 3], ceil_mode=1,
                                        pads=[1, 1, 0, 0])),
    "three_levels": ((1, 16, 25, 9), dict(kernel_shape=[25, 3], pads=[0, 1, 0, 1])),
    "one_side": ((1, 16, 6, 40), dict(kernel_shape=[1, 16], strides=[1, 8])),
    # the whole H x W: the global max pool, in levels over the tiles (an AveragePool's
    # numerics: test_anysize_pools' avgpool_whole)
    "whole_window": ((1, 16, 12, 30), dict(kernel_shape=[12, 30], strides=[2, 2])),
}


@pytest.mark.parametrize("case", sorted(MAX_CASES))
def test_max_pool_beyond_the_limit_matches_onnxruntime_exactly(case, tmp_path):
    shape, attrs = MAX_CASES[case]
    _, got, want, tasks = _run(tmp_path, shape, "MaxPool", **attrs)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)          # max of f16 values: exact
    kernels = _kernels(tasks)
    assert kernels and max(max(k) for k in kernels) <= MAX_KERNEL
    if case == "spp_13":            # the NPU compiler's lit test: two 7 x 7 levels
        assert kernels == {(7, 7)}


def _pool_case(draw, kmax):
    k = (draw(st.integers(1, kmax)), draw(st.integers(1, kmax)))
    size = tuple(draw(st.integers(1, 40)) for _ in k)
    pb = tuple(draw(st.integers(0, ki - 1)) for ki in k)
    pe = tuple(draw(st.integers(0, ki - 1)) for ki in k)
    s = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    return k, size, pb, pe, s


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_max_pool_levels_compose_to_the_window(data):
    k, size, pb, pe, s = _pool_case(data.draw, 40)
    if any(n + b + e < ki for n, b, e, ki in zip(size, pb, pe, k)):
        return                                          # no output: not a valid pool
    attrs = {"kernel": k, "strides": s, "pads_begin": pb, "pads_end": pe}
    levels = max_pool_levels(attrs, size)
    assert levels is not None             # pads below the kernel always fit the levels
    x = np.random.default_rng(sum(size)).standard_normal((1, 2) + size).astype(np.float16)
    y = x
    for level in levels:
        assert max(level["kernel"]) <= MAX_KERNEL
        assert all(p < kk for p, kk in zip(level["pads_begin"] + level["pads_end"],
                                           level["kernel"] * 2))
        y = _max_pool(y, level)
        assert np.all(np.isfinite(y)), "no window of padding only"
    np.testing.assert_array_equal(y, _max_pool(x, attrs))


@pytest.mark.parametrize("k", range(1, 120))
def test_split_side_covers_the_side_in_the_fewest_levels(k):
    sides = split_side(k)
    assert sum(s - 1 for s in sides) == k - 1 and max(sides) <= MAX_KERNEL
    assert len(sides) == max(1, -(-(k - 1) // (MAX_KERNEL - 1)))
    assert max(sides) - min(sides) <= 1


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_avg_pool_levels_are_the_mean_when_they_apply(data):
    k, size, pb, pe, s = _pool_case(data.draw, 30)
    if data.draw(st.booleans()):         # a height that factors: k = a * b, a divides s
        a, b = data.draw(st.integers(2, 11)), data.draw(st.integers(2, 11))
        k, s = (a * b, k[1]), (a * data.draw(st.integers(1, 3)), s[1])
        size, pb, pe = (data.draw(st.integers(a * b, a * b + 30)), size[1]), (0, pb[1]), (0, pe[1])
    exclude = data.draw(st.booleans())
    if any(n + b + e < ki for n, b, e, ki in zip(size, pb, pe, k)):
        return
    attrs = {"kernel": k, "strides": s, "pads_begin": pb, "pads_end": pe,
             "exclude_pad": exclude}
    levels = avg_pool_levels(attrs, size)
    if levels is None:          # refused: a large side with padding or no exact factoring
        assert any(ki > MAX_KERNEL for ki in k)
        return
    event = "factored" if max(k) > MAX_KERNEL else "within the limit"
    note(event)
    x = np.random.default_rng(sum(size)).standard_normal((1, 2) + size)     # float64
    y = x
    for level in levels:
        assert max(level["kernel"]) <= MAX_KERNEL
        y = avg_pool(y, level)
    want = avg_pool(x, attrs)
    assert y.shape == want.shape
    # float64: each mean of at most 40 * 40 terms errs by a few 1e-13 of the inputs' max
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-12 * np.max(np.abs(x)))


def test_avg_pool_factoring_is_taken_where_exact():
    base = {"pads_begin": (0, 0), "pads_end": (0, 0), "exclude_pad": True}
    ok = avg_pool_levels({**base, "kernel": (12, 12), "strides": (12, 12)}, (24, 36))
    assert [lv["kernel"] for lv in ok] == [(6, 6), (2, 2)]
    assert [lv["strides"] for lv in ok] == [(6, 6), (2, 2)]
    assert avg_pool_levels({**base, "kernel": (13, 13), "strides": (13, 13)}, (26, 26)) is None
    assert avg_pool_levels({**base, "kernel": (12, 12), "strides": (1, 1)}, (24, 24)) is None
    assert avg_pool_levels({**base, "kernel": (12, 1), "strides": (1, 1),
                            "pads_begin": (1, 0)}, (24, 24)) is None


AVG_CASES = {
    "avg_12_s12": ((1, 32, 24, 36), dict(kernel_shape=[12, 12], strides=[12, 12])),
    "avg_one_output": ((1, 16, 14, 9), dict(kernel_shape=[14, 1])),   # 14 = 7 * 2, H out 1
    # a side within the limit keeps its padding (count_include_pad: the second level a dwconv)
    "avg_pad_small_side": ((1, 16, 7, 30), dict(kernel_shape=[3, 15], strides=[1, 15],
                                                pads=[1, 0, 1, 0], count_include_pad=1)),
}


@pytest.mark.parametrize("case", sorted(AVG_CASES))
def test_avg_pool_beyond_the_limit_matches_onnxruntime(case, tmp_path):
    shape, attrs = AVG_CASES[case]
    x, got, want, tasks = _run(tmp_path, shape, "AveragePool", **attrs)
    assert got.shape == want.shape
    assert max(max(k) for k in _kernels(tasks)) <= MAX_KERNEL
    # The partial means are rounded to f16 once (u of the largest partial, which the
    # second mean carries through with weight 1), each level's f32 sum errs by at most its
    # terms' count times 2**-24 of the largest input, the result's rounding is u |want|.
    terms = int(np.prod(attrs["kernel_shape"]))
    x_max = float(np.max(np.abs(x.astype(np.float32))))
    bound = U * np.abs(want) + U * x_max + 2 * terms * F32 * x_max
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)


REFUSED = {     # beyond the limit, no exact cascade: the located error names the node
    "avg_13_prime": (dict(kernel_shape=[13, 13]), "AveragePool"),
    "avg_12_stride1": (dict(kernel_shape=[12, 12]), "AveragePool"),
    "avg_12_padded": (dict(kernel_shape=[12, 12], strides=[12, 12], pads=[1, 1, 1, 1]),
                      "AveragePool"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_avg_pool_without_an_exact_cascade_is_an_error_at_its_node(case, tmp_path):
    attrs, kind = REFUSED[case]
    m = ModelBuilder(seed=0, opset=17)
    m.output(m.node(kind, [m.input("x", [1, 16, 26, 26])], **attrs))
    with pytest.raises(VpucError) as err:
        api.compile(m.save(tmp_path / "m.onnx", "m"))
    text = str(err.value)
    assert "m.onnx (imported):" in text and "beyond the NCE's 11 x 11 window" in text
    assert "AveragePool whose sides beyond it are a * b" in text
