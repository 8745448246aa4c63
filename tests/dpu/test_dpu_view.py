"""Views: index expressions, masks, and the strided vs indexed gathers."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from runtime_sim.dpu import IndexExpr, View, ViewDim, to_layout
from vpuc.diagnostics import VpucError


def _conv_src_view(in_h=5, in_w=6, stride=(2, 1), dilation=(1, 2), pad=(1, 2), out=(3, 4), kernel=(3, 2)):
    """src[n, c, ih, iw] seen as (n, c, kh, kw, oh, ow)."""
    dims = (ViewDim("n", 2, "M"), ViewDim("c", 3, "K"), ViewDim("kh", kernel[0], "K"),
            ViewDim("kw", kernel[1], "K"), ViewDim("oh", out[0], "M"), ViewDim("ow", out[1], "M"))
    exprs = (IndexExpr.var("n"), IndexExpr.var("c"),
             IndexExpr.of(("oh", stride[0]), ("kh", dilation[0]), offset=-pad[0]),
             IndexExpr.of(("ow", stride[1]), ("kw", dilation[1]), offset=-pad[1]))
    return View(dims, (2, 3, in_h, in_w), exprs)


def _loop_gather(view: View, tensor: np.ndarray, fill: float) -> np.ndarray:
    """Evaluate the view element by element from its definition."""
    out = np.empty(view.shape, dtype=tensor.dtype)
    names = [d.name for d in view.dims]
    for index in product(*map(range, view.shape)):
        env = dict(zip(names, index))
        t = []
        for expr, size in zip(view.exprs, tensor.shape):
            numerator = sum(coef * env[name] for name, coef in expr.terms) + expr.offset
            value = numerator // expr.divisor
            ok = numerator % expr.divisor == 0 and 0 <= value < size
            t.append(value if ok else None)
        out[index] = fill if None in t else tensor[tuple(t)]
    return out


def test_index_expr_text():
    assert str(IndexExpr.of(("oh", 2), ("kh", 1), offset=-1)) == "oh*2 + kh - 1"
    assert str(IndexExpr.of(("ih", 1), ("kh", -2), offset=1, divisor=2)) == "(ih - kh*2 + 1) / 2"
    assert str(IndexExpr()) == "0"
    assert str(IndexExpr.of(("kd", -1), offset=3)) == "-kd + 3"


@pytest.mark.parametrize("strided", [True, False])
def test_conv_view_gather_matches_definition(strided):
    view = _conv_src_view()
    tensor = np.random.default_rng(0).standard_normal(view.tensor_shape)
    got = view.gather(tensor, fill=-7.0, strided=strided)
    np.testing.assert_array_equal(got, _loop_gather(view, tensor, -7.0))


def test_strided_gather_copies_nothing_without_padding():
    view = _conv_src_view(pad=(0, 0), out=(2, 3))
    tensor = np.random.default_rng(1).standard_normal(view.tensor_shape)
    assert view.mask() is None
    got = view.gather(tensor)
    assert np.shares_memory(got, tensor) and not got.flags.writeable
    np.testing.assert_array_equal(got, _loop_gather(view, tensor, 0.0))


def test_negative_coefficients_take_the_strided_path():
    # t = 4 - k + i: a reversed window, like backward-data with stride 1.
    dims = (ViewDim("i", 4), ViewDim("k", 3))
    view = View(dims, (6,), (IndexExpr.of(("i", 1), ("k", -1), offset=1),))
    tensor = np.arange(6.0) + 1
    for strided in (True, False):
        np.testing.assert_array_equal(view.gather(tensor, strided=strided), _loop_gather(view, tensor, 0.0))


def test_divided_expressions_mask_inexact_division():
    # od = (id + 1 - kd) / 2: backward-data with stride 2.
    dims = (ViewDim("id", 7), ViewDim("kd", 3))
    view = View(dims, (4,), (IndexExpr.of(("id", 1), ("kd", -1), offset=1, divisor=2),))
    tensor = np.arange(4.0) + 1
    np.testing.assert_array_equal(view.gather(tensor), _loop_gather(view, tensor, 0.0))
    with pytest.raises(VpucError, match="no strided form"):
        view.gather(tensor, strided=True)


def test_offsets_and_mask_are_the_im2col_gather():
    view = _conv_src_view()
    tensor = np.random.default_rng(2).standard_normal(view.tensor_shape)
    offsets, mask = view.offsets()
    assert offsets.shape == mask.shape == view.shape
    expected = _loop_gather(view, tensor, 0.0)
    np.testing.assert_array_equal(np.where(mask, tensor.ravel()[offsets], 0.0), expected)
    assert mask.sum() < mask.size  # the padding really is masked


@pytest.mark.parametrize("layout", ["NHWC", "nChw2c", "NCHW4c"])
def test_gather_from_stored_layouts(layout):
    view = _conv_src_view()
    tensor = np.random.default_rng(3).standard_normal(view.tensor_shape)
    stored = to_layout(tensor, layout)
    np.testing.assert_array_equal(view.gather_from(stored, layout), view.gather(tensor))


@pytest.mark.parametrize("make, message", [
    (lambda: View((ViewDim("a", 2), ViewDim("a", 3)), (2,), (IndexExpr.var("a"),)), "duplicate"),
    (lambda: View((ViewDim("a", 2),), (2, 2), (IndexExpr.var("a"),)), "index expressions"),
    (lambda: View((ViewDim("a", 2),), (2,), (IndexExpr.var("b"),)), "unknown dim"),
    (lambda: View((ViewDim("a", 0),), (2,), (IndexExpr.var("a"),)), "size 0"),
    (lambda: View((ViewDim("a", 2),), (2,), (IndexExpr.of(("a", 1), divisor=0),)), "divides by 0"),
])
def test_invalid_views_raise(make, message):
    with pytest.raises(VpucError, match=message):
        make()


def test_gather_checks_tensor_shape():
    with pytest.raises(VpucError, match="tensor shape"):
        _conv_src_view().gather(np.zeros((2, 3, 5, 5)))
