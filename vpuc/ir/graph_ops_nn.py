"""The graph dialect's ops for imported models: grouped and transposed (also grouped) convolution,
pools, reductions, normalization, and the data-movement ops (Concat, Slice,
Gather, Interpolate, DepthToSpace …; Pad and Tile are in ``graph_ops_copy.py``).

Names and attributes follow OpenVINO's opsets (GroupConvolution,
ConvolutionBackpropData, AvgPool with ``exclude_pad``, MVN, Interpolate with
its ``coordinate_transformation_mode`` and ``nearest_mode``, DepthToSpace with
``blocks_first``/``depth_first``), which is what an NPU compiler front end
receives.  These ops take static shapes: they come from models whose input
shapes are fixed at import.  ``graph_ops.py`` adds ``NN_SPECS`` to its table.
"""

from __future__ import annotations

import math

from vpuc.ir.graph import GraphOp
from vpuc.ir.graph_ops import (AttrSpec, InferError, OpSpec, _out_size, _pairs,
                               _same_elem, _shape_text)
from vpuc.ir.types import DimsOrder, ElemType, TensorType

VARIADIC = -1     # OpSpec.arity of an op taking one or more operands


def _static(op: GraphOp, ins: list[TensorType]) -> None:
    for t in ins:
        if not t.is_static:
            raise InferError(f"{op.kind} takes static shapes; got {t}")


def _like(x: TensorType, dims) -> TensorType:
    dims = tuple(int(d) for d in dims)
    order = x.order if len(dims) == x.rank else DimsOrder.identity(len(dims))
    return TensorType(dims, x.elem, order)


def _axes(op: GraphOp, rank: int, name: str = "axes") -> list[int]:
    axes = [a + rank if a < 0 else a for a in op.attrs[name]]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise InferError(f"{op.kind} {name} {list(op.attrs[name])} are not distinct axes of rank {rank}")
    return axes


def _window_4d(op: GraphOp, x: TensorType, what: str) -> None:
    _static(op, [x])
    if x.rank != 4:
        raise InferError(f"{op.kind} takes NCHW {what} (rank 4); got rank {x.rank}")


def _group_conv(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, w = ins
    _window_4d(op, x, "data")
    if w.rank != 5:
        raise InferError(f"GroupConvolution weights are GOIHW (rank 5); got rank {w.rank}")
    _same_elem(op, ins)
    groups, per_out, per_in, kh, kw = w.dims
    if x.dims[1] != groups * per_in:
        raise InferError(f"GroupConvolution input has {x.dims[1]} channels; the weights expect "
                         f"{groups} groups of {per_in}")
    strides, pb, pe, dil = _pairs(op, "strides", "pads_begin", "pads_end", "dilations")
    oh = _out_size(x.dims[2], kh, strides[0], pb[0] + pe[0], dil[0])
    ow = _out_size(x.dims[3], kw, strides[1], pb[1] + pe[1], dil[1])
    return _like(x, (x.dims[0], groups * per_out, oh, ow))


def _deconv_spatial(op: GraphOp, x: TensorType, kernel) -> list[int]:
    strides, pb, pe, dil = _pairs(op, "strides", "pads_begin", "pads_end", "dilations")
    extra = tuple(op.attrs["output_padding"])
    dims = []
    for axis in range(2):
        size = ((x.dims[2 + axis] - 1) * strides[axis] - pb[axis] - pe[axis]
                + dil[axis] * (kernel[axis] - 1) + 1 + extra[axis])
        if size < 1:
            raise InferError(f"{op.kind} output dim {axis + 2} would be {size}")
        dims.append(size)
    return dims


def _deconv(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, w = ins
    _window_4d(op, x, "data")
    if w.rank != 4 or w.dims[0] != x.dims[1]:
        raise InferError(f"ConvolutionBackpropData weights are IOHW with I = {x.dims[1]} input "
                         f"channels; got {_shape_text(w.dims)}")
    _same_elem(op, ins)
    return _like(x, (x.dims[0], w.dims[1], *_deconv_spatial(op, x, w.dims[2:])))


def _group_deconv(op: GraphOp, ins: list[TensorType]) -> TensorType:
    """OpenVINO's GroupConvolutionBackpropData: weights [G, I/G, O/G, KH, KW]."""
    x, w = ins
    _window_4d(op, x, "data")
    if w.rank != 5:
        raise InferError(f"GroupConvolutionBackpropData weights are GIOHW (rank 5); got rank {w.rank}")
    _same_elem(op, ins)
    groups, per_in, per_out = w.dims[:3]
    if x.dims[1] != groups * per_in:
        raise InferError(f"GroupConvolutionBackpropData input has {x.dims[1]} channels; the "
                         f"weights expect {groups} groups of {per_in}")
    return _like(x, (x.dims[0], groups * per_out, *_deconv_spatial(op, x, w.dims[3:])))


def _avg_pool(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    _window_4d(op, x, "data")
    kernel, strides, pb, pe = _pairs(op, "kernel", "strides", "pads_begin", "pads_end")
    oh = _out_size(x.dims[2], kernel[0], strides[0], pb[0] + pe[0])
    ow = _out_size(x.dims[3], kernel[1], strides[1], pb[1] + pe[1])
    return _like(x, x.dims[:2] + (oh, ow))


def _reduce(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    _static(op, ins)
    axes = _axes(op, x.rank)
    if op.attrs["keep_dims"]:
        return _like(x, [1 if i in axes else d for i, d in enumerate(x.dims)])
    return _like(x, [d for i, d in enumerate(x.dims) if i not in axes])


def _concat(op: GraphOp, ins: list[TensorType]) -> TensorType:
    _static(op, ins)
    _same_elem(op, ins)
    first = ins[0]
    axis = op.attrs["axis"] + first.rank if op.attrs["axis"] < 0 else op.attrs["axis"]
    if not 0 <= axis < first.rank:
        raise InferError(f"Concat axis {op.attrs['axis']} is out of range for rank {first.rank}")
    for t in ins[1:]:
        if t.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(t.dims, first.dims)) if i != axis):
            raise InferError(f"Concat operands {_shape_text(first.dims)} and {_shape_text(t.dims)} "
                             f"differ outside axis {axis}")
    dims = list(first.dims)
    dims[axis] = sum(t.dims[axis] for t in ins)
    return _like(first, dims)


def slice_extent(begin: int, end: int, step: int) -> int:
    """Elements of range(begin, end, step) with begin/end already clamped (numpy semantics)."""
    return len(range(begin, end, step))


def _slice(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    _static(op, ins)
    begin, end, step = (tuple(op.attrs[n]) for n in ("begin", "end", "step"))
    if not len(begin) == len(end) == len(step) == x.rank:
        raise InferError(f"Slice begin/end/step need {x.rank} values each (one per axis)")
    dims = []
    for axis, size in enumerate(x.dims):
        if step[axis] == 0:
            raise InferError(f"Slice step of axis {axis} is 0")
        count = len(range(size)[slice(begin[axis], end[axis], step[axis])])
        if count < 1:
            raise InferError(f"Slice of axis {axis} ({begin[axis]}:{end[axis]}:{step[axis]} of {size}) is empty")
        dims.append(count)
    return _like(x, dims)


def _gather(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    _static(op, ins)
    axis = op.attrs["axis"] + x.rank if op.attrs["axis"] < 0 else op.attrs["axis"]
    indices = tuple(op.attrs["indices"])
    if not 0 <= axis < x.rank:
        raise InferError(f"Gather axis {op.attrs['axis']} is out of range for rank {x.rank}")
    if not indices or any(not -x.dims[axis] <= i < x.dims[axis] for i in indices):
        raise InferError(f"Gather indices {list(indices)} are not within dim {axis} of size {x.dims[axis]}")
    dims = list(x.dims)
    dims[axis] = len(indices)
    return _like(x, dims)


def _indexed_gather(op: GraphOp, ins: list[TensorType]) -> TensorType:
    """Gather on run-time indices (an embedding lookup): the data's dims with the axis
    replaced by the indices' dims; the indices are i32 (int64 ones are converted at the
    model's boundary) and are range-checked when the kernel runs."""
    x, indices = ins
    _static(op, ins)
    axis = op.attrs["axis"] + x.rank if op.attrs["axis"] < 0 else op.attrs["axis"]
    if not 0 <= axis < x.rank:
        raise InferError(f"IndexedGather axis {op.attrs['axis']} is out of range for rank {x.rank}")
    if indices.elem is not ElemType.I32:
        raise InferError(f"IndexedGather indices have element type {indices.elem}; expected i32")
    dims = x.dims[:axis] + indices.dims + x.dims[axis + 1:]
    return TensorType(tuple(dims), x.elem, DimsOrder.identity(len(dims)))


def _topk(op: GraphOp, ins: list[TensorType]) -> TensorType:
    """TopK along the last axis: ``part`` values (the input's type) or indices (i32)."""
    x = ins[0]
    _static(op, ins)
    k = op.attrs["k"]
    if x.elem not in (ElemType.F16, ElemType.F32):
        raise InferError(f"TopK takes f16 or f32 values; got {x.elem}")
    if x.rank < 1 or not 1 <= k <= x.dims[-1]:
        raise InferError(f"TopK k = {k} needs a last axis of at least k values; got {x}")
    dims = x.dims[:-1] + (k,)
    if op.attrs["part"] == "indices":
        return TensorType(dims, ElemType.I32, DimsOrder.identity(len(dims)))
    return TensorType(dims, x.elem, DimsOrder.identity(len(dims)))


def _interpolate(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    _static(op, ins)
    shape = tuple(op.attrs["shape"])
    if len(shape) != x.rank or any(not isinstance(d, int) or d < 1 for d in shape):
        raise InferError(f"Interpolate shape {list(shape)} needs {x.rank} sizes >= 1")
    if op.attrs["mode"] == "linear" and (x.rank != 4 or shape[:2] != x.dims[:2]):
        raise InferError("linear Interpolate resizes the H and W of NCHW data only")
    scales = op.attrs.get("scales")
    if scales is not None:           # ONNX: size floor(d * scale), coordinates from the scale
        if len(scales) != x.rank or any(not s > 0 for s in scales):
            raise InferError(f"Interpolate scales {list(scales)} need {x.rank} numbers > 0")
        floors = [math.floor(d * s) for d, s in zip(x.dims, scales)]
        if floors != list(shape):
            raise InferError(f"Interpolate shape {list(shape)} is not floor(dims * scales) = {floors}")
    return _like(x, shape)


def _depth_to_space(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, b = ins[0], op.attrs["block_size"]
    _window_4d(op, x, "data")
    if b < 1 or x.dims[1] % (b * b):
        raise InferError(f"DepthToSpace block {b}: {x.dims[1]} channels are not a multiple of {b * b}")
    return _like(x, (x.dims[0], x.dims[1] // (b * b), x.dims[2] * b, x.dims[3] * b))


def _space_to_depth(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, b = ins[0], op.attrs["block_size"]
    _window_4d(op, x, "data")
    if b < 1 or x.dims[2] % b or x.dims[3] % b:
        raise InferError(f"SpaceToDepth block {b} does not divide H x W = {x.dims[2]} x {x.dims[3]}")
    return _like(x, (x.dims[0], x.dims[1] * b * b, x.dims[2] // b, x.dims[3] // b))


def _per_axis(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    if not -x.rank <= op.attrs["axis"] < x.rank:
        raise InferError(f"{op.kind} axis {op.attrs['axis']} is out of range for rank {x.rank}")
    return x


def _mvn(op: GraphOp, ins: list[TensorType]) -> TensorType:
    _static(op, ins)
    _axes(op, ins[0].rank)
    if op.attrs["eps"] < 0:
        raise InferError(f"MVN eps {op.attrs['eps']} is negative")
    return ins[0]


_CONV_WINDOW = (AttrSpec("strides", "ints", (1, 1)), AttrSpec("pads_begin", "ints", (0, 0)),
                AttrSpec("pads_end", "ints", (0, 0)), AttrSpec("dilations", "ints", (1, 1)))
_POOL_WINDOW = (AttrSpec("kernel", "ints"), AttrSpec("strides", "ints", (1, 1)),
                AttrSpec("pads_begin", "ints", (0, 0)), AttrSpec("pads_end", "ints", (0, 0)))
_REDUCE = (AttrSpec("axes", "ints"), AttrSpec("keep_dims", "bool", True))

NN_SPECS = [
    *(OpSpec(n, 1, "eltwise", lambda op, ins: ins[0], float_only=True) for n in ("Log", "SoftPlus", "Mish")),
    OpSpec("GroupConvolution", 2, "layer", _group_conv, _CONV_WINDOW),
    OpSpec("ConvolutionBackpropData", 2, "layer", _deconv,
           _CONV_WINDOW + (AttrSpec("output_padding", "ints", (0, 0)),)),
    OpSpec("GroupConvolutionBackpropData", 2, "layer", _group_deconv,
           _CONV_WINDOW + (AttrSpec("output_padding", "ints", (0, 0)),)),
    OpSpec("AvgPool", 1, "layer", _avg_pool, _POOL_WINDOW + (AttrSpec("exclude_pad", "bool", False),),
           float_only=True),
    *(OpSpec(n, 1, "layer", _reduce, _REDUCE, float_only=n != "ReduceMax")
      for n in ("ReduceMean", "ReduceSum", "ReduceMax")),
    OpSpec("Concat", VARIADIC, "layer", _concat, (AttrSpec("axis", "int"),)),
    OpSpec("Slice", 1, "layer", _slice, (AttrSpec("begin", "ints"), AttrSpec("end", "ints"),
                                         AttrSpec("step", "ints"))),
    OpSpec("Gather", 1, "layer", _gather, (AttrSpec("axis", "int"), AttrSpec("indices", "ints"))),
    OpSpec("IndexedGather", 2, "layer", _indexed_gather, (AttrSpec("axis", "int"),)),
    OpSpec("TopK", 1, "layer", _topk, (AttrSpec("k", "int"), AttrSpec("largest", "bool", True),
                                       AttrSpec("part", "enum:values|indices"))),
    OpSpec("Interpolate", 1, "layer", _interpolate, (
        AttrSpec("shape", "ints"), AttrSpec("mode", "enum:nearest|linear", "nearest"),
        AttrSpec("coordinate_transformation_mode",
                 "enum:half_pixel|pytorch_half_pixel|asymmetric|align_corners|tf_half_pixel_for_nn",
                 "half_pixel"),
        AttrSpec("nearest_mode", "enum:round_prefer_floor|round_prefer_ceil|floor|ceil",
                 "round_prefer_floor"),
        AttrSpec("scales", "floats", None)), float_only=True),
    OpSpec("DepthToSpace", 1, "layer", _depth_to_space,
           (AttrSpec("block_size", "int"), AttrSpec("mode", "enum:blocks_first|depth_first", "blocks_first"))),
    OpSpec("SpaceToDepth", 1, "layer", _space_to_depth, (AttrSpec("block_size", "int"),)),
    OpSpec("LogSoftmax", 1, "layer", _per_axis, (AttrSpec("axis", "int", -1),), float_only=True),
    OpSpec("MVN", 1, "layer", _mvn, (AttrSpec("axes", "ints"), AttrSpec("eps", "float", 1e-5),
                                     AttrSpec("normalize_variance", "bool", True),
                                     AttrSpec("eps_mode", "enum:inside_sqrt|outside_sqrt", "inside_sqrt")),
           float_only=True),
]
