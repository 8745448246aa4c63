"""Backward convolutions as GEMMs (see conv.py): BWD_D (diff_src, the transposed
convolution of diff_dst) and BWD_W (diff_weights), plus diff_bias.  BWD_D's A view divides
its index expressions by the stride (view.py's "stride condition"); BWD_W's A^T is FWD's
src view."""

from __future__ import annotations

import numpy as np

from vpuc.diagnostics import VpucError

from . import numerics
from .conv import ConvProblem, _channels_first, _im2col, _to_3d, make_problem, src_view
from .view import IndexExpr, View, ViewDim


def diff_dst_view(p: ConvProblem) -> View:
    """BWD_D's A view: diff_dst seen as (g, oc, kd, kh, kw, mb, id, ih, iw) with
    od = (id + PD - kd*DD) / SD, valid only where the division is exact."""
    dims = [ViewDim("g", p.groups), ViewDim("oc", p.ocg, "K")]
    dims += [ViewDim(k, n, "K") for k, n in zip(("kd", "kh", "kw"), p.kernel)]
    dims += [ViewDim("mb", p.mb, "M")]
    dims += [ViewDim(i, n, "M") for i, n in zip(("id", "ih", "iw"), p.in_size)]
    spatial = [IndexExpr.of((i, 1), (k, -d), offset=lo, divisor=s)
               for i, k, s, d, lo in zip(("id", "ih", "iw"), ("kd", "kh", "kw"),
                                         p.stride, p.dilation, p.pad_before)]
    channel = IndexExpr.of(("g", p.ocg), ("oc", 1))
    return View(tuple(dims), (p.mb, p.oc) + p.out_size, (IndexExpr.var("mb"), channel, *spatial))



def conv_backward_data(diff_dst: np.ndarray, weights: np.ndarray, src_shape, *, stride=1, padding=0,
                       dilation=1, groups: int = 1, out_dtype=None) -> np.ndarray:
    """diff_src of shape ``src_shape`` (the transposed convolution of diff_dst)."""
    numerics.check_input(diff_dst, "diff_dst")
    numerics.check_input(weights, "conv weights")
    p = make_problem(src_shape, weights.shape, stride=stride, padding=padding, dilation=dilation,
                     groups=groups)
    if tuple(diff_dst.shape) != p.dst_shape():
        raise VpucError(f"conv backward-data: diff_dst shape {tuple(diff_dst.shape)} "
                        f"!= expected {p.dst_shape()}")
    dtype = numerics.compute_dtype(diff_dst, weights)
    a = _im2col(diff_dst_view(p), _to_3d(numerics.to_compute(diff_dst, dtype), p.spatial_rank))
    # B^T: weights as (g, ic, oc.kd.kh.kw).
    w = numerics.to_compute(weights, dtype).reshape(p.groups, p.ocg, p.icg, -1)
    w = w.transpose(0, 2, 1, 3).reshape(p.groups, p.icg, -1)
    result = _channels_first(np.matmul(w, a), p.mb).reshape(p.src_shape())
    return numerics.round_to(result, diff_dst.dtype if out_dtype is None else out_dtype)


def conv_backward_weights(src: np.ndarray, diff_dst: np.ndarray, weights_shape, *, stride=1, padding=0,
                          dilation=1, groups: int = 1, out_dtype=None) -> np.ndarray:
    """diff_weights of shape ``weights_shape``: sum over mb and output pixels of diff_dst x src."""
    numerics.check_input(src, "conv source")
    numerics.check_input(diff_dst, "diff_dst")
    p = make_problem(src.shape, weights_shape, stride=stride, padding=padding, dilation=dilation,
                     groups=groups)
    if tuple(diff_dst.shape) != p.dst_shape():
        raise VpucError(f"conv backward-weights: diff_dst shape {tuple(diff_dst.shape)} "
                        f"!= expected {p.dst_shape()}")
    dtype = numerics.compute_dtype(src, diff_dst)
    a = _im2col(src_view(p), _to_3d(numerics.to_compute(src, dtype), p.spatial_rank))
    # B^T: diff_dst as (g, oc, mb.od.oh.ow); the GEMM's K runs over batch and pixels.
    dy = numerics.to_compute(diff_dst, dtype).reshape(p.mb, p.groups, p.ocg, -1)
    dy = dy.transpose(1, 2, 0, 3).reshape(p.groups, p.ocg, -1)
    result = np.matmul(dy, a.swapaxes(-1, -2))
    return numerics.round_to(result.reshape(p.weights_shape()), src.dtype if out_dtype is None else out_dtype)


def conv_backward_bias(diff_dst: np.ndarray, out_dtype=None) -> np.ndarray:
    """diff_bias: diff_dst summed over everything but channels."""
    numerics.check_input(diff_dst, "diff_dst")
    dtype = numerics.compute_dtype(diff_dst)
    axes = (0,) + tuple(range(2, diff_dst.ndim))
    result = numerics.to_compute(diff_dst, dtype).sum(axis=axes)
    return numerics.round_to(result, diff_dst.dtype if out_dtype is None else out_dtype)
