"""Ops of real detector and transformer exports, composed from graph ops with constant masks.

- Resize with ``coordinate_transformation_mode = tf_crop_and_resize``: the constant ``roi``
  gives each output position a constant source coordinate, ``start (L - 1) + i (end - start)
  (L - 1) / (L' - 1)`` (the middle of the box when ``L' = 1``), computed in f32 in the order
  onnxruntime computes it.  Each resized axis is then a ``Gather`` of constant rows
  (nearest: the rounded coordinate, by ``nearest_mode``) or two Gathers weighted by the
  coordinate's fraction (linear: ``x[lo] (1 - f) + x[lo + 1] f``, one axis after another,
  which is the multilinear interpolation); a position whose coordinate on any axis falls
  outside ``[0, L - 1]`` takes ``extrapolation_value`` by a ``Select`` on a constant mask.
  The other modes stay with ``convert_nn.py``'s Interpolate.
- Trilu: ``Select`` of the data and 0 by the constant triangle ``j - i >= k`` (upper) or
  ``j - i <= k`` (lower) over the last two dims: exact, and 0 (not NaN) for an inf removed.
- LpPool / GlobalLpPool: ``|x|^p`` (``x * x`` for p = 2, ``|x|`` for p = 1), summed over
  each window by a depthwise ``GroupConvolution`` of ones (padding adds zeros, as
  onnxruntime's does; the DPU sums in f32 and rounds once) or by ``ReduceSum`` over the
  spatial axes, then the p-th root (``Sqrt`` for 2, none for 1).
- CenterCropPad: per axis a ``Slice`` of the centre (start ``(d - s) // 2``) or a zero
  ``Pad`` (``(s - d) // 2`` before, the rest after), as ONNX's reference does.
- OneHot with constant indices and depth: ``Select`` between the values' on and off
  entries by the constant one-hot mask (when the values are constant too, the whole node
  was folded at import).

``EXTRA_CONVERTERS`` also holds ScatterND, ScatterElements and CumProd
(``convert_scatter.py``) and TopK (``convert_topk.py``).
"""

from __future__ import annotations

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_layers import ceil_extra
from vpuc.onnx_import.convert_scatter import SCATTER_CONVERTERS
from vpuc.onnx_import.convert_topk import TOPK_CONVERTERS

_ROUNDING = {
    "round_prefer_floor": lambda c: np.where(c - np.floor(c) == 0.5, np.floor(c), np.round(c)),
    "round_prefer_ceil": lambda c: np.where(c - np.floor(c) == 0.5, np.ceil(c), np.round(c)),
    "floor": np.floor, "ceil": np.ceil,
}


def _input(node, i: int) -> str | None:
    return node.input[i] if len(node.input) > i and node.input[i] else None


def _ints(b: GraphBuilder, name: str, what: str) -> np.ndarray:
    values = np.asarray(b.array(name))
    if not np.issubdtype(values.dtype, np.integer):
        raise b.error(f"{what} '{name}' must be integers; got {values.dtype}")
    return values.astype(np.int64)


def _along(axis: int, rank: int, values: np.ndarray) -> np.ndarray:
    """``values`` as a constant shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = values.size
    return values.reshape(shape)


def _crop_sizes(b: GraphBuilder, node, shape) -> list[int]:
    if _input(node, 3):
        sizes = [int(s) for s in _ints(b, node.input[3], "Resize sizes").reshape(-1)]
    elif _input(node, 2) and b.array(node.input[2]).size:
        sizes = [int(np.floor(d * float(s))) for d, s in zip(shape, b.array(node.input[2]).reshape(-1))]
    else:
        raise b.error("Resize needs constant scales or sizes")
    if len(sizes) != len(shape) or min(sizes) < 1:
        raise b.error(f"Resize to {sizes} does not give every one of the {len(shape)} dims a size >= 1")
    return sizes


def _crop_coordinates(start: float, end: float, size: int, out: int) -> np.ndarray:
    """tf_crop_and_resize's source coordinates, in f32 as onnxruntime evaluates them."""
    f32 = np.float32
    if out == 1:
        return np.asarray([0.5 * (float(f32(start)) + float(f32(end))) * (size - 1)], np.float32)
    i = np.arange(out, dtype=np.float32)
    span = (i * (f32(end) - f32(start)) * f32(size - 1)) / f32(out - 1)
    return (f32(start) * f32(size - 1) + span).astype(np.float32)


def _crop_and_resize(b: GraphBuilder, node, attrs) -> None:
    shape = b.shape(node.input[0])
    rank = len(shape)
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise b.error(f"Resize mode '{mode}' is not supported; supported: nearest, linear")
    if attrs.get("exclude_outside", 0):
        raise b.error("Resize exclude_outside is not supported")
    if not _input(node, 1):
        raise b.error("Resize tf_crop_and_resize needs the roi input")
    roi = np.asarray(b.array(node.input[1]), np.float64).reshape(-1)
    if roi.size != 2 * rank:
        raise b.error(f"Resize roi has {roi.size} values; tf_crop_and_resize needs {2 * rank} "
                      "(a start per axis, then an end per axis)")
    sizes = _crop_sizes(b, node, shape)
    rounding = _ROUNDING[attrs.get("nearest_mode", "round_prefer_floor")]
    fill = float(attrs.get("extrapolation_value", 0.0))
    y = b.value(node.input[0])
    inside = np.ones([1] * rank, bool)
    for axis, (size, out) in enumerate(zip(shape, sizes)):
        coords = _crop_coordinates(roi[axis], roi[rank + axis], size, out)
        valid = (coords >= 0) & (coords <= size - 1)
        inside = inside & _along(axis, rank, valid)
        held = np.clip(coords, 0, size - 1).astype(np.float64)
        if mode == "nearest":
            rows = np.clip(rounding(held), 0, size - 1).astype(np.int64)
            if out != size or not np.array_equal(rows, np.arange(size)):
                y = b.op("Gather", [y], {"axis": axis, "indices": tuple(int(r) for r in rows)})
            continue
        lo = np.minimum(np.floor(held), size - 1).astype(np.int64)
        hi = np.minimum(lo + 1, size - 1)
        frac = np.where(hi == lo, 0.0, held - lo)
        if out == size and np.array_equal(lo, np.arange(size)) and not frac.any():
            continue
        low = b.op("Gather", [y], {"axis": axis, "indices": tuple(int(r) for r in lo)})
        if not frac.any():
            y = low
            continue
        high = b.op("Gather", [y], {"axis": axis, "indices": tuple(int(r) for r in hi)})
        hint = f"{node.output[0]}.w{axis}"
        y = b.op("Add", [b.op("Multiply", [low, b.constant(_along(axis, rank, 1.0 - frac), hint + "lo")]),
                         b.op("Multiply", [high, b.constant(_along(axis, rank, frac), hint + "hi")])])
    if inside.all():
        if y == b.value(node.input[0]):
            b.alias(node.output[0], node.input[0])
        else:
            b.values[node.output[0]] = y
        return
    mask = b.constant(inside, f"{node.output[0]}.inside")
    b.op("Select", [mask, y, b.constant(np.float32(fill), f"{node.output[0]}.extrapolation")],
         out=node.output[0])


def _resize(b, node, attrs):
    if attrs.get("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize":
        from vpuc.onnx_import.convert_nn import NN_CONVERTERS
        NN_CONVERTERS["Resize"](b, node, attrs)
        return
    _crop_and_resize(b, node, attrs)


def _trilu(b, node, attrs):
    shape = b.shape(node.input[0])
    if len(shape) < 2:
        raise b.error(f"Trilu takes a tensor of rank >= 2; got rank {len(shape)}")
    k = 0
    if _input(node, 1):
        ks = _ints(b, node.input[1], "Trilu k").reshape(-1)
        if ks.size != 1:
            raise b.error(f"Trilu k must be one integer; got {ks.size} values")
        k = int(ks[0])
    rows, cols = shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = offset >= k if attrs.get("upper", 1) else offset <= k
    if keep.all():
        b.alias(node.output[0], node.input[0])
        return
    b.op("Select", [b.constant(keep, f"{node.output[0]}.triangle"), b.value(node.input[0]),
                    b.constant(np.float32(0.0), f"{node.output[0]}.zero")], out=node.output[0])


def _lp_power(b: GraphBuilder, node, p: float) -> str:
    x = b.value(node.input[0])
    if p == 1:
        return b.op("Abs", [x])
    if p == 2:
        return b.op("Multiply", [x, x])
    return b.op("Power", [b.op("Abs", [x]), b.constant(np.float32(p), f"{node.output[0]}.p")])


def _lp_root(b: GraphBuilder, node, summed: str, p: float) -> None:
    if p == 1:
        b.values[node.output[0]] = summed
    elif p == 2:
        b.op("Sqrt", [summed], out=node.output[0])
    else:
        b.op("Power", [summed, b.constant(np.float32(1.0 / p), f"{node.output[0]}.root")], out=node.output[0])


def _lp_exponent(b: GraphBuilder, attrs) -> float:
    p = float(attrs.get("p", 2))
    if not p > 0:
        raise b.error(f"LpPool p = {p}: only p > 0 is a norm vpuc composes")
    return p


def _lp_pool(b, node, attrs):
    from vpuc.onnx_import.convert_layers import _pads_2d
    shape = b.shape(node.input[0])
    kernel = tuple(int(k) for k in attrs["kernel_shape"])
    if len(shape) != 4 or len(kernel) != 2:
        raise b.error(f"only 2-D LpPool windows over NCHW tensors are supported; this one is "
                      f"{len(kernel)}-D over rank {len(shape)}")
    p = _lp_exponent(b, attrs)
    strides, dilations = tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("dilations", (1, 1)))
    begin, end = _pads_2d(b, attrs, shape[2:], kernel, strides, dilations)
    if attrs.get("ceil_mode", 0):
        extra = [ceil_extra(d, bb, e, (k - 1) * dl + 1, s)
                 for d, bb, e, k, s, dl in zip(shape[2:], begin, end, kernel, strides, dilations)]
        if min(extra) < 0:
            raise b.error("LpPool ceil_mode adds a window that starts in the padding; not supported")
        end = tuple(e + x for e, x in zip(end, extra))     # zeros add nothing to a sum
    channels = shape[1]
    ones = b.constant(np.ones((channels, 1, 1) + kernel, np.float32), f"{node.output[0]}.window")
    summed = b.op("GroupConvolution", [_lp_power(b, node, p), ones],
                  {"strides": strides, "pads_begin": tuple(begin), "pads_end": tuple(end),
                   "dilations": dilations})
    _lp_root(b, node, summed, p)


def _global_lp_pool(b, node, attrs):
    rank = len(b.shape(node.input[0]))
    p = _lp_exponent(b, attrs)
    summed = b.op("ReduceSum", [_lp_power(b, node, p)], {"axes": tuple(range(2, rank)), "keep_dims": True})
    _lp_root(b, node, summed, p)


def _center_crop_pad(b, node, attrs):
    shape = b.shape(node.input[0])
    rank = len(shape)
    target = [int(s) for s in _ints(b, node.input[1], "CenterCropPad shape").reshape(-1)]
    axes = [b.axis(a, rank, "CenterCropPad axis") for a in attrs.get("axes", range(rank))]
    if len(set(axes)) != len(axes) or len(target) != len(axes):
        raise b.error(f"CenterCropPad shape {target} for axes {axes}: expected one size per distinct axis")
    if min(target, default=1) < 1:
        raise b.error(f"CenterCropPad shape {target} has a size < 1")
    begin, end, step = [0] * rank, list(shape), [1] * rank
    pad_begin, pad_end = [0] * rank, [0] * rank
    for axis, size in zip(axes, target):
        d = shape[axis]
        if size < d:
            begin[axis] = (d - size) // 2
            end[axis] = begin[axis] + size
        elif size > d:
            pad_begin[axis] = (size - d) // 2
            pad_end[axis] = size - d - pad_begin[axis]
    y = b.value(node.input[0])
    cropped = end != list(shape) or any(begin)
    padded = any(pad_begin) or any(pad_end)
    if not cropped and not padded:
        b.alias(node.output[0], node.input[0])
        return
    if cropped:
        y = b.op("Slice", [y], {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)},
                 out=None if padded else node.output[0])
    if padded:
        b.op("Pad", [y], {"pads_begin": tuple(pad_begin), "pads_end": tuple(pad_end)}, out=node.output[0])


def _one_hot(b, node, attrs):
    indices = _ints(b, node.input[0], "OneHot indices")
    depths = np.asarray(b.array(node.input[1])).reshape(-1)
    if depths.size != 1 or not depths[0] >= 1:
        raise b.error(f"OneHot depth must be one number >= 1; got {depths.tolist()}")
    depth = int(depths[0])
    rank = indices.ndim + 1
    axis = b.axis(attrs.get("axis", -1), rank, "OneHot axis")
    if b.shape(node.input[2]) != (2,):
        raise b.error(f"OneHot values must hold 2 values (off, on); got shape {list(b.shape(node.input[2]))}")
    if indices.size == 0:
        raise b.error("OneHot of no indices gives an empty tensor; not supported")
    wrapped = np.where(indices < 0, indices + depth, indices)
    hot = np.expand_dims(wrapped, axis) == _along(axis, rank, np.arange(depth))   # out of range: all off
    values = b.value(node.input[2])
    off = b.op("Reshape", [b.op("Gather", [values], {"axis": 0, "indices": (0,)})], {"shape": (1,) * rank})
    on = b.op("Reshape", [b.op("Gather", [values], {"axis": 0, "indices": (1,)})], {"shape": (1,) * rank})
    b.op("Select", [b.constant(hot, f"{node.output[0]}.hot"), on, off], out=node.output[0])


EXTRA_CONVERTERS = {
    "Resize": _resize, "Trilu": _trilu, "LpPool": _lp_pool, "GlobalLpPool": _global_lp_pool,
    "CenterCropPad": _center_crop_pad, "OneHot": _one_hot, **SCATTER_CONVERTERS, **TOPK_CONVERTERS,
}
