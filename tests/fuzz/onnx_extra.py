"""Fuzz cases of the ops of vpuc/onnx_import/convert_extra.py and convert_scatter.py: Resize
with tf_crop_and_resize, Trilu, LpPool, GlobalLpPool, CenterCropPad, OneHot, ScatterND,
ScatterElements, TopK and CumProd, and of convert_grid_sample.py, convert_roi_align.py and convert_static.py: GridSample, RoiAlign,
ReverseSequence and Compress, one op each, attributes drawn over their ranges at an
opset drawn where the op has them.  The ``op`` family draws them as one of its kinds; the
``extra`` family is nothing else (``bench/onnx_fuzz.py --extra N``).

Constants both sides must read alike are exact in f16 (the check rounds every float
initializer to f16 for onnxruntime): a roi in 1/16ths.  Scatter indices are distinct
without a reduction (the spec leaves duplicates undefined there) and may repeat with one.
TopK reads ``Floor(2x)``, small integers, so ties are common and the lower index must win;
its axis is sometimes long (9 to 300) and K anywhere up to it, so both the topk kernel
and ArgMax's rounds are drawn.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tests.fuzz import onnx_forms as forms

KINDS = ("crop", "crop", "trilu", "lppool", "global_lppool", "center_crop_pad", "one_hot",
         "scatter_nd", "scatter_nd", "scatter_elements", "scatter_elements", "topk", "topk", "cumprod",
         "grid_sample", "grid_sample", "roi_align", "roi_align", "reverse_sequence", "compress")


def extra_case(m):
    r = m.rng
    kind = r.choice(KINDS)
    rank = r.randint(2, 4)
    shape = [r.randint(1, 6) for _ in range(rank)]
    if kind == "crop":
        return _crop(m)
    if kind == "trilu":
        m.opset = forms.draw_opset(m, 14)
        ins = ["x"] + ([m.ints(r.randint(-3, 3))] if r.random() < 0.7 else [])
        return m.model(shape, m.node("Trilu", ins, upper=r.choice([0, 1])))
    if kind in ("lppool", "global_lppool"):
        return _lp_pool(m, kind == "global_lppool")
    if kind == "center_crop_pad":
        m.opset = forms.draw_opset(m, 18)
        axes = sorted(r.sample(range(rank), r.randint(1, rank)))
        target = [r.randint(1, 8) for _ in axes]
        attrs = {"axes": [a - rank if r.random() < 0.3 else a for a in axes]}
        if len(axes) == rank and r.random() < 0.5:
            attrs = {}                                    # every axis, the default
        return m.model(shape, m.node("CenterCropPad", ["x", m.ints(target)], **attrs))
    if kind == "one_hot":
        m.opset = forms.draw_opset(m, 11)
        depth = r.randint(1, 6)
        lead = [r.randint(1, 4) for _ in range(r.randint(1, 2))]
        indices = m.np.integers(-depth, depth + 1, lead)       # depth itself: every value off
        axis = r.randint(-len(lead) - 1, len(lead))
        return m.model([2], m.node("OneHot", [m.ints(indices), m.init(np.float32(depth)), "x"], axis=axis))
    if kind == "scatter_nd":
        return _scatter(m, shape, nd=True)
    if kind == "scatter_elements":
        return _scatter(m, shape, nd=False)
    if kind == "topk":
        return _topk(m, shape)
    if kind == "grid_sample":
        return _grid_sample(m)
    if kind == "roi_align":
        return _roi_align(m)
    if kind == "reverse_sequence":
        m.opset = forms.draw_opset(m, 10)
        time_axis = r.choice([0, 1])
        shape = [r.randint(1, 6), r.randint(1, 4)] + shape[2:]
        lens = m.np.integers(0, shape[time_axis] + 1, shape[1 - time_axis])
        return m.model(shape, m.node("ReverseSequence", ["x", m.ints(lens)], time_axis=time_axis,
                                     batch_axis=1 - time_axis))
    if kind == "compress":
        m.opset = forms.draw_opset(m, 11)
        attrs = {"axis": r.randint(-rank, rank - 1)} if r.random() < 0.7 else {}
        length = shape[attrs["axis"]] if attrs else int(np.prod(shape))
        keep = m.np.random(r.randint(1, length)) < 0.6
        keep[r.randrange(keep.size)] = True                  # something selected
        return m.model(shape, m.node("Compress", ["x", m.init(keep)], **attrs))
    m.opset = 26                                          # CumProd's first opset
    axis = m.init(np.asarray(r.randint(-rank, rank - 1), r.choice([np.int64, np.int32])))
    x = m.node("Add", [m.node("Mul", ["x", m.init(np.float32(0.25))]), m.init(np.float32(1.0))])
    return m.model(shape, m.node("CumProd", [x, axis], exclusive=r.choice([0, 1]), reverse=r.choice([0, 1])))


def _crop(m):
    r = m.rng
    m.opset = forms.draw_opset(m, 11)
    mode = r.choice(["nearest", "linear"])
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize"}
    if mode == "nearest":
        attrs["nearest_mode"] = r.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    if r.random() < 0.6:
        attrs["extrapolation_value"] = r.choice([0.0, -1.0, 2.5, 10.0])
    starts = [r.randint(-5, 8) / 16 for _ in range(2)]
    ends = [r.randint(8, 21) / 16 for _ in range(2)]
    roi = [0, 0, *starts, 1, 1, *ends]
    sizes = [1, 2, r.randint(1, 12), r.randint(1, 12)]
    return m.model([1, 2, r.randint(1, 9), r.randint(1, 9)], forms.resize(m, "x", sizes=sizes, roi=roi, **attrs))


def _lp_pool(m, whole: bool):
    r = m.rng
    shape = [1, r.choice([1, 2, 3]), r.randint(1, 9), r.randint(1, 9)]
    p = r.choice([1, 2, 2, 3])
    if whole:                 # onnxruntime 1.32 has no GlobalLpPool of opset 22
        m.opset = min(forms.draw_opset(m, 11), 21)
        return m.model(shape, m.node("GlobalLpPool", ["x"], p=p))
    m.opset = forms.draw_opset(m, 11)
    kernel = [r.randint(1, min(3, shape[2])), r.randint(1, min(3, shape[3]))]
    attrs = {"kernel_shape": kernel, "p": p, "strides": [r.randint(1, 2), r.randint(1, 2)]}
    if r.random() < 0.5:
        attrs["pads"] = [r.randint(0, k - 1) for k in kernel] * 2
    if m.opset >= 18 and r.random() < 0.3:
        attrs["ceil_mode"] = 1
    return m.model(shape, m.node("LpPool", ["x"], **attrs))


def _reduction(m) -> str:
    r = m.rng
    if r.random() < 0.5:
        m.opset = forms.draw_opset(m, 11)
        return "none"
    if r.random() < 0.5:
        m.opset = forms.draw_opset(m, 16)
        return r.choice(["add", "mul"])
    m.opset = forms.draw_opset(m, 18)
    return r.choice(["add", "mul", "max", "min"])


def _box(m, dims):
    """A box spanning every axis of ``dims`` but one, which it covers from ``low`` for
    ``extent`` (ScatterND's box write)."""
    r = m.rng
    axis = r.randrange(len(dims))
    low, extent = [0] * len(dims), list(dims)
    extent[axis] = r.randint(1, dims[axis])
    low[axis] = r.randint(0, dims[axis] - extent[axis])
    return low, extent


def _scatter(m, shape, nd: bool):
    r = m.rng
    rank = len(shape)
    reduction = _reduction(m)
    spelled = reduction != "none" or (m.opset >= 16 and r.random() < 0.3)
    attrs = {"reduction": reduction} if spelled else {}
    if nd:
        depth = r.randint(1, rank)
        rows = int(np.prod(shape[:depth]))
        count = r.randint(1, rows if reduction == "none" else 2 * rows)
        picked = m.np.choice(rows, count, replace=reduction != "none")
        if reduction == "none" and r.random() < 0.4:      # a box, as a KV-cache write
            low, extent = _box(m, shape[:depth])
            box = np.indices(extent).reshape(depth, -1) + np.asarray(low)[:, None]
            picked, count = np.ravel_multi_index(tuple(box), shape[:depth]), box.shape[1]
        index = np.stack(np.unravel_index(picked, shape[:depth]), axis=-1)
        index = np.where(m.np.random(index.shape) < 0.3, index - np.asarray(shape[:depth]), index)
        lead = [count] if r.random() < 0.5 or count % 2 else [2, count // 2]
        indices = index.reshape(lead + [depth])
        updates_shape = lead + shape[depth:]
        op = "ScatterND"
    else:
        axis = r.randint(-rank, rank - 1)
        size = shape[axis]
        updates_shape = [r.randint(1, d) for d in shape]
        if reduction == "none":         # distinct targets along the axis in each line
            updates_shape[axis] = r.randint(1, size)
            lines = int(np.prod(updates_shape)) // updates_shape[axis]
            picks = np.stack([m.np.permutation(size)[:updates_shape[axis]] for _ in range(lines)])
            moved = [d for a, d in enumerate(updates_shape) if a != axis % rank] + [updates_shape[axis]]
            indices = np.moveaxis(picks.reshape(moved), -1, axis % rank)
        else:
            updates_shape[axis] = r.randint(1, 2 * size)
            indices = m.np.integers(-size, size, updates_shape)
        attrs["axis"] = axis
        op = "ScatterElements"
    if r.random() < 0.7:                # run-time data, constant updates
        return m.model(shape, m.node(op, ["x", m.ints(indices), m.weight(updates_shape, 1)], **attrs))
    return m.model(updates_shape, m.node(op, [m.weight(shape, 1), m.ints(indices), "x"], **attrs))


def _topk(m, shape):
    r = m.rng
    rank = len(shape)
    m.opset = forms.draw_opset(m, 11)
    axis = r.randint(-rank, rank - 1)
    attrs = {"largest": r.choice([0, 1])} if r.random() < 0.7 else {}
    if r.random() < 0.8:
        attrs["axis"] = axis
    else:
        axis = -1
    if r.random() < 0.4:                # a long axis: K past ArgMax's rounds, the topk kernel
        # the other dims cut to 2 (no draw: the stream stays), so at most 8 rows: the kernel's
        # data-dependent loops run in the ISA interpreter (125 rows of K = 103 over 174 took
        # 310 s with numerics)
        shape = [min(d, 2) for d in shape]
        shape[axis] = r.randint(9, 300)
    k = r.randint(1, shape[axis])
    x = m.node("Floor", [m.node("Mul", ["x", m.init(np.float32(2.0))])])
    m.node("TopK", [x, m.ints([k])], n_out=2, **attrs)
    values, indices = m.nodes[-1].output
    if r.random() < 0.5:
        return m.model(shape, values)
    model = m.model(shape, indices)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    return model


def _grid_sample(m):
    """GridSample of every mode, padding and alignment at an opset from 16 (the mode names
    of opset 20 from there): the run-time input is the grid (an image of weights sampled)
    or the image (a constant grid in 1/16ths, exact in f16), the grid reaching past the
    borders.  Reflection with align_corners on an axis of 1 pixel is left out: onnxruntime
    divides by the axis' zero span there."""
    r = m.rng
    m.opset = forms.draw_opset(m, 16)
    names = ("linear", "nearest", "cubic") if m.opset >= 20 else ("bilinear", "nearest", "bicubic")
    attrs = {"mode": r.choice(names), "padding_mode": r.choice(["zeros", "border", "reflection"]),
             "align_corners": r.choice([0, 1])}
    for name, default in (("mode", names[0]), ("padding_mode", "zeros"), ("align_corners", 0)):
        if attrs[name] == default and r.random() < 0.5:
            del attrs[name]
    low = 2 if attrs.get("padding_mode") == "reflection" and attrs.get("align_corners") else 1
    n = r.randint(1, 2)
    image = [n, r.randint(1, 3), r.randint(low, 6), r.randint(low, 6)]
    grid = [n, r.randint(1, 5), r.randint(1, 5), 2]
    if r.random() < 0.5:
        return m.model(grid, m.node("GridSample", [m.weight(image, 1), "x"], **attrs))
    values = m.np.integers(-28, 29, grid) / 16
    return m.model(image, m.node("GridSample", ["x", m.init(values.astype(np.float32))], **attrs))


def _roi_align(m):
    """RoiAlign at opset 10 to 21 (onnxruntime 1.32 has no RoiAlign-22): the run-time input
    is the rois (scaled by ``spatial_scale``, a power of two) over a constant image with a
    fixed sample count, or the image with constant rois in 1/16ths, the count fixed or
    adaptive; constant batch indices."""
    r = m.rng
    m.opset = min(forms.draw_opset(m, 10), 21)
    n = r.randint(1, 2)
    image = [n, r.randint(1, 3), r.randint(1, 6), r.randint(1, 6)]
    count = r.randint(1, 4)
    attrs = {"output_height": r.randint(1, 3), "output_width": r.randint(1, 3),
             "mode": r.choice(["avg", "max"]), "spatial_scale": r.choice([0.5, 1.0, 2.0])}
    if m.opset >= 16 and r.random() < 0.7:
        attrs["coordinate_transformation_mode"] = r.choice(["half_pixel", "output_half_pixel"])
    batch = m.ints(m.np.integers(0, n, count))
    if r.random() < 0.5:
        attrs["sampling_ratio"] = r.randint(1, 3)
        return m.model([count, 4], m.node("RoiAlign", [m.weight(image, 1), "x", batch], **attrs))
    attrs["sampling_ratio"] = r.randint(0, 3)
    low = m.np.integers(-32, 96, (count, 2))
    boxes = np.concatenate([low, low + m.np.integers(0, 64, (count, 2))], axis=1) / 16
    return m.model(image, m.node("RoiAlign", ["x", m.init(boxes.astype(np.float32)), batch], **attrs))
