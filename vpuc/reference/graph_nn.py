"""Numpy semantics of the graph ops of imported models (``vpuc/ir/graph_ops_nn.py``).

Each function takes its operands already widened to the compute type (float32,
or float64 for f64 tensors) and returns the unrounded result; ``graph.py``'s
``run_op`` rounds it to the stored type like every other op.  Where ONNX and
OpenVINO define an op by formula the formula is quoted; the resize
coordinate modes are ONNX's Resize (opset 11+) definitions.
"""

from __future__ import annotations

import numpy as np

from vpuc.diagnostics import VpucError


def _window(x, axis, start, stride, count, dilation=1):
    index = [slice(None)] * x.ndim
    first = start * dilation
    index[axis] = slice(first, first + stride * (count - 1) + 1, stride)
    return x[tuple(index)]


def _pad_hw(x, attrs, value=0.0):
    (pb0, pb1), (pe0, pe1) = attrs["pads_begin"], attrs["pads_end"]
    return np.pad(x, ((0, 0), (0, 0), (pb0, pe0), (pb1, pe1)), constant_values=value)


def group_conv(x, w, attrs):
    """Convolution of each group of input channels with its own weights (GOIHW)."""
    groups, per_out, per_in, kh, kw = w.shape
    (s0, s1), (d0, d1) = attrs["strides"], attrs["dilations"]
    xp = _pad_hw(x, attrs)
    oh = (xp.shape[2] - d0 * (kh - 1) - 1) // s0 + 1
    ow = (xp.shape[3] - d1 * (kw - 1) - 1) // s1 + 1
    xg = xp.reshape(x.shape[0], groups, per_in, *xp.shape[2:])
    out = np.zeros((x.shape[0], groups, per_out, oh, ow), x.dtype)
    for i in range(kh):
        rows = _window(xg, 3, i, s0, oh, d0)
        for j in range(kw):
            patch = _window(rows, 4, j, s1, ow, d1)          # N G I OH OW
            out += np.einsum("ngihw,goi->ngohw", patch, w[:, :, :, i, j])
    return out.reshape(x.shape[0], groups * per_out, oh, ow)


def deconv(x, w, attrs):
    """ConvolutionBackpropData: every input pixel scatters w * x into a stride-spaced
    output grid, which is then cropped by the pads (ONNX ConvTranspose)."""
    (s0, s1), (d0, d1) = attrs["strides"], attrs["dilations"]
    (pb0, pb1), (pe0, pe1) = attrs["pads_begin"], attrs["pads_end"]
    (op0, op1) = attrs["output_padding"]
    n, _, h, wd = x.shape
    kh, kw = w.shape[2:]
    full_h, full_w = (h - 1) * s0 + d0 * (kh - 1) + 1 + op0, (wd - 1) * s1 + d1 * (kw - 1) + 1 + op1
    out = np.zeros((n, w.shape[1], full_h, full_w), x.dtype)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("nchw,co->nohw", x, w[:, :, i, j])
            out[:, :, i * d0:i * d0 + (h - 1) * s0 + 1:s0, j * d1:j * d1 + (wd - 1) * s1 + 1:s1] += contrib
    return out[:, :, pb0:full_h - pe0, pb1:full_w - pe1]


def group_deconv(x, w, attrs):
    """GroupConvolutionBackpropData: each group of input channels transposed-convolved
    with its own weights [G, I/G, O/G, KH, KW], the groups' outputs concatenated."""
    groups, per_in = w.shape[:2]
    return np.concatenate([deconv(x[:, g * per_in:(g + 1) * per_in], w[g], attrs)
                           for g in range(groups)], axis=1)


def avg_pool(x, attrs):
    (k0, k1), (s0, s1) = attrs["kernel"], attrs["strides"]
    xp = _pad_hw(x, attrs)
    ones = _pad_hw(np.ones((1, 1) + x.shape[2:], x.dtype), attrs)
    oh, ow = (xp.shape[2] - k0) // s0 + 1, (xp.shape[3] - k1) // s1 + 1
    total = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    count = np.zeros((1, 1, oh, ow), x.dtype)
    for i in range(k0):
        rows, ones_rows = _window(xp, 2, i, s0, oh), _window(ones, 2, i, s0, oh)
        for j in range(k1):
            total += _window(rows, 3, j, s1, ow)
            count += _window(ones_rows, 3, j, s1, ow)
    return total / (count if attrs["exclude_pad"] else np.asarray(k0 * k1, x.dtype))


def reduce(kind):
    func = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max}[kind]

    def run(args, attrs):
        return func(args[0], axis=tuple(attrs["axes"]), keepdims=attrs["keep_dims"])
    return run


def slice_op(x, attrs):
    return x[tuple(slice(b, e, s) for b, e, s in zip(attrs["begin"], attrs["end"], attrs["step"]))]


def source_coords(out_size: int, in_size: int, mode: str, scale: float | None = None) -> np.ndarray:
    """The input coordinate each output index samples (ONNX Resize's coordinate modes).
    ``scale`` is the resize's own scale when it has one (ONNX computes coordinates from
    the given scale, not from the rounded sizes); else out_size / in_size."""
    i = np.arange(out_size, dtype=np.float64)
    if scale is None:
        # the scale is out/in: each coordinate as one division of exact integers, so one
        # that is a tie in real arithmetic (7 -> 9, output 4: 4.5 * 7 / 9 = 3.5) is exactly
        # that, as the spec's formula gives it; dividing by the rounded 9/7 gave 3.4999...
        if mode in ("half_pixel", "pytorch_half_pixel"):
            coords = ((2 * i + 1) * in_size - out_size) / (2 * out_size)
            return coords if mode == "half_pixel" or out_size > 1 else np.zeros(out_size)
        if mode == "tf_half_pixel_for_nn":
            return (2 * i + 1) * in_size / (2 * out_size)
        if mode == "asymmetric":
            return i * in_size / out_size
    scale = out_size / in_size if scale is None else scale
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_size > 1 else np.zeros(out_size)
    if mode == "align_corners":
        return i * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros(out_size)
    if mode == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    return i / scale                                           # asymmetric


def _nearest_index(coords: np.ndarray, in_size: int, mode: str) -> np.ndarray:
    if mode == "floor":
        index = np.floor(coords)
    elif mode == "ceil":
        index = np.ceil(coords)
    elif mode == "round_prefer_ceil":
        index = np.floor(coords + 0.5)
    else:                                                      # round_prefer_floor
        index = np.ceil(coords - 0.5)
    return np.clip(index, 0, in_size - 1).astype(np.int64)


def _axis_scale(attrs, axis: int) -> float | None:
    scales = attrs.get("scales") or ()
    return float(scales[axis]) if scales else None


def nearest_indices(attrs, in_shape, axis: int) -> np.ndarray:
    """The input index each output index of ``axis`` copies (nearest Interpolate); an
    axis the resize keeps (same size, no scale of its own) is copied unchanged."""
    if attrs["shape"][axis] == in_shape[axis] and _axis_scale(attrs, axis) in (None, 1.0):
        return np.arange(in_shape[axis])
    coords = source_coords(attrs["shape"][axis], in_shape[axis],
                           attrs["coordinate_transformation_mode"], _axis_scale(attrs, axis))
    return _nearest_index(coords, in_shape[axis], attrs["nearest_mode"])


def linear_taps(attrs, in_shape, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, frac) of ``axis``: output index i is x[low]*(1-frac) + x[high]*frac."""
    in_size = in_shape[axis]
    coords = np.clip(source_coords(attrs["shape"][axis], in_size,
                                   attrs["coordinate_transformation_mode"],
                                   _axis_scale(attrs, axis)), 0, in_size - 1)
    low = np.floor(coords).astype(np.int64)
    high = np.minimum(low + 1, in_size - 1)
    return low, high, coords - low


def interpolate(x, attrs):
    shape = attrs["shape"]
    if attrs["mode"] == "nearest":
        out = x
        for axis in range(len(shape)):
            out = np.take(out, nearest_indices(attrs, x.shape, axis), axis=axis)
        return out
    out = x
    for axis in (2, 3):                                        # separable bilinear
        low, high, frac = linear_taps(attrs, x.shape, axis)
        bshape = [1] * x.ndim
        bshape[axis] = shape[axis]
        frac = frac.astype(x.dtype).reshape(bshape)
        out = np.take(out, low, axis=axis) * (1 - frac) + np.take(out, high, axis=axis) * frac
    return out


def depth_to_space(x, attrs):
    b, (n, c, h, w) = attrs["block_size"], x.shape
    if attrs["mode"] == "blocks_first":                        # ONNX DCR
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:                                                      # ONNX CRD
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(x, attrs):
    b, (n, c, h, w) = attrs["block_size"], x.shape
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


def log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def mvn(x, attrs):
    """(x - mean) / sqrt(var + eps) over ``axes`` (eps outside the root if asked)."""
    axes = tuple(attrs["axes"])
    centered = x - np.mean(x, axis=axes, keepdims=True)
    if not attrs["normalize_variance"]:
        return centered
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    eps = np.asarray(attrs["eps"], x.dtype)
    return centered / (np.sqrt(var + eps) if attrs["eps_mode"] == "inside_sqrt" else np.sqrt(var) + eps)


def _softplus(x):
    return np.logaddexp(0, x).astype(x.dtype)


NN_UNARY = {
    "Log": lambda x, a: np.log(x),
    "SoftPlus": lambda x, a: _softplus(x),
    "Mish": lambda x, a: x * np.tanh(_softplus(x)),
}
NN_LAYERS = {
    "GroupConvolution": lambda args, a: group_conv(args[0], args[1], a),
    "ConvolutionBackpropData": lambda args, a: deconv(args[0], args[1], a),
    "GroupConvolutionBackpropData": lambda args, a: group_deconv(args[0], args[1], a),
    "AvgPool": lambda args, a: avg_pool(args[0], a),
    "ReduceMean": reduce("ReduceMean"), "ReduceSum": reduce("ReduceSum"), "ReduceMax": reduce("ReduceMax"),
    "Concat": lambda args, a: np.concatenate(args, axis=a["axis"]),
    "Slice": lambda args, a: slice_op(args[0], a),
    "Gather": lambda args, a: np.take(args[0], a["indices"], axis=a["axis"]),
    "IndexedGather": lambda args, a: indexed_gather(args[0], args[1], a["axis"]),
    "TopK": lambda args, a: topk(args[0], a),
    "Interpolate": lambda args, a: interpolate(args[0], a),
    "DepthToSpace": lambda args, a: depth_to_space(args[0], a),
    "SpaceToDepth": lambda args, a: space_to_depth(args[0], a),
    "LogSoftmax": lambda args, a: log_softmax(args[0], a["axis"]),
    "MVN": lambda args, a: mvn(args[0], a),
}


def topk(x: np.ndarray, attrs) -> np.ndarray:
    """TopK along the last axis, as onnxruntime orders it: sorted best first, ties to the
    lower index, every NaN above +inf (first for largest, last for smallest), -0 tying
    +0; ``part`` says whether the values or the (i32) indices are the result."""
    k, largest = attrs["k"], attrs["largest"]
    nan = np.isnan(x)
    key = np.where(nan, 0.0, x.astype(np.float64)) + 0.0
    key = np.where(nan, np.inf, key if largest else -key)
    rank = np.where(nan, 1 if largest else -1, 0)
    position = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    order = np.lexsort((position, -key, -rank), axis=-1)[..., :k]
    if attrs["part"] == "indices":
        return order.astype(np.int32)
    return np.take_along_axis(x, order, axis=-1)


def indexed_gather(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """ONNX Gather on run-time indices: negative ones count from the end; one outside
    [-size, size) is an error naming it (the kernel's E_INDEX)."""
    size = data.shape[axis]
    idx = np.asarray(indices).astype(np.int64)
    bad = idx[(idx < -size) | (idx >= size)]
    if bad.size:
        raise VpucError(f"IndexedGather: index {int(bad.flat[0])} is outside [{-size}, {size}) "
                        f"of axis {axis % data.ndim}")
    return np.take(data, np.where(idx < 0, idx + size, idx), axis=axis)
