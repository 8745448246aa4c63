"""ONNX ops of real CNNs and transformers → the graph ops of ``graph_ops_nn.py``.

Grouped/depthwise Conv, ConvTranspose, Average/Global pools, reductions,
normalizations (LayerNormalization and InstanceNormalization as MVN times scale
plus bias, as OpenVINO's ONNX front end lowers them), and the data-movement
ops (Concat, Split, Slice, Gather on constant indices, Resize, DepthToSpace,
SpaceToDepth; Pad, Expand and Tile are in ``convert_copy.py``).
"""

from __future__ import annotations

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_gather import gather_runtime_indices
from vpuc.onnx_import.convert_layers import _window_attrs, ceil_extra, softmax_like
from vpuc.onnx_import.empty import concat_operands, make_empty
from vpuc.onnx_import.convert_lrn import LRN_CONVERTERS


def grouped_conv(b: GraphBuilder, node, attrs, weights: np.ndarray, group: int):
    """Conv with ``group`` > 1: GroupConvolution over GOIHW weights, then the bias."""
    out_ch, per_in = weights.shape[:2]
    if out_ch % group:
        raise b.error(f"{out_ch} output channels do not split into group = {group}")
    strides, dilations, begin, end = _window_attrs(b, node, attrs, weights.shape[2:])
    grouped = weights.reshape(group, out_ch // group, per_in, *weights.shape[2:])
    has_bias = len(node.input) > 2 and bool(node.input[2])
    y = b.op("GroupConvolution", [b.value(node.input[0]), b.constant(grouped, node.input[1] + ".g")],
             {"strides": strides, "pads_begin": begin, "pads_end": end, "dilations": dilations},
             out=None if has_bias else node.output[0])
    if has_bias:
        bias = b.array(node.input[2]).reshape(1, -1, 1, 1)
        b.op("Add", [y, b.constant(bias, node.input[2])], out=node.output[0])


def _conv_transpose(b, node, attrs):
    weights = b.array(node.input[1])
    groups = attrs.get("group", 1)
    if "output_shape" in attrs:
        raise b.error("ConvTranspose output_shape is not supported; give pads instead")
    kernel = weights.shape[2:]
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    auto = attrs.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID", ""):
        raise b.error(f"ConvTranspose auto_pad {auto} is not supported; give pads instead")
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    has_bias = len(node.input) > 2 and bool(node.input[2])
    if len(kernel) != 2:
        raise b.error("only 2-D ConvTranspose is supported")
    if groups == 1:
        kind, w = "ConvolutionBackpropData", b.value(node.input[1])
    else:                  # [C, O/G, KH, KW] -> OpenVINO's [G, C/G, O/G, KH, KW]
        if weights.shape[0] % groups:
            raise b.error(f"group = {groups} does not divide the {weights.shape[0]} input channels")
        kind = "GroupConvolutionBackpropData"     # only the regrouped weights are stored
        w = b.constant(weights.reshape((groups, weights.shape[0] // groups) + weights.shape[1:]),
                       node.input[1] + ".grouped")
    y = b.op(kind, [b.value(node.input[0]), w],
             {"strides": strides, "pads_begin": (pads[0], pads[1]), "pads_end": (pads[2], pads[3]),
              "dilations": dilations, "output_padding": tuple(attrs.get("output_padding", (0, 0)))},
             out=None if has_bias else node.output[0])
    if has_bias:
        bias = b.array(node.input[2]).reshape(1, -1, 1, 1)
        b.op("Add", [y, b.constant(bias, node.input[2])], out=node.output[0])


def _average_pool(b, node, attrs):
    kernel = tuple(attrs["kernel_shape"])
    strides, dilations, begin, end = _window_attrs(b, node, attrs, kernel)
    if dilations != (1, 1):
        raise b.error(f"AveragePool dilations {list(dilations)} are not supported")
    exclude = not attrs.get("count_include_pad", 0)
    source = b.value(node.input[0])
    if attrs.get("ceil_mode", 0):
        # ceil_mode's extra window as padding at the end (MaxPool's way); its divisor
        # counts the input only, which is what excluding the padding gives
        h, w = b.shape(node.input[0])[2:]
        extra = [ceil_extra(size, bb, e, k, s) for size, bb, e, k, s in zip((h, w), begin, end, kernel, strides)]
        if any(x < 0 for x in extra):
            b.beside_shape_inference(node.output[0])
        if any(x > 0 for x in extra) and not exclude and any(begin + end):
            # onnxruntime's divisor counts the pads but not the extension: the pads made
            # zeros the window reads, so that excluding padding leaves out the extension only
            source = b.op("Pad", [source], {"pads_begin": (0, 0) + begin, "pads_end": (0, 0) + end})
            begin, end = (0, 0), (0, 0)
        exclude = exclude or any(x > 0 for x in extra)
        end = tuple(e + max(x, 0) for e, x in zip(end, extra))
    b.op("AvgPool", [source],
         {"kernel": kernel, "strides": strides, "pads_begin": begin, "pads_end": end,
          "exclude_pad": exclude}, out=node.output[0])


def _global_pool(kind: str):
    def convert(b, node, attrs):
        rank = len(b.shape(node.input[0]))
        b.op(kind, [b.value(node.input[0])], {"axes": tuple(range(2, rank)), "keep_dims": True},
             out=node.output[0])
    return convert


def _reduce(kind: str):
    def convert(b, node, attrs):
        rank = len(b.shape(node.input[0]))
        noop = attrs.get("noop_with_empty_axes", 0)
        keep_dims = bool(attrs.get("keepdims", 1))      # the identity keeps every dim anyway
        if "axes" in attrs:
            axes = list(attrs["axes"])
        elif len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in b.array(node.input[1])]
        else:
            axes = []
        # no axes, or an empty axes input: every axis, unless noop_with_empty_axes (13 for
        # ReduceSum, 18 for the others) makes it the identity
        if not axes:
            if noop:
                b.alias(node.output[0], node.input[0])
                return
            axes = list(range(rank))
        b.op(kind, [b.value(node.input[0])], {"axes": tuple(b.axis(a, rank) for a in axes),
                                              "keep_dims": keep_dims}, out=node.output[0])
    return convert


def _concat(b, node, attrs):
    rank = len(b.shape(node.input[0]))
    axis = b.axis(attrs["axis"], rank)
    kept = concat_operands(b, node.input)        # empty operands add nothing
    if len(kept) == 1:
        b.alias(node.output[0], kept[0])
        return
    b.op("Concat", [b.value(n) for n in kept], {"axis": axis}, out=node.output[0])


def _slice_to(b, node, out_name, source, begins, ends, steps):
    shape = b.types[source].dims
    counts = [len(range(size)[slice(*s)]) for size, s in zip(shape, zip(begins, ends, steps))]
    if 0 in counts:                        # selects nothing: an empty value
        make_empty(b, out_name, counts)
        return
    b.op("Slice", [source], {"begin": tuple(begins), "end": tuple(ends), "step": tuple(steps)}, out=out_name)


def _split(b, node, attrs):
    shape = b.shape(node.input[0])
    axis = b.axis(attrs.get("axis", 0), len(shape))
    if "split" in attrs:
        sizes = list(attrs["split"])
    elif len(node.input) > 1 and node.input[1]:
        sizes = [int(s) for s in b.array(node.input[1])]
    else:
        parts = attrs.get("num_outputs", len(node.output))
        chunk = -(-shape[axis] // parts)
        sizes = [min(chunk, shape[axis] - i * chunk) for i in range(parts)]
    if sum(sizes) != shape[axis] or len(sizes) != len(node.output):
        raise b.error(f"Split sizes {sizes} do not cover dim {axis} of size {shape[axis]} "
                      f"in {len(node.output)} outputs")
    source, start = b.value(node.input[0]), 0
    for out_name, size in zip(node.output, sizes):
        begins = [0] * len(shape)
        ends = list(shape)
        begins[axis], ends[axis] = start, start + size
        _slice_to(b, node, out_name, source, begins, ends, [1] * len(shape))
        start += size


def _slice(b, node, attrs):
    shape = b.shape(node.input[0])
    if b.opset < 10 or "starts" in attrs:
        starts, ends, axes, steps = attrs["starts"], attrs["ends"], attrs.get("axes"), None
    else:
        get = lambda i: [int(v) for v in b.array(node.input[i])] if len(node.input) > i and node.input[i] else None
        starts, ends, axes, steps = get(1), get(2), get(3), get(4)
    axes = list(range(len(starts))) if axes is None else [b.axis(a, len(shape)) for a in axes]
    steps = steps or [1] * len(axes)
    begins, finals, strides = [0] * len(shape), list(shape), [1] * len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        # clamp like ONNX (and numpy slicing): huge sentinels such as INT64_MAX mean "to the end"
        size = shape[axis]
        start = start + size if start < 0 else start
        end = end + size if end < 0 and end > -(2 ** 62) else end
        if step < 0:    # the spec: starts to [0, dim - 1], ends to [-1, dim - 1]
            start, end = max(0, min(start, size - 1)), max(-1, min(end, size - 1))
            if end == -1:   # through index 0: the graph's Slice counts as Python does
                end = -size - 1
        else:           # both to [0, dim]
            start, end = max(0, min(start, size)), max(0, min(end, size))
        begins[axis], finals[axis], strides[axis] = start, end, step
    _slice_to(b, node, node.output[0], b.value(node.input[0]), begins, finals, strides)


def _gather(b, node, attrs):
    if not b.is_known(node.input[1]):         # run-time indices: an embedding lookup
        gather_runtime_indices(b, node, attrs)
        return
    indices = np.asarray(b.array(node.input[1]))
    shape = b.shape(node.input[0])
    axis = b.axis(attrs.get("axis", 0), len(shape))
    size = shape[axis]
    if indices.ndim > 1:
        raise b.error("Gather with indices of rank > 1 is not supported")
    wrong = [int(i) for i in indices.reshape(-1) if not -size <= i < size]
    if wrong:       # onnxruntime refuses them too; wrapping would gather another row
        raise b.error(f"Gather indices {wrong} are out of range for axis {axis} of size {size} "
                      f"(expected {-size} to {size - 1})")
    flat = tuple(int(i) % size for i in indices.reshape(-1))
    y = b.op("Gather", [b.value(node.input[0])], {"axis": axis, "indices": flat},
             out=None if indices.ndim == 0 else node.output[0])
    if indices.ndim == 0:                     # a scalar index drops the axis
        b.op("Reshape", [y], {"shape": tuple(d for i, d in enumerate(shape) if i != axis)}, out=node.output[0])


_RESIZE_MODES = {"nearest": "nearest", "linear": "linear"}


def _resize(b, node, attrs):
    shape = b.shape(node.input[0])
    mode = attrs.get("mode", "nearest")
    if mode not in _RESIZE_MODES:
        raise b.error(f"Resize mode '{mode}' is not supported; supported: nearest, linear")
    sizes = scales = None
    if len(node.input) > 3 and node.input[3]:
        sizes = [int(s) for s in b.array(node.input[3])]
    elif len(node.input) > 2 and node.input[2] and b.array(node.input[2]).size:
        scales = [float(s) for s in b.array(node.input[2])]
    if sizes is None and scales is None:
        raise b.error("Resize needs constant scales or sizes")
    own_scales = None
    if sizes is None:
        sizes = [int(np.floor(d * s)) for d, s in zip(shape, scales)]
        if any(n != d * s for d, s, n in zip(shape, scales, sizes)):
            # ONNX computes coordinates from the scale, not from the rounded size
            own_scales = tuple(scales)
        if min(sizes) < 1:
            raise b.error(f"Resize scales {scales} of {list(shape)} leave an empty dim")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    supported = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn")
    if ctm not in supported:
        raise b.error(f"Resize coordinate_transformation_mode '{ctm}' is not supported; "
                      f"supported: {', '.join(supported)}")
    if mode == "linear" and attrs.get("exclude_outside", 0):
        raise b.error("Resize exclude_outside is not supported")
    b.op("Interpolate", [b.value(node.input[0])],
         {"shape": tuple(sizes), "mode": mode, "coordinate_transformation_mode": ctm,
          "nearest_mode": attrs.get("nearest_mode", "round_prefer_floor"),
          **({"scales": own_scales} if own_scales else {})}, out=node.output[0])


def _depth_to_space(b, node, attrs):
    mode = {"DCR": "blocks_first", "CRD": "depth_first"}[attrs.get("mode", "DCR")]
    b.op("DepthToSpace", [b.value(node.input[0])], {"block_size": attrs["blocksize"], "mode": mode},
         out=node.output[0])


def _space_to_depth(b, node, attrs):
    b.op("SpaceToDepth", [b.value(node.input[0])], {"block_size": attrs["blocksize"]}, out=node.output[0])


def _scale_shift(b, node, normalized: str, scale: np.ndarray, bias: np.ndarray | None, shape):
    y = b.op("Multiply", [normalized, b.constant(scale.reshape(shape), node.output[0] + ".scale")],
             out=node.output[0] if bias is None else None)
    if bias is not None:
        b.op("Add", [y, b.constant(bias.reshape(shape), node.output[0] + ".bias")], out=node.output[0])


def _layer_norm(b, node, attrs):
    """LayerNormalization: MVN over axes [axis, rank) times scale plus bias."""
    if len(node.output) > 1 and any(node.output[1:]):
        raise b.error("LayerNormalization's Mean and InvStdDev outputs are not supported")
    rank = len(b.shape(node.input[0]))
    axis = b.axis(attrs.get("axis", -1), rank)
    eps = float(attrs.get("epsilon", 1e-5))
    scale = b.array(node.input[1]).astype(np.float32)
    bias = b.array(node.input[2]).astype(np.float32) if len(node.input) > 2 and node.input[2] else None
    normalized = b.op("MVN", [b.value(node.input[0])], {"axes": tuple(range(axis, rank)), "eps": eps})
    _scale_shift(b, node, normalized, scale, bias, scale.shape)


def _instance_norm(b, node, attrs):
    rank = len(b.shape(node.input[0]))
    eps = float(attrs.get("epsilon", 1e-5))
    scale, bias = (b.array(n).astype(np.float32) for n in node.input[1:3])
    normalized = b.op("MVN", [b.value(node.input[0])], {"axes": tuple(range(2, rank)), "eps": eps})
    _scale_shift(b, node, normalized, scale, bias, (1, -1) + (1,) * (rank - 2))


def _unary(kind):
    def convert(b, node, attrs):
        b.op(kind, [b.value(node.input[0])], out=node.output[0])
    return convert


NN_CONVERTERS = {
    "ConvTranspose": _conv_transpose, "AveragePool": _average_pool,
    "GlobalAveragePool": _global_pool("ReduceMean"), "GlobalMaxPool": _global_pool("ReduceMax"),
    "ReduceMean": _reduce("ReduceMean"), "ReduceSum": _reduce("ReduceSum"), "ReduceMax": _reduce("ReduceMax"),
    "Concat": _concat, "Split": _split, "Slice": _slice, "Gather": _gather,
    "Resize": _resize, "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth,
    "LogSoftmax": softmax_like("LogSoftmax"), "LayerNormalization": _layer_norm,
    "InstanceNormalization": _instance_norm,
    "Log": _unary("Log"), "Softplus": _unary("SoftPlus"), "Mish": _unary("Mish"),
    **LRN_CONVERTERS,
}
