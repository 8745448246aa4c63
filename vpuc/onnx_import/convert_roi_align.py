"""ONNX RoiAlign (opsets 10, 16, 22) with run-time or constant rois and batch indices: each
bin's sample points computed in f32 from the rois as onnxruntime's CPU kernel computes them
(Caffe2's ``RoIAlign``: ``roi_align.cc``), their four neighbours fetched by the ACT SHAVE
library kernel ``gather`` (``IndexedGather``), weighted, then averaged or maxed per bin.

For roi ``r`` of image ``b`` (its batch index), in f32 and in onnxruntime's order:

- ``start = roi·spatial_scale − offset`` per coordinate (offset 1/2 for
  ``coordinate_transformation_mode = half_pixel``, opset 16's default; 0 for
  ``output_half_pixel`` and at opset 10), ``size = end − start`` (at least 1 with
  ``output_half_pixel``), ``bin = size / pooled``;
- ``G`` samples per bin and axis: ``sampling_ratio``, or when it is 0 ``ceil(size /
  pooled)`` of each roi, which only constant rois fix at import (run-time rois with
  ``sampling_ratio = 0`` are refused, naming the node: the count would be data);
- sample ``i`` of bin ``p``: ``(start + p·bin) + ((i + 1/2)·bin) / G``; a sample with
  either coordinate below −1 or beyond the axis' size contributes 0 (its weights are 0);
  else clamped at 0, its low neighbour ``floor`` (at most ``L − 1``, where the high one is
  the same and the coordinate becomes ``L − 1``), weights ``hy·hx, hy·lx, ly·hx, ly·lx``;
- ``avg``: the bin's samples' ``w1·p1 + w2·p2 + w3·p3 + w4·p4`` summed and divided by the
  sample count; ``max``: the largest of the samples' ``max(w1·p1, w2·p2, w3·p3, w4·p4)``
  (the weighted neighbours, as onnxruntime and ONNX's reference compute it, not the
  interpolated value);
- the sums in f32, rounded once to the graph's type.

The image is seen as ``N·H·W`` NHWC rows of ``C`` values; a neighbour of roi ``r`` is row
``b·H·W + y·W + x``, exact in f32 while ``N·H·W <= 2^24`` (refused beyond).  A batch index
out of ``[−N, N)`` stops the run with the gather kernel's index error, naming the node; a
negative one counts from the end, as the gather wraps it.  The rois are held in the graph's
type (f16 by default: roi coordinates above 1024 pixels round to whole pixels).
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph import CONSTANT, GraphOp
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_grid_sample import EXACT_INDICES, gathered
from vpuc.onnx_import.convert_math import in_f32


def f32_array(b: GraphBuilder, array: np.ndarray, hint: str, made: dict | None = None) -> str:
    """An f32 Constant of ``array`` whatever the graph's type (inline: small index tables);
    ``made`` keeps the node's Constants by value, so each is made once."""
    array = np.asarray(array, np.float32)
    key = (array.shape, array.tobytes())
    if made is not None and key in made:
        return made[key]
    name = b.fresh(f"{b.node.output[0]}.{hint}")
    ttype = TensorType(tuple(array.shape), ElemType.F32, DimsOrder.identity(array.ndim))
    b.graph.ops.append(GraphOp(CONSTANT, name, type=ttype,
                               const=ConstInit(values=tuple(float(v) for v in array.reshape(-1)))))
    b.types[name] = ttype
    if made is not None:
        made[key] = name
    return name


class RoiAxis:
    """The sample points of one axis (y: position 1 of the 5-D sample layout
    ``[R, PH, PW, GY, GX]``'s bins and 3 of its samples; x: 2 and 4)."""

    def __init__(self, b: GraphBuilder, size: int, pooled: int, grid: int, where: int,
                 made: dict) -> None:
        self.b, self.size, self.pooled, self.grid, self.where = b, size, pooled, grid, where
        self.made = made

    def shaped(self, values, slot: int) -> np.ndarray:
        shape = [1] * 5
        shape[slot] = len(values)
        return np.asarray(values, np.float32).reshape(shape)

    def op(self, kind: str, *operands: str, **attrs) -> str:
        return self.b.op(kind, list(operands), attrs or None)

    def const(self, value) -> str:
        return f32_array(self.b, np.asarray(value, np.float32), "c", self.made)

    def samples(self, start: str, end: str, grid_of_roi: str, output_half_pixel: bool) -> str:
        """Every sample coordinate, ``[R, 1, 1, 1, 1]`` rois to the axis' two slots."""
        size = self.op("Subtract", end, start)
        if output_half_pixel:
            size = self.op("Maximum", size, self.const(1.0))
        bin_size = self.op("Divide", size, self.const(float(self.pooled)))
        bins = self.op("Add", start, self.op("Multiply", self.const(self.shaped(range(self.pooled), self.where)),
                                             bin_size))
        offsets = self.const(self.shaped([i + 0.5 for i in range(self.grid)], self.where + 2))
        within = self.op("Divide", self.op("Multiply", offsets, bin_size), grid_of_roi)
        return self.op("Add", bins, within)

    def neighbours(self, c: str) -> tuple[str, str, str, str, str]:
        """(inside, low, high, l, h) of the samples ``c``: ``inside`` the u8 mask of
        coordinates within [-1, L]; ``l`` the high neighbour's weight, ``h`` the low's."""
        inside = self.op("Minimum", self.op("GreaterEqual", c, self.const(-1.0)),
                         self.op("LessEqual", c, self.const(float(self.size))))
        last = self.const(float(self.size - 1))
        c = self.op("Maximum", c, self.const(0.0))
        floor = self.op("Floor", c)
        edge = self.op("GreaterEqual", floor, last)
        low = self.op("Select", edge, last, floor)
        high = self.op("Select", edge, last, self.op("Add", floor, self.const(1.0)))
        l_weight = self.op("Subtract", self.op("Select", edge, last, c), low)
        return inside, low, high, l_weight, self.op("Subtract", self.const(1.0), l_weight)


def _sample_counts(b: GraphBuilder, node, rois_name: str, attrs: dict, pooled: tuple[int, int],
                   scale: float, offset: float, output_half_pixel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each roi's samples per bin along y and x when ``sampling_ratio`` is 0, from the
    constant rois as the graph holds them, in f32 as onnxruntime computes them."""
    stored = np.asarray(b.array(rois_name), np.float32).astype(
        np.float16 if b.elem is ElemType.F16 else np.float32).astype(np.float32)
    start = stored[:, [1, 0]] * np.float32(scale) - np.float32(offset)
    end = stored[:, [3, 2]] * np.float32(scale) - np.float32(offset)
    size = end - start
    if output_half_pixel:
        size = np.maximum(size, np.float32(1.0))
    counts = np.maximum(np.ceil(size / np.asarray(pooled, np.float32)), 0).astype(np.int64)
    return counts[:, 0], counts[:, 1]


def roi_align(b: GraphBuilder, node, attrs) -> None:
    x_name, rois_name, batch_name = node.input[:3]
    shape = b.shape(x_name)
    if len(shape) != 4:
        raise b.error(f"RoiAlign of a rank-{len(shape)} input; expected [N, C, H, W]")
    n, channels, height, width = shape
    count = b.shape(rois_name)[0]
    mode = attrs.get("mode", "avg")
    if mode not in ("avg", "max"):
        raise b.error(f"RoiAlign mode '{mode}' is not avg or max")
    transform = attrs.get("coordinate_transformation_mode", "half_pixel" if b.opset >= 16 else "output_half_pixel")
    if transform not in ("half_pixel", "output_half_pixel"):
        raise b.error(f"RoiAlign coordinate_transformation_mode '{transform}' is not half_pixel or "
                      "output_half_pixel")
    output_half_pixel = transform == "output_half_pixel"
    offset = 0.0 if output_half_pixel else 0.5
    pooled = (int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1)))
    ratio = int(attrs.get("sampling_ratio", 0))
    scale = float(np.float32(attrs.get("spatial_scale", 1.0)))
    if n * height * width > EXACT_INDICES:
        raise b.error(f"RoiAlign of {n}x{height}x{width} pixels: its row indices exceed 2^24, "
                      "beyond which f32 holds integers exactly")
    if count == 0:
        raise b.error("RoiAlign of no rois")
    if ratio > 0:
        grid_y = grid_x = np.full(count, ratio)
    elif b.is_known(rois_name):
        grid_y, grid_x = _sample_counts(b, node, rois_name, attrs, pooled, scale, offset, output_half_pixel)
    else:
        raise b.error("RoiAlign sampling_ratio = 0 (adaptive: ceil(roi size / output size) samples a "
                      "bin) with run-time rois is not supported: the sample count would be data; "
                      "give a positive sampling_ratio or constant rois")
    gy, gx = max(int(grid_y.max()), 1), max(int(grid_x.max()), 1)
    made: dict = {}
    y_axis = RoiAxis(b, height, pooled[0], gy, 1, made)
    x_axis = RoiAxis(b, width, pooled[1], gx, 2, made)

    rois = in_f32(b, b.value(rois_name))
    def corner(k: int) -> str:                       # roi column k as [R, 1, 1, 1, 1], scaled
        column = b.op("Slice", [rois], {"begin": (0, k), "end": (count, k + 1), "step": (1, 1)})
        scaled = b.op("Multiply", [column, y_axis.const(scale)])
        if offset:
            scaled = b.op("Subtract", [scaled, y_axis.const(offset)])
        return b.op("Reshape", [scaled], {"shape": (count, 1, 1, 1, 1)})
    per_roi = lambda values: y_axis.const(np.asarray(values, np.float32).reshape(count, 1, 1, 1, 1))
    # a roi of no samples divides by 1: its coordinates are never read
    ys = y_axis.neighbours(y_axis.samples(corner(1), corner(3), per_roi(np.maximum(grid_y, 1)),
                                          output_half_pixel))
    xs = x_axis.neighbours(x_axis.samples(corner(0), corner(2), per_roi(np.maximum(grid_x, 1)),
                                          output_half_pixel))
    y_inside, y_low, y_high, ly, hy = ys
    x_inside, x_low, x_high, lx, hx = xs
    valid = b.op("Minimum", [y_inside, x_inside])
    uneven = bool((grid_y < gy).any() or (grid_x < gx).any())     # a roi of fewer samples
    if uneven:
        taken = np.zeros((count, 1, 1, gy, gx), np.uint8)
        for r in range(count):
            taken[r, 0, 0, :grid_y[r], :grid_x[r]] = 1
        valid = b.op("Minimum", [valid, b.constant(taken, f"{node.output[0]}.samples")])

    rows = b.op("Reshape", [b.op("Transpose", [b.value(x_name)], {"order": (0, 2, 3, 1)})],
                {"shape": (n * height * width, channels)})
    base = _image_rows(b, batch_name, count, height * width, y_axis)
    samples = (count, pooled[0], pooled[1], gy * gx)
    zero = y_axis.const(0.0)
    terms = []
    for y_index, y_weight in ((y_low, hy), (y_high, ly)):
        line = b.op("Add", [b.op("Multiply", [y_index, y_axis.const(float(width))]), base])
        for x_index, x_weight in ((x_low, hx), (x_high, lx)):
            flat = b.op("Convert", [b.op("Add", [line, x_index])], {"to": ElemType.I32})
            flat = b.op("Reshape", [flat], {"shape": samples})
            weight = b.op("Select", [valid, b.op("Multiply", [y_weight, x_weight]), zero])
            weight = b.op("Reshape", [weight], {"shape": samples + (1,)})
            pixel = in_f32(b, gathered(b, rows, flat))
            terms.append(b.op("Multiply", [weight, pixel]))
    if mode == "avg":
        total = terms[0]
        for term in terms[1:]:
            total = b.op("Add", [total, term])
        counts = np.maximum(grid_y * grid_x, 1).astype(np.float32).reshape(count, 1, 1, 1)
        pooled_value = b.op("Divide", [b.op("ReduceSum", [total], {"axes": (3,), "keep_dims": False}),
                                       y_axis.const(counts)])
    else:
        best = terms[0]
        for term in terms[1:]:
            best = b.op("Maximum", [best, term])
        if uneven:      # a roi's samples past its count never win; a roi of none gives 0
            fill = np.where((grid_y * grid_x > 0).reshape(count, 1, 1, 1), -np.inf, 0.0)
            taken_mask = b.constant(taken.reshape(count, 1, 1, gy * gx, 1), f"{node.output[0]}.taken")
            best = b.op("Select", [taken_mask, best,
                                   y_axis.const(fill.reshape(count, 1, 1, 1, 1))])
        pooled_value = b.op("ReduceMax", [best], {"axes": (3,), "keep_dims": False})
    elem = b.types[b.value(x_name)].elem
    if elem is not ElemType.F32:
        pooled_value = b.op("Convert", [pooled_value], {"to": elem})
    b.op("Transpose", [pooled_value], {"order": (0, 3, 1, 2)}, out=node.output[0])


def _image_rows(b: GraphBuilder, batch_name: str, count: int, plane: int, axis: RoiAxis) -> str:
    """Each roi's first row, ``b·H·W``, as f32 ``[R, 1, 1, 1, 1]``: from constant batch
    indices at import, else converted from the run-time i32 indices."""
    if b.is_known(batch_name):
        batch = np.asarray(b.array(batch_name), np.int64).reshape(count, 1, 1, 1, 1)
        return axis.const(batch * plane)
    batch = b.value(batch_name)
    if b.types[batch].elem is not ElemType.I32:
        raise b.error(f"RoiAlign batch_indices '{batch_name}' are {b.types[batch].elem}; expected "
                      "int64 (held as i32)")
    as_float = b.op("Reshape", [b.op("Convert", [batch], {"to": ElemType.F32})], {"shape": (count, 1, 1, 1, 1)})
    return b.op("Multiply", [as_float, axis.const(float(plane))])


ROI_ALIGN_CONVERTERS = {"RoiAlign": roi_align}
