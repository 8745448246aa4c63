"""LRN (local response normalization across channels, opsets 1 and 13: one form).

ONNX defines, for an input ``x`` of shape ``[N, C, H, W]``,

    square_sum[n, c, h, w] = sum of x[n, i, h, w]^2 for i in
                             [max(0, c - floor((size - 1) / 2)), min(C - 1, c + ceil((size - 1) / 2))]
    y = x / (bias + alpha / size * square_sum) ^ beta

(AlexNet, ZFNet and Inception v1 use it after their first layers).  The channel
window's sum is a linear map over the channels at each pixel: a 1 x 1 Convolution
of ``x * x`` with a banded 0/1 weight matrix ``W[c, i] = 1`` for ``i`` in ``c``'s
window, which the DPU runs at its MAC rate with f32 accumulation (0 and 1 are exact
in f16, so the sum is rounded once, to f16).  The rest is elementwise,
``y = x * (bias + alpha / size * s) ^ -beta``, which the Snippets pipeline fuses into
generated ACT SHAVE kernels (the convolution's epilogue; ``Power`` with a constant
exponent is ``PowerStatic``), each op rounded to the graph's f16 as the reference
does.  ``x * x`` is one more elementwise op before the convolution (AlexNet's runs as a
DPU eltwise Multiply).

``alpha / size`` stays out of the weights: at AlexNet's 1e-4 / 5 it is an f16
subnormal with 3 significant digits, while 0/1 weights are exact.  The square is an
f16 value: a window's squares overflow f16 when they sum beyond 65504 (|x| beyond
about 114 for size 5), as the NPU's own f16 LRN would.
"""

from __future__ import annotations

import numpy as np


def channel_window(channels: int, size: int) -> np.ndarray:
    """The ``[C, C, 1, 1]`` 0/1 weights whose 1 x 1 convolution sums each channel's
    window: output ``c`` reads inputs ``c - floor((size - 1) / 2)`` to
    ``c + ceil((size - 1) / 2)``, clipped to the channels there are."""
    below, above = (size - 1) // 2, size // 2          # floor and ceil of (size - 1) / 2
    c = np.arange(channels)
    offset = c[None, :] - c[:, None]                     # input i minus output c
    band = (offset >= -below) & (offset <= above)
    return band.astype(np.float32)[:, :, None, None]


def _lrn(b, node, attrs):
    size = attrs["size"]
    alpha, beta = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    shape = b.shape(node.input[0])
    if len(shape) != 4:
        raise b.error(f"LRN of a rank-{len(shape)} input; vpuc lowers the [N, C, H, W] form only "
                      "(its channel window is a 1 x 1 convolution)")
    if size < 1:
        raise b.error(f"LRN size {size} must be at least 1")
    x = b.value(node.input[0])
    out = node.output[0]
    square = b.op("Multiply", [x, x])
    window = b.constant(channel_window(shape[1], size), f"{out}.window")
    square_sum = b.op("Convolution", [square, window],
                      {"strides": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0),
                       "dilations": (1, 1)})
    scale = b.constant(np.asarray(alpha / size, np.float32), f"{out}.alpha_over_size")
    base = b.op("Add", [b.op("Multiply", [square_sum, scale]),
                        b.constant(np.asarray(bias, np.float32), f"{out}.bias")])
    factor = b.op("Power", [base, b.constant(np.asarray(-beta, np.float32), f"{out}.minus_beta")])
    b.op("Multiply", [x, factor], out=out)


LRN_CONVERTERS = {"LRN": _lrn}
