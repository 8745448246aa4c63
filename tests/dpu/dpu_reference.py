"""Straightforward loop references for the DPU numerics tests.

Written from the definitions with explicit Python loops over output pixels and
kernel taps (vectorized only over channels), independent of runtime_sim.dpu's
views and GEMM formulation.  All in float64.
"""

from __future__ import annotations

from itertools import product

import numpy as np


def out_size(in_size, kernel, stride, pad_before, pad_after, dilation):
    return [(i + pb + pa - (k - 1) * d - 1) // s + 1
            for i, k, s, pb, pa, d in zip(in_size, kernel, stride, pad_before, pad_after, dilation)]


def _taps(x_shape, w_shape, stride, pad_before, pad_after, dilation, groups):
    """Yield (n, group channel slices, output index, kernel index, input index) for every
    in-bounds tap of the convolution."""
    in_size, kernel = x_shape[2:], w_shape[2:]
    outs = out_size(in_size, kernel, stride, pad_before, pad_after, dilation)
    icg, ocg = x_shape[1] // groups, w_shape[0] // groups
    for n in range(x_shape[0]):
        for g in range(groups):
            ics, ocs = slice(g * icg, (g + 1) * icg), slice(g * ocg, (g + 1) * ocg)
            for o in product(*map(range, outs)):
                for k in product(*map(range, kernel)):
                    i = tuple(o[d] * stride[d] - pad_before[d] + k[d] * dilation[d] for d in range(len(o)))
                    if all(0 <= i[d] < in_size[d] for d in range(len(i))):
                        yield n, ics, ocs, o, k, i


def conv_fwd(x, w, stride, pad_before, pad_after, dilation, groups):
    outs = out_size(x.shape[2:], w.shape[2:], stride, pad_before, pad_after, dilation)
    y = np.zeros([x.shape[0], w.shape[0], *outs])
    for n, ics, ocs, o, k, i in _taps(x.shape, w.shape, stride, pad_before, pad_after, dilation, groups):
        y[(n, ocs) + o] += w[(ocs, slice(None)) + k] @ x[(n, ics) + i]
    return y


def conv_bwd_data(dy, w, x_shape, stride, pad_before, pad_after, dilation, groups):
    """The transposed convolution: every tap scatters dy back through the weights."""
    dx = np.zeros(x_shape)
    for n, ics, ocs, o, k, i in _taps(x_shape, w.shape, stride, pad_before, pad_after, dilation, groups):
        dx[(n, ics) + i] += w[(ocs, slice(None)) + k].T @ dy[(n, ocs) + o]
    return dx


def conv_bwd_weights(x, dy, w_shape, stride, pad_before, pad_after, dilation, groups):
    dw = np.zeros(w_shape)
    for n, ics, ocs, o, k, i in _taps(x.shape, w_shape, stride, pad_before, pad_after, dilation, groups):
        dw[(ocs, slice(None)) + k] += np.outer(dy[(n, ocs) + o], x[(n, ics) + i])
    return dw


def pool(x, kernel, stride, pads, kind, exclude_pad=True):
    """pads = (top, bottom, left, right); kind is "max" or "avg"."""
    top, bottom, left, right = pads
    n, c, h, w = x.shape
    oh, ow = out_size((h, w), kernel, stride, (top, left), (bottom, right), (1, 1))
    y = np.zeros((n, c, oh, ow))
    for b, ch, i, j in product(range(n), range(c), range(oh), range(ow)):
        cells = []
        for kh, kw in product(range(kernel[0]), range(kernel[1])):
            ih, iw = i * stride[0] - top + kh, j * stride[1] - left + kw
            if 0 <= ih < h and 0 <= iw < w:
                cells.append(x[b, ch, ih, iw])
        if kind == "max":
            y[b, ch, i, j] = max(cells)
        else:
            y[b, ch, i, j] = sum(cells) / (len(cells) if exclude_pad else kernel[0] * kernel[1])
    return y


def matmul(a, b):
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            c[i, j] = sum(a[i, p] * b[p, j] for p in range(k))
    return c
